"""examples/deployment end to end at the smallest sizes, on tiny-random: simulated users (delayed, noisy,
some silent) drive `tether serve` with a canary through cycles of sessions -> later ratings -> `tether
train --from-sessions` -> canary -> decision. What is checked is the loop, not learning (a random model
has nothing to learn here): every cycle's version is tried and decided, the ratings arrive later and
under their sender, the silent users' sessions have none, and the figures add up."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tether.store.records import RolloutQuery
from tether.store.sqlite import SQLiteStore

ROOT = Path(__file__).resolve().parents[2]


def test_cycles_of_simulated_users_each_decide_a_trained_version(tmp_path: Path) -> None:
    project = tmp_path / "deployed"
    sizes = ["--cycles", "2", "--first", "16", "--min-sessions", "4", "--max-sessions", "8", "--final", "8"]
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples/deployment/cycles.py"), "--out", str(project)]
        + ["--model", "tiny-random", *sizes, "--train-steps", "1"]
        + ["--train-args", "--algorithm sft --sft-min-reward 0"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((project / "summary.json").read_text())
    cycles = summary["cycles"]
    assert [c["version"] for c in cycles] == [1, 2]
    assert all(c["decision"] in ("promoted", "rolled back") for c in cycles)
    for cycle in cycles:
        comparison = cycle["comparison"]
        assert min(comparison["canary"], comparison["incumbent"]) >= 4
        if cycle["decision"] == "promoted":
            assert comparison["low"] > 0
        else:
            assert comparison["high"] < 0 or comparison["canary"] >= 8
    assert summary["first"]["sessions"] == 16 and summary["last"]["sessions"] == 8
    assert "last minus first rating" in done.stdout

    store = SQLiteStore(project / ".tether" / "store.db")
    try:
        rows = store.query_rollouts(RolloutQuery(run="sessions", limit=10_000)).rows
        rewards = {row.rollout.id: store.query_rewards(row.rollout.id) for row in rows}
    finally:
        store.close()
    rated = [r for found in rewards.values() for r in found]
    assert rated and all(r.source == "later:simulated-user" for r in rated)
    assert any(not found for found in rewards.values())  # a silent user's session
    ended = {row.rollout.id: row.rollout.ended_at for row in rows}
    assert all(r.time is not None and r.time > (ended[r.rollout_id] or 0) for r in rated)  # after the end
    arms = {row.rollout.metadata.get("arm") for row in rows if row.rollout.metadata.get("canary")}
    assert arms == {"canary", "incumbent"}
