"""What every command that runs agents (`rollout`, `optimize-prompt`, `train`) opens first, in one order:
the runner's pools (`--runner`), the store, the placement (`--ray`) and the run record. The commands, and
the `Trainer`, take what `open_experiment` builds."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from tether.cli.common import begin_run, open_cli_store, request_caps, runner_pools, serving_policy
from tether.cli.placement import open_placement
from tether.cli.quota_args import agent_quota
from tether.gateway.upstreams import Upstream
from tether.placement.base import Placement
from tether.project import Project
from tether.runner.runner import PoolFactory
from tether.runner.runs import RunRecord
from tether.stack import LocalStack, local_stack
from tether.store import Store, Task
from tether.store.auth import TokenAuthority


@dataclass
class Experiment:
    store: Store
    placement: Placement
    record: RunRecord
    pools: PoolFactory | None  # the runner's own (`--runner`; None: worker processes), before placing
    authority: TokenAuthority

    @contextmanager
    def serving(
        self,
        args: argparse.Namespace,
        console: Console,
        upstreams: Sequence[Upstream] = (),
        routes: dict[str, str] | None = None,
    ) -> Iterator[LocalStack]:
        """The policy server the command line asks for, and the gateway over it (and `upstreams`)."""
        with (
            serving_policy(args, console, placement=self.placement) as policy,
            local_stack(
                self.store,
                self.authority,
                [policy, *upstreams],
                routes=routes,
                host=self.placement.host,
                agent_quota=agent_quota(args),
                caps=request_caps(args),
            ) as stack,
        ):
            yield stack


def open_experiment(
    args: argparse.Namespace,
    command: str,
    console: Console,
    tasks: Sequence[Task],
    agent: Any,
    named: Mapping[str, Any],
    shape: Mapping[str, Any],
    *,
    pool_tasks: Sequence[Task] | None = None,
    check: Callable[[Store, Placement], None] | None = None,
) -> Experiment:
    """Open everything before any rollout is enqueued; `check` runs before the run record is written,
    so a refused command line leaves no run behind. The caller closes `experiment.store` and the agent;
    if opening fails, this closes both."""
    store: Store | None = None
    try:
        pools = runner_pools(args, command, pool_tasks if pool_tasks is not None else tasks, agent)
        store = open_cli_store(args, command)
        placement = open_placement(args, command, console)
        if check is not None:
            check(store, placement)
        record = begin_run(store, args, command, tasks, Path(args.tasks).stem, named, shape)
    except BaseException:
        if store is not None:
            store.close()
        agent.close()
        raise
    return Experiment(store, placement, record, pools, Project.at(args.project_dir).authority())
