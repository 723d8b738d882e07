"""Several policies on one real vLLM server: each a LoRA adapter under its own names and version, called
through its own upstream, the other policies' adapters kept; an external server started with too few
LoRA slots is refused with the flag to change."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.policy_server.conftest import rig_over
from tests.policy_server.test_vllm_swaps import GREEDY, PROMPT, random_adapter
from tests.rigs import GatewayRig
from tether.contracts import CallAttr
from tether.policy_server import PolicyWeights
from tether.policy_server.vllm import VLLMPolicyServer, VLLMSetupError, connect_external


@pytest.fixture
def two_policy_rig(tmp_path: Path, vllm_server: VLLMPolicyServer) -> Iterator[GatewayRig]:
    upstreams = [vllm_server.policy_upstream(name) for name in ("writer", "rewriter")]
    yield from rig_over(tmp_path, *upstreams, routes={"writer": "writer", "rewriter": "rewriter"})
    # the session's server goes back to serving one policy, as the other tests expect it
    default = re.compile(rf"{re.escape(vllm_server.adapter_prefix)}-v\d+")
    for replica in vllm_server.replicas:
        for name in [name for name in replica.adapters if not default.fullmatch(name)]:
            replica.unload_adapter(name)
    vllm_server.policies.clear()


def greedy(rig: GatewayRig, model: str) -> str:
    _, base_url, key = rig.session()
    client = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)
    return (
        client.chat.completions.create(model=model, messages=PROMPT, **GREEDY).choices[0].message.content
        or ""
    )


def test_two_policies_serve_their_own_adapters_and_versions(
    two_policy_rig: GatewayRig, vllm_server: VLLMPolicyServer, tmp_path: Path
) -> None:
    base = greedy(two_policy_rig, "writer")  # no adapter yet: the base model
    writer = [random_adapter(tmp_path / f"w{i}", seed=10 + i) for i in range(3)]
    rewriter = random_adapter(tmp_path / "r", seed=20)
    assert asyncio.run(vllm_server.load_policy(PolicyWeights(rewriter, "lora", 1), "rewriter")) == 1
    for version, folder in enumerate(writer, start=1):
        assert (
            asyncio.run(vllm_server.load_policy(PolicyWeights(folder, "lora", version), "writer")) == version
        )
    texts = {model: greedy(two_policy_rig, model) for model in ("writer", "rewriter")}
    assert texts["writer"] != texts["rewriter"] and base not in texts.values()
    assert vllm_server.version_of("writer") == 3 and vllm_server.version_of("rewriter") == 1

    recorded = {
        (span.attributes[CallAttr.UPSTREAM], span.attributes[CallAttr.POLICY_VERSION])
        for span in two_policy_rig.store.query_spans()
    }
    assert {("writer", 0), ("writer", 3), ("rewriter", 1)} == recorded
    # each policy keeps its two newest adapters; the other policy's stays loaded
    served = {m["id"] for m in httpx.get(vllm_server.replicas[0].base_url + "/models").json()["data"]}
    prefix = vllm_server.adapter_prefix
    assert {f"{prefix}-writer-v2", f"{prefix}-writer-v3", f"{prefix}-rewriter-v1"} <= served
    assert f"{prefix}-writer-v1" not in served


def test_an_external_server_with_too_few_lora_slots_is_refused(vllm_server: VLLMPolicyServer) -> None:
    url = vllm_server.replicas[0].url
    with pytest.raises(VLLMSetupError, match="started with --max-loras 4; 3 policies .* --max-loras 6"):
        connect_external([url], name="probe", policies=3)
