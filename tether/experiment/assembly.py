"""What every command that runs agents (`rollout`, `optimize-prompt`, `train`) opens first, in one order:
the runner's pools (`--runner`), the store, the placement (`--ray`) and the run record. The commands, the
Python API and the `Trainer` take what `open_experiment` builds."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from tether.config.commands import OptimizePromptSettings, RolloutSettings, RunsAgents
from tether.config.run import StoreSettings
from tether.experiment.errors import SettingsError
from tether.experiment.inputs import agent_quota, request_caps
from tether.experiment.placement import open_placement
from tether.experiment.serving import served_policy
from tether.gateway.upstreams import Upstream
from tether.placement.base import Placement
from tether.project import Project
from tether.runner.runner import PoolFactory
from tether.runner.runs import RunError, RunRecord, default_run_name, start_run
from tether.stack import LocalStack, local_stack
from tether.store import Store, StoreError, StoreOptions, StoreURLError, Task, open_store
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
        settings: RolloutSettings | OptimizePromptSettings,
        upstream_key: str | None,
        console: Console,
        upstreams: Sequence[Upstream] = (),
        routes: dict[str, str] | None = None,
    ) -> Iterator[LocalStack]:
        """The policy server the settings ask for, and the gateway over it (and `upstreams`)."""
        command = "rollout" if isinstance(settings, RolloutSettings) else "optimize-prompt"
        with (
            served_policy(
                settings.server, settings.upstream, upstream_key, console, placement=self.placement
            ) as policy,
            local_stack(
                self.store,
                self.authority,
                [policy.upstream(), *upstreams],
                routes=routes,
                host=self.placement.host,
                agent_quota=agent_quota(settings.quota),
                caps=request_caps(settings.caps.max_tokens_cap, settings.caps.n_cap, command),
            ) as stack,
        ):
            yield stack


def open_experiment(
    settings: RunsAgents,
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
    so refused settings leave no run behind. The caller closes `experiment.store` and the agent; if
    opening fails, this closes both."""
    store: Store | None = None
    try:
        pools = runner_pools(settings, command, pool_tasks if pool_tasks is not None else tasks, agent)
        store = open_settings_store(settings.store, command)
        placement = open_placement(settings, command, console)
        if check is not None:
            check(store, placement)
        label = Path(settings.tasks.file or "tasks").stem
        record = begin_run(store, settings, command, tasks, label, named, shape)
    except BaseException:
        if store is not None:
            store.close()
        agent.close()
        raise
    return Experiment(store, placement, record, pools, Project.at(settings.store.project_dir).authority())


def runner_pools(settings: RunsAgents, command: str, tasks: Sequence[Task], agent: Any) -> Any:
    """The pool factory `--runner` names (None: the local pool), checked before anything runs."""
    from tether.experiment.k8s import check_unused, kubernetes_pools_for
    from tether.runner.k8s.options import K8sOptionsError

    try:
        if settings.runner.runner == "local":
            check_unused(settings.runner)
            return None
        if settings.ray.ray:
            raise K8sOptionsError("--ray and --runner k8s both place the agents: choose one")
        return kubernetes_pools_for(
            settings.runner, settings.agent.timeout, tasks, agent, Console(stderr=True)
        )
    except (K8sOptionsError, RuntimeError, ValueError) as exc:  # bad options, template or cluster
        raise SettingsError(f"tether {command}: {exc}") from None


def open_settings_store(settings: StoreSettings, command: str) -> Store:
    """The store `--store` names, opened before anything runs; a one-line error if it cannot be."""
    project = Project.at(settings.project_dir)
    try:
        return open_store(settings.url, StoreOptions(project_dir=project.root))
    except StoreURLError as exc:
        raise SettingsError(f"tether {command}: {exc}") from None
    except StoreError as exc:
        raise SettingsError(f"tether {command}: cannot open the store: {exc}") from None


def begin_run(
    store: Store,
    settings: RunsAgents,
    command: str,
    tasks: Sequence[Task],
    label: str,
    named: Mapping[str, Any],
    shape: Mapping[str, Any],
) -> RunRecord:
    """Start (or resume) the run `--run` names, or else the one these settings name: the default name
    hashes `named`; `shape` (what decides the run's rollouts) must match on a resume."""
    name = settings.run.name or default_run_name(command, label, named)
    try:
        record = start_run(store, name, command, tasks, shape, fresh=settings.run.fresh)
    except RunError as exc:
        raise SettingsError(f"tether {command}: {exc}") from None
    verb = f"resuming run {name} (start {record.starts})" if record.resumed else f"run {name}"
    Console(stderr=True).print(f"[bold]{verb}[/]")
    return record
