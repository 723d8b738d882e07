"""`tether eval`: a run's stored validations scored again by any evaluator: greedy pass@1 and, where the
run sampled (`tether train --val-k K`), pass@K and mean@K, each with its 95% interval, per validation.

The rollouts are not run again: what each held-out rollout answered is read from the store (one
`read_rollouts`) and given, with its task from the task file (references included), to the evaluator.
So a run validated on a cheap check can be scored by a judge, or by the evaluator it trained on.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from typing import Any

from rich.console import Console
from rich.table import Table

from tether.adapters.build import ALL_ROWS
from tether.cli.options import add_settings, settings_from_args
from tether.cli.secrets import JUDGE_KEY, add_secret_arg, secret_value
from tether.config.inspect import EvaluateSettings
from tether.experiment.assembly import open_settings_store
from tether.experiment.rewards import rewards_of
from tether.runner import RewardError, TaskFileError, load_tasks
from tether.runner.rewards import Evaluator, evaluate
from tether.store import RolloutStatus
from tether.store.records import RolloutRecord
from tether.trainer.coverage import CoverageConfig, greedy_record, sampled_record

console = Console(stderr=True)
VALIDATION = re.compile(r"@val(\d+)(k?)$")  # a held-out rollout's group: TASK@valSTEP, or ...k for samples


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "eval",
        help="score a run's stored held-out rollouts again, with any evaluator: pass@1, pass@K, mean@K",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_settings(parser, EvaluateSettings())
    add_secret_arg(parser, JUDGE_KEY)
    parser.set_defaults(command_main=run)


def run(args: argparse.Namespace) -> int:
    settings: EvaluateSettings = settings_from_args(args)
    try:
        evaluator = rewards_of(settings.rewards, secret_value(args, JUDGE_KEY))[0]
        tasks = {task.id: task.input for task in load_tasks(args.tasks)}
    except (RewardError, TaskFileError) as exc:
        raise SystemExit(f"tether eval: {exc}") from None
    if evaluator is None:
        raise SystemExit("tether eval: give --reward MODULE:FUNCTION (or judge:RUBRIC.md) to score with")
    store = open_settings_store(settings.store, "eval")
    try:
        held_out = [r for r in store.list_rollouts(run=args.run, limit=ALL_ROWS) if r.mode == "val"]
        if not held_out:
            raise SystemExit(
                f"tether eval: run {args.run!r} has no held-out rollouts: train it with --val-tasks "
                "(and --val-k K for pass@K)"
            )
        records = store.read_rollouts([r.id for r in held_out if r.status != RolloutStatus.queued])
    finally:
        store.close()
    rows = validations(records, tasks, evaluator, args.primary_reward, args.pass_reward)
    for row in rows:
        if args.json:
            print(json.dumps(row))
    if not args.json:
        show(rows, args.run)
    return 0


def validations(
    records: list[RolloutRecord],
    tasks: dict[str, dict[str, Any]],
    evaluator: Evaluator,
    primary: str | None,
    pass_reward: float,
) -> list[dict[str, Any]]:
    """Each validation's figures, by step: pass@1 of its greedy rollouts, pass@K and mean@K of its samples."""
    greedy: dict[int, dict[str, float]] = defaultdict(dict)
    sampled: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for record in records:
        found = VALIDATION.search(record.rollout.group_id or "")
        if found is None:
            continue
        step, is_sample = int(found.group(1)), bool(found.group(2))
        reward = score(record, tasks, evaluator, primary)
        if is_sample:
            sampled[step][record.rollout.task_id].append(reward)
        else:
            greedy[step][record.rollout.task_id] = reward
    rows = []
    for step in sorted(set(greedy) | set(sampled)):
        row: dict[str, Any] = {"step": step, **greedy_record(greedy[step], pass_reward)}
        if sampled.get(step):
            k = min(len(rewards) for rewards in sampled[step].values())
            coverage = CoverageConfig(k=k, pass_reward=pass_reward)
            row.update(sampled_record(sampled[step], coverage))
            row = {key: value for key, value in row.items() if not key.endswith("_tasks")}
        rows.append(row)
    return rows


def score(
    record: RolloutRecord, tasks: dict[str, dict[str, Any]], evaluator: Evaluator, primary: str | None
) -> float:
    """The evaluator's primary reward of a finished held-out rollout (0.0 when it did not succeed)."""
    rollout = record.rollout
    task = tasks.get(rollout.task_id)
    if task is None:
        raise SystemExit(f"tether eval: task {rollout.task_id!r} of the run is not in --tasks: give its file")
    if rollout.status != RolloutStatus.succeeded:
        return 0.0
    trace = [span for span in record.spans if span.attempt == rollout.attempt_count]
    try:
        rewards, _ = evaluate(
            evaluator, rollout.id, rollout.attempt_count, task, rollout.output, trace, primary
        )
    except RewardError as exc:
        raise SystemExit(f"tether eval: rollout {rollout.id} ({rollout.task_id}): {exc}") from None
    return next(reward.value for reward in rewards if reward.primary)


def show(rows: list[dict[str, Any]], run: str) -> None:
    table = Table(title=f"held-out coverage of run {run}, scored again")
    for column in ("step", "pass@1 (greedy)", "pass@K", "mean@K"):
        table.add_column(column)
    for row in rows:
        k = row.get("val_k")
        table.add_row(
            str(row["step"]),
            _cell(row, "val_pass_at_1"),
            "-" if k is None else f"K={k}: {_cell(row, 'val_pass_at_k')}",
            "-" if k is None else _cell(row, "val_mean_at_k"),
        )
    Console().print(table)


def _cell(row: dict[str, Any], key: str) -> str:
    if key not in row:
        return "-"
    low, high = row[f"{key}_ci"]
    return f"{row[key]:.3f} [{low:.3f}, {high:.3f}]"
