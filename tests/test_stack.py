"""`LocalStack.paused`, from the trainer's own loop: the gateway (on its server thread) first lets the calls
in flight finish, holds new ones while the block runs, and lets them through after it."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path

import openai

from tests.gateway.fake_upstream import Behaviour
from tether.gateway import HTTPUpstream, HTTPUpstreamConfig
from tether.stack import LocalStack, local_stack
from tether.store import SQLiteStore
from tether.store.auth import TokenAuthority

CHAT = {"model": "policy", "messages": [{"role": "user", "content": "hi"}]}


def wait_for(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def call_in_thread(stack: LocalStack, store: SQLiteStore, events: list[str], name: str) -> threading.Thread:
    rollout_id = store.start_session({"question": "q"}).rollout.id
    creds = stack.gateway.credentials(rollout_id)
    client = openai.OpenAI(base_url=creds["base_url"], api_key=creds["api_key"], max_retries=0, timeout=60)

    def call() -> None:
        client.chat.completions.create(**CHAT)  # type: ignore[call-overload]
        events.append(f"{name} answered")

    thread = threading.Thread(target=call)
    thread.start()
    return thread


def test_paused_drains_calls_in_flight_and_holds_new_ones(
    tmp_path: Path, upstream_url: str, behaviour: Behaviour
) -> None:
    behaviour.hang_s = 0.5
    store = SQLiteStore(tmp_path / "store.db")
    upstream = HTTPUpstream(HTTPUpstreamConfig(name="policy", base_url=upstream_url, request_token_ids=True))
    events: list[str] = []
    with local_stack(store, TokenAuthority.generate(), [upstream]) as stack:
        admission = stack.gateway.admission
        first = call_in_thread(stack, store, events, "first")
        wait_for(lambda: admission.in_flight == 1)

        async def swap() -> threading.Thread:
            async with stack.paused():
                # the first call is done at the gateway: answered, its span committed
                events.append(f"paused: {admission.in_flight} in flight, {len(store.query_spans())} recorded")
                second = call_in_thread(stack, store, events, "second")
                wait_for(lambda: admission.waiting == 1)
                events.append("swapped")
            return second

        second = asyncio.run(swap())
        first.join(30)
        second.join(30)
    store.close()
    assert sorted(events) == sorted(
        ["first answered", "paused: 0 in flight, 1 recorded", "swapped", "second answered"]
    )
    assert events.index("swapped") < events.index("second answered")
    assert not admission.paused
