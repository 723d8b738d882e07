"""What the Responses and Messages API tests share: the one span a call records, and a call made while the
gateway is paused."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

import httpx

from tests.gateway.scripted_upstream import Script
from tests.rigs import GatewayRig
from tether.store import Span

T = TypeVar("T")


def only_span(rig: GatewayRig, rollout_id: str) -> Span:
    spans = rig.store.query_spans(rollout_id=rollout_id)
    assert len(spans) == 1
    return spans[0]


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
