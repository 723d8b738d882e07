"""The gateway: an OpenAI-compatible proxy that ties every model call to its rollout and records it."""

from tether.gateway.app import Gateway, GatewayConfig, create_gateway_app
from tether.gateway.errors import GatewayError, UpstreamError
from tether.gateway.upstreams import EngineUpstream, HTTPUpstream, HTTPUpstreamConfig

__all__ = [
    "EngineUpstream",
    "Gateway",
    "GatewayConfig",
    "GatewayError",
    "HTTPUpstream",
    "HTTPUpstreamConfig",
    "UpstreamError",
    "create_gateway_app",
]
