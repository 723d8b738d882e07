"""examples/python_api.py: `tether.train(settings)` runs what `tether train` runs, and its run folder's
config.toml is the same run for the command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "python_api.py"


def run_example(project: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(EXAMPLE), "--model", "tiny-random", "--steps", "1", "--val", "4"]
    return subprocess.run(
        [*command, "--project-dir", str(project)], capture_output=True, text=True, timeout=600, check=False
    )


def test_the_python_api_example_trains_and_its_run_resumes_from_the_shell(tmp_path: Path) -> None:
    first = run_example(tmp_path)
    assert first.returncode == 0, first.stderr
    run_dir = tmp_path / ".tether" / "runs" / "python-api"
    assert f"run folder {run_dir}" in first.stdout
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["kind"] == "train"] == [1]
    assert [r["val_rollouts"] for r in records if r["kind"] == "val"] == [4, 4]

    shell = subprocess.run(
        [
            sys.executable,
            "-m",
            "tether.cli.main",
            "train",
            "--config",
            str(run_dir / "config.toml"),
            "--steps",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert shell.returncode == 0, shell.stderr
    assert "resuming run python-api" in shell.stderr
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["kind"] == "train"] == [1, 2]
