"""`--max-tokens-cap` and `--n-cap` on every command that serves the policy, not only `serve`: a framework
whose default asks for more tokens than the gateway's cap can be let through."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tether.cli.main import main
from tether.store import RolloutStatus, SQLiteStore

AGENT = Path(__file__).parent / "agents" / "openai_call_agent.py"  # asks for max_tokens 8


def rollout(project: Path, *flags: str) -> tuple[int, RolloutStatus, str | None]:
    project.mkdir(exist_ok=True)
    tasks = project / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "t0", "q": "hello"}) + "\n")
    command = ["rollout", "--agent", f"{sys.executable} {AGENT}", "--tasks", str(tasks)]
    code = main([*command, "--model", "tiny-random", "--project-dir", str(project), *flags])
    (found,) = SQLiteStore(project / ".tether" / "store.db").list_rollouts(run=None, limit=10)[:1]
    return code, found.status, found.error


def test_the_token_cap_of_rollout_refuses_and_lets_through(tmp_path: Path) -> None:
    code, status, error = rollout(tmp_path, "--max-tokens-cap", "4")
    assert code == 1 and status == RolloutStatus.failed and "cap of 4" in str(error)
    code, status, error = rollout(tmp_path / "again", "--max-tokens-cap", "8")
    assert code == 0 and status == RolloutStatus.succeeded, error


def test_a_cap_below_one_is_refused_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"^tether rollout: --max-tokens-cap and --n-cap must be at least 1"):
        rollout(tmp_path, "--n-cap", "0")
