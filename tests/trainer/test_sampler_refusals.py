"""Sampling an RL learner cannot reproduce is refused by name, not trained on silently.

- Parameters that reshape the distribution beyond temperature, top-p and top-k (penalties, logit bias,
  min-p, ...): an HTTP upstream (vLLM) applies them, so the gateway forwards them, serves the call, and
  records them on the span's sampler; RL then refuses the calls naming them. The built-in engine cannot
  apply them and answers 400 naming the parameter, instead of ignoring it. Neutral values pass.
- Logprobs of unverified provenance: a vLLM server whose probe shows raw logprobs (no
  `--logprobs-mode processed_logprobs`) records calls at T != 1 as inexact, and RL refuses them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.gateway.fake_upstream import Behaviour, create_fake_upstream
from tests.helpers import serve_app
from tests.rigs import GatewayRig
from tether.adapters import build_transitions
from tether.algorithms import Sample
from tether.algorithms.advantages import UnreproducibleSampling, assign_advantages
from tether.compose import create_app
from tether.contracts import REFUSED_CALL_SPAN, CallAttr
from tether.gateway import Gateway, GatewayConfig
from tether.learner.policy import PolicyTrainer, TrainConfig
from tether.policy_server.vllm.replica import Replica, check_capabilities
from tether.policy_server.vllm.server import connect_external
from tether.sampling import Sampler, sampler_problems, unreproducible_parameters
from tether.store import SQLiteStore
from tether.store.auth import TokenAuthority

MESSAGES = [{"role": "user", "content": "Count to five."}]
NEUTRAL = {
    "frequency_penalty": 0,
    "presence_penalty": 0.0,
    "repetition_penalty": 1.0,
    "logit_bias": {},
    "min_p": 0.0,
    "best_of": 1,
    "bad_words": [],
    "seed": 3,
}


def chat(base_url: str, key: str, **extra: Any) -> Any:  # noqa: ANN401
    client = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)
    params = {k: extra.pop(k) for k in ("temperature", "top_p", "stream") if k in extra}
    return client.chat.completions.create(
        model="policy", messages=MESSAGES, max_tokens=5, extra_body=extra or None, **params
    )


def sampler_of_span(rig: GatewayRig, rollout_id: str) -> Sampler:
    (span,) = rig.store.query_spans(rollout_id=rollout_id)
    return Sampler.from_attr(span.attributes[CallAttr.SAMPLING])


# -- the parameters ------------------------------------------------------------------------------------


def refusals_only(rig: GatewayRig, rollout_id: str) -> bool:
    """Whether the rollout's spans are refusals only (kept with their errors): no model call recorded."""
    spans = rig.store.query_spans(rollout_id=rollout_id)
    return bool(spans) and all(span.name == REFUSED_CALL_SPAN for span in spans)


def test_only_non_neutral_parameters_are_named() -> None:
    assert unreproducible_parameters(NEUTRAL) == ()
    assert unreproducible_parameters({"frequency_penalty": None, "logit_bias": {"7": 0}, "n": 2}) == ()
    found = unreproducible_parameters(
        {
            "frequency_penalty": 0.5,
            "presence_penalty": -1,
            "repetition_penalty": 1.1,
            "logit_bias": {"50256": -100},
            "min_p": 0.05,
            "typical_p": 0.9,
            "top_a": 0.2,
            "best_of": 4,
            "use_beam_search": True,
            "temperature": 0.5,  # reproduced by the learner: never named
            "top_k": 5,
        }
    )
    assert found == (
        "frequency_penalty=0.5",
        "presence_penalty=-1",
        "repetition_penalty=1.1",
        "logit_bias",
        "min_p=0.05",
        "typical_p=0.9",
        "top_a=0.2",
        "use_beam_search",
        "best_of=4",
    )
    assert unreproducible_parameters({"best_of": 2, "n": 2}) == ()  # nothing selected among the draws


def test_a_sampler_with_such_parameters_is_refused_and_survives_the_span() -> None:
    sampler = Sampler(temperature=1.0, unreproducible=("min_p=0.1", "logit_bias"))
    assert "min_p=0.1, logit_bias" in (sampler.rl_problem() or "")
    assert Sampler.from_attr(sampler.to_attr()) == sampler
    assert "unreproducible" not in Sampler(temperature=0.7).to_attr()  # reproducible spans as before
    message = sampler_problems({"rollout 'r' call 0": sampler})
    assert message is not None and "min_p=0.1" in message and "Leave those parameters out" in message


