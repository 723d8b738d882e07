"""OpenAI-style errors: every failure the gateway reports has the shape agents already parse."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response


class GatewayError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.code = code
        self.param = param
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> Response:
        return Response(
            orjson.dumps(self.body()),
            status_code=self.status,
            media_type="application/json",
            headers=self.headers,
        )


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
