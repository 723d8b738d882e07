"""Prometheus metrics of one gateway, served at `/metrics` (the admin or the viewer token).

Call counters are counted from the spans the gateway committed, at the moment each commit succeeds, so
after a run they equal what the store holds: `tether_calls_total` is the number of model-call spans the
gateway recorded (by upstream and span status), `tether_tokens_total` their prompt and response token
ids. Calls refused before they reached an upstream are in `tether_call_errors_total` by kind (the
error's code). Gauges (queue depth, rollouts by status, admission, policy versions) are read when
scraped; the store reads run off the event loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Protocol

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tether.contracts import CallAttr
from tether.gateway.admission import Admission
from tether.gateway.errors import GatewayError, unauthorized
from tether.gateway.upstreams import Upstream
from tether.store.auth import TokenAuthority, request_token
from tether.store.base import Store
from tether.store.records import RolloutQuery, RolloutStatus, Span


class Scraped(Protocol):
    """What the scrape reads of the gateway (`tether.gateway.app.Gateway`)."""

    @property
    def admission(self) -> Admission: ...

    @property
    def upstreams(self) -> dict[str, Upstream]: ...

    @property
    def store(self) -> Store: ...

    @property
    def auth(self) -> TokenAuthority: ...

    @property
    def metrics(self) -> GatewayMetrics: ...


LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
SWAP_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


class GatewayMetrics:
    """The counters a gateway updates as it works; a registry of its own, so gateways never share one."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.calls = Counter(
            "tether_calls", "Model calls recorded", ["upstream", "status"], registry=self.registry
        )
        self.latency = Histogram(
            "tether_call_latency_seconds",
            "Latency of recorded model calls",
            ["upstream"],
            buckets=LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self.tokens = Counter(
            "tether_tokens", "Token ids of recorded model calls", ["kind"], registry=self.registry
        )
        self.errors = Counter(
            "tether_call_errors",
            "Model calls answered with an error, by kind",
            ["kind"],
            registry=self.registry,
        )
        self.swaps = Histogram(
            "tether_swap_seconds",
            "Time model calls were paused for a policy swap (admin pause to resume)",
            buckets=SWAP_BUCKETS_S,
            registry=self.registry,
        )
        self._paused_at: float | None = None
        self._gauges: _ScrapeTimeGauges | None = None

    def read_at_scrape(self, gateway: Scraped) -> None:
        """Register the gauges read from `gateway` when scraped (once: an app may be built twice)."""
        if self._gauges is None:
            self._gauges = _ScrapeTimeGauges(gateway)
            self.registry.register(self._gauges)

    def recorded(self, span: Span) -> None:
        attributes = span.attributes
        upstream = str(attributes.get(CallAttr.UPSTREAM))
        self.calls.labels(upstream, span.status).inc()
        latency_ms = attributes.get(CallAttr.LATENCY_MS)
        if isinstance(latency_ms, int | float):
            self.latency.labels(upstream).observe(latency_ms / 1000)
        prompt = attributes.get(CallAttr.PROMPT_TOKEN_IDS)
        if isinstance(prompt, list):
            self.tokens.labels("prompt").inc(len(prompt))
        completion = sum(len(c.get("token_ids") or []) for c in attributes.get(CallAttr.CHOICES) or [])
        if completion:
            self.tokens.labels("completion").inc(completion)

    def refused(self, error: GatewayError) -> None:
        self.errors.labels(error.code or error.type).inc()

    def paused(self) -> None:
        if self._paused_at is None:
            self._paused_at = time.monotonic()

    def resumed(self) -> None:
        if self._paused_at is not None:
            self.swaps.observe(time.monotonic() - self._paused_at)
            self._paused_at = None


class _ScrapeTimeGauges(Collector):
    """What is read when scraped: admission, upstream versions, rollouts by status from the store."""

    NAMES = ("tether_admission_paused", "tether_calls_in_flight", "tether_calls_waiting")

    def __init__(self, gateway: Scraped) -> None:
        self.gateway = gateway

    def describe(self) -> Iterator[Metric]:
        """The names, without reading anything: the registry asks at registration, before any store."""
        for name in (*self.NAMES, "tether_policy_version", "tether_rollouts"):
            yield GaugeMetricFamily(name, name)

    def collect(self) -> Iterator[Metric]:
        admission = self.gateway.admission
        for name, documentation, value in (
            ("tether_admission_paused", "1 while model calls are paused", int(admission.paused)),
            ("tether_calls_in_flight", "Model calls being served", admission.in_flight),
            ("tether_calls_waiting", "Model calls waiting for admission (queue depth)", admission.waiting),
        ):
            yield GaugeMetricFamily(name, documentation, value=value)
        versions = GaugeMetricFamily(
            "tether_policy_version", "Policy version per upstream", labels=["upstream"]
        )
        for name, upstream in sorted(self.gateway.upstreams.items()):
            if upstream.policy_version is not None:
                versions.add_metric([name], upstream.policy_version)
        yield versions
        rollouts = GaugeMetricFamily("tether_rollouts", "Rollouts in the store by status", labels=["status"])
        for status in RolloutStatus:
            page = self.gateway.store.query_rollouts(RolloutQuery(status=status, limit=0, count_cap=2**62))
            rollouts.add_metric([status.value], page.total)
        yield rollouts


def create_metrics_router(gateway: Scraped) -> APIRouter:
    gateway.metrics.read_at_scrape(gateway)
    router = APIRouter(tags=["meta"])

    @router.get("/metrics", include_in_schema=False)
    async def metrics(request: Request) -> Response:
        if not gateway.auth.can_read(request_token(request.headers)):
            raise unauthorized("/metrics needs the admin or the viewer token ('Authorization: Bearer ...')")
        body = await asyncio.to_thread(generate_latest, gateway.metrics.registry)
        return Response(body, headers={"content-type": CONTENT_TYPE_LATEST})

    return router
