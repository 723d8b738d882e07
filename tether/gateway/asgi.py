"""The gateway's ASGI app: FastAPI for every route, with the model calls (the hot path) served in front of
its middleware and router. They need neither, and skipping them is most of the gateway's own time per
call. FastAPI still documents them in its OpenAPI schema."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from starlette.types import Receive, Scope, Send

from tether.gateway.app import CALL_KINDS, CALL_PATH, CALL_PREFIXES, CALL_ROUTES, CallRoute, Gateway


class GatewayApp(FastAPI):
    gateway: Gateway

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            match = CALL_PATH.fullmatch(self._route_path(scope))
            if match is not None:
                rollout_id, attempt, path = match.groups()
                number = None if attempt is None else int(attempt)
                await self.gateway.serve_call(scope, receive, send, CALL_KINDS[path], rollout_id, number)
                return
        await super().__call__(scope, receive, send)

    def _route_path(self, scope: Scope) -> str:
        """The path below the root path the app is served under (behind a proxy, or mounted), as
        Starlette's router matches it."""
        path: str = scope["path"]
        root: str = scope.get("root_path") or self.root_path
        if root and path.startswith(root + "/"):
            return path[len(root) :]
        return path

    def openapi(self) -> dict[str, Any]:
        documented = self.openapi_schema is not None
        schema = super().openapi()
        if not documented:
            schema["paths"] = {**_call_paths(), **schema["paths"]}
        return schema


def _call_paths() -> dict[str, Any]:
    """The OpenAPI path items of the model-call routes, which FastAPI's router does not serve."""
    return {
        prefix + route.path: {"post": _call_operation(prefix, route)}
        for prefix in CALL_PREFIXES
        for route in CALL_ROUTES
    }


def _call_operation(prefix: str, route: CallRoute) -> dict[str, Any]:
    parameters = [
        {"name": name, "in": "path", "required": True, "schema": {"type": type_}}
        for name, type_ in (("rollout_id", "string"), ("attempt", "integer"))
        if "{" + name + "}" in prefix
    ]
    operation = prefix.strip("/").replace("{", "").replace("}", "").replace("/", "_") + route.path
    return {
        "tags": [route.tag],
        "summary": route.summary,
        "operationId": operation.replace("/", "_") + "_post",
        "parameters": parameters,
        "responses": {
            "200": {"description": "The answer, as JSON or (with `stream`) server-sent events"},
            "default": {"description": "An error, in the API's own shape"},
        },
    }
