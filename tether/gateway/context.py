"""What the gateway knows about a model call before making it: whose call it is, and what the run
imposes on it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

TRACEPARENT = re.compile(r"[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}")


@dataclass
class CallContext:
    rollout_id: str
    attempt: int | None
    agent: str | None
    # Sampling parameters the run imposes on this rollout's calls (e.g. temperature 0 for validation).
    overrides: dict[str, Any] = field(default_factory=dict)
    # A candidate system prompt under evaluation (prompt optimization), applied to chat calls.
    prompt_override: Any = None
    # A call made in another API (`responses`, `messages`): its name and the request as the agent sent it.
    api: str | None = None
    api_request: dict[str, Any] | None = None
    # The agent's OpenTelemetry context (its `traceparent` header): the call's span joins that trace,
    # under the agent's span, which may name the agent (see `tether.adapters.build`).
    trace_id: str | None = None
    parent_span_id: str | None = None
    # The upstream that serves the policy's calls for this rollout instead of the default one (a served
    # session given to a canary), while it is registered.
    upstream: str | None = None
    # The token counts above the gateway's cap that were lowered to it: each field as the agent asked it.
    lowered: dict[str, Any] = field(default_factory=dict)

    def join_trace(self, traceparent: str | None) -> None:
        match = TRACEPARENT.fullmatch(traceparent.strip().lower()) if traceparent else None
        if match is not None and match.group(1).strip("0") and match.group(2).strip("0"):
            self.trace_id, self.parent_span_id = match.group(1), match.group(2)
