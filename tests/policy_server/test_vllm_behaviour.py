"""vLLM's recorded logprobs are the behaviour policy: calls at temperature 0.7 and top-p 0.9 through the
gateway to a real vLLM server (started with `--logprobs-mode processed_logprobs`) become transitions
that the learner, scoring the same processed distribution with SmolLM2's torch weights, starts at
ratio 1; scored raw, they are far from it."""

from __future__ import annotations

from dataclasses import replace

from tests.gateway.test_recording import client
from tests.policy_server.conftest import direct
from tests.rigs import GatewayRig
from tether.adapters import build_transitions
from tether.algorithms import Sample
from tether.learner.policy import PolicyTrainer, TrainConfig
from tether.policy_server.vllm import VLLMPolicyServer
from tether.policy_server.vllm.replica import check_capabilities
from tether.sampling import RAW, Sampler

QUESTIONS = [f"Name an animal that starts with the letter {letter}." for letter in "BCDFGH"]


def test_managed_vllm_is_probed_as_processed(vllm_server: VLLMPolicyServer) -> None:
    assert check_capabilities(vllm_server.replicas[0]).processed_logprobs
    # And the probe can tell: top-k 1 leaves one token, whose processed logprob is 0.
    answer = direct(
        vllm_server, "/completions", {"prompt": "Colours: red,", "max_tokens": 1, "top_k": 1, "logprobs": 0}
    )
    assert abs(answer["choices"][0]["logprobs"]["token_logprobs"][0]) < 1e-4


def test_first_update_ratio_is_one_on_vllm_calls_at_temperature_07(vllm_rig: GatewayRig) -> None:
    rollouts = []
    for seed, question in enumerate(QUESTIONS):
        rollout_id, base_url, key = vllm_rig.session()
        client(base_url, key).chat.completions.create(
            model="policy",
            messages=[{"role": "user", "content": question}],
            temperature=0.7,
            top_p=0.9,
            max_tokens=16,
            seed=seed,
        )
        rollouts.append(rollout_id)
    report = build_transitions(vllm_rig.store, rollouts)
    transitions = report.transitions
    assert len(transitions) == len(QUESTIONS)
    assert {t.sampler for t in transitions} == {Sampler(temperature=0.7, top_p=0.9)}

    learner = PolicyTrainer(TrainConfig(model="smollm2-135m"))
    raw = learner.logprobs([replace(t, sampler=RAW) for t in transitions])
    raw_gap = max(
        abs(a - b)
        for t, lp in zip(transitions, raw, strict=True)
        for a, b in zip(lp, t.response_logprobs, strict=True)
    )
    assert raw_gap > 0.05  # the raw softmax is not what vLLM sampled from

    samples = [Sample(t, advantage=1.0 if i % 2 else -1.0, weight=1.0) for i, t in enumerate(transitions)]
    metrics = learner.step(samples)
    assert abs(metrics.mean_ratio - 1.0) < 1e-3
    assert metrics.truncated_fraction == 0.0
