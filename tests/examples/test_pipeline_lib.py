"""examples/pipeline_lib.sh's `run_pipeline` and examples/pipeline_summary.py, with `tether` and the teacher
stood in for (the real pipelines are tests/examples/test_pipelines.py): one teacher run, SFT and RL once per
seed, and a results row per seed with 95% intervals and the paired after-RL minus after-SFT difference."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.examples.support import ROOT
from tether.rewards.intervals import bootstrap_interval, paired_difference_interval

SFT_STEPS = 2
# Per-task held-out rewards a fake `tether train` records for each seed: base, after SFT, after RL.
REWARDS = {
    0: [[0.0, 0.0, 0.0], [1.0, 0.0, 1.0], [1.0, 1.0, 1.0]],
    1: [[0.0, 0.0, 1.0], [0.0, 1.0, 1.0], [0.0, 1.0, 1.0]],
}

FAKE_TETHER = f"""#!{sys.executable}
import json, os, sys
from pathlib import Path
args = sys.argv[1:]
with open(os.environ["CALLS"], "a") as calls:
    calls.write(json.dumps(args) + "\\n")
if args[0] == "train":
    option = lambda name: args[args.index(name) + 1]
    rewards = {json.dumps({str(k): v for k, v in REWARDS.items()})}.get(option("--seed"), {REWARDS[0]})
    run = Path(option("--project-dir")) / ".tether" / "runs" / option("--run")
    run.mkdir(parents=True, exist_ok=True)
    records = []
    for step, values in zip((0, {SFT_STEPS}, {SFT_STEPS + 1}), rewards):
        per_task = {{f"v{{i}}": value for i, value in enumerate(values)}}
        records.append({{"kind": "val", "step": step, "val_score": sum(values) / len(values),
                        "val_ci_low": min(values), "val_ci_high": max(values), "val_rewards": per_task,
                        "val_rollouts": len(values)}})
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\\n" for r in records))
"""

PIPELINE = """
set -euo pipefail
source examples/pipeline_lib.sh
prefix=DEMO
name=demo
project=$PROJECT
agent="python agent.py"
reward=reward.py:score
teacher=teacher.py
mkdir -p "$project/data"
printf '{"id": "a"}\\n{"id": "b"}\\n' >"$project/data/train.jsonl"
printf '{"id": "v0"}\\n{"id": "v1"}\\n{"id": "v2"}\\n' >"$project/data/val.jsonl"
train_tasks=$project/data/train.jsonl
val_tasks=$project/data/val.jsonl
first_val_tasks
declare -A size=([MODEL]=m [TEACHER_WORKERS]=1 [SFT_STEPS]=@SFT@ [SFT_BATCH]=1 [LR]=1
  [RL_STEPS]=1 [GROUP]=2 [TASKS_PER_STEP]=1 [WORKERS]=1)
