"""Named sessions of a served agent, and the rewards that come later (`tether serve`).

A deployment opens a session per conversation, user or job, under a name it chooses, with the deploy key:

    POST /sessions/open {"session": "user-42.chat-7", "input": {...}}
      -> {"session", "rollout_id", "base_url", "api_key"}

and its agent calls the model with that base URL and key: every call is recorded under the session's
rollout, as a runner's rollout is. Opening the same name again while the session is open gives the same
credentials, so a stateless front end can ask on every turn. A session closes when the deployment ends it
(`POST /sessions/NAME/end`) or after `idle_s` without a model call; a closed session's key stops working
and its name is not opened again (409: name a new session).

Whoever learns the outcome later (a feedback button, a ticket closed, a merge, a nightly judge) posts it
with the reward key, while the session is open or after it closed:

    POST /sessions/NAME/rewards {"thumbs": "up"}
    POST /sessions/NAME/rewards {"value": 0.7, "name": "ticket_closed", "span_id": "...", "by": "helpdesk"}

Each is recorded with who sent it and when (`source` "later:BY", `time`), for the session or for one of
its calls (`span_id`). A session takes at most `max_rewards` of them; past that, 429. Sessions live in the
store under one run per deployment (`sessions` unless `tether serve --sessions-run NAME` names another),
keyed `session:NAME`, so a restarted server finds them all, and `tether train --from-sessions RUN`
trains on that deployment's alone."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, Field

from tether.contracts import Meta
from tether.gateway.app import Gateway
from tether.gateway.errors import GatewayError, forbidden, unauthorized
from tether.gateway.events import reward_from_event
from tether.periodic import Periodic
from tether.store.auth import request_token
from tether.store.records import Reward, Rollout, RolloutQuery, RolloutRequest, RolloutStatus, Task, now

SESSIONS_RUN = "sessions"
SESSION_KEY = "session:"  # a session's task id and key in its run: session:NAME
WORKER = "tether-sessions"
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,199}")
LATER = "later:"  # the source of a reward posted later: later:BY
THUMBS = {"up": 1.0, "down": 0.0}
DEFAULT_FEEDBACK = "feedback"


@dataclass(frozen=True)
class SessionRules:
    idle_s: float = 1800.0  # a session without a model call for this long closes; 0: only when ended
    max_rewards: int = 100  # rewards one session takes
    run: str = SESSIONS_RUN  # the store run that holds them: one per deployment


class OpenRequest(BaseModel):
    session: str = Field(description="the session's name: letters, digits and . _ : @ -, at most 200")
    input: dict[str, Any] = Field(default_factory=dict)


class SessionBook:
    """The named sessions of one store: open, find, end, and close the idle ones."""

    def __init__(
        self,
        gateway: Gateway,
        rules: SessionRules | None = None,
        assign: Callable[[str], dict[str, Any]] | None = None,
    ) -> None:
        self.gateway = gateway
        self.rules = rules or SessionRules()
        self.assign = assign  # a new session's metadata from its name: which policy serves it (a canary)
        self.started = time.time()  # a restarted server counts idleness from its start
        self._lock = threading.Lock()
        self._sweeping = Periodic("tether-sessions", self.sweep)

    @property
    def store(self) -> Any:
        return self.gateway.store

    def open(self, name: str, task_input: dict[str, Any]) -> Rollout:
        """The open session NAME, opened now if it is new; SessionClosed if it has closed."""
        key = SESSION_KEY + _checked(name)
        with self._lock:  # one opener at a time: every queued rollout of the run is a session asked for
            arm = self.assign(name) if self.assign is not None else {}
            request = RolloutRequest(
                task=Task(id=key, input=task_input),
                mode="session",
                run=self.rules.run,
                key=key,
                metadata={**arm, Meta.SESSION: True, "session_name": name},
            )
            rollout = self.store.enqueue([request])[0]
            while rollout.status == RolloutStatus.queued and self.store.claim(WORKER, self.rules.run):
                rollout = self.store.get_rollout(rollout.id)
        if rollout.status != RolloutStatus.running:
            raise GatewayError(
                409,
                f"session {name!r} is closed ({rollout.status.value}): open a session under a new name",
                code="session_closed",
            )
        return rollout

    def find(self, name: str) -> Rollout:
        """The session NAME, open or closed; 404 if there is none."""
        key = SESSION_KEY + _checked(name)
        query = RolloutQuery(run=self.rules.run, task=key, limit=100, oldest_first=True)
        found = next(
            (row.rollout for row in self.store.query_rollouts(query).rows if row.rollout.task_id == key), None
        )
        if found is None:
            raise GatewayError(404, f"unknown session {name!r}", code="session_not_found")
        return found

    def end(self, name: str, reason: str = "ended") -> Rollout:
        """Close the session NAME (its key stops working); ending a closed one changes nothing."""
        return self._close(self.find(name), reason)

    def _close(self, rollout: Rollout, reason: str) -> Rollout:
        if rollout.status != RolloutStatus.running:
            return rollout
        self.gateway.session_calls.pop(rollout.id, None)
        return self.store.update_status(rollout.id, RolloutStatus.succeeded, output=reason)

    def sweep(self) -> list[str]:
        """Close the sessions idle for `idle_s`: the names closed."""
        if self.rules.idle_s <= 0:
            return []
        cutoff = time.time() - self.rules.idle_s
        query = RolloutQuery(
            run=self.rules.run, status=RolloutStatus.running, limit=10_000, oldest_first=True
        )
        closed = []
        for row in self.store.query_rollouts(query).rows:
            rollout = row.rollout
            last = self.gateway.session_calls.get(rollout.id, max(self.started, rollout.started_at or 0.0))
            if last < cutoff:
                self._close(rollout, f"idle for {self.rules.idle_s:g}s")
                closed.append(rollout.task_id.removeprefix(SESSION_KEY))
        return closed

    def start(self, interval_s: float | None = None) -> None:
        """Close idle sessions every `interval_s` (default: a tenth of `idle_s`) on a background thread."""
        if self.rules.idle_s > 0:
            self._sweeping.start(interval_s if interval_s is not None else max(self.rules.idle_s / 10, 0.05))

    def stop(self) -> None:
        self._sweeping.stop(10)

    def later_reward(self, name: str, body: dict[str, Any]) -> Reward:
        """What a later report of session NAME's outcome records (400 if malformed, 429 past the cap)."""
        rollout = self.find(name)
        value, reward_name, span_id = _value_of(body)
        by = body.get("by", "reward-key")
        if not isinstance(by, str) or not by or len(by) > 100:
            raise GatewayError(
                400, "'by' names who reports the outcome: a string of 1-100 characters", param="by"
            )
        if len(self.store.query_rewards(rollout.id)) >= self.rules.max_rewards:
            raise GatewayError(
                429,
                f"session {name!r} has {self.rules.max_rewards} rewards, the most one session takes "
                "(tether serve --max-session-rewards)",
                type="rate_limit_error",
                code="too_many_rewards",
            )
        reward = Reward(
            rollout_id=rollout.id,
            attempt=1,
            value=value,
            name=reward_name,
            span_id=span_id,
            source=LATER + by,
            time=now(),
        )
        self.store.add_rewards([reward])
        return reward


