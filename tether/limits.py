"""Limits every server applies to what a client sends, so that no request (and no rollout) can hurt the
others: a body size cap and a JSON nesting cap, checked before anything is stored or run, and the quota of
spans an agent may send over its attempt (`AgentQuota`).

The nesting cap stays well below what the store's JSON serializer accepts (254 levels), leaving room for
the levels a span adds around a request it records.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.requests import Request

MIB = 1024 * 1024
MAX_BODY_BYTES = 8 * MIB
# Per attempt: room for thousands of instrumented calls and tool steps, far below what would weigh on
# the runner, which reads an attempt's spans back whole to score it.
DEFAULT_MAX_ATTEMPT_SPANS = 10_000
DEFAULT_MAX_ATTEMPT_SPAN_BYTES = 32 * MIB
# The most spans the runner reads back of one attempt to score it (the evaluator gets them as one list).
# What bounds that read is the quota at every route an agent sends spans to (`AgentQuota`: a few thousand
# spans, tens of MiB); the rest are the model calls the gateway recorded, each one served by the upstream.
ATTEMPT_SPANS_READ = 1_000_000
# The command-line options that raise each limit (`tether rollout`, `train`, `serve`), named in refusals.
REQUEST_OPTION = "--max-request-mb"
SPANS_OPTION = "--max-spans-per-attempt"
SPAN_BYTES_OPTION = "--max-span-mb-per-attempt"
MAX_JSON_DEPTH = 64
# What the store API accepts: a stored body wraps a recorded request in a few more levels
# ({"spans": [{"attributes": {"request": ...}}]}).
MAX_STORED_JSON_DEPTH = MAX_JSON_DEPTH + 8


@dataclass(frozen=True)
class AgentQuota:
    """What an agent may send with its rollout token: one request's body (a model call, a store API
    request, an OTLP export), and over its attempt, how many spans and how many bytes of them (their
    names, attributes and events). The gateway's own records of the agent's model calls are not the
    agent's spans: they count against nothing and are never refused."""

    max_request_bytes: int = MAX_BODY_BYTES
    max_spans: int = DEFAULT_MAX_ATTEMPT_SPANS
    max_span_bytes: int = DEFAULT_MAX_ATTEMPT_SPAN_BYTES


def size_text(size: int) -> str:
    """A byte count as people read it: MiB from 1 MiB up, else KiB, else bytes."""
    if size >= MIB:
        return f"{size / MIB:.4g} MiB"
    return f"{size / 1024:.4g} KiB" if size >= 1024 else f"{size} bytes"


def too_large_message(limit: int) -> str:
    return f"the request body is larger than the {size_text(limit)} limit: raise it with {REQUEST_OPTION}"


class BodyTooLarge(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(too_large_message(limit))
        self.limit = limit


async def read_bounded(request: Request, limit: int = MAX_BODY_BYTES) -> bytes:
    """The request's body, refused (BodyTooLarge) as soon as it passes `limit`, never read whole first."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def json_depth(value: Any, limit: int = MAX_JSON_DEPTH) -> int:
    """The nesting depth of a parsed JSON value, counting up to `limit + 1` at most (then it stops)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest


def too_deep(raw: bytes, parsed: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether the body `raw` (parsed as `parsed`) nests deeper than `limit`: a bracket count first, and
    only past it a check at C speed."""
    return not few_brackets(raw, limit) and nests_deeper(parsed, limit)


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


def _wrapping(levels: int) -> tuple[list[Any], list[Any]]:
    """Lists nested `levels` deep, and the innermost one, which holds the value being checked."""
    inner: list[Any] = [None]
    outer = inner
    for _ in range(levels - 1):
        outer = [outer]
    return outer, inner


_wrappings = threading.local()  # one per thread and depth: filled in place, so not shared


def few_brackets(raw: bytes, limit: int) -> bool:
    """A cheap sufficient check: a body with at most `limit` brackets cannot nest deeper than `limit`.
    Braces first: past the limit in a long conversation's objects, the second scan is skipped."""
    braces = raw.count(b"{")
    return braces <= limit and braces + raw.count(b"[") <= limit


def nests_deeper(value: Any, limit: int) -> bool:
    """Whether a parsed JSON value nests deeper than `limit` levels (as `json_depth`
    counts them). orjson serializes the value inside `SERIALIZER_DEPTH - limit` levels of lists, and
    refuses exactly then: at C speed, where a walk in Python costs ~100 ns a value (a long agent
    conversation has hundreds)."""
    levels = SERIALIZER_DEPTH - limit
    if levels < 1:
        return json_depth(value, limit) > limit
    cache: dict[int, tuple[list[Any], list[Any]]] | None = getattr(_wrappings, "by_levels", None)
    if cache is None:
        cache = _wrappings.by_levels = {}
    outer, inner = cache.get(levels) or cache.setdefault(levels, _wrapping(levels))
    inner[0] = value
    try:
        orjson.dumps(outer)
    except orjson.JSONEncodeError:
        # Nested too deep, as a parsed body is when it fails; any other value is told by walking it.
        return json_depth(value, limit) > limit
    finally:
        inner[0] = None
    return False
