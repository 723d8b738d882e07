"""OpenAI-style errors: every failure the gateway reports has the shape agents already parse."""

from __future__ import annotations

from typing import Any

from tether.errors import APIError
from tether.store.auth import AuthError, Refusal


class GatewayError(APIError):
    """An error the gateway answers a model call or admin request with."""


class UpstreamError(GatewayError):
    """The upstream could not answer (after retries), or answered with an error of its own."""

    def __init__(
        self, status: int, message: str, *, upstream_body: Any = None, code: str | None = None
    ) -> None:
        error_type = "upstream_error" if status >= 500 else "invalid_request_error"
        super().__init__(status, message, type=error_type, code=code or "upstream_error")
        self.upstream_body = upstream_body


def unauthorized(message: str) -> GatewayError:
    return GatewayError(401, message, type="authentication_error", code="invalid_api_key")


def forbidden(message: str) -> GatewayError:
    return GatewayError(403, message, type="permission_error", code="forbidden")


def refused(error: AuthError) -> GatewayError:
    """A model call's or reward event's refused API key, as agents' SDKs expect it."""
    refusal, rollout_id = error.refusal, error.rollout_id
    if refusal is Refusal.MISSING:
        return unauthorized("missing API key: send the rollout token as 'Authorization: Bearer <token>'")
    if refusal is Refusal.OTHER_ROLLOUT:
        return forbidden(f"this API key belongs to another rollout, not {rollout_id!r}")
    if refusal is Refusal.UNKNOWN_ROLLOUT:
        return GatewayError(404, f"unknown rollout {rollout_id!r}", code="rollout_not_found")
    if refusal is Refusal.OTHER_ATTEMPT:
        return forbidden(error.reason)
    if refusal in (Refusal.EXPIRED, Refusal.ATTEMPT_OVER, Refusal.NOT_STARTED):
        # A valid token whose attempt is not live: 401, as for any key that no longer works.
        code = "rollout_finished" if refusal is Refusal.EXPIRED else refusal.value
        return GatewayError(401, f"API key expired: {error.reason}", type="authentication_error", code=code)
    return unauthorized("invalid API key: not a token issued by this Tether server")