def _checked(name: str) -> str:
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise GatewayError(
            400,
            "a session's name is 1-200 letters, digits and . _ : @ -, starting with a letter or digit",
            param="session",
        )
    return name


def _value_of(body: dict[str, Any]) -> tuple[float, str, str | None]:
    """`{"thumbs": "up"|"down"}` (1 or 0) or a numeric `value`, its name (default "feedback") and call."""
    thumbs = body.get("thumbs")
    if thumbs is not None:
        if thumbs not in THUMBS or "value" in body:
            raise GatewayError(
                400, "'thumbs' is \"up\" or \"down\", and comes without a 'value'", param="thumbs"
            )
        body = {**body, "value": THUMBS[thumbs]}
    return reward_from_event({"name": DEFAULT_FEEDBACK, **body})


def create_session_router(book: SessionBook) -> APIRouter:
    gateway = book.gateway

    def key_check(allowed: str) -> Any:
        def check(request: Request) -> None:
            token = request_token(request.headers)
            auth = gateway.auth
            ok = auth.is_admin(token) or (
                auth.is_deploy(token) if allowed == "deploy" else auth.is_reward(token)
            )
            if ok:
                return
            if token is None or not (
                auth.is_deploy(token) or auth.is_reward(token) or auth.attempt_of(token)
            ):
                raise unauthorized(
                    f"this route needs the {allowed} key ('Authorization: Bearer <{allowed} key>')"
                )
            raise forbidden(f"this route needs the {allowed} key (or the admin token), not this one")

        return Depends(check)

    router = APIRouter(prefix="/sessions", tags=["sessions"])

    @router.post("/open", dependencies=[key_check("deploy")])
    async def open_session(body: OpenRequest) -> dict[str, Any]:
        rollout = await asyncio.to_thread(book.open, body.session, body.input)
        arm: dict[str, Any] = {
            key: rollout.metadata[key] for key in (Meta.ARM, Meta.CANARY) if key in rollout.metadata
        }
        return {"session": body.session, **gateway.credentials(rollout.id, rollout.attempt_count), **arm}

    @router.post("/{name}/end", dependencies=[key_check("deploy")])
    async def end_session(name: str) -> dict[str, Any]:
        rollout = await asyncio.to_thread(book.end, name)
        return {"session": name, "rollout_id": rollout.id, "status": rollout.status.value}

    @router.post("/{name}/rewards", dependencies=[key_check("reward")])
    async def post_reward(name: str, request: Request) -> dict[str, Any]:
        body = await gateway.read_body(request)
        reward = await asyncio.to_thread(book.later_reward, name, body)
        return {
            "recorded": True,
            "session": name,
            "rollout_id": reward.rollout_id,
            "name": reward.name,
            "value": reward.value,
            "source": reward.source,
            "time": reward.time,
        }

    return router
