"""Upstream faults the gateway tests do not cover: a hang that recovers on retry, a dead port, a 200
with a broken body, a stream that stalls or breaks off. Each is retried where it can be, then ends in
an OpenAI-style error for the agent and an error span, never a hung or half-answered call."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from starlette.types import Receive, Scope, Send

from tests.gateway.fake_upstream import WORDS, Behaviour, create_fake_upstream
from tests.helpers import serve_app
from tests.rigs import GatewayRig, make_rig

MESSAGES = [{"role": "user", "content": "hi"}]
STALL_S = 5.0


class ScriptedUpstream:
    """Answers the n-th request with the n-th action of the script (then "ok"): the fake upstream's
    normal answer, or a fault."""

    def __init__(self, script: list[str]) -> None:
        self.script = list(script)
        self.requests = 0
        self.normal = create_fake_upstream(Behaviour())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.normal(scope, receive, send)
        action = self.script.pop(0) if self.script else "ok"
        self.requests += 1
        if action == "hang":
            await asyncio.sleep(STALL_S)
        elif action == "garbage":
            await self._send(send, 200, b"<html>not json")
            return None
        elif action == "500":
            await self._send(send, 500, b'{"error": {"message": "boom"}}')
            return None
        elif action in ("stall_stream", "break_stream"):
            await self._half_stream(send, stall=action == "stall_stream")
            return None
        return await self.normal(scope, receive, send)

    @staticmethod
    async def _send(send: Send, status: int, body: bytes) -> None:
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    @staticmethod
    async def _half_stream(send: Send, stall: bool) -> None:
        chunk = b'data: {"id": "x", "choices": [{"index": 0, "delta": {"content": "The"}}]}\n\n'
        if stall:
            headers = [(b"content-type", b"text/event-stream")]
        else:  # promises more than it sends, then closes: the client sees the connection break
            headers = [(b"content-type", b"text/event-stream"), (b"content-length", b"100000")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
        if stall:
            await asyncio.sleep(STALL_S)
        else:
            await send({"type": "http.response.body", "body": b""})


def scripted_rig(tmp_path: Path, upstream: ScriptedUpstream, **options: object) -> Iterator[GatewayRig]:
    with serve_app(upstream, timeout_graceful_shutdown=1) as url:
        yield from make_rig(tmp_path, url + "/v1", Behaviour(), **options)


def call(rig: GatewayRig, stream: bool = False) -> tuple[str, str]:
    rollout_id, base_url, key = rig.session()
    llm = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=30)
    if stream:
        parts = llm.chat.completions.create(model="policy", messages=MESSAGES, stream=True)
        text = "".join(chunk.choices[0].delta.content or "" for chunk in parts if chunk.choices)
    else:
        text = llm.chat.completions.create(model="policy", messages=MESSAGES).choices[0].message.content
    return rollout_id, text or ""


def only_span(rig: GatewayRig, rollout_id: str):  # noqa: ANN201
    (span,) = rig.store.query_spans(rollout_id=rollout_id)
    return span


@pytest.mark.parametrize("stream", [False, True])
def test_a_hang_then_an_answer_is_retried(tmp_path: Path, stream: bool) -> None:
    upstream = ScriptedUpstream(["hang", "500"])
    for rig in scripted_rig(tmp_path, upstream, timeout_s=0.5, max_retries=2):
        rollout_id, text = call(rig, stream)
        assert text == "".join(WORDS)
        assert upstream.requests == 3
        assert only_span(rig, rollout_id).status == "ok"


def test_a_dead_port_is_retried_then_a_502(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
        for rig in make_rig(tmp_path, dead, Behaviour(), max_retries=2):
            with pytest.raises(openai.APIStatusError) as raised:
                call(rig)
            assert raised.value.status_code == 502
            assert raised.value.body["code"] == "upstream_unavailable"
            assert "failed after 3 attempts" in raised.value.message
            assert "Connect" in raised.value.message  # says why: the connection was refused


def test_a_200_with_a_broken_body_is_a_502(tmp_path: Path) -> None:
    for rig in scripted_rig(tmp_path, ScriptedUpstream(["garbage"])):
        with pytest.raises(openai.APIStatusError) as raised:
            call(rig)
        assert raised.value.status_code == 502 and "invalid JSON" in raised.value.message
        assert raised.value.body["type"] == "upstream_error"
        assert [s.status for s in rig.store.query_spans()] == ["error"]


@pytest.mark.parametrize("fault", ["stall_stream", "break_stream"])
def test_a_stream_that_stalls_or_breaks_ends_in_an_error_event(tmp_path: Path, fault: str) -> None:
    for rig in scripted_rig(tmp_path, ScriptedUpstream([fault]), timeout_s=0.5):
        with pytest.raises(openai.APIError, match="broke off its stream"):
            call(rig, stream=True)
        spans = rig.store.query_spans()
        assert [s.status for s in spans] == ["error"]
        assert spans[0].attributes["error"]["type"] == "upstream_error"
        # The gateway is not stuck: the next call goes through.
        _, text = call(rig, stream=True)
        assert text == "".join(WORDS)
