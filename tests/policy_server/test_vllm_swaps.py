"""New weights into a real vLLM server under load, and a vLLM that dies and comes back."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import httpx
import openai
import pytest

from tests.rigs import GatewayRig
from tether.gateway.upstreams.replicas import UNREACHABLE_CODE
from tether.policy_server import PolicyWeights
from tether.policy_server.vllm import VLLMPolicyServer

PROMPT = [{"role": "user", "content": "Name a color."}]
GREEDY = {"temperature": 0.0, "max_tokens": 12}
BACK_IN_S = 600.0


def random_adapter(folder: Path, seed: int) -> Path:
    """A LoRA adapter with large random weights (in Tether's target modules): it visibly changes outputs."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from tether.learner.config import LLAMA_TARGET_MODULES
    from tether.models.catalog import resolve_model

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(resolve_model("smollm2-135m"))
    config = LoraConfig(
        r=8, lora_alpha=32, target_modules=list(LLAMA_TARGET_MODULES), init_lora_weights=False
    )
    peft_model = get_peft_model(model, config)
    with torch.no_grad():
        for name, parameter in peft_model.named_parameters():
            if "lora_" in name:
                parameter.normal_(0.0, 0.08)
    peft_model.save_pretrained(folder)
    return folder


def greedy_text(base_url: str, key: str) -> str:
    reply = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0).chat.completions.create(
        model="policy", messages=PROMPT, **GREEDY
    )
    return reply.choices[0].message.content or ""


def test_lora_swaps_under_load_change_outputs_and_versions(
    vllm_rig: GatewayRig, vllm_server: VLLMPolicyServer, tmp_path: Path
) -> None:
    adapters = [random_adapter(tmp_path / f"a{i}", seed=i) for i in (1, 2)]
    start = vllm_server.policy_version
    _, base_url, key = vllm_rig.session()
    before = greedy_text(base_url, key)

    errors: list[BaseException] = []
    stop = threading.Event()

    def agent() -> None:
        rollout_id, url, token = vllm_rig.session()
        llm = openai.OpenAI(base_url=url, api_key=token, max_retries=0)
        while not stop.is_set():
            try:
                llm.chat.completions.create(model="policy", messages=PROMPT, temperature=1.0, max_tokens=24)
            except openai.OpenAIError as exc:
                errors.append(exc)

    threads = [threading.Thread(target=agent) for _ in range(8)]
    for thread in threads:
        thread.start()
    texts = []
    try:
        for offset, folder in enumerate(adapters, start=1):
            time.sleep(3.0)  # calls in flight on the old version while the new one loads
            version = start + offset
            assert asyncio.run(vllm_server.load(PolicyWeights(folder, "lora", version))) == version
            texts.append(greedy_text(base_url, key))
        time.sleep(2.0)
    finally:
        stop.set()
        for thread in threads:
            thread.join()

    assert errors == []  # no call failed across the swaps
    assert texts[0] != before and texts[1] != texts[0]
    versions = {span.attributes["policy_version"] for span in vllm_rig.store.query_spans()}
    assert {start, start + 1, start + 2} <= versions and None not in versions
    assert len(vllm_server.swap_seconds) >= 2
    # The two newest versions stay loaded; older adapter names are unloaded.
    served = httpx.get(vllm_server.replicas[0].base_url + "/models").json()["data"]
    names = {m["id"] for m in served}
    assert vllm_server.served.model in names and len(names - {vllm_server.base_model}) <= 2


def test_full_weights_reload_in_place_with_their_version(
    vllm_rig: GatewayRig, vllm_server: VLLMPolicyServer, tmp_path: Path
) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from tether.models.catalog import resolve_model

    base = resolve_model("smollm2-135m")
    model = AutoModelForCausalLM.from_pretrained(base)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(1.0 + 0.05 * torch.randn_like(parameter))
    model.save_pretrained(tmp_path / "full")
    rollout_id, base_url, key = vllm_rig.session()
    version = vllm_server.policy_version + 1

    assert asyncio.run(vllm_server.load(PolicyWeights(base, "full", version))) == version
    original = greedy_text(base_url, key)
    assert asyncio.run(vllm_server.load(PolicyWeights(tmp_path / "full", "full", version + 1))) == version + 1
    changed = greedy_text(base_url, key)
    assert changed != original
    versions = [s.attributes["policy_version"] for s in vllm_rig.store.query_spans(rollout_id=rollout_id)]
    assert versions == [version, version + 1]
    # Back to the base weights, for whatever runs next on this server.
    assert asyncio.run(vllm_server.load(PolicyWeights(base, "full", version + 2))) == version + 2
    assert greedy_text(base_url, key) == original


def test_a_crashed_vllm_fails_calls_clearly_then_comes_back_with_the_current_version(
    vllm_rig: GatewayRig, vllm_server: VLLMPolicyServer, tmp_path: Path
) -> None:
    # An adapter is the current version: the restarted server must be given it again.
    version = vllm_server.policy_version + 1
    adapter = PolicyWeights(random_adapter(tmp_path / "current", seed=3), "lora", version)
    assert asyncio.run(vllm_server.load(adapter)) == version
    rollout_id, base_url, key = vllm_rig.session()
    llm = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)
    llm.chat.completions.create(model="policy", messages=PROMPT, **GREEDY)
    process = vllm_server.replicas[0].process
    assert process is not None
    process.crash()
    upstream = vllm_server.upstream()
    deadline = time.monotonic() + 60
    while upstream.live() and time.monotonic() < deadline:  # type: ignore[attr-defined]
        time.sleep(0.2)  # the watcher takes the dead replica out of rotation (its restart takes minutes)

    with pytest.raises(openai.APIStatusError) as caught:
        llm.chat.completions.create(model="policy", messages=PROMPT, **GREEDY)
    assert caught.value.status_code == 503
    spans = vllm_rig.store.query_spans(rollout_id=rollout_id)
    assert [s.status for s in spans] == ["ok", "error"]  # the answered call is kept, the failure recorded
    error = spans[1].attributes["error"]
    assert error["code"] == UNREACHABLE_CODE and "no replica of 'policy' is up" in error["message"]

    deadline = time.monotonic() + BACK_IN_S
    while not upstream.live() and time.monotonic() < deadline:  # type: ignore[attr-defined]
        time.sleep(2.0)
    assert vllm_server.restarts == 1 and process.alive()
    # Calls name the adapter's model: they are answered only if the restarted server was given it.
    reply = llm.chat.completions.create(model="policy", messages=PROMPT, **GREEDY)
    assert reply.choices[0].message.content
    last = vllm_rig.store.query_spans(rollout_id=rollout_id)[-1]
    assert last.status == "ok" and last.attributes["policy_version"] == version == vllm_server.policy_version
    served = httpx.get(vllm_server.replicas[0].base_url + "/models").json()["data"]
    assert vllm_server.served.model == f"{vllm_server.adapter_prefix}-v{version}"
    assert vllm_server.served.model in {m["id"] for m in served}