extra_train=()
start_teacher() { TEACHER_URL=http://teacher.invalid/v1; }
stop_teacher() { :; }
run_pipeline --extra
""".replace("@SFT@", str(SFT_STEPS))


def run_pipeline(tmp_path: Path, **env: str) -> tuple[list[list[str]], dict, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "tether").write_text(FAKE_TETHER)
    (bin_dir / "tether").chmod(0o755)
    calls = tmp_path / "calls.jsonl"
    calls.unlink(missing_ok=True)
    project = tmp_path / "project"
    path = os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), os.environ["PATH"]])
    full_env = {**os.environ, "PATH": path, "CALLS": str(calls), "PROJECT": str(project), **env}
    done = subprocess.run(
        ["bash", "-c", PIPELINE], cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    invoked = [json.loads(line) for line in calls.read_text().splitlines()]
    return invoked, json.loads((project / "pipeline-summary.json").read_text()), done.stdout


def test_every_seed_trains_its_own_run_from_one_teacher_run_and_gets_a_row(tmp_path: Path) -> None:
    invoked, summary, printed = run_pipeline(tmp_path)
    assert [args[0] for args in invoked] == ["rollout", "train", "train"]
    assert invoked[0][invoked[0].index("--run") + 1] == "demo-teacher"
    for seed, args in zip((0, 1), invoked[1:], strict=True):
        assert args[args.index("--seed") + 1] == str(seed)
        assert args[args.index("--run") + 1] == f"demo-pipeline-seed{seed}"
        assert args[args.index("--from-run") + 1] == "demo-teacher" and args[-1] == "--extra"
    assert [row["seed"] for row in summary["rows"]] == [0, 1]
    for row in summary["rows"]:
        base, sft, rl = REWARDS[row["seed"]]
        assert row["after_sft"] == {"score": sum(sft) / 3, "interval": [min(sft), max(sft)], "tasks": 3}
        difference = row["rl_minus_sft"]
        assert difference["score"] == pytest.approx((sum(rl) - sum(sft)) / 3)
        before = {f"v{i}": v for i, v in enumerate(sft)}
        after = {f"v{i}": v for i, v in enumerate(rl)}
        assert difference["interval"] == list(paired_difference_interval(before, after))
    lines = printed.splitlines()
    assert "after RL - after SFT (paired)" in lines[-3]
    assert lines[-2].split()[:6] == ["0", "0.000", "[0.000,", "0.000]", "0.667", "[0.000,"]
    assert lines[-1].startswith("1 ") and "+0.000 [+0.000, +0.000]" in lines[-1]


def test_the_seeds_and_the_held_out_head_come_from_the_environment(tmp_path: Path) -> None:
    invoked, summary, _ = run_pipeline(tmp_path, DEMO_SEEDS="5", DEMO_VAL="2")
    assert [args[args.index("--seed") + 1] for args in invoked if args[0] == "train"] == ["5"]
    val_file = Path(invoked[1][invoked[1].index("--val-tasks") + 1])
    assert val_file.name == "val-head.jsonl" and len(val_file.read_text().splitlines()) == 2
    assert [row["seed"] for row in summary["rows"]] == [5]


def summary_module() -> ModuleType:
    """examples/pipeline_summary.py, loaded by path (examples/ is not a package)."""
    spec = importlib.util.spec_from_file_location(
        "pipeline_summary", ROOT / "examples" / "pipeline_summary.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_run_from_before_intervals_were_recorded_gets_them_from_its_rewards_or_none() -> None:
    module = summary_module()
    rewards = {"a": 0.0, "b": 1.0, "c": 1.0, "d": 0.0}
    old = [
        {"kind": "val", "step": 0, "val_score": 0.0},
        {"kind": "val", "step": 2, "val_score": 0.5, "val_rewards": rewards},
        {"kind": "val", "step": 3, "val_score": 0.5},
    ]
    result = module.summary(old, sft_steps=2)
    assert result["base"] == {"score": 0.0, "interval": None, "tasks": None}
    assert result["after_sft"]["interval"] == list(bootstrap_interval(list(rewards.values())))
    assert result["rl_minus_sft"] is None  # the run after RL has no per-task rewards to pair with
    assert module.cell(result["base"]) == "0.000" and module.cell(None) == "-"


def test_the_summary_counts_what_rl_had_to_learn_from() -> None:
    module = summary_module()
    records = [
        {"kind": "train", "step": 1, "phase": "sft", "samples": 8},
        {"kind": "train", "step": 2, "rollouts": 32, "groups": 8, "groups_used": 2, "samples": 8},
        {"kind": "train", "step": 3, "rollouts": 16, "groups": 4, "groups_used": 3, "samples": 12},
    ]
    rl = module.summary(records, sft_steps=1)["rl"]
    assert rl == {"steps": 2, "rollouts": 48, "groups": 12, "groups_with_signal": 5, "samples_trained": 20}
    assert (
        "2 steps, 48 rollouts, 5 of 12 groups with signal"
        in module.coverage_and_rl_lines([{"seed": 0, "rl": rl}])[0]
    )
