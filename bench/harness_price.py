"""The harness's price: how much longer a step's rollout phase takes than the policy server's generation,
and what `--agent-warm` changes, for the demo agent (the `openai` client), the SQL agent (LangGraph) and the
RAG agent (OpenAI Agents SDK), each trained cold and warm in the same run, in turns.

    .venv/bin/python -m bench.harness_price [--agents demo,sql,rag] [--steps 3] [--rounds 1] [--out DIR]

Each run is a plain `tether train` (SmolLM2-135M, GRPO, no validation, no checkpoints) on the example's
own tasks; its metrics log splits every step's rollout phase (`tether/trainer/stages.py`): generation
(at least one model call running), idle (none running), the agents' start-up before their first call,
their own time outside calls, and their CPU. The first step of a warm run includes starting its zygote
and learning its imports; the table's means are over the steps after it, in both modes.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.trees import tree_env

ROOT = Path(__file__).parents[1]
EXAMPLES = ROOT / "examples"


@dataclass(frozen=True)
class Example:
    """One agent: its command, evaluator, how to write its tasks, and its step's shape."""

    agent: str
    reward: str
    tasks: list[str]  # the example's tasks.py arguments after --out-dir
    group_size: int
    tasks_per_step: int
    timeout_s: int
    extra: tuple[str, ...] = ()  # more `tether train` options


EXAMPLES_RUN = {
    "demo": Example(
        "python examples/arith_agent/agent.py",
        "examples/arith_agent/reward.py:correct",
        ["--train", "200", "--val", "32", "--seed", "0"],
        8,
        3,
        300,
    ),
    "sql": Example(
        "python examples/sql_agent/agent.py --max-turns 1",
        "examples/sql_agent/reward.py:execution_match",
        ["--seed", "0"],
        4,
        4,
        600,
        ("--train-temperature", "1.0"),  # its checker samples greedily, which RL cannot train on
    ),
    "rag": Example(
        "python examples/rag_agent/agent.py --temperature 1.0",
        "examples/rag_agent/reward.py:score",
        ["--seed", "0"],
        6,
        2,
        600,
    ),
}
STEP_KEYS = (
    "rollout_seconds",
    "generation_seconds",
    "idle_seconds",
    "harness_ratio",
    "startup_seconds",
    "agent_seconds",
    "agent_cpu_seconds",
    "update_seconds",
)


def write_tasks(name: str, project: Path) -> Path:
    example = EXAMPLES_RUN[name]
    script = EXAMPLES / f"{'arith' if name == 'demo' else name}_agent" / "tasks.py"
    out = project / "data"
    subprocess.run([sys.executable, str(script), "--out-dir", str(out), *example.tasks], check=True, cwd=ROOT)
    return out / "train.jsonl"


def train(name: str, project: Path, tasks: Path, steps: int, warm: bool) -> list[dict[str, Any]]:
    """One `tether train` run, warm or cold; its train records, one per step."""
    return train_run(
        name, project, tasks, steps, "warm" if warm else "cold", () if warm else ("--agent-cold",)
    )


def train_run(
    name: str,
    project: Path,
    tasks: Path,
    steps: int,
    label: str,
    options: tuple[str, ...],
    tree: Path | None = None,
) -> list[dict[str, Any]]:
    """One `tether train` run of example `name` with more `options`, from this checkout or from `tree`
    (a past revision's files, `bench/trees.py`); its train records, one per step."""
    example = EXAMPLES_RUN[name]
    run = f"{name}-{label}-{time.monotonic_ns()}"
    command = [
        *(sys.executable, "-m", "tether.cli.main", "train", "--project-dir", str(project)),
        *("--agent", example.agent, "--tasks", str(tasks), "--reward", example.reward),
        *("--model", "smollm2-135m", "--algorithm", "grpo", "--steps", str(steps), "--seed", "0"),
        *("--group-size", str(example.group_size), "--tasks-per-step", str(example.tasks_per_step)),
        *("--val-every", "0", "--checkpoint-every", "0", "--timeout", str(example.timeout_s)),
        *("--run-name", run, *example.extra, *options),
    ]
    env = tree_env(tree) if tree else dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    done = subprocess.run(command, cwd=tree or ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{name} ({label}) failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    metrics = project / ".tether" / "runs" / run / "metrics.jsonl"
    return [r for r in map(json.loads, metrics.read_text().splitlines()) if r.get("kind") == "train"]


def steady(records: list[dict[str, Any]]) -> dict[str, float]:
    """Means over the steps after the first, of the split and of the step's time."""
    later = records[1:] or records
    means = {key: statistics.fmean(r.get(key, 0.0) for r in later) for key in STEP_KEYS}
    means["step_seconds"] = statistics.fmean(
        r.get("rollout_seconds", 0.0) + r.get("update_seconds", 0.0) + r.get("swap_seconds", 0.0)
        for r in later
    )
    means["agent_cpu_per_rollout"] = statistics.fmean(
        r.get("agent_cpu_seconds", 0.0) / max(r["rollouts"], 1) for r in later
    )
    return means


def table(results: dict[str, dict[str, list[dict[str, float]]]]) -> str:
    lines = [
        "| agent | mode | step s | rollout s | generation s | rollout / generation | start-up s | agent s "
        "| agent CPU s / rollout | warm / cold step |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, modes in results.items():
        for mode in ("cold", "warm"):
            for index, row in enumerate(modes.get(mode, [])):
                cold = modes.get("cold", [])
                ratio = row["step_seconds"] / cold[index]["step_seconds"] if mode == "warm" and cold else None
                lines.append(
                    f"| {name} | {mode} | {row['step_seconds']:.1f} | {row['rollout_seconds']:.1f} "
                    f"| {row['generation_seconds']:.1f} | {row['harness_ratio']:.2f} "
                    f"| {row['startup_seconds']:.2f} | {row['agent_seconds']:.2f} "
                    f"| {row['agent_cpu_per_rollout']:.2f} | {'' if ratio is None else f'{ratio:.2f}'} |"
                )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--agents", default="demo,sql,rag", help="which agents, comma-separated")
    parser.add_argument("--steps", type=int, default=3, help="steps per run (the first is left out)")
    parser.add_argument("--rounds", type=int, default=1, help="cold-then-warm pairs per agent")
    parser.add_argument("--out", type=Path, help="a folder for results.json")
    args = parser.parse_args()
    names = [n.strip() for n in args.agents.split(",") if n.strip()]
    unknown = [n for n in names if n not in EXAMPLES_RUN]
    if unknown:
        parser.error(f"unknown agents {unknown}; choose from {sorted(EXAMPLES_RUN)}")
    results: dict[str, dict[str, list[dict[str, float]]]] = {}
    with tempfile.TemporaryDirectory(prefix="harness-price-") as folder:
        for name in names:
            project = Path(folder) / name
            tasks = write_tasks(name, project)
            for round_ in range(args.rounds):
                for warm in (False, True):
                    mode = "warm" if warm else "cold"
                    started = time.monotonic()
                    row = steady(train(name, project, tasks, args.steps, warm))
                    results.setdefault(name, {}).setdefault(mode, []).append(row)
                    if args.out:  # so far, in case a later run fails
                        args.out.mkdir(parents=True, exist_ok=True)
                        (args.out / "results.json").write_text(json.dumps(results, indent=2))
                    took = time.monotonic() - started
                    print(
                        f"harness_price: {name} {mode} round {round_ + 1}: {took:.0f} s, "
                        f"step {row['step_seconds']:.1f} s",
                        file=sys.stderr,
                        flush=True,
                    )
    print(table(results))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