# -- the HTTP upstream: forwarded, served, recorded, refused for RL ------------------------------------


def test_penalties_through_an_http_upstream_are_served_and_refused_for_rl_by_name(
    rig: GatewayRig, behaviour: Behaviour
) -> None:
    penalised, base_url, key = rig.session()
    reply = chat(base_url, key, frequency_penalty=0.5, logit_bias={"50256": -100}, min_p=0.05)
    assert reply.choices[0].message.content  # a non-training caller is served as before
    sent = behaviour.requests[-1]
    assert sent["frequency_penalty"] == 0.5 and sent["logit_bias"] == {"50256": -100}  # forwarded
    assert sampler_of_span(rig, penalised).unreproducible == (
        "frequency_penalty=0.5",
        "logit_bias",
        "min_p=0.05",
    )

    neutral, base_url, key = rig.session()
    chat(base_url, key, **NEUTRAL)
    assert sampler_of_span(rig, neutral) == Sampler()

    transitions = build_transitions(rig.store, [penalised, neutral]).transitions
    assert len(transitions) == 2
    with pytest.raises(UnreproducibleSampling) as caught:
        assign_advantages(transitions)
    message = str(caught.value)
    assert f"rollout {penalised!r}" in message and "1 call(s)" in message
    assert "frequency_penalty=0.5, logit_bias, min_p=0.05" in message
    # The learner refuses them too, whoever calls it.
    learner = PolicyTrainer(TrainConfig(model="tiny-random", bf16=False))
    with pytest.raises(UnreproducibleSampling, match="frequency_penalty=0.5"):
        learner.step([Sample(t, advantage=1.0, weight=1.0) for t in transitions])
    # The neutral call alone trains.
    clean = [t for t in transitions if t.rollout_id == neutral]
    assert assign_advantages(clean).report.transitions == 1


def test_streamed_calls_record_the_parameters_too(rig: GatewayRig) -> None:
    rollout_id, base_url, key = rig.session()
    chunks = list(chat(base_url, key, stream=True, presence_penalty=0.6))
    assert chunks
    assert sampler_of_span(rig, rollout_id).unreproducible == ("presence_penalty=0.6",)


# -- the built-in engine: a 400 naming the parameter ----------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_the_built_in_engine_refuses_what_it_cannot_apply_by_name(
    engine_rig: GatewayRig, stream: bool
) -> None:
    rollout_id, base_url, key = engine_rig.session()
    with pytest.raises(openai.BadRequestError) as caught:
        result = chat(base_url, key, stream=stream, repetition_penalty=1.3, logit_bias={"5": 10})
        list(result) if stream else None
    error = caught.value.body
    assert isinstance(error, dict)
    assert "repetition_penalty=1.3, logit_bias" in error["message"] and "built-in engine" in error["message"]
    assert error["param"] == "repetition_penalty"
    assert refusals_only(engine_rig, rollout_id)  # nothing was generated; the refusals are kept

    # Neutral values are what many clients send by default: served, and recorded as reproducible.
    served, base_url, key = engine_rig.session()
    result = chat(base_url, key, stream=stream, temperature=0.7, **NEUTRAL)
    list(result) if stream else None
    assert sampler_of_span(engine_rig, served) == Sampler(temperature=0.7)


@pytest.mark.parametrize(
    "response_format",
    [{"type": "json_object"}, {"type": "json_schema", "json_schema": {"name": "a", "schema": {}}}],
)
def test_the_built_in_engine_refuses_json_output_it_cannot_constrain(
    engine_rig: GatewayRig, response_format: dict[str, Any]
) -> None:
    rollout_id, base_url, key = engine_rig.session()
    with pytest.raises(openai.BadRequestError) as caught:
        chat(base_url, key, response_format=response_format)
    error = caught.value.body
    assert isinstance(error, dict) and error["param"] == "response_format"
    assert f"response_format {response_format['type']!r}" in error["message"]
    assert refusals_only(engine_rig, rollout_id)  # nothing was generated; the refusals are kept
    served, base_url, key = engine_rig.session()
    chat(base_url, key, response_format={"type": "text"})  # the unconstrained default is served
    assert sampler_of_span(engine_rig, served) == Sampler()


# -- logprobs of unverified provenance: an external vLLM in raw-logprobs mode --------------------------


