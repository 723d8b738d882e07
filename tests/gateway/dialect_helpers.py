"""What the Responses and Messages API tests share: the one span a call records, the spans a call records
in its own time (an abandoned stream), and a call made while the gateway is paused."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

import httpx

from tests.gateway.scripted_upstream import Script
from tests.rigs import GatewayRig
from tether.store import Span

T = TypeVar("T")

# A 1x1 PNG, base64: an image a request can carry.
PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="


def only_span(rig: GatewayRig, rollout_id: str) -> Span:
    spans = rig.store.query_spans(rollout_id=rollout_id)
    assert len(spans) == 1
    return spans[0]


def wait_for_spans(rig: GatewayRig, rollout_id: str, count: int, patience_s: float = 30.0) -> list[Span]:
    """The rollout's spans once there are `count` (recorded after the client is gone, so not at once)."""
    deadline = time.monotonic() + patience_s
    while len(spans := rig.store.query_spans(rollout_id=rollout_id)) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"{len(spans)} spans recorded for {rollout_id}, not {count}")
        time.sleep(0.01)
    return spans


def call_through_pause(rig: GatewayRig, script: Script, call: Callable[[], T]) -> list[T]:
    """Makes `call` from an agent thread while the gateway is paused, checks that it waits in the gateway
    without reaching the upstream, then resumes; returns what the call returned (nothing if it failed)."""
    admin = {"Authorization": f"Bearer {rig.auth.admin_token}"}
    httpx.post(f"{rig.url}/admin/pause", json={"drain": True}, headers=admin).raise_for_status()
    results: list[T] = []
    agent = threading.Thread(target=lambda: results.append(call()))
    agent.start()
    for _ in range(2000):
        if httpx.get(f"{rig.url}/admin/status", headers=admin).json()["waiting"] == 1:
            break
    else:
        raise AssertionError("the call never reached the paused gateway")
    assert results == [] and script.requests == []
    httpx.post(f"{rig.url}/admin/resume", headers=admin).raise_for_status()
    agent.join(timeout=30)
    return results
