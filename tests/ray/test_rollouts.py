"""`tether rollout --ray`: an unmodified openai-client agent runs on rollout-worker actors on both nodes
of a real 2-node cluster, against the head's gateway and store over HTTP."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from ray.cluster_utils import Cluster

from tether.cli.main import main
from tether.contracts import CallAttr
from tether.runner.pool import worker_node
from tether.store import RolloutStatus, SQLiteStore

AGENTS = Path(__file__).parent / "agents"


def write_tasks(path: Path, count: int) -> Path:
    path.write_text("".join(json.dumps({"id": f"t{i}", "q": f"question {i}"}) + "\n" for i in range(count)))
    return path


def test_rollouts_run_on_both_nodes(tmp_path: Path, ray_cluster: Cluster) -> None:
    tasks = write_tasks(tmp_path / "tasks.jsonl", 8)
    code = main(
        [
            "rollout",
            "--agent",
            f"{sys.executable} {AGENTS / 'openai_agent.py'}",
            "--tasks",
            str(tasks),
            "--reward",
            f"{AGENTS / 'reward.py'}:varied",
            "--model",
            "tiny-random",
            "--n-workers",
            "2",
            "--ray",
            ray_cluster.address,
            "--agent-cpus",
            "1",
            "--agent-resources",
            '{"agent_slot": 1}',
            "--run",
            "two-nodes",
            "--project-dir",
            str(tmp_path),
        ]
    )
    assert code == 0
    store = SQLiteStore(tmp_path / ".tether" / "store.db")
    rollouts = store.list_rollouts(run="two-nodes", limit=100)
    assert len(rollouts) == 8 and all(r.status == RolloutStatus.succeeded for r in rollouts)
    nodes = {worker_node(a.worker_id) for r in rollouts for a in store.list_attempts(r.id)}
    assert len(nodes) == 2 and all(node.startswith("ray:") for node in nodes)
    # Every rollout's model call went through the head's gateway and was recorded with token ids.
    for rollout in rollouts:
        spans = store.query_spans(rollout_id=rollout.id, limit=100)
        calls = [s for s in spans if s.origin == "gateway"]
        assert calls and all(s.attributes[CallAttr.PROMPT_TOKEN_IDS] for s in calls)
        assert all(c["token_ids"] for s in calls for c in s.attributes[CallAttr.CHOICES])


def test_an_unreachable_cluster_is_one_line_before_anything_is_enqueued(tmp_path: Path) -> None:
    tasks = write_tasks(tmp_path / "tasks.jsonl", 2)
    with socket.socket() as sock:  # a port nothing listens at
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    done = subprocess.run(
        [sys.executable, "-m", "tether.cli.main", "rollout", "--agent", "true", "--tasks", str(tasks)]
        + ["--model", "tiny-random", "--ray", f"127.0.0.1:{port}", "--project-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot reach the Ray cluster" in lines[0], done.stderr
    assert SQLiteStore(tmp_path / ".tether" / "store.db").list_rollouts(limit=10) == []


def test_no_address_starts_a_cluster_of_its_own_beside_a_running_one(
    tmp_path: Path, ray_cluster: Cluster
) -> None:
    """`--ray` alone starts a local cluster even where another is running and named by $RAY_ADDRESS (Ray
    would join that one, which then refuses the CPUs a new cluster is started with)."""
    tasks = write_tasks(tmp_path / "tasks.jsonl", 2)
    agent = f"{sys.executable} {AGENTS / 'openai_agent.py'}"
    done = subprocess.run(
        [sys.executable, "-m", "tether.cli.main", "rollout", "--agent", agent, "--tasks", str(tasks)]
        + ["--reward", f"{AGENTS / 'reward.py'}:varied", "--model", "tiny-random", "--ray"]
        + ["--run", "own-cluster", "--project-dir", str(tmp_path)],
        env={**os.environ, "RAY_ADDRESS": ray_cluster.address},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rollouts = SQLiteStore(tmp_path / ".tether" / "store.db").list_rollouts(run="own-cluster", limit=10)
    assert len(rollouts) == 2 and all(r.status == RolloutStatus.succeeded for r in rollouts)
