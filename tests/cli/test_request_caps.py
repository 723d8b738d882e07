"""`--max-tokens-cap` and `--n-cap` on every command that serves the policy, not only `serve`: a call asking
for more tokens than the cap gets the cap, and its span says what it asked."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tether.cli.main import main
from tether.contracts import CallAttr, is_call_span
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


def recorded_call(project: Path) -> dict:
    store = SQLiteStore(project / ".tether" / "store.db")
    (rollout_,) = store.list_rollouts(limit=10)
    (call,) = [s for s in store.query_spans(rollout_id=rollout_.id) if is_call_span(s.name)]
    return call.attributes


def test_the_token_cap_of_rollout_lowers_what_a_call_asks(tmp_path: Path) -> None:
    code, status, error = rollout(tmp_path, "--max-tokens-cap", "4")  # the agent asks for 8
    assert code == 0 and status == RolloutStatus.succeeded, error
    call = recorded_call(tmp_path)
    assert call[CallAttr.LOWERED] == {"max_tokens": 8} and call[CallAttr.REQUEST]["max_tokens"] == 4
    assert 1 <= len(call[CallAttr.CHOICES][0]["token_ids"]) <= 4
    code, status, error = rollout(tmp_path / "again", "--max-tokens-cap", "8")
    assert code == 0 and status == RolloutStatus.succeeded, error
    assert CallAttr.LOWERED not in recorded_call(tmp_path / "again")


def test_a_cap_below_one_is_refused_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"^tether rollout: --max-tokens-cap and --n-cap must be at least 1"):
        rollout(tmp_path, "--n-cap", "0")
