"""examples/calc_agent/compare_summary.py: the equal-wall-clock comparison's table, from run folders' metrics
as `tether train` writes them (base validation first, the final one last, each with per-task rewards)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.examples.support import ROOT
from tether.rewards.intervals import paired_difference_interval

SCRIPT = ROOT / "examples" / "calc_agent" / "compare_summary.py"


def write_run(folder: Path, base: list[float], after: list[float], steps: list[dict]) -> Path:
    def val(step: int, values: list[float]) -> dict:
        rewards = {f"v{i}": value for i, value in enumerate(values)}
        return {"kind": "val", "step": step, "val_score": sum(values) / len(values), "val_rewards": rewards}

    records = [val(0, base), *({"kind": "train", "step": i + 1, **s} for i, s in enumerate(steps))]
    records.append(val(len(steps), after))
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


def test_each_arm_is_paired_with_its_own_base_and_its_time_is_summed(tmp_path: Path) -> None:
    base = [0.0, 0.0, 1.0, 0.0]
    teacher = write_run(tmp_path / "teacher", base, [1.0, 1.0, 1.0, 0.0], [{"step_seconds": 5.0}])
    opd_steps = [
        {"step_seconds": 40.0, "opd.reverse_kl": 0.5, "opd.teacher_seconds": 10.0},
        {"step_seconds": 30.0, "opd.reverse_kl": 0.3, "opd.teacher_seconds": 8.0},
    ]
    opd = write_run(tmp_path / "opd", base, [0.0, 1.0, 1.0, 0.0], opd_steps)
    grpo = write_run(tmp_path / "grpo", base, base, [{"step_seconds": 70.0, "skipped": "no signal"}])
    out = tmp_path / "summary.json"
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--teacher",
            str(teacher),
            "--arm",
            "opd",
            "0",
            str(opd),
            "--arm",
            "grpo",
            "0",
            str(grpo),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    summary = json.loads(out.read_text())
    first, second = summary["arms"]
    assert (first["arm"], first["steps"], first["updates"], first["train_seconds"]) == ("opd", 2, 2, 70.0)
    assert first["teacher_seconds"] == 18.0 and first["reverse_kl_first_last"] == [0.5, 0.3]
    assert first["minus_base"]["score"] == pytest.approx(0.25)
    expected = paired_difference_interval(
        {f"v{i}": v for i, v in enumerate(base)}, {"v0": 0.0, "v1": 1.0, "v2": 1.0, "v3": 0.0}
    )
    assert first["minus_base"]["interval"] == list(expected)
    assert (second["updates"], second["minus_base"]["score"]) == (0, 0.0)
    assert summary["teacher"]["after"]["score"] == 0.75
    lines = done.stdout.splitlines()
    assert lines[0].startswith("base: 0.250")
    assert "opd, seed 0" in lines[3] and "2 (2 updated), 70 s" in lines[3] and "+0.250" in lines[3]


def test_a_run_without_a_final_validation_has_no_scores(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("compare_summary", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "metrics.jsonl").write_text(json.dumps({"kind": "val", "step": 0, "val_score": 0.0}) + "\n")
    summary = module.run_summary(folder)
    assert summary["after"] is None and summary["minus_base"] is None and summary["steps"] == 0
