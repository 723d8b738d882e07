"""The per-attempt quota of spans an agent sends with its rollout token (the store API's `POST /spans`, the
OTLP receiver): how many, and how many bytes (`tether.limits.AgentQuota`). A request that the quota could
never take is refused whole with a 413, one that the attempt's remaining quota cannot take with a 429;
either way nothing of it is stored. The gateway's records of model calls never pass through here; its
records of calls it refused do (an agent chooses to be refused).

The counts live in the serving process, seeded from the store the first time an attempt sends spans to
it (so a restarted server keeps counting where the store is), and forgotten least recently used first.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import orjson

from tether.contracts import REFUSED_CALL_SPAN, Origin
from tether.errors import APIError
from tether.limits import SPAN_BYTES_OPTION, SPANS_OPTION, AgentQuota, size_text
from tether.store.auth import Caller
from tether.store.base import Store
from tether.store.records import Span

ATTEMPTS_KEPT = 65_536  # attempts whose counts stay in memory (one is seeded again from the store)

AttemptKey = tuple[str, int | None]


def span_bytes(span: Span) -> int:
    """What a span weighs as stored: its name, status message, attributes and events."""
    size = len(span.name) + len(span.status_message or "") + len(orjson.dumps(span.attributes))
    for event in span.events:
        size += len(event.name) + len(orjson.dumps(event.attributes))
    return size


@dataclass
class Usage:
    spans: int = 0
    bytes: int = 0


class SpanQuotaError(APIError):
    """A request of spans refused by the quota: 413 when no attempt could take it, 429 when this one's
    remaining quota cannot."""


class SpanLedger:
    """What each attempt's agent has sent as spans, charged before they are stored."""

    def __init__(self, store: Store, quota: AgentQuota | None = None) -> None:
        self.store = store
        self.quota = quota or AgentQuota()
        self._used: OrderedDict[AttemptKey, Usage] = OrderedDict()
        self._lock = threading.Lock()

    def add_spans(self, caller: Caller, spans: Sequence[Span]) -> None:
        """Store `spans`: an agent's (a rollout token's) once charged to its attempt, the admin's as they
        are; blocks."""
        if caller.is_admin or caller.rollout_id is None:
            self.store.add_spans(spans)
            return
        key = (caller.rollout_id, caller.attempt)
        size = sum(span_bytes(span) for span in spans)
        self.charge(key, len(spans), size)
        try:
            self.store.add_spans(spans)
        except BaseException:
            self.refund(key, len(spans), size)
            raise

    def charge(self, key: AttemptKey, count: int, size: int) -> None:
        quota = self.quota
        _refuse_oversized(key, count, size, quota)
        if key not in self._used:
            seeded = self._stored_usage(key)
            with self._lock:
                self._used.setdefault(key, seeded)
        with self._lock:
            used = self._used[key]
            self._used.move_to_end(key)
            if used.spans + count > quota.max_spans:
                raise _used_up(key, f"its {quota.max_spans} spans", SPANS_OPTION)
            if used.bytes + size > quota.max_span_bytes:
                raise _used_up(key, f"its {size_text(quota.max_span_bytes)} of spans", SPAN_BYTES_OPTION)
            used.spans += count
            used.bytes += size
            while len(self._used) > ATTEMPTS_KEPT:
                self._used.popitem(last=False)

    def refund(self, key: AttemptKey, count: int, size: int) -> None:
        with self._lock:
            used = self._used.get(key)
            if used is not None:
                used.spans = max(0, used.spans - count)
                used.bytes = max(0, used.bytes - size)

    def used(self, rollout_id: str, attempt: int | None) -> Usage:
        with self._lock:
            found = self._used.get((rollout_id, attempt))
            return Usage(found.spans, found.bytes) if found else Usage()

    def _stored_usage(self, key: AttemptKey) -> Usage:
        """What the store already holds of the attempt's agent (a server restarted mid-attempt)."""
        rollout_id, attempt = key
        stored = self.store.query_spans(
            rollout_id=rollout_id, attempt=attempt, limit=self.quota.max_spans * 2 + 1
        )
        agents = [span for span in stored if span.origin == Origin.AGENT or span.name == REFUSED_CALL_SPAN]
        return Usage(len(agents), sum(span_bytes(span) for span in agents))


def _refuse_oversized(key: AttemptKey, count: int, size: int, quota: AgentQuota) -> None:
    rollout_id, attempt = key
    if count > quota.max_spans:
        raise SpanQuotaError(
            413,
            f"{count} spans in one request, more than attempt {attempt} of rollout {rollout_id} may send "
            f"in all ({quota.max_spans}): raise it with {SPANS_OPTION}",
            code="too_many_spans",
        )
    if size > quota.max_span_bytes:
        raise SpanQuotaError(
            413,
            f"{size_text(size)} of spans in one request, more than attempt {attempt} of rollout "
            f"{rollout_id} may send in all ({size_text(quota.max_span_bytes)}): raise it with "
            f"{SPAN_BYTES_OPTION}",
            code="spans_too_large",
        )


def _used_up(key: AttemptKey, what: str, option: str) -> SpanQuotaError:
    rollout_id, attempt = key
    return SpanQuotaError(
        429,
        f"attempt {attempt} of rollout {rollout_id} has used up {what}: further spans are refused "
        f"(model calls are still served and recorded); raise the quota with {option}",
        type="rate_limit_error",
        code="span_quota_exceeded",
    )
