"""Reward events: an agent posts its own verdict on its rollout (`POST /rollouts/{id}/rewards`).

With a rollout token the reward is the agent's, whatever the event claims: the server sets its source,
time and primacy (`tether.store.provenance.agent_reward`). The admin's events are kept as sent: they may
name a `source`, a `time` and whether the reward is `primary` (or `?primary=1`)."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request

from tether.gateway.app import Gateway
from tether.gateway.errors import GatewayError
from tether.store.auth import request_token
from tether.store.provenance import DEFAULT_REWARD_NAME, agent_reward
from tether.store.records import Reward, now

EVENT_PATHS = ("/rollouts/{rollout_id}", "/rollouts/{rollout_id}/rewards")
TRUE_FLAGS = frozenset({"1", "true", "yes", "on"})


def event_data(body: dict[str, Any]) -> dict[str, Any]:
    """The reward's fields: the body, or its `data` when it is a `{"event_type": "reward"}` event."""
    nested = body.get("data")
    return nested if body.get("event_type") == "reward" and isinstance(nested, dict) else body


def reward_from_event(body: dict[str, Any]) -> tuple[float, str, str | None]:
    """Accepts `{"value": 1}`, `{"reward": 1}` and `{"event_type": "reward", "data": {"value": 1}}`."""
    data = event_data(body)
    value = data.get("value", data.get("reward"))
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise GatewayError(400, "a reward event needs a numeric 'value' (or 'reward')", param="value")
    name = data.get("name", DEFAULT_REWARD_NAME)
    span_id = data.get("span_id")
    if not isinstance(name, str) or not name or (span_id is not None and not isinstance(span_id, str)):
        raise GatewayError(400, "'name' and 'span_id' must be strings", param="name")
    return float(value), name, span_id


def as_sent(reward: Reward, data: dict[str, Any], primary_flag: str | None) -> Reward:
    """An admin's reward with the source, time and primacy its event names."""
    source, time, primary = data.get("source", reward.source), data.get("time"), data.get("primary")
    if not isinstance(source, str) or not source:
        raise GatewayError(400, "'source' must be a non-empty string", param="source")
    if time is not None and (isinstance(time, bool) or not isinstance(time, int | float) or time != time):
        raise GatewayError(400, "'time' must be a number (seconds since the epoch)", param="time")
    if primary is not None and not isinstance(primary, bool):
        raise GatewayError(400, "'primary' must be a boolean", param="primary")
    if primary is None:
        flagged = primary_flag is not None and primary_flag.lower() in TRUE_FLAGS
        primary = reward.name == DEFAULT_REWARD_NAME or flagged
    return reward.model_copy(
        update={"source": source, "time": now() if time is None else float(time), "primary": primary}
    )


def create_event_router(gateway: Gateway) -> APIRouter:
    router = APIRouter(tags=["events"])

    async def post_reward(request: Request, rollout_id: str) -> dict[str, Any]:
        token = request_token(request.headers)
        ctx = await gateway.authorize(token, request.headers.get("x-tether-agent"), rollout_id, None)
        body = await gateway.read_body(request)
        value, name, span_id = reward_from_event(body)
        reward = Reward(
            rollout_id=ctx.rollout_id, attempt=ctx.attempt, value=value, name=name, span_id=span_id
        )
        if gateway.auth.is_admin(token):
            reward = as_sent(reward, event_data(body), request.query_params.get("primary"))
        else:
            reward = agent_reward(reward)
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
