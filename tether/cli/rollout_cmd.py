"""`tether rollout`: run an unmodified agent over a task file, recording every model call."""

from __future__ import annotations

import argparse
import asyncio
import os
import pwd
import stat
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table
from rich.text import Text

from tether.cli.experiment import open_experiment
from tether.cli.options import add_settings, settings_from_args
from tether.cli.progress import progress_bar
from tether.cli.reward_args import rewards_from_args
from tether.cli.sandbox_args import sandbox_from_args
from tether.cli.secrets import JUDGE_KEY, UPSTREAM_KEY, add_secret_arg
from tether.cli.text import shown
from tether.config.commands import RolloutSettings
from tether.config.option import run_identity
from tether.contracts import TASK_REFERENCE, Meta, has_reference
from tether.runner import (
    AIRRules,
    CommandAgent,
    RewardError,
    RolloutOutcome,
    Runner,
    RunnerConfig,
    TaskFileError,
    load_tasks,
    summarize,
)
from tether.runner.agents import refuse_missing_script
from tether.runner.driver import DEFAULT_CAP_HINT, NO_CALLS_HINT
from tether.runner.rewards import Evaluator, check_reference_reader
from tether.runner.warm import WarmStarts
from tether.store import RolloutRequest, Task

console = Console(stderr=True)
AGENT_REWARDS: dict[str, bool | None] = {"auto": None, "count": True, "ignore": False}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "rollout",
        help="run an agent over a task file and record every model call",
        description=(
            "Run an unmodified agent once per task (times --group-size) with N concurrent workers. The agent "
            "gets OPENAI_BASE_URL / OPENAI_API_KEY pointing at a recording gateway, and TETHER_TASK (the "
            "task as JSON, without its 'reference' object: those fields are for --reward only). Task fields "
            "also fill {placeholders} in the command. Its last stdout line is its final output, which "
            "--reward scores (it gets the whole task). The run has a name (--run, or one derived from this "
            "command line): running the same command again resumes it, running only what is missing."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add_settings(parser, RolloutSettings())
    add_secret_arg(parser, JUDGE_KEY)
    add_secret_arg(parser, UPSTREAM_KEY)
    parser.set_defaults(command_main=run)


def runner_config(args: argparse.Namespace) -> RunnerConfig:
    if args.n_workers < 1 or args.max_attempts < 1 or args.timeout <= 0:
        raise SystemExit("--n-workers and --max-attempts must be at least 1, --timeout positive")
    return RunnerConfig(
        n_workers=args.n_workers,
        timeout_s=args.timeout,
        primary_reward=args.primary_reward,
        agent_rewards=AGENT_REWARDS[args.agent_rewards],
        air=AIRRules.off() if args.no_air else AIRRules(),
    )


def load_inputs(args: argparse.Namespace) -> tuple[list[Task], Evaluator | None, CommandAgent]:
    """Everything that can be wrong with the user's files is found here, before anything runs."""
    try:
        tasks = load_tasks(args.tasks)
        evaluator, group_scorer = rewards_from_args(args)
        if group_scorer is None:  # else the group's judge reads the whole task
            check_reference_reader(evaluator, tasks)
        sandbox = sandbox_from_args(args, evaluator, group_scorer)
        warn_if_the_agent_user_reads(args, args.tasks, tasks)
        agent = CommandAgent(
            args.agent, cwd=args.agent_cwd, user=args.agent_user, sandbox=sandbox, warm=warm_starts(args)
        )
        if args.runner == "local":
            refuse_missing_script(agent)
        for task in tasks:
            agent.argv(task.input)
    except (TaskFileError, RewardError, ValueError) as exc:
        raise SystemExit(f"tether: {exc}") from None
    return tasks, evaluator, agent


def warn_if_the_agent_user_reads(args: argparse.Namespace, path: str, tasks: Sequence[Task]) -> None:
    """With --agent-user and no sandbox, a task file that holds references and that user can read hands
    every agent every answer: its path is on Tether's command line (docs/security.md). Say so, once."""
    if args.agent_user is None or args.sandbox != "none" or not any(has_reference(t.input) for t in tasks):
        return
    try:
        user = pwd.getpwnam(args.agent_user)
    except KeyError:
        return  # CommandAgent refuses the user, naming it
    if readable_by(path, user.pw_uid, user.pw_gid):
        console.print(
            Text.assemble(
                ("warning:", "yellow"),
                f" {path} holds tasks with a {TASK_REFERENCE!r} and --agent-user {args.agent_user} can read "
                f"it, so every agent can read every answer: chmod o-r {path} (and g-r, where that user's "
                "group owns it), or add --sandbox bwrap, which hides it",
            )
        )


def readable_by(path: str, uid: int, gid: int) -> bool:
    """Whether a process of `uid` and primary group `gid` and no other group (as --agent-user runs
    agents) can read the file at `path`: read permission on it, search permission on each folder above."""
    real = Path(os.path.realpath(path))
    try:
        checks = [(real, stat.S_IRUSR)] + [(folder, stat.S_IXUSR) for folder in real.parents]
        for item, owner_bit in checks:
            st = item.stat()
            shift = 0 if st.st_uid == uid else 3 if st.st_gid == gid else 6
            if not st.st_mode & (owner_bit >> shift):
                return False
    except OSError:
        return False
    return True


def warm_starts(args: argparse.Namespace) -> WarmStarts | None:
    """Warm starts unless `--agent-cold`."""
    if args.agent_cold and args.agent_warm:
        raise ValueError("--agent-cold and --agent-warm contradict each other: keep one")
    if args.agent_cold and args.agent_preload is not None:
        raise ValueError("--agent-preload needs warm starts: drop --agent-cold")
    if args.agent_cold:
        return None
    preload = args.agent_preload
    return WarmStarts(None if preload is None else [m.strip() for m in preload.split(",") if m.strip()])


def requests_for(
    tasks: Sequence[Task],
    group_size: int,
    mode: str,
    max_attempts: int,
    metadata: dict[str, Any],
) -> list[RolloutRequest]:
    """One request per task and sample, keyed `mode/task#sample` within the run."""
    return [
        RolloutRequest(
            task=task,
            mode=mode,
            group_id=f"{task.id}@{mode}",
            max_attempts=max_attempts,
            metadata=dict(metadata),
            key=f"{mode}/{task.id}#{sample}",
            sample=sample,
        )
        for task in tasks
        for sample in range(group_size)
    ]


def track(progress: Progress, label: str, total: int) -> Callable[[Runner], None]:
    """An `on_update` hook for the runner that moves a progress bar."""
    bar = progress.add_task(label, total=total, detail="")

    def on_update(runner: Runner) -> None:
        stats = runner.stats
        mean = f"{stats.mean_reward:.3f}" if stats.mean_reward is not None else "-"
        progress.update(
            bar,
            completed=stats.succeeded + stats.failed,
            detail=f"ok {stats.succeeded} failed {stats.failed} running {stats.running} reward {mean}",
        )

    return on_update


def print_summary(outcomes: Sequence[RolloutOutcome], seconds: float) -> None:
    summary = summarize(outcomes)
    table = Table(title="rollouts", show_header=False)
    mean = summary["mean_reward"]
    rows = [
        ("rollouts", str(summary["rollouts"])),
        ("succeeded", f"{summary['succeeded']} ({summary['success_rate']:.0%})"),
        ("failed / timed out", str(summary["failed"])),
        ("mean reward", "-" if mean is None else f"{mean:.4f}"),
        ("model calls per rollout", f"{summary['calls_per_rollout']:.2f}"),
        ("completion tokens", str(summary["completion_tokens"])),
        ("wall time", f"{seconds:.1f}s ({summary['rollouts'] / max(seconds, 1e-9):.2f} rollouts/s)"),
    ]
    for key, value in rows:
        table.add_row(key, value)
    Console().print(table)
    if summary["without_calls"]:
        console.print(
            f"[yellow]{summary['without_calls']} of {summary['rollouts']} rollouts {NO_CALLS_HINT}[/]"
        )
    if cut := summary["cut_by_default"]:
        console.print(f"[yellow]{cut} model call{'' if cut == 1 else 's'} {DEFAULT_CAP_HINT}[/]")
    for error in sorted({o.error for o in outcomes if o.error})[:5]:
        console.print(Text.assemble(("error:", "red"), " ", shown(error)))  # the agent's stderr
    failed = next((o for o in outcomes if o.error), None)
    if failed is not None:
        console.print(f"a failed rollout's attempts and output: tether store show {failed.rollout_id}")


def run(args: argparse.Namespace) -> int:
    tasks, evaluator, agent = load_inputs(args)
    config = runner_config(args)
    named, shape = run_identity(settings_from_args(args), "rollout")  # from the settings' declarations
    experiment = open_experiment(args, "rollout", console, tasks, agent, named, shape)
    store, name = experiment.store, experiment.record.name
    try:
        requests = requests_for(tasks, args.group_size, args.mode, args.max_attempts, _metadata(args))
        started = time.monotonic()
        with experiment.serving(args, console) as stack, progress_bar(console) as progress:
            runner = Runner(
                store,
                agent,
                stack.endpoints,
                evaluator,
                config,
                on_update=track(progress, "rollouts", len(requests)),
                run=name,
                pools=experiment.placement.pools(experiment.authority, experiment.pools),
            )
            outcomes = asyncio.run(_run(runner, requests))
        print_summary(outcomes, time.monotonic() - started)
        console.print(f"run {name}: `tether store rollouts --run {name}` lists its rollouts")
    finally:
        store.close()
        agent.close()
    return 0 if any(o.status.value == "succeeded" for o in outcomes) else 1


def _metadata(args: argparse.Namespace) -> dict[str, Any]:
    """An upstream that reports no token ids answers with another model's text: its rollouts are
    demonstrations (`tether train --from-run`), never RL samples."""
    return {Meta.DEMONSTRATION: True} if args.upstream and not args.upstream_token_ids else {}


async def _run(runner: Runner, requests: list[RolloutRequest]) -> list[RolloutOutcome]:
    try:
        return await runner.run(requests)
    finally:
        await runner.stop()
