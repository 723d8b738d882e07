"""`tether rollout`: run an unmodified agent over a task file, recording every model call."""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table
from rich.text import Text

from tether.cli.options import add_settings, settings_from_args
from tether.cli.secrets import JUDGE_KEY, UPSTREAM_KEY, add_secret_arg, secrets_of
from tether.config.commands import RolloutSettings
from tether.config.option import run_identity
from tether.contracts import Meta
from tether.experiment.assembly import open_experiment
from tether.experiment.inputs import load_inputs, runner_config
from tether.experiment.progress import progress_bar
from tether.runner import RolloutOutcome, Runner, summarize
from tether.runner.driver import DEFAULT_CAP_HINT, NO_CALLS_HINT
from tether.store import RolloutRequest, Task
from tether.text import shown

console = Console(stderr=True)


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
    settings: RolloutSettings = settings_from_args(args)
    secrets = secrets_of(args)
    tasks, evaluator, agent = load_inputs(settings, secrets.judge_key)
    config = runner_config(settings.agent, settings.rewards.primary_reward)
    named, shape = run_identity(settings, "rollout")  # from the settings' declarations
    experiment = open_experiment(settings, "rollout", console, tasks, agent, named, shape)
    store, name = experiment.store, experiment.record.name
    try:
        groups = settings.groups
        metadata = _metadata(settings)
        requests = requests_for(tasks, groups.group_size, groups.mode, settings.agent.max_attempts, metadata)
        started = time.monotonic()
        serving = experiment.serving(settings, secrets.upstream_key, console)
        with serving as stack, progress_bar(console) as progress:
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


def _metadata(settings: RolloutSettings) -> dict[str, Any]:
    """An upstream that reports no token ids answers with another model's text: its rollouts are
    demonstrations (`tether train --from-run`), never RL samples."""
    upstream = settings.upstream
    return {Meta.DEMONSTRATION: True} if upstream.upstream and not upstream.upstream_token_ids else {}


async def _run(runner: Runner, requests: list[RolloutRequest]) -> list[RolloutOutcome]:
    try:
        outcomes = await runner.run(requests)
    except BaseException:  # interrupted (Ctrl-C, SIGTERM) or failed: what still ran runs on the next start
        await runner.stop(requeue=True)
        raise
    await runner.stop()
    return outcomes
