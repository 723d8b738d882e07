"""The model API's routes besides the calls: the model list, and an OpenAI-style answer for every
endpoint the gateway does not serve."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, FastAPI, Request
from starlette.responses import Response

from tether.contracts import DEFAULT_ROUTE
from tether.gateway.app import CALL_PREFIXES, CALL_ROUTES, Gateway
from tether.gateway.errors import GatewayError
from tether.store.auth import request_token


def create_models_router(gateway: Gateway) -> APIRouter:
    router = APIRouter(tags=["openai"])

    async def models(request: Request, rollout_id: str | None = None) -> dict[str, Any]:
        token = request_token(request.headers)
        if not gateway.auth.is_admin(token):
            await gateway.live_rollout(token, rollout_id)  # a rollout token: its own live attempt only
        names = sorted(
            {alias for alias in gateway.config.routes if alias != DEFAULT_ROUTE} | set(gateway.upstreams)
        )
        return {
            "object": "list",
            "data": [{"id": name, "object": "model", "created": 0, "owned_by": "tether"} for name in names],
        }

    for prefix in CALL_PREFIXES:
        router.add_api_route(
            prefix + "/models", models, methods=["GET"], summary="Models the route map serves"
        )
    return router


def add_unsupported_api_routes(app: FastAPI) -> None:
    """Any other path under a model-API prefix (embeddings, audio, files, ...): an OpenAI-style 404 that
    names the endpoint and what is served, instead of a bare "Not Found". Add them after every route."""
    paths = [route.path for route in CALL_ROUTES] + ["/models", "/traces"]
    served, known = ", ".join(path.lstrip("/") for path in paths), set(paths)

    async def unsupported(request: Request, endpoint: str) -> Response:
        if "/" + endpoint in known:
            raise GatewayError(405, f"{request.method} is not allowed on {request.url.path}")
        raise GatewayError(
            404,
            f"{request.method} {request.url.path}: this endpoint is not supported by the Tether gateway "
            f"(it serves {served} under /v1)",
            code="unsupported_endpoint",
        )

    for prefix in CALL_PREFIXES:
        app.add_api_route(
            prefix + "/{endpoint:path}",
            unsupported,
            methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
            include_in_schema=False,
        )
