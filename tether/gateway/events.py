"""Reward events: an agent posts its own verdict on its rollout (`POST /rollouts/{id}/rewards`)."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request

from tether.gateway.app import Gateway, request_token
from tether.gateway.errors import GatewayError
from tether.store.models import Reward

EVENT_PATHS = ("/rollouts/{rollout_id}", "/rollouts/{rollout_id}/rewards")


def reward_from_event(body: dict[str, Any]) -> tuple[float, str, str | None]:
    """Accepts `{"value": 1}`, `{"reward": 1}` and `{"event_type": "reward", "data": {"value": 1}}`."""
    nested = body.get("data")
    data: dict[str, Any] = nested if body.get("event_type") == "reward" and isinstance(nested, dict) else body
    value = data.get("value", data.get("reward"))
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise GatewayError(400, "a reward event needs a numeric 'value' (or 'reward')", param="value")
    name = data.get("name", "reward")
    span_id = data.get("span_id")
    if not isinstance(name, str) or not name or (span_id is not None and not isinstance(span_id, str)):
        raise GatewayError(400, "'name' and 'span_id' must be strings", param="name")
    return float(value), name, span_id


def create_event_router(gateway: Gateway) -> APIRouter:
    router = APIRouter(tags=["events"])

    async def post_reward(request: Request, rollout_id: str) -> dict[str, Any]:
        agent = request.headers.get("x-tether-agent")
        ctx = await gateway.authorize(request_token(request), agent, rollout_id, None)
        value, name, span_id = reward_from_event(await gateway.read_body(request))
        primary = name == "reward" or bool(request.query_params.get("primary"))
        reward = Reward(
            rollout_id=ctx.rollout_id,
            attempt=ctx.attempt,
            value=value,
            name=name,
            span_id=span_id,
            source="agent",
            primary=primary,
        )
        await asyncio.to_thread(gateway.store.add_rewards, [reward])
        return {"recorded": True, "rollout_id": ctx.rollout_id, "name": name, "value": value}

    for path in EVENT_PATHS:
        router.add_api_route(
            path,
            post_reward,
            methods=["POST"],
            summary="Record a reward for this rollout (the agent's own verdict)",
        )
    return router
