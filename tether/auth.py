"""Tokens: one admin token per project, and a token per rollout that only that rollout can use.

Rollout tokens are HMACs of the rollout id under the project's secret, so they need no table,
survive restarts, and are checked in constant time. A token stops working when its rollout finishes
(the gateway and store check the rollout's status).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

ROLLOUT_PREFIX = "tro-"
ADMIN_PREFIX = "tadm-"


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

    @property
    def admin_token(self) -> str:
        return ADMIN_PREFIX + _sign(self.secret, "admin")

    def is_admin(self, token: str | None) -> bool:
        return token is not None and hmac.compare_digest(token.encode(), self.admin_token.encode())

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
