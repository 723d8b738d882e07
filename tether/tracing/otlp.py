"""An OTLP/HTTP trace receiver: agents instrumented with OpenTelemetry export their spans to Tether.

`POST /v1/traces` and `POST /rollouts/{rollout_id}/v1/traces` take an `ExportTraceServiceRequest` as
protobuf (`application/x-protobuf`) or OTLP JSON (`application/json`), optionally gzip-compressed, and
store every span as a `Span` of its rollout.

Attribution: a rollout token writes only to its own rollout (the path, when given, must name it). The
admin token writes to the rollout the path names, else to the one named by a `tether.rollout_id` span
attribute, else by a `tether.rollout_id` resource attribute.

Span attributes keep their OpenTelemetry keys. Besides them a stored span has:
- `resource`: the resource attributes, as one nested object (e.g. `{"service.name": "agent"}`);
- `otel.scope` and `otel.scope.version`: the instrumentation scope's name and version, when set;
- `otel.links`: the span's links, when it has any.
A span attribute of the same name wins over these. With a rollout token the attempt is the token's, and
the token works only while that attempt runs. With the admin token it is the `tether.attempt` attribute
(span, then resource) when present, else the rollout's current attempt.
"""

from __future__ import annotations

import base64
import math
import re
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio.to_thread
import orjson
from fastapi import APIRouter, Request, Response
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1 import trace_pb2

from tether.contracts import Origin
from tether.errors import APIError
from tether.limits import MAX_JSON_DEPTH, BodyTooLarge, read_bounded, too_deep, too_large_message
from tether.store.auth import (
    DEAD,
    AuthError,
    Caller,
    Refusal,
    TokenAuthority,
    authenticate,
    check_live,
    find_rollout,
    request_token,
)
from tether.store.base import InvalidValue, Store, StoreError
from tether.store.records import Rollout, Span, SpanEvent
from tether.store.span_quota import SpanLedger, SpanQuotaError

MAX_BODY_BYTES = 16 * 1024 * 1024
ROLLOUT_ATTRIBUTE = "tether.rollout_id"
ATTEMPT_ATTRIBUTE = "tether.attempt"
PROTOBUF = "application/x-protobuf"
JSON = "application/json"
_MEDIA_TYPES = {PROTOBUF: PROTOBUF, "application/protobuf": PROTOBUF, JSON: JSON}
_KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}
_STATUSES = {0: "unset", 1: "ok", 2: "error"}
_PARSE_PREFIX = re.compile(r"Failed to parse (\w+) field: ")
_ID_FIELDS = {"traceId": 16, "spanId": 8, "parentSpanId": 8}


class OTLPError(APIError):
    """An error the OTLP receiver answers with (always JSON, whatever the request's encoding)."""


def _bad_request(message: str, code: str = "invalid_otlp") -> OTLPError:
    return OTLPError(400, message, code=code)


def _unauthorized(message: str, code: str) -> OTLPError:
    return OTLPError(401, message, type="authentication_error", code=code)


def _forbidden(message: str) -> OTLPError:
    return OTLPError(403, message, type="permission_error", code="forbidden")


@dataclass
class ParsedSpan:
    span: trace_pb2.Span
    where: str
    resource: dict[str, Any]
    scope_name: str
    scope_version: str


# -- request reading ------------------------------------------------------------------------------------


def _refused(error: AuthError) -> OTLPError:
    refusal, rollout_id = error.refusal, error.rollout_id
    if refusal is Refusal.MISSING:
        return _unauthorized("missing token: send 'Authorization: Bearer <token>'", "missing_token")
    if refusal is Refusal.OTHER_ROLLOUT:
        return _forbidden(f"this token belongs to another rollout, not {rollout_id!r}")
    if refusal is Refusal.UNKNOWN_ROLLOUT:
        return OTLPError(
            404, f"unknown rollout {rollout_id!r}", type="not_found_error", code="rollout_not_found"
        )
    if refusal in DEAD:
        return _unauthorized(f"token expired: {error.reason}", "token_expired")
    return _unauthorized("invalid token: not a token issued by this Tether server", "invalid_token")


def _media_type(request: Request) -> str:
    declared = request.headers.get("content-type", "").split(";")[0].strip().lower()
    media_type = _MEDIA_TYPES.get(declared)
    if media_type is None:
        raise OTLPError(
            415,
            f"unsupported content type {declared or 'none'!r}: send {PROTOBUF} or {JSON}",
            code="unsupported_media_type",
        )
    return media_type


def _too_large(limit: int) -> OTLPError:
    return OTLPError(413, too_large_message(limit), code="request_too_large")


async def _read_body(request: Request, limit: int) -> bytes:
    try:
        return await read_bounded(request, limit)
    except BodyTooLarge:
        raise _too_large(limit) from None


