"""An HTTP upstream retargeted to a new model name and policy version (a policy server that loaded a new
adapter): calls admitted afterwards go out under the new name and record the new version, while calls
already in flight keep the ones they were sent with. Streams too."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.gateway.fake_upstream import Behaviour
from tests.rigs import GatewayRig, make_rig
from tether.gateway import HTTPUpstream

MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture
def policy_rig(tmp_path: Path, upstream_url: str, behaviour: Behaviour) -> Iterator[GatewayRig]:
    yield from make_rig(tmp_path, upstream_url, behaviour, model="adapter-1", policy_version=1)


def upstream_of(rig: GatewayRig) -> HTTPUpstream:
    upstream = rig.gateway.upstreams["policy"]
    assert isinstance(upstream, HTTPUpstream)
    return upstream


def in_background(call: Callable[[], object]) -> threading.Thread:
    thread = threading.Thread(target=call)
    thread.start()
    return thread


def wait_for(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def recorded(rig: GatewayRig, rollout_id: str) -> list[tuple[int | None, bool]]:
    spans = rig.store.query_spans(rollout_id=rollout_id)
    return sorted((s.attributes["policy_version"], s.attributes["stream"]) for s in spans)


@pytest.mark.parametrize("stream", [False, True])
def test_a_call_in_flight_keeps_its_version(policy_rig: GatewayRig, stream: bool) -> None:
    rig = policy_rig
    rollout_id, base_url, key = rig.session()
    llm = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)

    def call() -> None:
        answer = llm.chat.completions.create(model="policy", messages=MESSAGES, stream=stream)
        if stream:
            assert "".join(chunk.choices[0].delta.content or "" for chunk in answer if chunk.choices)

    rig.behaviour.hang_s = 0.5
    first = in_background(call)
    wait_for(lambda: len(rig.behaviour.requests) == 1)  # it is upstream now, under the old name
    upstream_of(rig).retarget("adapter-2", 2)
    rig.behaviour.hang_s = 0.0
    call()
    first.join(30)

    assert [request["model"] for request in rig.behaviour.requests] == ["adapter-1", "adapter-2"]
    assert recorded(rig, rollout_id) == [(1, stream), (2, stream)]
    assert upstream_of(rig).policy_version == 2


def test_a_call_held_by_paused_admission_goes_out_retargeted(policy_rig: GatewayRig) -> None:
    rig = policy_rig
    rollout_id, base_url, key = rig.session()
    admin = {"Authorization": f"Bearer {rig.auth.admin_token}"}
    httpx.post(rig.url + "/admin/pause", json={"drain": True}, headers=admin).raise_for_status()
    llm = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)
    held = in_background(lambda: llm.chat.completions.create(model="policy", messages=MESSAGES))
    wait_for(lambda: rig.gateway.admission.waiting == 1)
    upstream_of(rig).retarget("adapter-2", 2)  # the weight update, while calls are held
    httpx.post(rig.url + "/admin/resume", headers=admin).raise_for_status()
    held.join(30)

    assert [request["model"] for request in rig.behaviour.requests] == ["adapter-2"]
    assert recorded(rig, rollout_id) == [(2, False)]
    status = httpx.get(rig.url + "/admin/status", headers=admin).json()
    assert status["upstreams"]["policy"]["policy_version"] == 2


def test_a_failed_call_records_the_version_it_was_sent_with(policy_rig: GatewayRig) -> None:
    rig = policy_rig
    rollout_id, base_url, key = rig.session()
    rig.behaviour.fail_next, rig.behaviour.fail_status = 1, 400
    rig.behaviour.hang_s = 0.3
    llm = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)
    refused: list[BaseException] = []

    def call() -> None:
        try:
            llm.chat.completions.create(model="policy", messages=MESSAGES)
        except openai.BadRequestError as exc:
            refused.append(exc)

    failing = in_background(call)
    wait_for(lambda: len(rig.behaviour.requests) == 1)
    upstream_of(rig).retarget("adapter-2", 2)
    failing.join(30)

    assert refused
    [span] = rig.store.query_spans(rollout_id=rollout_id)
    assert span.status == "error" and span.attributes["policy_version"] == 1
