"""The SQL pipeline's own RL step, before and after, in one run (after first):
`examples/sql_agent/pipeline.sh` as it is (teacher demonstrations, SFT warm start, GRPO with dynamic
sampling), seed 0, fewer RL steps and held-out questions.

    .venv/bin/python -m bench.pipeline_step --before-rev a875ced [--rl-steps 3] [--val 8] [--rounds 1]

before is REV's own code and pipeline script with their defaults (`bench/trees.py`); after is this
checkout's, or with `--after-rev REV2` that revision's (so that work in progress in the checkout does
not change what is measured). Both run the pipeline's sizes (SFT 20 steps of 8, RL groups of 4, 4 tasks
a step, at least 3 groups with signal, at most 8 groups a step, 8 agents at once) in a project folder
of their own. Per RL
step, from the run's metrics: the step's seconds (its rollouts in rounds, the update and the swap), of
which rollouts, generation and update, the groups generated and those with signal. The table gives the
mean RL step after / before, and the range of the steps.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.trees import ROOT, export, tree_env

SFT_STEPS = 20
KEYS = ("step_seconds", "rollout_seconds", "generation_seconds", "update_seconds")


def pipeline(project: Path, rl_steps: int, val: int, tree: Path | None) -> list[dict[str, Any]]:
    """One seed of the SQL pipeline in `tree` (or this checkout); the RL steps' metrics records."""
    env = tree_env(tree) if tree else dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    env.update(SQL_PROJECT=str(project), SQL_SEEDS="0", SQL_RL_STEPS=str(rl_steps), SQL_VAL=str(val))
    env["SQL_SFT_STEPS"] = str(SFT_STEPS)
    log = project.with_suffix(".log")
    with log.open("w") as out:
        done = subprocess.run(
            ["bash", "examples/sql_agent/pipeline.sh"], cwd=tree or ROOT, env=env, stdout=out, stderr=out
        )
    if done.returncode != 0:
        raise SystemExit(f"the pipeline failed ({tree or 'this checkout'}):\n{log.read_text()[-3000:]}")
    metrics = project / ".tether" / "runs" / "sql-pipeline-seed0" / "metrics.jsonl"
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    return [r for r in records if r.get("kind") == "train" and r["step"] > SFT_STEPS]


def summary(steps: list[dict[str, Any]]) -> dict[str, Any]:
    means = {key: statistics.fmean(s.get(key, 0.0) for s in steps) for key in KEYS}
    means["step_range"] = (min(s["step_seconds"] for s in steps), max(s["step_seconds"] for s in steps))
    means["groups"] = [(s.get("groups_generated", 0), s.get("groups_with_signal", 0)) for s in steps]
    return means


def table(rows: list[tuple[int, dict[str, Any], dict[str, Any]]]) -> str:
    lines = [
        "| round | RL step s before → after (mean) | ratio | steps' range before; after "
        "| rollouts s | generation s | update s | groups generated / with signal, before; after |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for index, before, after in rows:
        split = [f"{before[k]:.1f} → {after[k]:.1f}" for k in KEYS[1:]]
        ranges = "; ".join(f"{r['step_range'][0]:.1f}-{r['step_range'][1]:.1f}" for r in (before, after))
        groups = "; ".join(" ".join(f"{g}/{s}" for g, s in r["groups"]) for r in (before, after))
        lines.append(
            f"| {index} | {before['step_seconds']:.1f} → {after['step_seconds']:.1f} "
            f"| {after['step_seconds'] / before['step_seconds']:.2f}x | {ranges} | {' | '.join(split)} "
            f"| {groups} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before-rev", required=True, help="the code before, e.g. a875ced (before M22)")
    parser.add_argument("--after-rev", help="the code after (default: this checkout as it is)")
    parser.add_argument("--rl-steps", type=int, default=3, help="RL steps per pipeline run")
    parser.add_argument("--val", type=int, default=8, help="held-out questions validated (3 times a run)")
    parser.add_argument("--rounds", type=int, default=1, help="before-then-after pairs")
    parser.add_argument("--out", type=Path, help="a folder for results.json and the runs' logs")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="pipeline-step-") as folder:
        work = args.out or Path(folder)
        work.mkdir(parents=True, exist_ok=True)
        before_tree = export(args.before_rev, Path(folder) / "before")
        after_tree = export(args.after_rev, Path(folder) / "after") if args.after_rev else None
        for round_ in range(1, args.rounds + 1):
            results = {}
            for mode, tree in (("after", after_tree), ("before", before_tree)):
                started = time.monotonic()
                steps = pipeline(work / f"{mode}-{round_}", args.rl_steps, args.val, tree)
                results[mode] = summary(steps)
                print(
                    f"pipeline_step: {mode} round {round_}: {time.monotonic() - started:.0f} s, "
                    f"RL step {results[mode]['step_seconds']:.1f} s",
                    file=sys.stderr,
                    flush=True,
                )
            rows.append((round_, results["before"], results["after"]))
            if args.out:
                (args.out / "results.json").write_text(json.dumps([r[1:] for r in rows], indent=2))
    print(table(rows))


if __name__ == "__main__":
    main()
