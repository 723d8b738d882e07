"""The span a model call becomes: what was asked, what came back with its token ids and logprobs, and
the policy version that produced it (see `tether.contracts.CallAttr` for the attributes)."""

from __future__ import annotations

import secrets
import time
from typing import Any

from tether.contracts import (
    CALL_SPAN_NAMES,
    CHOICE_TOOL_PARSE_ERROR,
    REFUSED_CALL_SPAN,
    AgentSource,
    CallAttr,
    Origin,
    SpanStatus,
)
from tether.gateway.context import CallContext
from tether.gateway.errors import GatewayError
from tether.gateway.upstreams import CallKind, CallRecord, ChoiceRecord
from tether.store.records import Span

# The status of a streamed call's span when the agent went away mid-stream: what was generated until then
# is recorded (choices without a finish reason), neither "ok" nor "error".
ABORTED = SpanStatus.ABORTED
ABORTED_MESSAGE = "the agent went away mid-stream: recorded as generated until then"

# Every field of a span, given to `model_construct` so that pydantic evaluates no default factory.
_SPAN_FIELDS = frozenset(
    {
        "rollout_id",
        "attempt",
        "name",
        "kind",
        "start_time",
        "end_time",
        "status",
        "status_message",
        "attributes",
    }
)


def call_span(
    ctx: CallContext,
    kind: CallKind,
    body: dict[str, Any],
    upstream: str,
    started: float,
    outcome: CallRecord | GatewayError,
    policy_version: int | None = None,
    *,
    aborted: bool = False,
) -> Span:
    """The span of a call that ended with `outcome`; `policy_version` is recorded for a failed call.
    `aborted`: a stream the agent left, whose record is what was generated until then."""
    ended = time.time()
    model = body.get("model")
    attributes: dict[str, Any] = {
        CallAttr.CALL: kind,
        CallAttr.MODEL: model,
        CallAttr.AGENT: ctx.agent or model,
        CallAttr.AGENT_SOURCE: AgentSource.HEADER if ctx.agent else AgentSource.MODEL,
        CallAttr.UPSTREAM: upstream,
        CallAttr.STREAM: bool(body.get("stream")),
        CallAttr.LATENCY_MS: round((ended - started) * 1000, 3),
        CallAttr.REQUEST: body,
    }
    if ctx.api is not None:
        attributes[CallAttr.API] = ctx.api
        attributes[CallAttr.REQUEST] = ctx.api_request
        attributes[CallAttr.CHAT_REQUEST] = body
    if ctx.overrides:
        attributes[CallAttr.OVERRIDES] = ctx.overrides
    if ctx.lowered:
        attributes[CallAttr.LOWERED] = ctx.lowered
    error = outcome if isinstance(outcome, GatewayError) else None
    if isinstance(outcome, CallRecord):
        attributes[CallAttr.POLICY_VERSION] = outcome.policy_version
        if outcome.sampler is not None:
            attributes[CallAttr.SAMPLING] = outcome.sampler.to_attr()
        attributes[CallAttr.PROMPT_TOKEN_IDS] = outcome.prompt_token_ids
        attributes[CallAttr.CHOICES] = [_choice(choice) for choice in outcome.choices]
        attributes[CallAttr.USAGE] = outcome.usage
        attributes[CallAttr.RESPONSE] = _without_token_details(outcome.response)
    else:
        attributes[CallAttr.ERROR] = outcome.body()["error"]
        attributes[CallAttr.POLICY_VERSION] = policy_version
    # Built without validation: every field comes from the gateway itself, on the hot path.
    return Span.model_construct(
        set(_SPAN_FIELDS),
        rollout_id=ctx.rollout_id,
        attempt=ctx.attempt,
        trace_id=ctx.trace_id or _random_id(128),
        span_id=_random_id(64),
        parent_id=ctx.parent_span_id,
        name=CALL_SPAN_NAMES[kind],
        kind="client",
        start_time=started,
        end_time=ended,
        status="error" if error else ABORTED if aborted else "ok",
        status_message=error.message if error else ABORTED_MESSAGE if aborted else None,
        attributes=attributes,
        events=[],
        seq=None,
        origin=Origin.GATEWAY,
    )


def refused_span(
    ctx: CallContext, route: str, body: dict[str, Any], started: float, error: GatewayError
) -> Span:
    """The span of a call refused before any upstream answered (a cap, a field the engine cannot honour),
    so that a run shows it: the request as the agent sent it and the error it got."""
    model = body.get("model") if isinstance(body.get("model"), str) else None
    attributes: dict[str, Any] = {
        CallAttr.CALL: route,
        CallAttr.MODEL: model,
        CallAttr.AGENT: ctx.agent or model,
        CallAttr.REQUEST: request_summary(body),
        CallAttr.ERROR: error.body()["error"],
    }
    return Span(
        rollout_id=ctx.rollout_id,
        attempt=ctx.attempt,
        trace_id=ctx.trace_id or _random_id(128),
        span_id=_random_id(64),
        parent_id=ctx.parent_span_id,
        name=REFUSED_CALL_SPAN,
        kind="client",
        start_time=started,
        end_time=time.time(),
        status="error",
        status_message=error.message,
        attributes=attributes,
        origin=Origin.GATEWAY,
    )


SUMMARY_FIELDS = 64
SUMMARY_TEXT = 200


def request_summary(body: dict[str, Any]) -> dict[str, Any]:
    """What a refused request asked, bounded whatever it holds: its scalar fields (text cut short) and the
    names of the others, never their contents (a refused body may be the poison it was refused for)."""
    summary: dict[str, Any] = {}
    for key, value in list(body.items())[:SUMMARY_FIELDS]:
        if isinstance(value, str):
            summary[str(key)[:SUMMARY_TEXT]] = value[:SUMMARY_TEXT]
        elif value is None or isinstance(value, bool | int | float):
            summary[str(key)[:SUMMARY_TEXT]] = value
        else:
            summary[str(key)[:SUMMARY_TEXT]] = f"({type(value).__name__})"
    return summary


def _random_id(bits: int) -> str:
    # From the OS, not the process-global `random`: the trainer seeds that one, and a restarted run would
    # repeat its ids, so a retried attempt's spans would collide with the dead run's (and be dropped).
    return f"{secrets.randbits(bits) or 1:0{bits // 4}x}"


def _choice(choice: ChoiceRecord) -> dict[str, Any]:
    item: dict[str, Any] = {
        "index": choice.index,
        "text": choice.text,
        "finish_reason": choice.finish_reason,
        "token_ids": choice.token_ids,
        "logprobs": choice.logprobs,
    }
    if choice.tool_parse_error:
        item[CHOICE_TOOL_PARSE_ERROR] = choice.tool_parse_error
    return item


def _without_token_details(response: dict[str, Any]) -> dict[str, Any]:
    """The response as recorded: token ids and logprobs live once, in the span's `choices`."""
    slim = {key: value for key, value in response.items() if key != "prompt_token_ids"}
    slim["choices"] = [
        {key: value for key, value in choice.items() if key not in ("logprobs", "token_ids")}
        for choice in response.get("choices") or []
    ]
    return slim
