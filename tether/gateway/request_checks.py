"""What the gateway checks in a model call's body before the model runs. An agent under training is an
adversary, and one call must not hurt the others:

- nesting: a body nested deeper than `MAX_JSON_DEPTH` is refused, since its span (which holds the body)
  would fail the store's commit it shares with other rollouts' calls;
- caps: a call asking for a billion tokens or dozens of choices would take the engine from every other
  rollout, so it is refused with a 400 that names the field and the cap, never silently cut.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import orjson

from tether.gateway.errors import GatewayError
from tether.limits import MAX_JSON_DEPTH, json_depth

DEFAULT_MAX_TOKENS_CAP = 4096
DEFAULT_N_CAP = 8

# The capped fields of each model-call route, in the route's own API: (field, which cap).
CAPPED_FIELDS: dict[str, tuple[tuple[str, str], ...]] = {
    "chat": (("max_tokens", "tokens"), ("max_completion_tokens", "tokens"), ("n", "choices")),
    "completions": (("max_tokens", "tokens"), ("n", "choices"), ("best_of", "choices")),
    "responses": (("max_output_tokens", "tokens"),),
    "messages": (("max_tokens", "tokens"),),
}
CAP_OPTIONS = {"tokens": "--max-tokens-cap", "choices": "--n-cap"}


def _serializer_depth() -> int:
    """The deepest nesting orjson serializes (254 today); it refuses anything deeper."""
    value: list[Any] = []
    depth = 1
    while depth < 10_000:
        try:
            orjson.dumps([value])
        except orjson.JSONEncodeError:
            break
        value, depth = [value], depth + 1
    return depth


SERIALIZER_DEPTH = _serializer_depth()


@dataclass
class _Wrapping:
    """Lists nested `levels` deep, whose innermost holds the value being checked."""

    outer: list[Any]
    inner: list[Any]

    @classmethod
    def of(cls, levels: int) -> _Wrapping:
        inner: list[Any] = [None]
        outer = inner
        for _ in range(levels - 1):
            outer = [outer]
        return cls(outer, inner)


_wrappings = threading.local()  # one per thread and depth: filled in place, so not shared


def check_depth(raw: bytes, body: Any, limit: int = MAX_JSON_DEPTH) -> None:
    if not few_brackets(raw, limit) and nests_deeper(body, limit):
        raise GatewayError(400, f"the request body nests deeper than {limit} levels", code="too_deep")


def few_brackets(raw: bytes, limit: int) -> bool:
    """`tether.limits.brackets_allow_depth`, braces first: past the limit in a long conversation's
    objects, the second scan of the body is skipped."""
    braces = raw.count(b"{")
    return braces <= limit and braces + raw.count(b"[") <= limit


def nests_deeper(value: Any, limit: int) -> bool:
    """Whether a parsed JSON value nests deeper than `limit` levels (as `tether.limits.json_depth`
    counts them). orjson serializes the value inside `SERIALIZER_DEPTH - limit` levels of lists, and
    refuses exactly then: at C speed, where a walk in Python costs ~100 ns a value (a long agent
    conversation has hundreds)."""
    levels = SERIALIZER_DEPTH - limit
    if levels < 1:
        return json_depth(value, limit) > limit
    cache: dict[int, _Wrapping] | None = getattr(_wrappings, "by_levels", None)
    if cache is None:
        cache = _wrappings.by_levels = {}
    wrapping = cache.get(levels) or cache.setdefault(levels, _Wrapping.of(levels))
    wrapping.inner[0] = value
    try:
        orjson.dumps(wrapping.outer)
    except orjson.JSONEncodeError:
        # Nested too deep, as a parsed body is when it fails; any other value is told by walking it.
        return json_depth(value, limit) > limit
    finally:
        wrapping.inner[0] = None
    return False


def check_caps(kind: str, body: dict[str, Any], max_tokens: int, n: int) -> None:
    """Refuse a request whose token or choice count is above its cap. A value of the wrong type is left
    to the upstream's own checks."""
    for name, cap_kind in CAPPED_FIELDS[kind]:
        value = body.get(name)
        if value is None or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        cap = max_tokens if cap_kind == "tokens" else n
        if value > cap:
            raise GatewayError(
                400,
                f"'{name}' is {value}, above this gateway's cap of {cap} (set with tether serve "
                f"{CAP_OPTIONS[cap_kind]})",
                code="integer_above_max_value",
                param=name,
            )
