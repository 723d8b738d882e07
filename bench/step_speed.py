"""A training step's seconds and work, before and after the step's repeated work was removed, in one run.

    .venv/bin/python -m bench.step_speed [--agents demo,sql] [--steps 4] [--rounds 2] [--out DIR]

Each agent is trained with plain `tether train` (SmolLM2-135M, GRPO, no validation, no checkpoints, the
example's own tasks and step shape, `bench/harness_price.py`), in turns:
- before: `--agent-cold --no-shared-prefixes --prefix-cache-mb 0 --max-batch-size 8`: the agents start a
  fresh interpreter each, the learner runs every sample's whole prompt, the engine keeps no prefix and
  decodes 8 rows at a time (a default run before these were the defaults; the engine still prefills a
  prompt admitted several times at once only once, which cannot be turned off);
- after: the defaults.
With `--before-rev REV` (say `a875ced`, the commit before M22), before is instead REV's own code with
its own defaults (`bench/trees.py`), so that what changed without a flag (the engine's adapter path, its
swaps) counts too; an engine that old records no prompt counts, and the after run's prompt tokens stand
for what it prefilled.
Per mode, means over the steps after the first (the first starts the warm interpreter and learns its
imports): the step's seconds (rollouts + update + swap), the rollout phase against generation
(`harness_ratio`), the learner's forward tokens per update (and, on the after run's own batches, packed
against unshared: the deterministic count), and the engine's prefilled prompt tokens per step against the
prompt tokens the before run asked for (an engine without prefix sharing prefilled them all). The table
gives after / before.

`--sql-sft` counts instead, without training, the learner's forward tokens of the SQL pipeline's SFT
updates (8 demonstrations each: the writer's system prompt and schema, the question, the gold query as
the teacher writes it), padded against packed: a deterministic count.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness_price import EXAMPLES, EXAMPLES_RUN, train_run, write_tasks
from bench.trees import export

EXAMPLES_DIR = EXAMPLES

BEFORE = ("--agent-cold", "--no-shared-prefixes", "--prefix-cache-mb", "0", "--max-batch-size", "8")
KEYS = (
    "step_seconds",
    "rollout_seconds",
    "generation_seconds",
    "update_seconds",
    "harness_ratio",
    "train.forward_tokens",
    "train.sample_tokens",
    "train.tokens",
    "engine.prompt_tokens",
    "engine.prefilled_tokens",
)


def train(
    name: str, project: Path, tasks: Path, steps: int, mode: str, before_tree: Path | None = None
) -> list[dict[str, Any]]:
    """One `tether train` run in `mode` (before or after); its train records, one per step. With
    `before_tree`, before is that revision's code with its own defaults."""
    if mode == "before" and before_tree is not None:
        return train_run(name, project, tasks, steps, mode, (), tree=before_tree)
    return train_run(name, project, tasks, steps, mode, BEFORE if mode == "before" else ())


def steady(records: list[dict[str, Any]]) -> dict[str, float]:
    """Means over the steps after the first; the step is its rollouts, update and swap."""
    later = records[1:] or records
    for record in later:
        record["step_seconds"] = sum(
            record.get(k, 0.0) for k in ("rollout_seconds", "update_seconds", "swap_seconds")
        )
    return {key: statistics.fmean(r.get(key, 0.0) for r in later) for key in KEYS}


