from __future__ import annotations

import base64
import gzip
from pathlib import Path
from typing import Any

import orjson
import pytest
from httpx import Response
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1 import trace_pb2

from tests.tracing.conftest import TracingRig, run_agent
from tether.store import RolloutStatus, Span

AGENTS = Path(__file__).parent / "agents"
TRACE_ID = "5b8efff798038103d269b633813fc60c"
ROOT_ID = "eee19b7ec3c1b174"
CHILD_ID = "eee19b7ec3c1b173"
NANOS = 1_700_000_000_000_000_000


def otlp_json(
    *spans: dict[str, Any], resource: list[dict[str, Any]] | None = None, scope: str = "my.lib"
) -> dict[str, Any]:
    return {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": resource or [{"key": "service.name", "value": {"stringValue": "a"}}]
                },
                "scopeSpans": [{"scope": {"name": scope, "version": "0.1"}, "spans": list(spans)}],
            }
        ]
    }


def json_span(span_id: str = ROOT_ID, parent: str = "", **extra: Any) -> dict[str, Any]:
    return {
        "traceId": TRACE_ID,
        "spanId": span_id,
        "parentSpanId": parent,
        "name": f"span-{span_id[-2:]}",
        "kind": 1,
        "startTimeUnixNano": str(NANOS),
        "endTimeUnixNano": NANOS + 1_500_000_000,
        **extra,
    }


def post(
    rig: TracingRig,
    path: str,
    body: dict[str, Any] | bytes,
    token: str | None,
    *,
    content_type: str = "application/json",
    headers: dict[str, str] | None = None,
) -> Response:
    content = body if isinstance(body, bytes) else orjson.dumps(body)
    all_headers = {"Content-Type": content_type} | (headers or {})
    if token is not None:
        all_headers["Authorization"] = f"Bearer {token}"
    return rig.http.post(path, content=content, headers=all_headers)


def spans_of(rig: TracingRig, rollout_id: str) -> dict[str, Span]:
    return {span.name: span for span in rig.store.query_spans(rollout_id=rollout_id)}


# -- OpenTelemetry SDK agents -------------------------------------------------------------------------


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_sdk_agent_spans_arrive_attributed_and_linked(rig: TracingRig, compression: str) -> None:
    agent = rig.agent()
    env = agent.env | {"OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": compression}
    run_agent(AGENTS / "otel_agent.py", env)

    spans = spans_of(rig, agent.rollout_id)
    assert set(spans) == {"agent.run", "tool:search"}
    root, child = spans["agent.run"], spans["tool:search"]
    assert root.rollout_id == child.rollout_id == agent.rollout_id
    assert root.attempt == child.attempt == 1
    assert child.trace_id == root.trace_id and len(root.trace_id) == 32
    assert child.parent_id == root.span_id and root.parent_id is None
    assert (root.kind, child.kind) == ("server", "client")
    assert root.status == "ok"
    assert (child.status, child.status_message) == ("error", "search failed")
    assert child.end_time is not None and child.start_time <= child.end_time
    assert {k: child.attributes[k] for k in ("query", "hits", "score", "cached", "sources")} == {
        "query": "cats",
        "hits": 3,
        "score": 0.5,
        "cached": False,
        "sources": ["a", "b"],
    }
    assert child.attributes["resource"]["service.name"] == "search-agent"
    assert child.attributes["resource"]["agent.version"] == 3
    assert child.attributes["otel.scope"] == "agent.tracer"
    assert child.attributes["otel.scope.version"] == "1.2.3"
    [event] = child.events
    assert event.name == "exception"
    assert event.attributes["exception.type"] == "TimeoutError"
    assert event.attributes["exception.message"] == "search backend timed out"


# -- JSON encoding --------------------------------------------------------------------------------------


