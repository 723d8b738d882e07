"""The equal-wall-clock comparison of `compare.sh`: for the long-SFT teacher and each arm (SFT, GRPO, OPD
from the base model, one run per seed), the held-out score after training with its 95% bootstrap interval,
its paired difference from the base model (the run's own first validation, the same tasks), and what the
arm did with its time.

python examples/calc_agent/compare_summary.py --teacher RUN_DIR --arm ARM SEED RUN_DIR [...] [--out F]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parents[1]))
from pipeline_summary import cell, difference, scored  # noqa: E402


def run_summary(run_dir: Path) -> dict[str, Any]:
    """Base and final held-out scores of one run, their paired difference, and its training's shape."""
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    val = sorted((r for r in records if r.get("kind") == "val"), key=lambda r: r["step"])
    steps = [r for r in records if r.get("kind") == "train"]
    base, final = (val[0], val[-1]) if len(val) > 1 else (None, None)
    kl = [r["opd.reverse_kl"] for r in steps if r.get("opd.reverse_kl") is not None]
    return {
        "run_dir": str(run_dir),
        "base": scored(base),
        "after": scored(final),
        "minus_base": difference(base, final),
        "steps": len(steps),
        "updates": sum(1 for r in steps if not r.get("skipped")),
        "train_seconds": sum(r.get("step_seconds", 0.0) for r in steps),
        "teacher_seconds": sum(r.get("opd.teacher_seconds", 0.0) for r in steps),
        "reverse_kl_first_last": [kl[0], kl[-1]] if kl else None,
        "reverse_kl_mean": statistics.fmean(kl) if kl else None,
    }


def table(teacher: dict[str, Any], arms: list[dict[str, Any]]) -> str:
    rows = [["teacher (long SFT)", "", cell(teacher["after"]), cell(teacher["minus_base"], signed=True)]]
    rows += [
        [
            f"{arm['arm']}, seed {arm['seed']}",
            f"{arm['steps']} ({arm['updates']} updated), {arm['train_seconds']:.0f} s",
            cell(arm["after"]),
            cell(arm["minus_base"], signed=True),
        ]
        for arm in arms
    ]
    columns = ["training", "steps, training s", "held-out after", "minus base (paired)"]
    widths = [max(len(line[i]) for line in [columns, *rows]) for i in range(len(columns))]
    text = ["  ".join(t.ljust(w) for t, w in zip(line, widths, strict=True)) for line in [columns, *rows]]
    return "\n".join([f"base: {cell(teacher['base'])}", *text])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--teacher", type=Path, required=True, help="the long-SFT teacher's run folder")
    parser.add_argument(
        "--arm",
        nargs=3,
        action="append",
        default=[],
        metavar=("ARM", "SEED", "RUN_DIR"),
        help="one arm's run",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    teacher = run_summary(args.teacher)
    arms = [{"arm": arm, "seed": int(seed), **run_summary(Path(run))} for arm, seed, run in args.arm]
    if args.out:
        args.out.write_text(json.dumps({"teacher": teacher, "arms": arms}, indent=2) + "\n")
    print(table(teacher, arms))


if __name__ == "__main__":
    main()
