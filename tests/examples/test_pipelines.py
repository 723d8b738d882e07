"""The SQL and RAG examples' pipelines, shortened: `pipeline.sh` runs the scripted teacher through the
unmodified agent, a few SFT updates on those demonstrations and one GRPO step, with the real
SmolLM2-135M; the held-out score after SFT beats the base model's on that example's validation split.

The calc pipeline is not here: shortened to fit (10 SFT updates, 16 held-out problems, 9 minutes) it
got 1 problem right after SFT where the base got none, a margin too thin to assert; its full run is
measured in its README."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]

# Sizes that fit a test: fewer SFT updates, one RL step, smaller splits where the example has large ones.
SHORT = {
    "sql": {"SQL_SFT_STEPS": "8", "SQL_SFT_BATCH": "4", "SQL_LR": "5e-4"},
    "rag": {"RAG_SFT_STEPS": "8", "RAG_SFT_BATCH": "4", "RAG_LR": "5e-4", "RAG_VAL": "8"},
}


@pytest.mark.parametrize("name", sorted(SHORT))
def test_the_short_pipeline_beats_the_base_model_after_sft(name: str, tmp_path: Path) -> None:
    prefix = name.upper()
    project = tmp_path / f"{name}-project"
    env = {
        **os.environ,
        **SHORT[name],
        f"{prefix}_PROJECT": str(project),
        f"{prefix}_RL_STEPS": "1",
        f"{prefix}_TASKS_PER_STEP": "1",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    done = subprocess.run(
        ["bash", str(ROOT / "examples" / f"{name}_agent" / "pipeline.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((project / "pipeline-summary.json").read_text())
    assert (
        summary["base"] is not None and summary["after_sft"] is not None and summary["after_rl"] is not None
    )
    assert summary["after_sft"] > summary["base"], summary