def _decompress(body: bytes, encoding: str, limit: int) -> bytes:
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding not in ("gzip", "deflate"):
        raise OTLPError(
            415, f"unsupported content encoding {encoding!r}: use gzip", code="unsupported_encoding"
        )
    wbits = 16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS
    decompressor = zlib.decompressobj(wbits)
    try:
        data = decompressor.decompress(body, limit + 1)
    except zlib.error as exc:
        raise _bad_request(f"the body is not valid {encoding} data: {exc}", "invalid_encoding") from None
    if len(data) > limit:
        raise _too_large(limit)
    if not decompressor.eof:
        raise _bad_request(f"the {encoding} body is truncated", "invalid_encoding")
    return data


# -- decoding -------------------------------------------------------------------------------------------


def _hex_to_base64(value: Any, where: str, size: int) -> str:
    if not isinstance(value, str):
        raise _bad_request(f"{where}: must be a hex string")
    if value == "":
        return ""
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        raise _bad_request(f"{where}: {value!r} is not a hex string") from None
    if len(raw) != size:
        raise _bad_request(f"{where}: must be {size * 2} hex digits, got {len(value)}")
    return base64.b64encode(raw).decode()


def _dicts(parent: dict[str, Any], key: str) -> Iterable[tuple[int, dict[str, Any]]]:
    items = parent.get(key)
    if not isinstance(items, list):
        return ()
    return ((index, item) for index, item in enumerate(items) if isinstance(item, dict))


def _convert_ids(span: dict[str, Any], where: str) -> None:
    for key, size in _ID_FIELDS.items():
        if key in span:
            span[key] = _hex_to_base64(span[key], f"{where}.{key}", size)
    for index, link in _dicts(span, "links"):
        for key in ("traceId", "spanId"):
            if key in link:
                link[key] = _hex_to_base64(link[key], f"{where}.links[{index}].{key}", _ID_FIELDS[key])


def _ids_to_base64(payload: dict[str, Any]) -> None:
    """OTLP JSON writes trace and span ids as hex, where protobuf's JSON mapping expects base64."""
    for r, resource_spans in _dicts(payload, "resourceSpans"):
        for s, scope_spans in _dicts(resource_spans, "scopeSpans"):
            for i, span in _dicts(scope_spans, "spans"):
                _convert_ids(span, f"resourceSpans[{r}].scopeSpans[{s}].spans[{i}]")


def _parse_error(exc: Exception) -> str:
    """protobuf's nested "Failed to parse a field: Failed to parse b field: ..." as "a.b: ..."."""
    message = str(exc).rstrip(".")
    fields = []
    while match := _PARSE_PREFIX.match(message):
        fields.append(match.group(1))
        message = message[match.end() :]
    return f"{'.'.join(fields)}: {message}" if fields else message


def _decode_json(data: bytes) -> ExportTraceServiceRequest:
    try:
        payload = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise _bad_request(f"malformed JSON body: {exc}", "invalid_json") from None
    if not isinstance(payload, dict):
        raise _bad_request("the JSON body must be an ExportTraceServiceRequest object")
    if too_deep(data, payload):  # protobuf's JSON parser would recurse past Python's limit
        raise _bad_request(f"the JSON body nests deeper than {MAX_JSON_DEPTH} levels", "too_deep")
    _ids_to_base64(payload)
    try:
        return json_format.ParseDict(payload, ExportTraceServiceRequest(), ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError, TypeError) as exc:
        raise _bad_request(f"invalid OTLP JSON: {_parse_error(exc)}") from None


def _decode_protobuf(data: bytes) -> ExportTraceServiceRequest:
    try:
        return ExportTraceServiceRequest.FromString(data)
    except (DecodeError, ValueError) as exc:
        raise _bad_request(f"invalid OTLP protobuf: {exc}", "invalid_protobuf") from None


# -- conversion -----------------------------------------------------------------------------------------


