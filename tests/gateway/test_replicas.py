"""Several upstream replicas as one: rollouts stick to a replica, and a dead one leaves the rotation."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys

import pytest

from tests.gateway.fake_upstream import Behaviour, create_fake_upstream
from tests.helpers import serve_app
from tether.gateway.errors import UpstreamError
from tether.gateway.upstreams import HTTPUpstream, HTTPUpstreamConfig, ReplicaUpstream
from tether.gateway.upstreams.replicas import stable_index

BODY = {"model": "policy", "messages": [{"role": "user", "content": "hi"}]}


def dead_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"  # nothing listens there now


def http(name: str, url: str) -> HTTPUpstream:
    config = HTTPUpstreamConfig(
        name=name, base_url=url, request_token_ids=True, max_retries=1, backoff_s=0.01
    )
    return HTTPUpstream(config)


def test_stable_index_is_the_same_in_every_process_and_spreads() -> None:
    script = "from tether.gateway.upstreams.replicas import stable_index; print(stable_index('ro-abc', 4))"
    other = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert int(other.stdout) == stable_index("ro-abc", 4)  # another process, another hash salt
    assert len({stable_index(f"ro-{i}", 4) for i in range(64)}) == 4


def test_rollouts_stick_to_one_replica_and_a_dead_one_leaves_rotation() -> None:
    behaviours = [Behaviour(), Behaviour()]
    with (
        serve_app(create_fake_upstream(behaviours[0])) as one,
        serve_app(create_fake_upstream(behaviours[1])) as two,
    ):
        downs: list[int] = []
        replicas = ReplicaUpstream(
            "policy",
            [http("a", one + "/v1"), http("b", two + "/v1"), http("c", dead_url())],
            on_down=lambda index, reason: downs.append(index),
        )
        owners = [f"ro-{i}" for i in range(40)]
        on_dead = next(o for o in owners if stable_index(o, 3) == 2)

        async def calls() -> None:
            with pytest.raises(UpstreamError) as caught:
                await replicas.call("chat", BODY, owner=on_dead)
            assert caught.value.status == 502 and "failed after" in caught.value.message
            for owner in owners * 2:
                await replicas.call("chat", BODY, owner=owner)
            await replicas.aclose()

        asyncio.run(calls())
        assert downs == [2] and replicas.live() == [0, 1]
        # Each rollout stayed on its hashed replica; those of the dead one moved to the next live one.
        expected_first = 2 * sum(stable_index(o, 3) in (0, 2) for o in owners)
        assert len(behaviours[0].requests) == expected_first
        assert len(behaviours[1].requests) == 2 * len(owners) - expected_first


def test_no_live_replica_is_a_clear_503() -> None:
    replicas = ReplicaUpstream("policy", [http("a", dead_url())])
    replicas.mark_down(0, "gone")
    with pytest.raises(UpstreamError) as caught:
        asyncio.run(replicas.call("chat", BODY, owner="ro-1"))
    assert caught.value.status == 503 and "no replica of 'policy' is up" in caught.value.message
    replicas.mark_up(0)
    assert replicas.live() == [0]
