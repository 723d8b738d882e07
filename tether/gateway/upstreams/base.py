"""What every upstream is: the protocol the gateway calls, the records it returns for the span, and the
readers of the OpenAI request and answer fields that more than one upstream needs."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from tether.gateway.errors import GatewayError
from tether.sampling import Sampler

CallKind = Literal["chat", "completions"]


@dataclass
class ChoiceRecord:
    index: int
    text: str
    finish_reason: str | None
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    tool_parse_error: str | None = None  # the text looked like a tool call but could not be parsed


@dataclass
class CallRecord:
    """What an upstream reports about one call, for the span."""

    response: dict[str, Any]
    choices: list[ChoiceRecord]
    prompt_token_ids: list[int] | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    policy_version: int | None = None
    # The distribution the choices' tokens were drawn from, which their logprobs are under (None: the
    # upstream cannot say, e.g. a hosted API).
    sampler: Sampler | None = None


class Upstream(Protocol):
    name: str

    @property
    def policy_version(self) -> int | None:
        """The version a call made now would be recorded with."""
        ...

    async def call(self, kind: CallKind, body: dict[str, Any], *, owner: str | None = None) -> CallRecord:
        """Make one call. `owner` is the rollout it is for: an upstream that shares capacity across
        rollouts (the built-in engine) schedules fairly across owners; others may ignore it."""
        ...

    def stream(
        self, kind: CallKind, body: dict[str, Any], *, owner: str | None = None
    ) -> AsyncGenerator[bytes | CallRecord, None]:
        """Yield SSE event bytes for the agent (never the final `[DONE]`), then one CallRecord. `owner`
        is as for `call`."""
        ...

    async def aclose(self) -> None: ...


# -- request fields -----------------------------------------------------------------------------------


def stream_options(body: dict[str, Any]) -> dict[str, Any]:
    options = body.get("stream_options")
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise GatewayError(400, "'stream_options' must be an object", param="stream_options")
    return options


def wants_logprobs(kind: CallKind, body: dict[str, Any]) -> bool:
    value = body.get("logprobs")
    return bool(value) if kind == "chat" else value is not None and value is not False


# -- answer fields ------------------------------------------------------------------------------------

_INT_TYPES = frozenset({int, bool})
_FLOAT_TYPE = frozenset({float})


def int_list(value: Any) -> list[int] | None:
    """A list of token ids from an answer, or None if it is not one."""
    if not isinstance(value, list):
        return None
    # The type test first: it runs in C, about twice as fast over the hundreds of ids of a call.
    if _INT_TYPES.issuperset(map(type, value)) or all(isinstance(v, int) for v in value):
        return value  # freshly parsed: nothing else holds it
    return None


def logprob_values(kind: CallKind, logprobs: Any) -> list[float] | None:
    """The sampled tokens' logprobs of a choice's `logprobs` field, in either API's shape."""
    if not isinstance(logprobs, dict):
        return None
    if kind == "chat":
        content = logprobs.get("content")
        if isinstance(content, list):
            try:  # the usual shape: a dict with a number per token
                values = [item["logprob"] for item in content]
            except (KeyError, TypeError):
                return [float(item.get("logprob", 0.0)) for item in content if isinstance(item, dict)]
            return values if _FLOAT_TYPE.issuperset(map(type, values)) else [float(v) for v in values]
        return None
    numbers = logprobs.get("token_logprobs")
    return [float(v) for v in numbers] if isinstance(numbers, list) else None
