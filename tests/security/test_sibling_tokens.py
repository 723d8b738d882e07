"""An agent cannot act as a concurrently running sibling: run by `tether rollout --n-workers 2`, two
hostile agents (`agents/sibling_thief.py`) each wait for the other, read its environment from
/proc/PID/environ and make a model call with its token. Without a sandbox (Tether's own user) the theft
works and the call becomes one of the sibling's spans, so the test can fail; under `--sandbox bwrap` no
sibling is to be found, and each rollout holds its own call only: started cold (`--agent-cold`), and
warm, the default (both forked from one warm interpreter, which starts them both)."""

from __future__ import annotations

import json
import secrets
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.gateway.fake_upstream import Behaviour
from tether.cli.main import main
from tether.contracts import Origin
from tether.experiment import inputs
from tether.runner.warm import WarmStarts
from tether.store import RolloutStatus, SQLiteStore

AGENTS = Path(__file__).parent / "agents"
STOLEN_SAYS = "stolen by the sibling"  # in the stolen call's prompt (sibling_thief.py)
LOOK_S = 5.0  # how long each agent looks for its sibling before it gives up

pytestmark = pytest.mark.bwrap


def thieves(tmp_path: Path, upstream_url: str, kind: str, *extra: str) -> dict[str, dict[str, Any]]:
    """`tether rollout` of two sibling thieves at once; per rollout, what its agent managed and the
    prompts of the model calls the gateway recorded in it."""
    project, meet = tmp_path / kind, tmp_path / f"{kind}-meet"
    project.mkdir()
    meet.mkdir()
    tasks = tmp_path / f"{kind}.jsonl"
    tasks.write_text(
        "".join(json.dumps({"id": f"t{i}", "dir": str(meet), "look_s": LOOK_S}) + "\n" for i in range(2))
    )
    agent = f"{sys.executable} {AGENTS / 'sibling_thief.py'} thief-{secrets.token_hex(6)}"
    args = [
        "rollout",
        "--agent",
        agent,
        "--tasks",
        str(tasks),
        "--n-workers",
        "2",
        "--upstream",
        upstream_url,
    ]
    assert main([*args, "--upstream-token-ids", "--project-dir", str(project), "--no-air", *extra]) == 0
    store = SQLiteStore(project / ".tether" / "store.db")
    try:
        seen = {}
        for rollout in store.list_rollouts(limit=10):
            assert rollout.status == RolloutStatus.succeeded, rollout
            spans = store.query_spans(rollout_id=rollout.id, limit=100)
            calls = [json.dumps(s.attributes) for s in spans if s.origin == Origin.GATEWAY]
            seen[rollout.id] = {"report": json.loads(rollout.output or "{}"), "calls": calls}
    finally:
        store.close()
    assert len(seen) == 2
    return seen


@pytest.mark.parametrize("start", ["cold", "warm"])
def test_an_agent_cannot_call_with_its_siblings_token_through_tether_rollout_in_the_sandbox(
    tmp_path: Path,
    upstream_url: str,
    behaviour: Behaviour,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    start: str,
) -> None:
    if shutil.which("bwrap") is None:
        pytest.fail("bubblewrap is not installed: run scripts/ensure_bwrap.sh (make test does)")
    made: list[WarmStarts] = []

    class Recorded(WarmStarts):
        def __init__(self, modules: Any = None) -> None:
            super().__init__(modules)
            made.append(self)

    monkeypatch.setattr(inputs, "WarmStarts", Recorded)
    cold = ["--agent-cold"] if start == "cold" else []
    inside = thieves(tmp_path, upstream_url, "sandboxed", "--sandbox", "bwrap", *cold)
    assert not any(STOLEN_SAYS in json.dumps(request) for request in behaviour.requests)
    assert [(w.cold, w.forked) for w in made] == ([] if cold else [({}, 2)])  # both warm, or both cold
    outside = thieves(
        tmp_path, upstream_url, "plain", "--agent-cold", "--sandbox", "none"
    )  # its environ in /proc
    capsys.readouterr()

    reports = [rollout["report"] for rollout in inside.values()]
    # the two sandboxed agents ran at once, each looking for the other the whole time, and found nothing
    assert max(r["started"] for r in reports) < min(r["ended"] for r in reports)
    for rollout_id, rollout in inside.items():
        report = rollout["report"]
        assert report["rollout"] == rollout_id and report["own_call"] == 200
        assert (report["environ"], report["sibling"], report["stolen_call"]) == (None, None, None)
        assert report["processes"] <= 3 and report["looked_s"] >= LOOK_S  # bwrap's init, the relay, it
        (call,) = rollout["calls"]  # its own, and no other
        assert f"{rollout_id}'s own call" in call and STOLEN_SAYS not in call

    # unsandboxed, as Tether's own user, each reads its sibling's environment and calls as the sibling:
    # the call lands in the sibling's rollout
    for rollout_id, rollout in outside.items():
        report = rollout["report"]
        sibling = next(other for other in outside if other != rollout_id)
        assert report["environ"] == "read" and report["sibling"] == sibling
        assert report["stolen_call"] == 200
        stolen = [call for call in outside[sibling]["calls"] if f"{STOLEN_SAYS} {rollout_id}" in call]
        assert len(stolen) == 1
        assert len(rollout["calls"]) == 2  # its own call and the one its sibling made with its token
