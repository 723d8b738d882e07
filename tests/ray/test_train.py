"""A short GRPO run on Ray: 2 rollout-worker actors (one per node), 1 policy-server replica actor, a
learner of 2 ranks; it writes its metrics (rollouts per node, stage times) and its policy versions."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import orjson
from ray.cluster_utils import Cluster

from tether.cli.main import main
from tether.contracts import CallAttr
from tether.store import SQLiteStore

AGENTS = Path(__file__).parent / "agents"


def test_grpo_on_ray_writes_metrics_and_versions(tmp_path: Path, ray_cluster: Cluster) -> None:
    tasks = tmp_path / "tasks.jsonl"
    # One task streams its call, the other does not: both ways through the replica actor, every step.
    lines = [json.dumps({"id": f"t{i}", "q": f"say {i}", "stream": i % 2 == 0}) + "\n" for i in range(2)]
    tasks.write_text("".join(lines))
    code = main(
        [
            "train",
            "--agent",
            f"{sys.executable} {AGENTS / 'openai_agent.py'}",
            "--tasks",
            str(tasks),
            "--reward",
            f"{AGENTS / 'reward.py'}:varied",
            "--model",
            "tiny-random",
            "--group-size",
            "2",
            "--tasks-per-step",
            "2",
            "--steps",
            "2",
            "--val-every",
            "0",
            "--checkpoint-every",
            "2",
            "--n-workers",
            "2",
            "--ray",
            ray_cluster.address,
            "--agent-resources",
            '{"agent_slot": 1}',
            "--replicas",
            "1",
            "--learner-ranks",
            "2",
            "--run",
            "grpo-ray",
            "--project-dir",
            str(tmp_path),
        ]
    )
    assert code == 0
    run_dir = tmp_path / ".tether" / "runs" / "grpo-ray"
    records = [orjson.loads(line) for line in (run_dir / "metrics.jsonl").read_bytes().splitlines()]
    steps = [r for r in records if r["kind"] == "train"]
    assert [r["step"] for r in steps] == [1, 2]
    for record in steps:  # the reward differs between any two answers: no group is skipped
        per_node = {k: v for k, v in record.items() if k.startswith("nodes.")}
        assert all(k.startswith("nodes.ray:") for k in per_node) and sum(per_node.values()) == 4
        assert record["rollout_seconds"] > 0 and record["generation_seconds"] > 0
        assert "skipped" not in record and record["train.ranks"] == 2
        assert record["update_seconds"] > 0 and record["swap_seconds"] >= 0
    assert sorted(p.name for p in (run_dir / "policies").iterdir()) == ["v1", "v2"]
    assert steps[-1]["policy_version_after"] == 2
    assert (run_dir / "checkpoint" / "state.pt").exists()
    # The streamed calls were recorded with their token ids, as the others.
    store = SQLiteStore(tmp_path / ".tether" / "store.db")
    calls = [
        span
        for rollout in store.list_rollouts(run="grpo-ray", limit=100)
        for span in store.query_spans(rollout_id=rollout.id, limit=100)
        if span.origin == "gateway"
    ]
    assert {bool(span.attributes.get(CallAttr.STREAM)) for span in calls} == {True, False}
    assert all(choice["token_ids"] for span in calls for choice in span.attributes[CallAttr.CHOICES])
