"""What every policy server (`tether.policy_server.base.PolicyServer`) does, on each kind in
`POLICY_SERVERS` (conftest): it serves the policy's calls as an OpenAI-compatible upstream recorded with
its version, starts at version 0 (the base model), serves each version the learner saves from the
`load` on, lets calls wait through a pause, and closes twice without harm. Servers of several policies
(`ServesSeveralPolicies`) keep each policy's version and weights apart."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import openai
import pytest

from tests.contracts.conftest import ServerKind, Versions, gap, served_logprobs
from tests.policy_server.conftest import rig_over
from tests.rigs import GatewayRig
from tether.gateway.upstreams import CallRecord, Upstream
from tether.models.catalog import resolve_model
from tether.policy_server import PolicyServer, PolicyServerError, PolicyWeights, ServesSeveralPolicies
from tether.store import Span

MESSAGES = [{"role": "user", "content": "Count to five."}]
CHAT = {"model": "policy", "messages": MESSAGES, "max_tokens": 4, "temperature": 1.0, "seed": 7}
SDK = {key: value for key, value in CHAT.items() if key != "messages"}
CALL_TIMEOUT_S = 120.0

gateway_over = contextmanager(rig_over)


async def chat(upstream: Upstream, owner: str = "contract") -> CallRecord:
    return await asyncio.wait_for(upstream.call("chat", dict(CHAT), owner=owner), CALL_TIMEOUT_S)


def answered(record: CallRecord) -> bool:
    """An OpenAI chat completion with one assistant message."""
    (choice,) = record.response["choices"]
    message = choice["message"]
    return record.response["object"] == "chat.completion" and message["role"] == "assistant"


def assert_distinct(versions: Versions, kind: ServerKind) -> None:
    """The learner's versions differ from each other by more than the server may differ from them: which
    one is served can be told apart."""
    assert min(gap(a, b) for a, b in itertools.combinations(versions.logprobs, 2)) > 2 * kind.tolerance


def gateway_spans(rig: GatewayRig, rollout_id: str) -> list[Span]:
    return [s for s in rig.store.query_spans(rollout_id=rollout_id) if s.origin == "gateway"]


def test_serves_openai_clients_through_the_gateway_recorded_with_its_version(
    served: tuple[ServerKind, PolicyServer], tmp_path: Path
) -> None:
    """An OpenAI SDK client gets a chat completion, whole and streamed, and each call is recorded with the
    version the server says it serves."""
    _, server = served
    with gateway_over(tmp_path, server.upstream()) as rig:
        for stream in (False, True):
            rollout_id, base_url, key = rig.session()
            llm = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)
            if stream:
                chunks = list(llm.chat.completions.create(messages=MESSAGES, stream=True, **SDK))
                text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
                assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] in ("stop", "length")
            else:
                reply = llm.chat.completions.create(messages=MESSAGES, **SDK)
                (choice,) = reply.choices
                assert choice.message.role == "assistant" and choice.finish_reason in ("stop", "length")
                assert reply.usage is not None and reply.usage.completion_tokens >= 1
                text = choice.message.content or ""
            (span,) = gateway_spans(rig, rollout_id)
            assert span.attributes["choices"][0]["text"] == text
            assert span.attributes["policy_version"] == server.policy_version, f"stream={stream}"


async def test_starts_at_version_0(served: tuple[ServerKind, PolicyServer]) -> None:
    """A server Tether trains starts at 0 (the base model); one it does not manage has no version (None),
    and its calls record none."""
    kind, server = served
    start = 0 if kind.trains else None
    assert server.policy_version == start
    assert server.upstream().policy_version == start  # "the version a call made now would be recorded with"
    record = await chat(server.upstream())
    assert answered(record) and record.policy_version == start


async def test_version_0_is_the_base_model_the_learner_trains(
    trained: tuple[ServerKind, PolicyServer], learner_versions: Callable[[str], Versions]
) -> None:
    kind, server = trained
    versions = learner_versions(kind.model)
    served, version = await served_logprobs(server.upstream(), versions.probe)
    assert version == 0 and gap(served, versions.logprobs[0]) < kind.tolerance


async def test_each_loaded_version_is_served_from_then_on(
    trained: tuple[ServerKind, PolicyServer], learner_versions: Callable[[str], Versions]
) -> None:
    """Loaded as the trainer loads (between pause and resume), each LoRA version the learner saved is what
    the upstream serves and records, and `load` answers the version."""
    kind, server = trained
    versions = learner_versions(kind.model)
    upstream = server.upstream()
    assert_distinct(versions, kind)
    for weights, expected in zip(versions.weights, versions.logprobs[1:], strict=True):
        await server.pause()
        try:
            assert await server.load(weights) == weights.version
        finally:
            await server.resume()
        assert server.policy_version == upstream.policy_version == weights.version
        served, version = await served_logprobs(upstream, versions.probe)
        assert version == weights.version and gap(served, expected) < kind.tolerance
        record = await chat(upstream)
        assert answered(record) and record.policy_version == weights.version


async def test_a_server_that_does_not_train_refuses_weights_and_keeps_no_version(
    fixed: tuple[ServerKind, PolicyServer], learner_versions: Callable[[str], Versions]
) -> None:
    kind, server = fixed
    with pytest.raises(PolicyServerError):
        await server.load(learner_versions(kind.model).weights[0])
    assert server.policy_version is None and server.upstream().policy_version is None
    assert answered(await chat(server.upstream()))


async def test_calls_wait_through_a_pause_and_are_answered_after_resume(
    served: tuple[ServerKind, PolicyServer],
) -> None:
    """ "Calls wait, they are not refused": a call made while paused is answered once resumed. Pause and
    resume are safe to repeat, and a resume with nothing paused changes nothing."""
    _, server = served
    upstream = server.upstream()
    await server.resume()
    await server.pause()
    await server.pause()
    waiting = asyncio.create_task(chat(upstream, "paused"))
    await asyncio.sleep(0.3)
    assert not waiting.done() or answered(waiting.result())  # held, or answered: never refused
    await server.resume()
    assert answered(await waiting)
    await server.resume()
    assert answered(await chat(upstream))


def test_close_twice(served: tuple[ServerKind, PolicyServer]) -> None:
    """Closed by the command that opened it, then by whatever owned it (the fixture closes it again)."""
    _, server = served
    server.close()
    server.close()


# -- several policies -------------------------------------------------------------------------------------


async def test_each_policy_keeps_its_own_version_and_weights(
    several: tuple[ServerKind, PolicyServer], learner_versions: Callable[[str], Versions]
) -> None:
    """Each policy samples from the base model until its first `load_policy`, then from its own version;
    loading one leaves the others' versions and weights (the default policy's too) as they were."""
    kind, server = several
    assert isinstance(server, ServesSeveralPolicies)
    versions = learner_versions(kind.model)
    assert_distinct(versions, kind)
    v1, v2 = versions.weights

    async def serves(upstream: Upstream, version: int) -> None:
        served, recorded = await served_logprobs(upstream, versions.probe)
        assert recorded == upstream.policy_version == version
        assert gap(served, versions.logprobs[version]) < kind.tolerance

    def versions_now() -> tuple[int, int, int]:
        assert isinstance(server, ServesSeveralPolicies)
        return server.version_of("writer"), server.version_of("critic"), server.policy_version

    writer, critic = server.policy_upstream("writer"), server.policy_upstream("critic")
    try:
        assert versions_now() == (0, 0, 0)
        await serves(writer, 0)
        assert await server.load_policy(v1, "writer") == 1
        assert versions_now() == (1, 0, 0)
        await serves(writer, 1)
        await serves(critic, 0)
        await serves(server.upstream(), 0)

        assert await server.load_policy(v2, "critic") == 2
        assert versions_now() == (1, 2, 0)
        await serves(writer, 1)
        await serves(critic, 2)
        record = await chat(critic)
        assert answered(record) and record.policy_version == 2
    finally:  # as the gateway closes every upstream it routes to
        await writer.aclose()
        await critic.aclose()


async def test_a_policy_is_a_lora_and_full_weights_are_refused_with_a_policy_server_error(
    several: tuple[ServerKind, PolicyServer],
) -> None:
    """Several policies share the base model as LoRA adapters: a whole model as a policy's version is
    refused as weights a server cannot load are (`PolicyServerError`), and nothing is served from it."""
    kind, server = several
    assert isinstance(server, ServesSeveralPolicies)
    whole = PolicyWeights(path=resolve_model(kind.model), kind="full", version=1)
    writer = server.policy_upstream("writer")
    try:
        with pytest.raises(PolicyServerError):
            await server.load_policy(whole, "writer")
        assert server.version_of("writer") == 0 and writer.policy_version == 0
    finally:
        await writer.aclose()
