"""Training progress: one short line per step, and a live bar when stderr is a terminal.

In a log (not a terminal) every step is exactly one line, never wrapped or cut, and no bar is drawn: a
bar redrawn with carriage returns is noise in a file. In a terminal the bar stays at the bottom and the
step lines scroll above it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tether.text import printable

OnStep = Callable[[dict[str, Any]], None]


def step_line(record: dict[str, Any]) -> str:
    """`step   7  reward 0.125±0.331  signal 3/8 groups  entropy 0.412  grad 0.731  31.2s (rollouts 18.1,
    update 11.9, swap 1.2)`: what the step learned from and where its seconds went. The surrogate's loss,
    clip fraction and KL are shown only when the update took several optimizer steps: in one step they
    are 0 by construction (the ratio starts at 1)."""
    step = f"step {record['step']:>3}"
    if record["kind"] == "val":
        line = f"{step}  held-out accuracy {held_out_score(record['val_score'], record)}"
        if "val_pass_at_k" in record:
            k = record["val_k"]
            line += f"  pass@{k} {record['val_pass_at_k']:.3f}  mean@{k} {record['val_mean_at_k']:.3f}"
        return line
    if record["kind"] == "probe":
        return (
            f"probe before step {record['step'] + 1}: {record['probe_tasks']} tasks, "
            f"{record['probe_solved']} solved by every sample, {record['probe_mixed']} mixed, "
            f"{record['probe_unsolved']} by none  {record['probe_seconds']:.1f}s"
        )
    if record.get("phase") == "sft":
        return _imitation_line(step, record)
    groups = record.get("groups", record["groups_used"])
    line = f"{step}  reward {record['reward_mean']:.3f}±{record['reward_std']:.3f}  "
    line += f"signal {record['groups_used']}/{groups} groups"
    if "train.entropy" in record:
        line += f"  entropy {record['train.entropy']:.3f}  grad {record['train.grad_norm']:.3f}"
    if record.get("train.optimizer_steps", 1) > 1:
        line += (
            f"  loss {record['train.loss']:+.4f}  clip {record['train.clip_fraction']:.3f}  "
            f"kl {record['train.approx_kl']:.4f}"
        )
    if "skipped" in record:
        line += "  no update (no group with signal)"
    return line + _seconds(record)


def _seconds(record: dict[str, Any]) -> str:
    """`  31.2s (rollouts 18.1, update 11.9, swap 1.2)`: the whole step and its parts."""
    total = record.get("step_seconds")
    if total is None:
        return f"  {record['train.seconds']:.1f}s" if "train.seconds" in record else ""
    parts = [
        f"{name} {record[key]:.1f}"
        for name, key in (
            ("rollouts", "rollout_seconds"),
            ("update", "update_seconds"),
            ("swap", "swap_seconds"),
        )
        if key in record
    ]
    return f"  {total:.1f}s ({', '.join(parts)})" if parts else f"  {total:.1f}s"


def held_out_score(score: float | None, record: dict[str, Any] | None = None) -> str:
    """`0.625 (95% CI 0.469 to 0.781)`: a held-out score with the bootstrap interval its validation record
    holds (`val_ci_low`, `val_ci_high`), the score alone for a record without one, `-` for no score."""
    if score is None:
        return "-"
    text = f"{score:.3f}"
    if record is not None and "val_ci_low" in record and "val_ci_high" in record:
        text += f" (95% CI {record['val_ci_low']:.3f} to {record['val_ci_high']:.3f})"
    return text


def _imitation_line(step: str, record: dict[str, Any]) -> str:
    """`step   3  sft  8 demonstrations  nll 0.9250  4.2s`: an imitation update's loss is the
    demonstrations' negative log-likelihood per token (its policy loss is a constant -1)."""
    line = f"{step}  sft  {record['rollouts']} demonstrations"
    if "train.nll" in record:
        line += f"  nll {record['train.nll']:.4f}  {record['train.seconds']:.1f}s"
    return line


def progress_bar(console: Console) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[detail]}"),
        TimeElapsedColumn(),
        console=console,
    )


@contextmanager
def step_progress(console: Console, total: int) -> Iterator[OnStep]:
    """A callback for each metrics record: a bar plus lines on a terminal, plain lines otherwise."""
    if not console.is_terminal:
        yield _plain_lines(console.file)
        return
    with progress_bar(console) as progress:
        bar = progress.add_task("training", total=total, detail="")

        def show(record: dict[str, Any]) -> None:
            if record["kind"] != "val":
                detail = f"reward {record['reward_mean']:.3f}  v{record['policy_version_after']}"
                progress.update(bar, completed=record["step"], detail=detail)
            progress.console.print(
                printable(step_line(record)), soft_wrap=True, highlight=False, markup=False
            )

        yield show


def _plain_lines(stream: IO[str]) -> OnStep:
    def show(record: dict[str, Any]) -> None:
        stream.write(printable(step_line(record)) + "\n")
        stream.flush()

    return show