def fake_vllm(processed: bool, behaviour: Behaviour) -> Starlette:
    """An external vLLM (the fake upstream's answers) with the routes `check_capabilities` probes. Its
    top-k 1 probe answers the raw softmax's logprob (-0.5), or, `processed`, the processed one (0)."""
    app = create_fake_upstream(behaviour)

    async def models(request: Request) -> Response:
        return JSONResponse({"data": [{"id": "base", "parent": None}]})

    async def unload(request: Request) -> Response:
        body = await request.json()
        message = f"The lora adapter '{body['lora_name']}' cannot be found."
        return JSONResponse({"error": {"message": message}}, status_code=404)

    async def ok(request: Request) -> Response:
        return JSONResponse({})

    async def completions(request: Request) -> Response:
        body = await request.json()
        if processed and body.get("top_k") == 1 and body.get("max_tokens") == 1:
            choice = {"text": "x", "token_ids": [3], "logprobs": {"tokens": ["x"], "token_logprobs": [0.0]}}
            return JSONResponse({"prompt_token_ids": [1, 2], "choices": [choice]})
        return await fallback(request)

    fallback = next(r for r in app.routes if getattr(r, "path", "") == "/v1/completions").endpoint  # type: ignore[attr-defined]
    routes = [
        Route("/v1/models", models),
        Route("/v1/unload_lora_adapter", unload, methods=["POST"]),
        Route("/health", ok),
        Route("/is_paused", ok),
        Route("/v1/completions", completions, methods=["POST"]),
        *[r for r in app.routes if getattr(r, "path", "") != "/v1/completions"],
    ]
    return Starlette(routes=routes)


@contextmanager
def rig_over_vllm(tmp_path: Path, vllm_url: str, behaviour: Behaviour) -> Iterator[GatewayRig]:
    """A gateway whose policy upstream is the external server, connected as `--vllm-url` does."""
    server = connect_external([vllm_url + "/v1"], name="policy")
    store = SQLiteStore(tmp_path / "store.db")
    auth = TokenAuthority.generate()
    gateway = Gateway(store, auth, GatewayConfig(hold_limit_s=60))
    gateway.add_upstream(server.upstream())
    try:
        with serve_app(create_app(gateway)) as url:
            gateway.config.public_url = url
            yield GatewayRig(url, gateway, store, auth, behaviour)
    finally:
        server.close()
        store.close()


@pytest.mark.parametrize("processed", [False, True])
def test_a_raw_logprobs_vllm_is_probed_and_its_processed_calls_refused_as_unverified(
    tmp_path: Path, processed: bool
) -> None:
    behaviour = Behaviour()
    with serve_app(fake_vllm(processed, behaviour)) as vllm_url:
        assert check_capabilities(Replica(vllm_url)).processed_logprobs is processed
        with rig_over_vllm(tmp_path, vllm_url, behaviour) as rig:
            at_07, base_url, key = rig.session()
            chat(base_url, key, temperature=0.7)
            at_1, base_url, key = rig.session()
            chat(base_url, key, temperature=1.0)
            samplers = {rid: sampler_of_span(rig, rid) for rid in (at_07, at_1)}
            transitions = build_transitions(rig.store, [at_07, at_1]).transitions
    # At T = 1 the raw softmax is the sampling distribution: exact whatever the mode.
    assert samplers[at_1] == Sampler()
    assert samplers[at_07] == Sampler(temperature=0.7, exact=processed)
    if processed:
        assert assign_advantages(transitions).report.transitions == 2
        return
    with pytest.raises(UnreproducibleSampling) as caught:
        assign_advantages(transitions)
    message = str(caught.value)
    assert f"rollout {at_07!r}" in message and "1 call(s)" in message
    assert "unverified logprobs" in message and "--logprobs-mode processed_logprobs" in message
    assert "--train-temperature" in message


def test_the_built_in_engine_refuses_an_image_it_cannot_see(engine_rig: GatewayRig) -> None:
    rollout_id, base_url, key = engine_rig.session()
    picture = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    client = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="policy",
            messages=[{"role": "user", "content": [{"type": "text", "text": "What is this?"}, picture]}],
            max_tokens=4,
        )
    error = caught.value.body
    assert isinstance(error, dict) and error["param"] == "messages[0].content"
    assert "reads text only" in error["message"] and "'image_url' part" in error["message"]
    assert refusals_only(engine_rig, rollout_id)
