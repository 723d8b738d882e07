"""`make test` runs on pytest-xdist workers, and tests/conftest.py puts every test of the session's vLLM
server or Ray cluster on one worker, so that each starts once (three would not fit CI's memory beside the
pipelines). This runs a small suite the same way and checks where its tests ran."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBE = """
import json, os, pytest

def record(name):
    with open(os.environ["WHERE_FILE"], "a") as out:
        out.write(json.dumps([name, os.environ["PYTEST_XDIST_WORKER"]]) + "\\n")

@pytest.mark.vllm
@pytest.mark.parametrize("i", range(3))
def test_vllm(i):
    record(f"vllm{i}")

@pytest.mark.ray
@pytest.mark.parametrize("i", range(3))
def test_ray(i):
    record(f"ray{i}")

@pytest.mark.parametrize("i", range(6))
def test_other(i):
    record(f"other{i}")
"""


def test_the_vllm_and_ray_tests_share_one_worker(tmp_path: Path) -> None:
    (tmp_path / "test_probe.py").write_text(PROBE)
    where = tmp_path / "where.jsonl"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest"]
    command += ["-n", "3", "--dist", "loadgroup", "--rootdir", str(tmp_path), str(tmp_path)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WHERE_FILE": str(where)}
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ran = dict(json.loads(line) for line in where.read_text().splitlines())
    assert len(ran) == 12
    shared = {worker for name, worker in ran.items() if not name.startswith("other")}
    assert len(shared) == 1, f"the vLLM and Ray tests ran on {sorted(shared)}: {ran}"
