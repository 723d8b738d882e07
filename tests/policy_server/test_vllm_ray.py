"""A vLLM policy server as a Ray replica actor: calls through the gateway reach vLLM through the actor
with vLLM's own token ids, and a LoRA version streamed through Ray's object store changes what it
serves and what is recorded."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gateway.test_recording import client, only_span
from tests.policy_server.conftest import direct, rig_over
from tests.policy_server.test_vllm_swaps import random_adapter
from tests.rigs import GatewayRig
from tether.policy_server import PolicyServerOptions, PolicyWeights, VLLMOptions
from tether.policy_server.ray_replicas import ReplicaSet
from tether.policy_server.vllm import VLLMPolicyServer
from tether.ray.cluster import RaySettings, connect

MESSAGES = [{"role": "user", "content": "Name a color."}]
GREEDY = {"temperature": 0.0, "max_tokens": 12, "seed": 1}


@pytest.fixture
def replicas(vllm_server: VLLMPolicyServer, ray_cluster: object) -> Iterator[ReplicaSet]:
    """One replica actor on the Ray cluster whose policy server is the session's vLLM (by URL)."""
    cluster = connect(RaySettings(address=ray_cluster.address, replicas=1, weights_transfer="stream"))  # type: ignore[attr-defined]
    options = PolicyServerOptions(
        model="smollm2-135m", vllm=VLLMOptions(urls=(vllm_server.replicas[0].base_url,))
    )
    replica_set = ReplicaSet(cluster, "vllm", options, 1, 0.0)
    yield replica_set
    replica_set.close()


@pytest.fixture
def ray_rig(tmp_path: Path, replicas: ReplicaSet) -> Iterator[GatewayRig]:
    yield from rig_over(tmp_path, replicas.upstream())


def greedy(rig: GatewayRig) -> tuple[str, dict]:
    rollout_id, base_url, key = rig.session()
    reply = client(base_url, key).chat.completions.create(model="policy", messages=MESSAGES, **GREEDY)
    return reply.choices[0].message.content or "", only_span(rig, rollout_id).attributes


def test_a_vllm_replica_actor_serves_vllms_ids_and_takes_streamed_weights(
    ray_rig: GatewayRig,
    replicas: ReplicaSet,
    vllm_server: VLLMPolicyServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (where,) = replicas.placements()
    assert where.role == "replica 0"
    text, attrs = greedy(ray_rig)
    answer = direct(vllm_server, "/chat/completions", {"messages": MESSAGES, **GREEDY})
    assert attrs["prompt_token_ids"] == answer["prompt_token_ids"]
    assert attrs["choices"][0]["token_ids"] == answer["choices"][0]["token_ids"]
    assert text == answer["choices"][0]["message"]["content"]
    base_version = attrs["policy_version"]

    adapter = random_adapter(tmp_path / "adapter", seed=7)
    version = asyncio.run(replicas.load(PolicyWeights(path=adapter, kind="lora", version=base_version + 1)))
    assert version == base_version + 1
    assert "policy weights reach Ray actors through Ray's object store" in capsys.readouterr().err
    tuned, attrs = greedy(ray_rig)
    assert attrs["policy_version"] == version
    assert tuned != text  # the adapter's large random weights change the greedy answer
