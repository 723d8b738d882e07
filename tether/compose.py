"""The composition root: one ASGI app from a gateway. The model calls (served in front of FastAPI), the
model list, reward events, named sessions and their later rewards, the admin API, the store API and the
OTLP receiver, with each part's errors in its own shape, `/healthz`, Prometheus `/metrics` and the
dashboard at `/ui`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from starlette.responses import Response

from tether.dashboard import DashboardConfig, install_dashboard
from tether.gateway.admin import create_admin_router
from tether.gateway.app import Gateway
from tether.gateway.asgi import GatewayApp
from tether.gateway.errors import GatewayError
from tether.gateway.events import create_event_router
from tether.gateway.metrics import create_metrics_router
from tether.gateway.model_api import add_unsupported_api_routes, create_models_router
from tether.gateway.sessions import SessionBook, create_session_router
from tether.store.server import create_store_router, install_store_error_handlers
from tether.tracing.otlp import create_otlp_router


def create_app(
    gateway: Gateway, dashboard: DashboardConfig | None = None, sessions: SessionBook | None = None
) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await gateway.aclose()

    app = GatewayApp(
        lifespan=lifespan,
        title="Tether gateway",
        description="OpenAI-compatible gateway that records every model call of a rollout, with token ids.",
        version="0.1.0",
    )
    app.gateway = gateway
    app.state.gateway = gateway

    async def gateway_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, GatewayError)
        return exc.response()

    app.add_exception_handler(GatewayError, gateway_error)
    app.include_router(create_models_router(gateway))
    app.include_router(create_event_router(gateway))
    app.include_router(create_admin_router(gateway))
    app.include_router(create_session_router(sessions or SessionBook(gateway)))
    # One body cap and one span quota for every route an agent sends spans to.
    store, auth, cap, ledger = gateway.store, gateway.auth, gateway.config.max_body_bytes, gateway.span_ledger
    app.include_router(create_store_router(store, auth, max_body_bytes=cap, spans=ledger))
    app.include_router(create_otlp_router(store, auth, max_body_bytes=cap, spans=ledger))
    app.include_router(create_metrics_router(gateway))
    install_dashboard(app, gateway.store, gateway.auth, dashboard or DashboardConfig())
    install_store_error_handlers(app)
    add_unsupported_api_routes(app)  # after every route: they match any path under a model-API prefix

    @app.get("/healthz", tags=["meta"])
    async def healthz() -> dict[str, Any]:
        return {"ok": True, "upstreams": sorted(gateway.upstreams), "paused": gateway.admission.paused}

    return app


__all__ = ["create_app"]
