"""`tether rollout` with an agent that floods spans through its own token (`agents/span_flooder.py`): the
rollout completes, the flood stops at the attempt's quota set on the command line, and every model call
the agent made, before and after its quota was used up, is recorded by the gateway."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tether.cli.main import build_parser
from tether.contracts import Origin
from tether.store import RolloutStatus, SQLiteStore
from tether.store.span_quota import span_bytes

FLOODER = Path(__file__).parent / "agents" / "span_flooder.py"
MAX_SPANS, MAX_SPAN_MB = 120, 4
OPTIONS = ("--max-request-mb", "--max-spans-per-attempt", "--max-span-mb-per-attempt")


def test_a_span_flood_through_tether_rollout_is_capped_and_its_calls_are_recorded(
    tmp_path: Path, upstream_url: str
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "flood", "q": "hi"}) + "\n")
    command = [sys.executable, "-m", "tether.cli.main", "rollout", "--agent", f"{sys.executable} {FLOODER}"]
    command += ["--tasks", str(tasks), "--upstream", upstream_url, "--upstream-token-ids", "--no-air"]
    command += ["--project-dir", str(tmp_path / "project"), "--run", "flood", "--timeout", "240"]
    command += ["--max-spans-per-attempt", str(MAX_SPANS), "--max-span-mb-per-attempt", str(MAX_SPAN_MB)]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr[-2000:]

    store = SQLiteStore(tmp_path / "project" / ".tether" / "store.db")
    try:
        (rollout,) = store.list_rollouts(run="flood", limit=10)
        spans = store.query_spans(rollout_id=rollout.id, limit=100_000)
    finally:
        store.close()
    assert rollout.status == RolloutStatus.succeeded, rollout.error
    seen = json.loads(rollout.output or "{}")
    # Both ways were taken at first and refused with a 429 once the attempt's quota was used up.
    for way in ("store", "otlp"):
        assert seen[way][0] in (200, 204) and 429 in seen[way] and set(seen[way]) <= {200, 204, 429}
    agents = [span for span in spans if span.origin == Origin.AGENT]
    assert 0 < len(agents) <= MAX_SPANS
    assert sum(span_bytes(span) for span in agents) <= MAX_SPAN_MB * 1024 * 1024
    # Every call the agent made was answered and recorded, the one after the flood included.
    assert seen["calls"] == [200] * 5
    calls = [span for span in spans if span.origin == Origin.GATEWAY]
    assert len(calls) == 5 and "call after the flood" in json.dumps(calls[-1].attributes)


@pytest.mark.parametrize("command", ["rollout", "train", "serve", "optimize-prompt"])
def test_the_quota_options_are_in_the_help_of_every_command_that_serves_agents(command: str) -> None:
    subcommands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    text = subcommands[command].format_help()
    assert all(option in text for option in OPTIONS)
    assert "429" in text and "413" in text