def _double(value: float) -> float | str:
    if math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def flatten_value(value: AnyValue) -> Any:
    """An OTLP AnyValue as plain JSON: arrays become lists, kvlists objects, bytes hex strings."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [flatten_value(item) for item in value.array_value.values]
    if kind == "kvlist_value":
        return flatten_attributes(value.kvlist_value.values)
    if kind == "bytes_value":
        return value.bytes_value.hex()
    if kind == "double_value":
        return _double(value.double_value)
    return getattr(value, kind)


def flatten_attributes(attributes: Sequence[KeyValue]) -> dict[str, Any]:
    return {attribute.key: flatten_value(attribute.value) for attribute in attributes}


def _check_id(raw: bytes, size: int, where: str, *, optional: bool = False) -> str:
    if optional and not raw:
        return ""
    if len(raw) != size or not any(raw):
        raise _bad_request(f"{where}: must be a non-zero id of {size} bytes, got {len(raw)} bytes")
    return raw.hex()


def parse_spans(request: ExportTraceServiceRequest) -> list[ParsedSpan]:
    parsed = []
    for r, resource_spans in enumerate(request.resource_spans):
        resource = flatten_attributes(resource_spans.resource.attributes)
        for s, scope_spans in enumerate(resource_spans.scope_spans):
            scope = scope_spans.scope
            for i, span in enumerate(scope_spans.spans):
                where = f"resourceSpans[{r}].scopeSpans[{s}].spans[{i}]"
                parsed.append(ParsedSpan(span, where, resource, scope.name, scope.version))
    return parsed


def _attempt(value: Any, where: str) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise _bad_request(f"{where}: {ATTEMPT_ATTRIBUTE} must be a non-negative integer, got {value!r}")
    return value


def _attributes(item: ParsedSpan, own: dict[str, Any]) -> dict[str, Any]:
    extra: dict[str, Any] = {"resource": item.resource}
    if item.scope_name:
        extra["otel.scope"] = item.scope_name
    if item.scope_version:
        extra["otel.scope.version"] = item.scope_version
    if item.span.links:
        extra["otel.links"] = [
            {
                "trace_id": link.trace_id.hex(),
                "span_id": link.span_id.hex(),
                "attributes": flatten_attributes(link.attributes),
            }
            for link in item.span.links
        ]
    return extra | own


def to_span(item: ParsedSpan, rollout_id: str, attempt: int | None) -> Span:
    """One OTLP span as a stored `Span`. Ids must have been checked already."""
    span = item.span
    own = flatten_attributes(span.attributes)
    events = [
        SpanEvent.model_construct(
            name=event.name, time=event.time_unix_nano / 1e9, attributes=flatten_attributes(event.attributes)
        )
        for event in span.events
    ]
    return Span.model_construct(
        rollout_id=rollout_id,
        attempt=attempt,
        trace_id=span.trace_id.hex(),
        span_id=span.span_id.hex(),
        parent_id=span.parent_span_id.hex() or None,
        name=span.name,
        kind=_KINDS.get(span.kind, "unspecified"),
        start_time=span.start_time_unix_nano / 1e9,
        end_time=span.end_time_unix_nano / 1e9 if span.end_time_unix_nano else None,
        status=_STATUSES.get(span.status.code, "unset"),
        status_message=span.status.message or None,
        attributes=_attributes(item, own),
        events=events,
        seq=None,
        origin=Origin.AGENT,  # whatever the token: only the gateway records model calls it served
    )


# -- attribution ----------------------------------------------------------------------------------------


@dataclass
class Claimed:
    """What one span says about itself: the rollout and attempt it names, if any."""

    rollout_id: str | None
    attempt: int | None


def _named(item: ParsedSpan, own: dict[str, AnyValue], key: str) -> Any:
    value = own.get(key)
    return flatten_value(value) if value is not None else item.resource.get(key)


def _claimed(item: ParsedSpan) -> Claimed:
    own = {attribute.key: attribute.value for attribute in item.span.attributes}
    rollout_id = _named(item, own, ROLLOUT_ATTRIBUTE)
    if rollout_id is not None and not isinstance(rollout_id, str):
        raise _bad_request(f"{item.where}: {ROLLOUT_ATTRIBUTE} must be a string")
    attempt = _named(item, own, ATTEMPT_ATTRIBUTE)
    return Claimed(rollout_id, None if attempt is None else _attempt(attempt, item.where))


def _rollout_for(caller: Caller, path_rollout: str | None, item: ParsedSpan, claimed: Claimed) -> str:
    named = claimed.rollout_id
    if caller.rollout_id is not None:
        if named is not None and named != caller.rollout_id:
            raise _forbidden(
                f"{item.where} names rollout {named!r}, but this token belongs to {caller.rollout_id!r}"
            )
        return caller.rollout_id
    if path_rollout is not None:
        if named is not None and named != path_rollout:
            raise _bad_request(f"{item.where} names rollout {named!r}, but the path names {path_rollout!r}")
        return path_rollout
    if named is None:
        raise _bad_request(
            f"{item.where}: cannot tell which rollout this span belongs to: post to "
            f"/rollouts/{{id}}/v1/traces or set a {ROLLOUT_ATTRIBUTE} resource or span attribute",
            "rollout_unknown",
        )
    return named


def _lookup(store: Store, caller: Caller, rollout_id: str) -> Rollout:
    """The rollout spans go to: any rollout for the admin, a live attempt's for a rollout token."""
    rollout = find_rollout(store, rollout_id)
    if caller.is_admin and rollout is not None:
        return rollout
    try:
        return check_live(rollout_id, rollout, caller.attempt)
    except AuthError as exc:
        raise _refused(exc) from None


