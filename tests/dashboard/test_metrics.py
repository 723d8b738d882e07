"""`/metrics` after a run through the real gateway (fake upstream): it parses with prometheus_client's
parser, and its counters equal what the store recorded."""

from __future__ import annotations

import asyncio
from collections import Counter

import httpx
import openai
from prometheus_client.parser import text_string_to_metric_families

from tests.rigs import GatewayRig
from tether.contracts import Origin, is_call_span
from tether.runner import AgentEndpoints, CallableAgent, Runner, RunnerConfig
from tether.store import RolloutRequest, RolloutStatus, Task


async def two_calls(task: dict, llm) -> str:  # noqa: ANN001
    if task.get("crash"):
        raise RuntimeError("the agent crashed")
    texts = []
    async with openai.AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key, max_retries=0) as client:
        for _ in range(2):
            try:
                answer = await client.chat.completions.create(
                    model="policy", messages=[{"role": "user", "content": task["q"]}], max_tokens=5
                )
                texts.append(answer.choices[0].message.content or "")
            except openai.APIStatusError:
                texts.append("")
    return " ".join(texts)


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def test_metrics_counters_match_the_store_after_a_run(rig: GatewayRig) -> None:
    rig.behaviour.fail_next = 3  # the first call fails on every retry: recorded as an error span
    tasks = [Task(input={"q": f"question {i}", "crash": i == 3}) for i in range(5)]
    runner = Runner(
        rig.store,
        CallableAgent(two_calls),
        AgentEndpoints(rig.url, rig.auth),
        None,
        RunnerConfig(n_workers=1, timeout_s=30),
    )

    async def run() -> None:
        try:
            await runner.run([RolloutRequest(task=task) for task in tasks])
        finally:
            await runner.stop()

    asyncio.run(run())
    refused = httpx.post(
        f"{rig.url}/v1/chat/completions", headers={"Authorization": "Bearer nope"}, json={"model": "policy"}
    )
    assert refused.status_code == 401

    assert httpx.get(f"{rig.url}/metrics").status_code == 401
    viewer = {"Authorization": f"Bearer {rig.auth.viewer_token}"}
    scraped = httpx.get(f"{rig.url}/metrics", headers=viewer)
    assert scraped.status_code == 200
    found = samples(scraped.text)

    spans = [
        s
        for r in rig.store.list_rollouts(limit=100)
        for s in rig.store.query_spans(rollout_id=r.id)
        if is_call_span(s.name) and s.origin == Origin.GATEWAY
    ]
    by_status = Counter(s.status for s in spans)
    assert by_status["error"] == 1 and by_status["ok"] == 7  # 4 agents x 2 calls, one failed
    for status, count in by_status.items():
        assert found[("tether_calls_total", (("status", status), ("upstream", "policy")))] == count
    latency_count = found[("tether_call_latency_seconds_count", (("upstream", "policy"),))]
    assert latency_count == len(spans)
    prompt = sum(len(s.attributes.get("prompt_token_ids") or []) for s in spans)
    completion = sum(len(c["token_ids"]) for s in spans for c in s.attributes.get("choices") or [])
    assert found[("tether_tokens_total", (("kind", "prompt"),))] == prompt
    assert found[("tether_tokens_total", (("kind", "completion"),))] == completion
    assert found[("tether_call_errors_total", (("kind", "invalid_api_key"),))] == 1
    rollouts = Counter(r.status for r in rig.store.list_rollouts(limit=100))
    assert rollouts[RolloutStatus.failed] == 1 and rollouts[RolloutStatus.succeeded] == 4
    for status in RolloutStatus:
        assert found[("tether_rollouts", (("status", status.value),))] == rollouts[status]
    assert found[("tether_admission_paused", ())] == 0
    assert found[("tether_calls_waiting", ())] == 0