def table(results: dict[str, dict[str, list[dict[str, float]]]]) -> str:
    lines = [
        "| agent | round | step s before → after | ratio | learner forward tokens | ratio "
        "| same batch: packed / unshared | engine prefilled tokens | ratio | harness ratio before → after |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, modes in results.items():
        for index, (before, after) in enumerate(zip(modes["before"], modes["after"], strict=False)):
            cells = []
            for key in ("step_seconds", "train.forward_tokens", "engine.prefilled_tokens"):
                # Before the prefix cache the engine prefilled every prompt token it was asked for.
                was = before[key]
                if key == "engine.prefilled_tokens":  # an engine before M22 records none: it had no cache
                    was = before["engine.prompt_tokens"] or after["engine.prompt_tokens"]
                ratio = after[key] / was if was else float("nan")
                cells.append(f"{was:.1f} → {after[key]:.1f} | {ratio:.2f}x")
                if key == "train.forward_tokens":  # the deterministic count: one batch, both layouts
                    same = after[key] / after["train.sample_tokens"] if after["train.sample_tokens"] else 0.0
                    cells.append(f"{same:.3f}x")
            lines.append(
                f"| {name} | {index + 1} | {' | '.join(cells)} "
                f"| {before['harness_ratio']:.2f} → {after['harness_ratio']:.2f} |"
            )
    return "\n".join(lines)


def sql_sft_tokens(updates: int = 5, batch: int = 8) -> list[tuple[int, int, int]]:
    """(padded forward tokens, packed forward tokens, trained tokens) of the SQL pipeline's first
    `updates` SFT updates of `batch` demonstrations, in the learner's default micro-batches."""
    import importlib.util

    from tether.adapters.transitions import Transition
    from tether.engines.transformers_engine import TransformersEngine
    from tether.learner.batches import collate, collate_packed, plan_micro_batches, plan_packed

    spec = importlib.util.spec_from_file_location("sql_agent", EXAMPLES_DIR / "sql_agent" / "agent.py")
    assert spec is not None and spec.loader is not None
    agent = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(agent)
    with tempfile.TemporaryDirectory(prefix="sql-sft-") as folder:
        tasks = write_tasks("sql", Path(folder))
        rows = [json.loads(line) for line in tasks.read_text().splitlines()][: updates * batch]
    engine = TransformersEngine("smollm2-135m", max_batch_size=1)
    try:
        demos = []
        for task in rows:
            user = f"Schema:\n{agent.describe_schema(task['db'])}\n\nQuestion: {task['question']}"
            messages = [{"role": "system", "content": agent.WRITER}, {"role": "user", "content": user}]
            prompt = engine.chat_prompt_ids(messages)
            reply = engine.encode(f"```sql\n{task['reference']['gold_sql']}\n```") + [
                min(engine.eos_token_ids)
            ]
            demos.append(
                Transition(
                    rollout_id=task["id"],
                    task_id=task["id"],
                    group_id=task["id"],
                    attempt=None,
                    call_index=0,
                    agent="writer",
                    policy_version=None,
                    prompt_ids=prompt,
                    response_ids=reply,
                    response_logprobs=[0.0] * len(reply),
                    loss_mask=[1] * len(reply),
                    reward=1.0,
                )
            )
    finally:
        engine.close()
    counts = []
    for start in range(0, len(demos), batch):
        part = demos[start : start + batch]
        sequences = [list(t.prompt_ids) + list(t.response_ids) for t in part]
        padded = sum(
            collate(part, group, 0).tokens for group in plan_micro_batches([len(s) for s in sequences], 2048)
        )
        packed = sum(
            collate_packed(part, group, 0, 1024).tokens for group in plan_packed(sequences, 2048, 1024)
        )
        counts.append((padded, packed, sum(t.trained_tokens for t in part)))
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--agents", default="demo", help="comma-separated, of: " + ", ".join(EXAMPLES_RUN))
    parser.add_argument("--steps", type=int, default=4, help="steps per run (the first is left out)")
    parser.add_argument("--rounds", type=int, default=2, help="before-then-after pairs per agent")
    parser.add_argument("--out", type=Path, help="a folder for results.json")
    parser.add_argument("--sql-sft", action="store_true", help="count the SQL SFT updates' tokens, then stop")
    parser.add_argument(
        "--before-rev",
        help="run before from this revision's code with its own defaults (e.g. the commit before M22), "
        "instead of this checkout with the old defaults' flags",
    )
    args = parser.parse_args()
    if args.sql_sft:
        print(
            "| SFT update | padded forward tokens | packed | ratio | trained tokens |\n|---|---|---|---|---|"
        )
        for index, (padded, packed, trained) in enumerate(sql_sft_tokens(), start=1):
            print(f"| {index} | {padded} | {packed} | {packed / padded:.3f}x | {trained} |")
        return
    names = [n.strip() for n in args.agents.split(",") if n.strip()]
    unknown = [n for n in names if n not in EXAMPLES_RUN]
    if unknown:
        parser.error(f"unknown agents {unknown}; choose from {sorted(EXAMPLES_RUN)}")
    results: dict[str, dict[str, list[dict[str, float]]]] = {}
    with tempfile.TemporaryDirectory(prefix="step-speed-") as folder:
        before_tree = export(args.before_rev, Path(folder) / "before") if args.before_rev else None
        for name in names:
            project = Path(folder) / name
            tasks = write_tasks(name, project)
            for round_ in range(args.rounds):
                for mode in ("before", "after"):
                    started = time.monotonic()
                    row = steady(train(name, project, tasks, args.steps, mode, before_tree))
                    results.setdefault(name, {}).setdefault(mode, []).append(row)
                    if args.out:  # so far, in case a later run fails
                        args.out.mkdir(parents=True, exist_ok=True)
                        (args.out / "results.json").write_text(json.dumps(results, indent=2))
                    print(
                        f"step_speed: {name} {mode} round {round_ + 1}: {time.monotonic() - started:.0f} s, "
                        f"step {row['step_seconds']:.1f} s",
                        file=sys.stderr,
                        flush=True,
                    )
    print(table(results))


if __name__ == "__main__":
    main()
