"""Tokens: one admin token per project, and a token per rollout that only that rollout can use.

Rollout tokens are HMACs of the rollout id under the project's secret, so they need no table,
survive restarts, and are checked in constant time. A token stops working when its rollout finishes.

Every server (the gateway, the store API, the OTLP receiver) asks `authenticate` who holds a token, then
`check_live` whether a rollout token's rollout still runs, and answers an `AuthError` in its own shape.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property
from pathlib import Path

from tether.store.base import NotFound, Store
from tether.store.models import Rollout

ROLLOUT_PREFIX = "tro-"
ADMIN_PREFIX = "tadm-"
VIEWER_PREFIX = "tview-"


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

    def can_read(self, token: str | None) -> bool:
        """The dashboard's check: the admin token or the viewer token."""
        return self.is_admin(token) or self.is_viewer(token)

    def rollout_token(self, rollout_id: str) -> str:
        return f"{ROLLOUT_PREFIX}{rollout_id}.{_sign(self.secret, 'rollout:' + rollout_id)}"

    def rollout_of(self, token: str | None) -> str | None:
        """The rollout id a token is valid for, or None if it is not a valid rollout token."""
        if not token or not token.startswith(ROLLOUT_PREFIX):
            return None
        rollout_id, _, signature = token[len(ROLLOUT_PREFIX) :].rpartition(".")
        expected = _sign(self.secret, "rollout:" + rollout_id)
        if not rollout_id or not hmac.compare_digest(signature.encode(), expected.encode()):
            return None
        return rollout_id


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
    """Who is calling: the admin (rollout_id None) or the holder of one rollout's token."""

    rollout_id: str | None = None

    @property
    def is_admin(self) -> bool:
        return self.rollout_id is None


class Refusal(StrEnum):
    MISSING = "missing"  # no token at all
    INVALID = "invalid"  # not a token of this project
    OTHER_ROLLOUT = "other_rollout"  # a rollout token used on a path that names another rollout
    UNKNOWN_ROLLOUT = "unknown_rollout"
    EXPIRED = "expired"  # its rollout has finished


class AuthError(Exception):
    """Why a caller is refused. Each server answers it in its own error shape."""

    def __init__(self, refusal: Refusal, rollout_id: str | None = None, status: str | None = None) -> None:
        super().__init__(f"{refusal.value}: {rollout_id}" if rollout_id else refusal.value)
        self.refusal = refusal
        self.rollout_id = rollout_id
        self.status = status  # the finished rollout's status, for EXPIRED


def authenticate(authority: TokenAuthority, token: str | None, path_rollout: str | None = None) -> Caller:
    """Who holds `token`: pure, no store read. A rollout token must match the rollout the path names
    (`path_rollout`), when it names one. Whether that rollout is still live is `check_live`'s part."""
    if not token:
        raise AuthError(Refusal.MISSING)
    rollout_id = authority.rollout_of(token)
    if rollout_id is None:
        if authority.is_admin(token):
            return Caller()
        raise AuthError(Refusal.INVALID)
    if path_rollout is not None and path_rollout != rollout_id:
        raise AuthError(Refusal.OTHER_ROLLOUT, path_rollout)
    return Caller(rollout_id)


def check_live(rollout_id: str, rollout: Rollout | None) -> Rollout:
    """The rollout a token names, as read from the store (None: not there), if its token still works.
    The read is the caller's, so that a server on an event loop can make it off the loop, or cache it."""
    if rollout is None:
        raise AuthError(Refusal.UNKNOWN_ROLLOUT, rollout_id)
    if rollout.status.finished:
        raise AuthError(Refusal.EXPIRED, rollout_id, rollout.status.value)
    return rollout


def request_token(headers: Mapping[str, str]) -> str | None:
    """The API key of a request: a bearer token, or Anthropic's `x-api-key` header."""
    return bearer_token(headers.get("authorization")) or headers.get("x-api-key")


def find_rollout(store: Store, rollout_id: str) -> Rollout | None:
    """The rollout, or None if the store has none of that id (a blocking read)."""
    try:
        return store.get_rollout(rollout_id)
    except NotFound:
        return None
