"""A stream the agent leaves is still recorded: with the token ids and logprobs generated until the gateway
noticed, status "aborted", and no finish reason; its admission slot is freed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import openai
import pytest

from tests.gateway.dialect_helpers import wait_for_spans
from tests.gateway.scripted_upstream import PROMPT_IDS, Script, scripted_rig
from tests.rigs import GatewayRig
from tether.gateway.spans import ABORTED

if TYPE_CHECKING:
    from tether.engines import TransformersEngine

TOKENS = 500  # 10 s of stream at 20 ms a token: the client is gone long before its end


@pytest.fixture
def script() -> Script:
    return Script(text_pieces=["tick"] * TOKENS, pause_s=0.02)


@pytest.fixture
def srig(tmp_path: Path, script: Script) -> Iterator[GatewayRig]:
    yield from scripted_rig(tmp_path, script)


def in_flight(rig: GatewayRig) -> int:
    admin = {"Authorization": f"Bearer {rig.auth.admin_token}"}
    return int(httpx.get(f"{rig.url}/admin/status", headers=admin).json()["in_flight"])


def test_a_client_that_reads_one_chunk_and_closes_leaves_an_aborted_span(
    srig: GatewayRig, script: Script
) -> None:
    rollout_id, base_url, key = srig.session()
    llm = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)
    stream = llm.chat.completions.create(
        model="policy", messages=[{"role": "user", "content": "count"}], stream=True
    )
    next(iter(stream))
    stream.close()

    [span] = wait_for_spans(srig, rollout_id, 1)
    assert span.status == ABORTED and span.origin == "gateway"
    [choice] = span.attributes["choices"]
    generated = len(choice["token_ids"])
    assert 1 <= generated < TOKENS  # what was generated until then, not the whole answer
    assert choice["token_ids"] == script.token_ids()[:generated]
    assert choice["logprobs"] == script.logprobs()[:generated]
    assert choice["text"] == "tick" * generated and choice["finish_reason"] is None
    assert span.attributes["prompt_token_ids"] == PROMPT_IDS
    for _ in range(2000):
        if in_flight(srig) == 0:
            break
    else:
        raise AssertionError("the abandoned stream still holds its admission slot")


def test_a_stream_read_to_the_end_is_not_aborted(srig: GatewayRig, script: Script) -> None:
    script.text_pieces = ["tick"] * 3
    rollout_id, base_url, key = srig.session()
    llm = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)
    chunks = list(
        llm.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}], stream=True)
    )
    assert chunks and chunks[-1].choices[0].finish_reason == "stop"
    [span] = srig.store.query_spans(rollout_id=rollout_id)
    assert span.status == "ok" and span.attributes["choices"][0]["token_ids"] == script.token_ids()


def test_an_engine_stream_left_early_is_rebuilt_from_the_events_relayed(
    engine_rig: GatewayRig, tiny_engine: TransformersEngine
) -> None:
    # The built-in engine does not hand back its partial call: the gateway rebuilds it from the events it
    # relayed, which carry ids and logprobs when the agent asked for them. Greedy, the tiny model never
    # says EOS: it would run to the end of its context (seconds), long after the agent has gone.
    rollout_id, base_url, key = engine_rig.session()
    body = {
        "model": "policy",
        "messages": [{"role": "user", "content": "once upon a time"}],
        "max_tokens": 4000,
        "temperature": 0,
        "stream": True,
        "logprobs": True,
        "return_token_ids": True,
    }
    with httpx.stream(
        "POST", f"{base_url}/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}
    ) as response:
        assert response.status_code == 200
        assert next(response.iter_raw()).startswith(b"data: ")
    [span] = wait_for_spans(engine_rig, rollout_id, 1)
    [choice] = span.attributes["choices"]
    assert span.status == ABORTED and choice["finish_reason"] is None
    prompt = span.attributes["prompt_token_ids"]
    assert prompt and 1 <= len(choice["token_ids"]) == len(
        choice["logprobs"]
    ) < tiny_engine.max_context - len(prompt)