def attribute_spans(
    store: Store, caller: Caller, path_rollout: str | None, request: ExportTraceServiceRequest
) -> list[Span]:
    """Every span of the request as a stored `Span`, or an `OTLPError` (nothing is written)."""
    rollouts: dict[str, Rollout] = {}
    if caller.rollout_id is not None:
        rollouts[caller.rollout_id] = _lookup(store, caller, caller.rollout_id)
    targets = []
    for item in parse_spans(request):
        _check_id(item.span.trace_id, 16, f"{item.where}.traceId")
        _check_id(item.span.span_id, 8, f"{item.where}.spanId")
        _check_id(item.span.parent_span_id, 8, f"{item.where}.parentSpanId", optional=True)
        claimed = _claimed(item)
        targets.append((item, _rollout_for(caller, path_rollout, item, claimed), claimed.attempt))
    for rollout_id in {target[1] for target in targets} - rollouts.keys():
        rollouts[rollout_id] = _lookup(store, caller, rollout_id)
    spans = []
    for item, rollout_id, claimed_attempt in targets:
        attempt = caller.recorded_attempt(claimed_attempt, rollouts[rollout_id].attempt_count or None)
        spans.append(to_span(item, rollout_id, attempt))
    return spans


def _ingest(
    ledger: SpanLedger, caller: Caller, path_rollout: str | None, data: bytes, media_type: str
) -> int:
    decode = _decode_json if media_type == JSON else _decode_protobuf
    spans = attribute_spans(ledger.store, caller, path_rollout, decode(data))
    if spans:  # an agent's only within its attempt's quota
        ledger.add_spans(caller, spans)
    return len(spans)


# -- router ---------------------------------------------------------------------------------------------


def _success(media_type: str) -> Response:
    if media_type == PROTOBUF:
        return Response(ExportTraceServiceResponse().SerializeToString(), media_type=PROTOBUF)
    return Response(b"{}", media_type=JSON)


_OPENAPI_EXTRA: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            PROTOBUF: {"schema": {"type": "string", "format": "binary"}},
            JSON: {"schema": {"type": "object", "description": "OTLP JSON ExportTraceServiceRequest"}},
        },
    }
}
_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"description": "An empty ExportTraceServiceResponse, in the request's encoding"},
    400: {"description": "Malformed payload (nothing is written)"},
    401: {"description": "Missing, invalid or expired token"},
    403: {"description": "A rollout token writing to another rollout"},
    404: {"description": "Unknown rollout"},
    413: {"description": "Body, or spans in one request, larger than the limit"},
    429: {"description": "The attempt's span quota is used up"},
    415: {"description": "Unsupported content type or encoding"},
    503: {"description": "The store is unavailable"},
}
_ROUTE: dict[str, Any] = {
    "openapi_extra": _OPENAPI_EXTRA,
    "responses": _RESPONSES,
    "response_class": Response,
}


def create_otlp_router(
    store: Store,
    auth: TokenAuthority,
    *,
    max_body_bytes: int = MAX_BODY_BYTES,
    spans: SpanLedger | None = None,
) -> APIRouter:
    """The OTLP/HTTP trace routes: `POST /v1/traces` and `POST /rollouts/{rollout_id}/v1/traces`.
    `spans`: the quota of spans a rollout token may send (shared with the app's other span routes)."""
    router = APIRouter(tags=["otlp"])
    ledger = spans or SpanLedger(store)

    async def receive(request: Request, path_rollout: str | None) -> Response:
        try:
            try:
                caller = authenticate(auth, request_token(request.headers), path_rollout)
            except AuthError as exc:
                raise _refused(exc) from None
            media_type = _media_type(request)
            body = await _read_body(request, max_body_bytes)
            encoding = request.headers.get("content-encoding", "")
            data = await anyio.to_thread.run_sync(_decompress, body, encoding, max_body_bytes)
            await anyio.to_thread.run_sync(_ingest, ledger, caller, path_rollout, data, media_type)
        except (OTLPError, SpanQuotaError) as exc:
            return exc.response()
        except InvalidValue as exc:
            return _bad_request(f"the spans cannot be stored: {exc}", "invalid_value").response()
        except StoreError as exc:
            message = f"the spans could not be stored: {exc}"
            return OTLPError(503, message, type="server_error", code="store_unavailable").response()
        return _success(media_type)

    @router.post(
        "/v1/traces",
        summary="Receive OTLP/HTTP traces (rollout from the token or tether.rollout_id)",
        **_ROUTE,
    )
    async def export_traces(request: Request) -> Response:
        return await receive(request, None)

    @router.post(
        "/rollouts/{rollout_id}/v1/traces", summary="Receive OTLP/HTTP traces for one rollout", **_ROUTE
    )
    async def export_rollout_traces(rollout_id: str, request: Request) -> Response:
        return await receive(request, rollout_id)

    return router