def test_json_export_converts_every_field(rig: TracingRig) -> None:
    rollout_id, token = rig.rollout()
    attributes = [
        {"key": "s", "value": {"stringValue": "x"}},
        {"key": "i", "value": {"intValue": "42"}},
        {"key": "d", "value": {"doubleValue": 1.5}},
        {"key": "b", "value": {"boolValue": True}},
        {"key": "raw", "value": {"bytesValue": base64.b64encode(b"\x01\xff").decode()}},
        {"key": "arr", "value": {"arrayValue": {"values": [{"intValue": 1}, {"stringValue": "two"}]}}},
        {
            "key": "kv",
            "value": {"kvlistValue": {"values": [{"key": "inner", "value": {"boolValue": False}}]}},
        },
        {"key": "empty", "value": {}},
    ]
    child = json_span(
        CHILD_ID,
        ROOT_ID,
        kind=3,
        attributes=attributes,
        status={"code": 2, "message": "bad"},
        events=[{"name": "retry", "timeUnixNano": str(NANOS + 10**9), "attributes": attributes[:2]}],
        links=[{"traceId": TRACE_ID, "spanId": ROOT_ID}],
        unknownField="ignored",
    )
    response = post(rig, f"/rollouts/{rollout_id}/v1/traces", otlp_json(json_span(), child), token)

    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {}
    spans = spans_of(rig, rollout_id)
    root, stored = spans["span-74"], spans["span-73"]
    assert (root.kind, root.status, root.parent_id) == ("internal", "unset", None)
    assert root.start_time == pytest.approx(NANOS / 1e9)
    assert root.end_time == pytest.approx(NANOS / 1e9 + 1.5)
    assert (stored.trace_id, stored.span_id, stored.parent_id) == (TRACE_ID, CHILD_ID, ROOT_ID)
    assert (stored.kind, stored.status, stored.status_message) == ("client", "error", "bad")
    expected = {
        "s": "x",
        "i": 42,
        "d": 1.5,
        "b": True,
        "raw": "01ff",
        "arr": [1, "two"],
        "kv": {"inner": False},
        "empty": None,
    }
    assert {key: stored.attributes[key] for key in expected} == expected
    assert stored.attributes["resource"] == {"service.name": "a"}
    assert stored.attributes["otel.scope"] == "my.lib"
    assert stored.attributes["otel.links"] == [{"trace_id": TRACE_ID, "span_id": ROOT_ID, "attributes": {}}]
    [event] = stored.events
    assert (event.name, event.attributes) == ("retry", {"s": "x", "i": 42})
    assert event.time == pytest.approx(NANOS / 1e9 + 1)


