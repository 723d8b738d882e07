"""Tokens: one admin token per project, and a token per attempt of a rollout that only that attempt can use.

An attempt's token (the agent's `OPENAI_API_KEY`) is `tro-{rollout id}.{attempt}.{signature}`, the
signature an HMAC of the rollout id and the attempt number under the project's secret: it needs no table,
survives restarts and is checked in constant time. Agents should treat it as opaque. The signature never
expires; what makes a token stop working is `check_live`: it is accepted only while its attempt is the
rollout's current, running one. So it dies when its attempt ends (finished, failed, timed out, cancelled,
abandoned), and a retry's new attempt gets a token of its own: whatever a dead attempt left running
(a background child of the agent) can no longer call, nor record anything, as the rollout, in this run or
in any later one. Rollout ids are random and attempt numbers only grow, so no later attempt is ever the
one an old token names.

Every server (the gateway, the store API, the OTLP receiver) asks `authenticate` who holds a token, then
`check_live` whether a rollout token's attempt is still live, and answers an `AuthError` in its own shape.
What an attempt's token records is recorded as that attempt, whatever the request says.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property
from pathlib import Path

from tether.store.base import NotFound, Store
from tether.store.records import Rollout, RolloutStatus

ROLLOUT_PREFIX = "tro-"
ADMIN_PREFIX = "tadm-"
VIEWER_PREFIX = "tview-"
DEPLOY_PREFIX = "tdep-"
REWARD_PREFIX = "trwd-"
# The attempt number as a token spells it: canonical decimal (one spelling per number, ASCII digits only).
_ATTEMPT = re.compile(r"[1-9][0-9]{0,17}")


def _sign(secret: bytes, message: str) -> str:
    return hmac.new(secret, message.encode(), hashlib.sha256).hexdigest()[:40]


@dataclass(frozen=True)
class TokenAuthority:
    secret: bytes

    @classmethod
    def generate(cls) -> TokenAuthority:
        return cls(secrets.token_bytes(32))

    @classmethod
    def load_or_create(cls, path: Path) -> TokenAuthority:
        """Read the project secret from `path`, creating it (readable by the owner only) if absent."""
        if path.exists():
            return cls(bytes.fromhex(path.read_text().strip()))
        path.parent.mkdir(parents=True, exist_ok=True)
        secret = secrets.token_bytes(32)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secret.hex())
        return cls(secret)

    @cached_property  # the hot path checks every call's token against it
    def admin_token(self) -> str:
        return ADMIN_PREFIX + _sign(self.secret, "admin")

    def is_admin(self, token: str | None) -> bool:
        return token is not None and hmac.compare_digest(token.encode(), self.admin_token.encode())

    @cached_property
    def viewer_token(self) -> str:
        """Read-only access to the dashboard (`/ui`) and `/metrics`; no other route takes it."""
        return VIEWER_PREFIX + _sign(self.secret, "viewer")

    def is_viewer(self, token: str | None) -> bool:
        return token is not None and hmac.compare_digest(token.encode(), self.viewer_token.encode())

    @cached_property
    def deploy_token(self) -> str:
        """The deployment's key: opens and ends named sessions (`/sessions/*`); no other route takes it."""
        return DEPLOY_PREFIX + _sign(self.secret, "deploy")

    def is_deploy(self, token: str | None) -> bool:
        return token is not None and hmac.compare_digest(token.encode(), self.deploy_token.encode())

    @cached_property
    def reward_token(self) -> str:
        """The key of whoever reports outcomes later (a feedback button, a CI hook, a nightly judge): posts
        rewards for sessions (`/sessions/NAME/rewards`); no other route takes it."""
        return REWARD_PREFIX + _sign(self.secret, "reward")

    def is_reward(self, token: str | None) -> bool:
        return token is not None and hmac.compare_digest(token.encode(), self.reward_token.encode())

    def can_read(self, token: str | None) -> bool:
        """The dashboard's check: the admin token or the viewer token."""
        return self.is_admin(token) or self.is_viewer(token)

    def rollout_token(self, rollout_id: str, attempt: int) -> str:
        """The token of one attempt of a rollout (see the module docstring for its format)."""
        if not _ATTEMPT.fullmatch(str(attempt)):
            raise ValueError(f"an attempt number starts at 1, not {attempt!r}")
        signature = _sign(self.secret, _attempt_message(rollout_id, attempt))
        return f"{ROLLOUT_PREFIX}{rollout_id}.{attempt}.{signature}"

    def attempt_of(self, token: str | None) -> AttemptGrant | None:
        """The attempt a token was issued to, or None if it is not a valid rollout token."""
        if not token or not token.startswith(ROLLOUT_PREFIX):
            return None
        rest, _, signature = token[len(ROLLOUT_PREFIX) :].rpartition(".")
        rollout_id, _, number = rest.rpartition(".")  # ids may contain dots; the number never does
        if not rollout_id or not _ATTEMPT.fullmatch(number):
            return None
        expected = _sign(self.secret, _attempt_message(rollout_id, int(number)))
        if not hmac.compare_digest(signature.encode(), expected.encode()):
            return None
        return AttemptGrant(rollout_id, int(number))


