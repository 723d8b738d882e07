"""A short GRPO run on Ray: 2 rollout-worker actors (one per node), 1 policy-server replica actor, a
learner of 2 ranks; it writes its metrics (rollouts per node, stage times) and its policy versions, the
weights streamed to the replica through Ray's object store. A learner rank that dies ends the run in one
line, and --resume continues it."""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from pathlib import Path

import orjson
import psutil
import pytest
import torch
from ray.cluster_utils import Cluster
from safetensors.torch import load_file

from tether.cli.main import main
from tether.contracts import CallAttr, Meta
from tether.curriculum.cursor import TaskCursor
from tether.runner import load_tasks
from tether.store import SQLiteStore

AGENTS = Path(__file__).parent / "agents"


def _train_args(tmp_path: Path, cluster: Cluster, steps: int, tasks_in_file: int = 2) -> list[str]:
    """A short GRPO run on the cluster: 2 worker actors (one per node), 2 learner ranks, tiny model, 2
    tasks a step (of `tasks_in_file`)."""
    tasks = tmp_path / "tasks.jsonl"
    # One task streams its call, the other does not: both ways through the replica actor, every step.
    lines = [
        json.dumps({"id": f"t{i}", "q": f"say {i}", "stream": i % 2 == 0}) + "\n"
        for i in range(tasks_in_file)
    ]
    tasks.write_text("".join(lines))
    return [
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
        str(steps),
        "--val-every",
        "0",
        "--n-workers",
        "2",
        "--ray",
        cluster.address,
        "--agent-resources",
        '{"agent_slot": 1}',
        "--learner-ranks",
        "2",
        "--project-dir",
        str(tmp_path),
    ]


def test_grpo_on_ray_writes_metrics_and_versions(
    tmp_path: Path, ray_cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    extra = ["--checkpoint-every", "2", "--replicas", "1", "--run", "grpo-ray"]
    # One machine shares its filesystem: make the weights take the other way.
    code = main([*_train_args(tmp_path, ray_cluster, steps=2), *extra, "--weights-transfer", "stream"])
    assert code == 0
    said = capsys.readouterr().err
    assert "policy weights reach Ray actors through Ray's object store" in said
    assert "checkpoints reach Ray actors through Ray's object store" in said
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
    # Step 2's rollouts were served by the replica holding version 1, which reached it streamed.
    assert {span.attributes.get(CallAttr.POLICY_VERSION) for span in calls} == {0, 1}
    assert all(choice["token_ids"] for span in calls for choice in span.attributes[CallAttr.CHOICES])
    # The run's learner ranks end with it: no rank process outlives the command.
    deadline = time.monotonic() + 30
    while learner_ranks() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert learner_ranks() == []


def learner_ranks() -> list[psutil.Process]:
    return [
        p for p in psutil.process_iter(["cmdline"]) if "ray::LearnerRank" in " ".join(p.info["cmdline"] or [])
    ]


def test_a_dead_learner_rank_fails_in_one_line_and_resume_continues(
    tmp_path: Path, ray_cluster: Cluster
) -> None:
    """A learner rank's process is killed after the first checkpoint: the run stops with one line naming
    the rank and its node, and the same command with --resume finishes from that checkpoint."""
    # 6 tasks, 2 a step: the 3 steps of seed 0's order take 3 disjoint pairs, so a resumed step that
    # started the task order over (or anywhere but where the checkpoint left it) takes other tasks.
    args = [
        *_train_args(tmp_path, ray_cluster, steps=3, tasks_in_file=6),
        *("--checkpoint-every", "1", "--run", "rank-lost"),
    ]
    checkpoint = tmp_path / ".tether" / "runs" / "rank-lost" / "checkpoint" / "state.pt"
    outcome: dict[str, BaseException | int] = {}

    def run() -> None:
        try:
            outcome["code"] = main(args)
        except BaseException as exc:  # the SystemExit the command ends with
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 600
    while not checkpoint.exists() and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert checkpoint.exists(), outcome
    ranks = learner_ranks()
    settle = time.monotonic() + 30  # an earlier test's ranks may still be on their way out
    while len(ranks) > 2 and time.monotonic() < settle:
        time.sleep(0.2)
        ranks = learner_ranks()
    assert len(ranks) == 2
    ranks[0].kill()
    thread.join(600)

    error = outcome.get("error")
    assert isinstance(error, SystemExit), outcome
    message = str(error.code)
    assert "\n" not in message and "Traceback" not in message
    assert re.search(r"learner rank [01] on node \S+ \(\w{8}\) died", message), message
    assert "--resume" in message

    done = torch.load(checkpoint, map_location="cpu", weights_only=True)["step"]
    assert 1 <= done < 3
    folder = checkpoint.parent
    history = json.loads((folder / "extra.json").read_text())["history"]
    stopped_policy = load_file(folder / "policy" / "adapter_model.safetensors")
    store = SQLiteStore(tmp_path / ".tether" / "store.db")
    before = {rollout.id for rollout in store.list_rollouts(run="rank-lost", limit=1000)}
    assert main([*args, "--resume"]) == 0
    run_dir = folder.parent
    records = [orjson.loads(line) for line in (run_dir / "metrics.jsonl").read_bytes().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    # The resumed run took up where the checkpoint was: steps up to it kept as they were, not run again...
    assert [r["step"] for r in train] == [1, 2, 3] and train[:done] == history
    # ...serving the checkpoint's weights (version `done`, saved again from the restored learner)...
    resumed_policy = load_file(run_dir / "policies" / f"v{done}" / "adapter_model.safetensors")
    assert stopped_policy.keys() == resumed_policy.keys()
    assert all(torch.equal(stopped_policy[name], resumed_policy[name]) for name in stopped_policy)
    # ...and on from its optimizer state: AdamW counts every step of the run, not just the resumed ones.
    final = torch.load(checkpoint, map_location="cpu", weights_only=True)
    assert final["step"] == 3
    assert {int(param["step"]) for param in final["optimizer"]["state"].values()} == {3}
    # ...and on from its task cursor: the resumed steps ran the tasks an uninterrupted run takes in those
    # steps (the trainer's seeded order, seed 0), each task once per group member.
    uninterrupted = TaskCursor(load_tasks(tmp_path / "tasks.jsonl"), seed=0)
    expected = {
        step: sorted(task.id for task in uninterrupted.take(2) for _ in range(2)) for step in range(3)
    }
    assert len({tuple(ids) for ids in expected.values()}) == 3  # the steps' tasks differ: the check can fail
    resumed: dict[int, list[str]] = {}
    for rollout in store.list_rollouts(run="rank-lost", limit=1000):
        if rollout.id not in before and rollout.mode == "train":
            resumed.setdefault(rollout.metadata[Meta.STEP], []).append(rollout.task_id)
    assert {step: sorted(ids) for step, ids in resumed.items()} == {
        step: ids for step, ids in expected.items() if step >= done
    }
