"""`tether train` with vLLM serving the policy: GRPO steps whose versions vLLM really serves."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import orjson

from tether.cli.main import main
from tether.policy_server.vllm import VLLMPolicyServer
from tether.store import SQLiteStore

AGENTS = Path(__file__).parent / "agents"


def test_grpo_through_vllm_writes_metrics_and_versions(tmp_path: Path, vllm_server: VLLMPolicyServer) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        "".join(json.dumps({"id": f"t{i}", "q": f"Say a word about {i}."}) + "\n" for i in range(4))
    )
    argv = [
        "train",
        "--agent",
        f"{sys.executable} {AGENTS / 'short_answer_agent.py'}",
        "--tasks",
        str(tasks),
        "--reward",
        f"{AGENTS / 'rewards.py'}:odd_length",
        "--policy-server",
        vllm_server.replicas[0].base_url,
        "--group-size",
        "8",
        "--tasks-per-step",
        "2",
        "--steps",
        "3",
        "--val-every",
        "0",
        "--run",
        "vllm-grpo",
        "--project-dir",
        str(tmp_path),
    ]
    assert main(argv) == 0
    run_dir = tmp_path / ".tether" / "runs" / "vllm-grpo"
    records = [orjson.loads(line) for line in (run_dir / "metrics.jsonl").read_bytes().splitlines()]
    steps = [r for r in records if r["kind"] == "train"]
    assert [r["policy_version_after"] for r in steps] == [1, 2, 3]
    assert all(r["swap_seconds"] > 0 and r["samples"] > 0 for r in steps)
    assert sorted(p.name for p in (run_dir / "policies").iterdir()) == ["v1", "v2", "v3"]

    store = SQLiteStore(tmp_path / ".tether" / "store.db")
    spans = store.query_spans()
    store.close()
    for span in spans:
        assert span.attributes["prompt_token_ids"] and span.attributes["choices"][0]["token_ids"]
    # Step k's rollouts ran on version k-1, and each call records the version that generated it.
    versions = Counter(span.attributes["policy_version"] for span in spans)
    assert versions == {0: 16, 1: 16, 2: 16}