@dataclass(frozen=True)
class AttemptGrant:
    """What a rollout token grants: calls as this attempt of this rollout, while it is live."""

    rollout_id: str
    attempt: int


def _attempt_message(rollout_id: str, attempt: int) -> str:
    # Unambiguous: the number is the part after the last '#'. Its own label, so no signature of another
    # kind of message (the attempt-less rollout tokens of old, "rollout:ID") is valid here.
    return f"rollout-attempt:{rollout_id}#{attempt}"


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer ...` header, or None."""
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


# -- who is calling ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Caller:
    """Who is calling: the admin (rollout_id None) or the holder of one attempt's token."""

    rollout_id: str | None = None
    attempt: int | None = None  # the token's attempt: what the caller's spans and rewards are recorded as

    @property
    def is_admin(self) -> bool:
        return self.rollout_id is None

    def recorded_attempt(self, claimed: int | None, current: int | None) -> int | None:
        """The attempt what this caller sends is recorded as: a token's own; for the admin, the one the
        request names (`claimed`), else the rollout's `current` one."""
        if self.attempt is not None:
            return self.attempt
        return claimed if claimed is not None else current


class Refusal(StrEnum):
    MISSING = "missing"  # no token at all
    INVALID = "invalid"  # not a token of this project
    OTHER_ROLLOUT = "other_rollout"  # a rollout token used on a path that names another rollout
    OTHER_ATTEMPT = "other_attempt"  # ... or on a path that names another attempt of its rollout
    UNKNOWN_ROLLOUT = "unknown_rollout"
    EXPIRED = "expired"  # its rollout has finished
    ATTEMPT_OVER = "attempt_over"  # its attempt ended; the rollout was retried or awaits a retry
    NOT_STARTED = "not_started"  # its attempt has not been opened (yet)


# A valid token whose attempt is not live (finished, over, or not yet started): it no longer works.
DEAD = frozenset({Refusal.EXPIRED, Refusal.ATTEMPT_OVER, Refusal.NOT_STARTED})


class AuthError(Exception):
    """Why a caller is refused. Each server answers it in its own error shape; `reason` says it in words."""

    def __init__(
        self,
        refusal: Refusal,
        rollout_id: str | None = None,
        status: str | None = None,
        attempt: int | None = None,
        current: int | None = None,
    ) -> None:
        super().__init__(f"{refusal.value}: {rollout_id}" if rollout_id else refusal.value)
        self.refusal = refusal
        self.rollout_id = rollout_id
        self.status = status  # the rollout's status, for EXPIRED and ATTEMPT_OVER
        self.attempt = attempt  # the token's attempt
        self.current = current  # the rollout's current attempt

    @property
    def reason(self) -> str:
        """Why a dead or misdirected rollout token is refused, in a sentence (for the error message)."""
        rollout, attempt, current = self.rollout_id, self.attempt, self.current
        if self.refusal is Refusal.ATTEMPT_OVER:
            over = f"attempt {attempt} of rollout {rollout} is over"
            if current is not None and attempt is not None and current > attempt:
                return f"{over}: a retry (attempt {current}) replaced it"
            return f"{over}: it ended and the rollout is {self.status}"
        if self.refusal is Refusal.EXPIRED:
            return f"rollout {rollout} finished ({self.status}): its tokens no longer work"
        if self.refusal is Refusal.NOT_STARTED:
            return f"attempt {attempt} of rollout {rollout} has not started (current: {current})"
        if self.refusal is Refusal.OTHER_ATTEMPT:
            return f"this token belongs to attempt {attempt} of rollout {rollout}, not attempt {current}"
        if self.refusal is Refusal.OTHER_ROLLOUT:
            return f"this token belongs to another rollout, not {rollout!r}"
        if self.refusal is Refusal.UNKNOWN_ROLLOUT:
            return f"unknown rollout {rollout!r}"
        if self.refusal is Refusal.MISSING:
            return "missing token"
        return "invalid token: not a token issued by this Tether server"


def authenticate(
    authority: TokenAuthority,
    token: str | None,
    path_rollout: str | None = None,
    path_attempt: int | None = None,
) -> Caller:
    """Who holds `token`: pure, no store read. A rollout token must match the rollout (and attempt) the
    path names, when it names one. Whether its attempt is still live is `check_live`'s part."""
    if not token:
        raise AuthError(Refusal.MISSING)
    grant = authority.attempt_of(token)
    if grant is None:
        if authority.is_admin(token):
            return Caller()
        raise AuthError(Refusal.INVALID)
    if path_rollout is not None and path_rollout != grant.rollout_id:
        raise AuthError(Refusal.OTHER_ROLLOUT, path_rollout)
    if path_attempt is not None and path_attempt != grant.attempt:
        raise AuthError(Refusal.OTHER_ATTEMPT, grant.rollout_id, attempt=grant.attempt, current=path_attempt)
    return Caller(grant.rollout_id, grant.attempt)


def check_live(rollout_id: str, rollout: Rollout | None, attempt: int | None = None) -> Rollout:
    """The rollout a token names, as read from the store (None: not there), if its token still works:
    for an attempt's token, while that attempt is the rollout's current one and running; with `attempt`
    None (the admin naming a rollout), while the rollout is unfinished. The read is the caller's, so
    that a server on an event loop can make it off the loop, or cache it.

    The rollout row is the attempt record here: a claim opens attempt N and sets the rollout running
    with `attempt_count` N in one transaction, and every close of N moves the rollout off running (to
    queued for a retry, or finished) in another; `tether.store.lifecycle` holds the same rule."""
    if rollout is None:
        raise AuthError(Refusal.UNKNOWN_ROLLOUT, rollout_id)
    status, current = rollout.status.value, rollout.attempt_count
    if attempt is not None and attempt < current:
        raise AuthError(Refusal.ATTEMPT_OVER, rollout_id, status, attempt, current)
    if rollout.status.finished:
        raise AuthError(Refusal.EXPIRED, rollout_id, status, attempt, current)
    if attempt is None:
        return rollout
    if attempt > current:
        raise AuthError(Refusal.NOT_STARTED, rollout_id, status, attempt, current)
    if rollout.status != RolloutStatus.running:
        raise AuthError(Refusal.ATTEMPT_OVER, rollout_id, status, attempt, current)
    return rollout


def may_be_stale(error: AuthError) -> bool:
    """Whether a refusal made on a cached rollout could be the cache's: only a token of an attempt newer
    than the cached copy knows (opened by another process since). Every other refusal is final: attempts
    only grow, and a finished rollout never runs again."""
    return error.refusal is Refusal.NOT_STARTED


def request_token(headers: Mapping[str, str]) -> str | None:
    """The API key of a request: a bearer token, or Anthropic's `x-api-key` header."""
    return bearer_token(headers.get("authorization")) or headers.get("x-api-key")


def find_rollout(store: Store, rollout_id: str) -> Rollout | None:
    """The rollout, or None if the store has none of that id (a blocking read)."""
    try:
        return store.get_rollout(rollout_id)
    except NotFound:
        return None
