"""The admin API (`/admin/*`, admin token only): pause and resume model calls around a weight update,
register upstreams and routes, open sessions and hand out a rollout's credentials."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, Field

from tether.gateway.app import Gateway
from tether.gateway.errors import GatewayError, forbidden, unauthorized
from tether.gateway.upstreams import HTTPUpstream, HTTPUpstreamConfig
from tether.store.auth import AuthError, authenticate, request_token


class PauseRequest(BaseModel):
    drain: bool = True
    timeout_s: float = Field(default=600.0, ge=0)


class RoutesUpdate(BaseModel):
    routes: dict[str, str]


class UpstreamRegistration(BaseModel):
    name: str = Field(min_length=1)
    base_url: str = Field(min_length=1)
    api_key: str | None = None
    model: str | None = None
    request_token_ids: bool = False
    request_logprobs: bool = True
    timeout_s: float = Field(default=600.0, gt=0)
    max_retries: int = Field(default=3, ge=0, le=10)
    policy_version: int | None = None


class SessionRequest(BaseModel):
    input: dict[str, Any] = Field(default_factory=dict)


def create_admin_router(gateway: Gateway) -> APIRouter:
    # A dependency, so the token is checked before the body is validated (no hints to a caller without one).
    def admin(request: Request) -> None:
        try:
            caller = authenticate(gateway.auth, request_token(request.headers))
        except AuthError:
            raise unauthorized(
                "this route needs the admin token ('Authorization: Bearer <admin token>')"
            ) from None
        if not caller.is_admin:
            raise forbidden("this route needs the admin token; a rollout token cannot use it")

    router = APIRouter(prefix="/admin", tags=["admin"], dependencies=[Depends(admin)])

    @router.post("/pause")
    async def pause(body: PauseRequest | None = None) -> dict[str, Any]:
        body = body or PauseRequest()
        return await gateway.pause(body.drain, body.timeout_s)

    @router.post("/resume")
    async def resume() -> dict[str, Any]:
        return await gateway.resume()

    @router.get("/status")
    async def status() -> dict[str, Any]:
        return {
            "paused": gateway.admission.paused,
            "in_flight": gateway.admission.in_flight,
            "waiting": gateway.admission.waiting,
            "routes": gateway.config.routes,
            "upstreams": {
                name: {"policy_version": u.policy_version} for name, u in gateway.upstreams.items()
            },
            "recorded_calls": gateway.recorder.recorded,
            "commits": gateway.recorder.batches,
        }

    @router.post("/upstreams")
    async def register_upstream(body: UpstreamRegistration) -> dict[str, Any]:
        old = gateway.upstreams.get(body.name)
        gateway.add_upstream(HTTPUpstream(HTTPUpstreamConfig(**body.model_dump())))
        if old is not None:
            await old.aclose()
        return {"registered": body.name}

    @router.put("/routes")
    async def set_routes(body: RoutesUpdate) -> dict[str, Any]:
        missing = sorted(set(body.routes.values()) - set(gateway.upstreams))
        if missing:
            raise GatewayError(
                400, f"routes name unregistered upstreams: {', '.join(missing)}", param="routes"
            )
        gateway.config.routes = dict(body.routes)
        return {"routes": gateway.config.routes}

    @router.post("/sessions")
    async def open_session(body: SessionRequest | None = None) -> dict[str, str]:
        claim = await asyncio.to_thread(gateway.store.start_session, (body or SessionRequest()).input)
        return gateway.credentials(claim.rollout.id, claim.attempt.number)

    @router.get("/rollouts/{rollout_id}/credentials")
    async def credentials(rollout_id: str) -> dict[str, str]:
        """The current attempt's credentials (a queued rollout's: its first attempt's)."""
        rollout = await gateway.rollouts.get(rollout_id, fresh=True)
        if rollout is None:
            raise GatewayError(404, f"unknown rollout {rollout_id!r}", code="rollout_not_found")
        return gateway.credentials(rollout_id, rollout.attempt_count or 1)

    return router
