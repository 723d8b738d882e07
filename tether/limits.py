"""Limits every server applies to what a client sends, so that no request (and no rollout) can hurt the
others: a body size cap and a JSON nesting cap, checked before anything is stored or run.

The nesting cap stays well below what the store's JSON serializer accepts (254 levels), leaving room for
the levels a span adds around a request it records.
"""

from __future__ import annotations

from typing import Any

MAX_BODY_BYTES = 8 * 1024 * 1024
MAX_JSON_DEPTH = 64


def brackets_allow_depth(raw: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """A cheap sufficient check: a body with at most `limit` brackets cannot nest deeper than `limit`."""
    return raw.count(b"[") + raw.count(b"{") <= limit


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
    return not brackets_allow_depth(raw, limit) and json_depth(parsed, limit) > limit