def test_gzip_json_and_protobuf_responses(rig: TracingRig) -> None:
    rollout_id, token = rig.rollout()
    body = gzip.compress(orjson.dumps(otlp_json(json_span())))
    response = post(rig, "/v1/traces", body, token, headers={"Content-Encoding": "gzip"})
    assert response.status_code == 200, response.text

    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name = bytes.fromhex(TRACE_ID), bytes.fromhex(CHILD_ID), "proto"
    span.start_time_unix_nano = NANOS
    response = post(
        rig, "/v1/traces", request.SerializeToString(), token, content_type="application/x-protobuf"
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/x-protobuf"
    ExportTraceServiceResponse.FromString(response.content)
    assert set(spans_of(rig, rollout_id)) == {"span-74", "proto"}


def test_admin_token_attributes_by_path_or_attribute(rig: TracingRig) -> None:
    first, _ = rig.rollout()
    second, _ = rig.rollout()
    admin = rig.auth.admin_token
    resource = [{"key": "tether.rollout_id", "value": {"stringValue": first}}]
    moved = json_span(
        CHILD_ID,
        attributes=[
            {"key": "tether.rollout_id", "value": {"stringValue": second}},
            {"key": "tether.attempt", "value": {"intValue": "7"}},
        ],
    )
    response = post(rig, "/v1/traces", otlp_json(json_span(), moved, resource=resource), admin)
    assert response.status_code == 200, response.text
    assert [(s.name, s.attempt) for s in rig.store.query_spans(rollout_id=first)] == [("span-74", 1)]
    assert [(s.name, s.attempt) for s in rig.store.query_spans(rollout_id=second)] == [("span-73", 7)]

    third, _ = rig.rollout()
    rig.store.update_status(third, RolloutStatus.succeeded)
    response = post(rig, f"/rollouts/{third}/v1/traces", otlp_json(json_span("0000000000000abc")), admin)
    assert response.status_code == 200, response.text
    assert [s.name for s in rig.store.query_spans(rollout_id=third)] == ["span-bc"]


# -- refusals -------------------------------------------------------------------------------------------


def _short_id_protobuf() -> bytes:
    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name = b"\x01" * 8, b"\x02" * 8, "short"
    return request.SerializeToString()


def _zero_id_protobuf() -> bytes:
    span = trace_pb2.Span(trace_id=bytes(16), span_id=b"\x02" * 8, name="zero")
    request = ExportTraceServiceRequest()
    request.resource_spans.add().scope_spans.add().spans.append(span)
    return request.SerializeToString()


def _nested_value(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"stringValue": "x"}
    for _ in range(depth):
        value = {"arrayValue": {"values": [value]}}
    return value


BAD_PAYLOADS: dict[str, tuple[bytes, str, dict[str, str], str]] = {
    "bad protobuf": (b"\xff\xff\xff\xff", "application/x-protobuf", {}, "invalid OTLP protobuf"),
    "short trace id": (_short_id_protobuf(), "application/x-protobuf", {}, "traceId"),
    "zero trace id": (_zero_id_protobuf(), "application/x-protobuf", {}, "non-zero"),
    "bad json": (b"{not json", "application/json", {}, "malformed JSON"),
    "json array": (b"[]", "application/json", {}, "must be an ExportTraceServiceRequest object"),
    "wrong shape": (b'{"resourceSpans": {}}', "application/json", {}, "resourceSpans"),
    "bad hex id after a good span": (
        orjson.dumps(otlp_json(json_span(), json_span("zz" * 8))),
        "application/json",
        {},
        "is not a hex string",
    ),
    "odd-length id": (orjson.dumps(otlp_json(json_span("abcd"))), "application/json", {}, "16 hex digits"),
    "bad time": (
        orjson.dumps(otlp_json(json_span(startTimeUnixNano="soon"))),
        "application/json",
        {},
        "startTimeUnixNano",
    ),
    "bad attempt": (
        orjson.dumps(
            otlp_json(json_span(attributes=[{"key": "tether.attempt", "value": {"stringValue": "x"}}]))
        ),
        "application/json",
        {},
        "tether.attempt",
    ),
    "bad gzip": (b"not gzip at all", "application/json", {"Content-Encoding": "gzip"}, "gzip"),
    "json nested 1000 deep": (
        b'{"resourceSpans": ' + b"[" * 1000 + b"]" * 1000 + b"}",
        "application/json",
        {},
        "nests deeper than",
    ),
    "an attribute nested too deep": (
        orjson.dumps(otlp_json(json_span(attributes=[{"key": "deep", "value": _nested_value(40)}]))),
        "application/json",
        {},
        "nests deeper than",
    ),
}


@pytest.mark.parametrize("case", list(BAD_PAYLOADS))
def test_malformed_payloads_are_refused_and_nothing_is_written(rig: TracingRig, case: str) -> None:
    rollout_id, token = rig.rollout()
    body, content_type, headers, message = BAD_PAYLOADS[case]
    response = post(
        rig, f"/rollouts/{rollout_id}/v1/traces", body, token, content_type=content_type, headers=headers
    )

    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert message in error["message"]
    assert error["code"]
    assert rig.store.query_spans(rollout_id=rollout_id) == []


def test_spans_are_the_agents_whatever_the_token(rig: TracingRig) -> None:
    rollout_id, token = rig.rollout()
    path = f"/rollouts/{rollout_id}/v1/traces"
    # Named and shaped like a model call the gateway records: still the agent's.
    ids = [{"key": "prompt_token_ids", "value": {"stringValue": "[1, 2]"}}]
    assert post(rig, path, otlp_json(json_span(name="llm.chat", attributes=ids)), token).status_code == 200
    admin_span = json_span(CHILD_ID, ROOT_ID)
    assert post(rig, path, otlp_json(admin_span), rig.auth.admin_token).status_code == 200
    spans = rig.store.query_spans(rollout_id=rollout_id)
    assert len(spans) == 2 and {span.origin for span in spans} == {"agent"}


def test_admin_spans_without_a_rollout_are_refused(rig: TracingRig) -> None:
    response = post(rig, "/v1/traces", otlp_json(json_span()), rig.auth.admin_token)
    assert response.status_code == 400
    assert "tether.rollout_id" in response.json()["error"]["message"]


def test_auth_refusals(rig: TracingRig) -> None:
    mine, token = rig.rollout()
    other, _ = rig.rollout()
    payload = otlp_json(json_span())

    cases = {
        "no token": (f"/rollouts/{mine}/v1/traces", None, 401, "missing_token"),
        "bad token": (f"/rollouts/{mine}/v1/traces", "tro-nope.123", 401, "invalid_token"),
        "foreign path": (f"/rollouts/{other}/v1/traces", token, 403, "forbidden"),
        "unknown rollout": ("/rollouts/missing/v1/traces", rig.auth.admin_token, 404, "rollout_not_found"),
    }
    for name, (path, credential, status, code) in cases.items():
        response = post(rig, path, payload, credential)
        assert (response.status_code, response.json()["error"]["code"]) == (status, code), name

    claims_other = json_span(attributes=[{"key": "tether.rollout_id", "value": {"stringValue": other}}])
    response = post(rig, "/v1/traces", otlp_json(claims_other), token)
    assert response.status_code == 403
    response = post(rig, "/v1/traces", otlp_json(json_span(), resource=claims_other["attributes"]), token)
    assert response.status_code == 403

    rig.store.update_status(mine, RolloutStatus.succeeded)
    response = post(rig, f"/rollouts/{mine}/v1/traces", payload, token)
    assert (response.status_code, response.json()["error"]["code"]) == (401, "token_expired")
    assert rig.store.query_spans(rollout_id=mine) == []
    assert rig.store.query_spans(rollout_id=other) == []


def test_size_and_media_type_limits(rig: TracingRig) -> None:
    rollout_id, token = rig.rollout()
    path = f"/rollouts/{rollout_id}/v1/traces"

    response = post(rig, path, b"\0" * (16 * 1024 * 1024 + 1), token, content_type="application/x-protobuf")
    assert response.status_code == 413
    bomb = gzip.compress(b" " * (16 * 1024 * 1024 + 1))
    response = post(rig, path, bomb, token, headers={"Content-Encoding": "gzip"})
    assert (response.status_code, response.json()["error"]["code"]) == (413, "request_too_large")

    response = post(rig, path, b"{}", token, content_type="text/plain")
    assert response.status_code == 415
    response = post(rig, path, b"{}", token, headers={"Content-Encoding": "br"})
    assert response.status_code == 415
    assert rig.store.query_spans(rollout_id=rollout_id) == []
