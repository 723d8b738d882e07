"""Held-out scores of pipeline runs (teacher -> SFT -> RL), one row per seed, from each run's metrics.jsonl:
base, after SFT and after RL, each with its 95% bootstrap interval, and after RL minus after SFT with the
paired interval (the same held-out tasks, resampled together). As JSON and as a table.

python examples/pipeline_summary.py --sft-steps N --run 0 RUN_DIR [--run 1 RUN_DIR ...] [--out summary.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from tether.rewards.intervals import bootstrap_interval, paired_difference_interval


def scored(record: dict[str, Any] | None) -> dict[str, Any] | None:
    """A validation's score and its interval: the one the run recorded, else one from its per-task rewards
    (a run from before intervals were recorded has neither: the interval is None)."""
    if record is None:
        return None
    low, high = record.get("val_ci_low"), record.get("val_ci_high")
    rewards = record.get("val_rewards")
    if (low is None or high is None) and rewards:
        low, high = bootstrap_interval(list(rewards.values()))
    interval = None if low is None or high is None else [low, high]
    return {"score": record["val_score"], "interval": interval, "tasks": record.get("val_rollouts")}


def difference(before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, Any] | None:
    """after - before, task by task, with the paired 95% interval; None without per-task rewards of the
    same tasks."""
    if before is None or after is None or not before.get("val_rewards") or not after.get("val_rewards"):
        return None
    first, second = before["val_rewards"], after["val_rewards"]
    if set(first) != set(second):
        return None
    low, high = paired_difference_interval(first, second)
    mean = statistics.fmean(second[task] - first[task] for task in first)
    return {"score": mean, "interval": [low, high], "tasks": len(first)}


def coverage(record: dict[str, Any] | None) -> dict[str, Any] | None:
    """A validation's greedy pass@1 and, when it sampled (`tether train --val-k K`), pass@K and mean@K,
    each with its interval; None for a validation that recorded neither."""
    if record is None or "val_pass_at_1" not in record:
        return None
    found = {"pass_at_1": {"score": record["val_pass_at_1"], "interval": record["val_pass_at_1_ci"]}}
    if "val_pass_at_k" in record:
        found["k"] = record["val_k"]
        for name in ("pass_at_k", "mean_at_k"):
            found[name] = {"score": record[f"val_{name}"], "interval": record[f"val_{name}_ci"]}
    return found


def summary(records: list[dict[str, Any]], sft_steps: int) -> dict[str, Any]:
    val = {r["step"]: r for r in records if r.get("kind") == "val"}
    updates = [r for r in records if r.get("kind") == "train"]
    last = max(val) if val else None
    after_sft = val.get(sft_steps)
    after_rl = val[last] if last is not None and last > sft_steps else None
    return {
        "coverage": {
            phase: coverage(record)
            for phase, record in (("base", val.get(0)), ("after_sft", after_sft), ("after_rl", after_rl))
        },
        "base": scored(val.get(0)),
        "after_sft": scored(after_sft),
        "after_rl": scored(after_rl),
        "rl_minus_sft": difference(after_sft, after_rl),
        "val_steps": {step: record["val_score"] for step, record in val.items()},
        "sft_update_seconds": sum(r.get("train.seconds", 0.0) for r in updates if r.get("phase") == "sft"),
        "rl_rollout_seconds": sum(r.get("rollout_seconds", 0.0) for r in updates if r.get("phase") != "sft"),
        "rl_update_seconds": sum(r.get("train.seconds", 0.0) for r in updates if r.get("phase") != "sft"),
        "val_seconds": sum(r.get("val_seconds", 0.0) for r in records if r.get("kind") == "val"),
        "rl": rl_signal(updates),
    }


def rl_signal(updates: list[dict[str, Any]]) -> dict[str, Any]:
    """What RL had to learn from: its steps, the rollouts they generated, the groups among them whose
    rewards varied, and the samples trained on."""
    rl = [r for r in updates if r.get("phase") != "sft"]
    return {
        "steps": len(rl),
        "rollouts": sum(r.get("rollouts", 0) for r in rl),
        "groups": sum(r.get("groups", 0) for r in rl),
        "groups_with_signal": sum(r.get("groups_used", 0) for r in rl),
        "samples_trained": sum(r.get("samples", 0) for r in rl),
    }


def cell(value: dict[str, Any] | None, signed: bool = False) -> str:
    """`0.350 [0.150, 0.550]`: a score and its 95% interval; `-` for none."""
    if value is None:
        return "-"
    number = "{:+.3f}" if signed else "{:.3f}"
    text = number.format(value["score"])
    if value["interval"] is not None:
        low, high = value["interval"]
        text += f" [{number.format(low)}, {number.format(high)}]"
    return text


def table(rows: list[dict[str, Any]]) -> str:
    columns = ["seed", "base", "after SFT", "after RL", "after RL - after SFT (paired)"]
    cells = [
        [
            str(row["seed"]),
            cell(row["base"]),
            cell(row["after_sft"]),
            cell(row["after_rl"]),
            cell(row["rl_minus_sft"], signed=True),
        ]
        for row in rows
    ]
    widths = [max(len(line[i]) for line in [columns, *cells]) for i in range(len(columns))]
    lines = ["  ".join(text.ljust(width) for text, width in zip(line, widths, strict=True)) for line in cells]
    header = "  ".join(text.ljust(width) for text, width in zip(columns, widths, strict=True))
    return "\n".join(
        ["held-out scores, 95% bootstrap intervals:", header, *lines, *coverage_and_rl_lines(rows)]
    )


def coverage_and_rl_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Lines of pass@1 (greedy) and pass@K per seed and phase, for the runs that sampled, then what each
    seed's RL steps had to learn from."""
    lines = []
    for row in rows:
        for phase, label in (("base", "base"), ("after_sft", "after SFT"), ("after_rl", "after RL")):
            found = row.get("coverage", {}).get(phase)
            if not found or "k" not in found:
                continue
            k = found["k"]
            lines.append(
                f"seed {row['seed']}, {label}: pass@1 {cell(found['pass_at_1'])}  pass@{k} "
                f"{cell(found['pass_at_k'])}  mean@{k} {cell(found['mean_at_k'])}"
            )
    lines = ["coverage (greedy pass@1 against k samples at a temperature):", *lines] if lines else []
    for row in rows:
        rl = row.get("rl")
        if rl and rl["steps"]:
            lines.append(
                f"seed {row['seed']}, RL: {rl['steps']} steps, {rl['rollouts']} rollouts, "
                f"{rl['groups_with_signal']} of {rl['groups']} groups with signal, "
                f"{rl['samples_trained']} samples trained on"
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--run",
        nargs=2,
        action="append",
        required=True,
        metavar=("SEED", "RUN_DIR"),
        help="a pipeline run of this seed (repeat for each seed)",
    )
    parser.add_argument("--sft-steps", type=int, required=True)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = []
    for seed, run_dir in args.run:
        lines = (Path(run_dir) / "metrics.jsonl").read_text().splitlines()
        records = [json.loads(line) for line in lines if line.strip()]
        rows.append({"seed": int(seed), "run_dir": run_dir, **summary(records, args.sft_steps)})
    if args.out:
        args.out.write_text(json.dumps({"sft_steps": args.sft_steps, "rows": rows}, indent=2) + "\n")
    print(table(rows))


if __name__ == "__main__":
    main()
