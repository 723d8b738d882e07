"""An agent instrumented with OpenTelemetry names itself through its spans: the gateway call joins the
agent's trace via `traceparent`, and the transition carries the agent name of the enclosing span."""

from __future__ import annotations

import openai
from opentelemetry import propagate, trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from tests.rigs import GatewayRig
from tether.adapters import build_transitions
from tether.store.records import Reward


def test_calls_inside_an_otel_agent_span_are_labelled_with_its_agent(engine_rig: GatewayRig) -> None:
    rollout_id, base_url, api_key = engine_rig.session()
    root = base_url.removesuffix("/v1")
    provider = TracerProvider()
    exporter = OTLPSpanExporter(endpoint=f"{root}/v1/traces", headers={"Authorization": f"Bearer {api_key}"})
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("planner-agent")
    client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)

    def ask(headers: dict[str, str]) -> None:
        client.chat.completions.create(
            model="policy",
            messages=[{"role": "user", "content": "plan"}],
            max_tokens=3,
            extra_headers=headers,
        )

    with tracer.start_as_current_span("invoke_agent planner", attributes={"gen_ai.agent.name": "planner"}):
        with tracer.start_as_current_span("step"):
            carrier: dict[str, str] = {}
            propagate.inject(carrier)
            ask(carrier)
            agent_span_context = trace.get_current_span().get_span_context()
    ask({})  # outside any agent span: named by its model alias
    ask({"X-Tether-Agent": "critic", **carrier})  # a declared name wins over the trace
    provider.shutdown()
    engine_rig.store.add_rewards([Reward(rollout_id=rollout_id, value=1.0)])

    calls = [s for s in engine_rig.store.query_spans(rollout_id=rollout_id) if s.name == "llm.chat"]
    assert calls[0].trace_id == format(agent_span_context.trace_id, "032x")
    assert calls[0].parent_id == format(agent_span_context.span_id, "016x")
    report = build_transitions(engine_rig.store, [rollout_id])
    assert [t.agent for t in report.transitions] == ["planner", "policy", "critic"]
    assert len(build_transitions(engine_rig.store, [rollout_id], agents=["planner"]).transitions) == 1
