"""The gateway: an OpenAI-compatible proxy that ties every model call to its rollout and records it.
`tether.compose.create_app` serves it."""

from tether.gateway.app import Gateway, GatewayConfig
from tether.gateway.errors import GatewayError, UpstreamError
from tether.gateway.upstreams import (
    CallKind,
    CallRecord,
    ChoiceRecord,
    HTTPUpstream,
    HTTPUpstreamConfig,
    Upstream,
)

__all__ = [
    "CallKind",
    "CallRecord",
    "ChoiceRecord",
    "Gateway",
    "GatewayConfig",
    "GatewayError",
    "HTTPUpstream",
    "HTTPUpstreamConfig",
    "Upstream",
    "UpstreamError",
]
