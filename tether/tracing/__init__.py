"""Tracing for agents: an OTLP/HTTP receiver for OpenTelemetry spans, and a light built-in tracer.

`create_otlp_router` is imported on first use, so that agents importing the tracer do not load FastAPI
and protobuf.
"""

from typing import TYPE_CHECKING, Any

from tether.tracing.tracer import SpanHandle, configure, current_span, emit_reward, flush, span, traced

if TYPE_CHECKING:
    from tether.tracing.otlp import create_otlp_router

__all__ = [
    "SpanHandle",
    "configure",
    "create_otlp_router",
    "current_span",
    "emit_reward",
    "flush",
    "span",
    "traced",
]


def __getattr__(name: str) -> Any:
    if name == "create_otlp_router":
        from tether.tracing.otlp import create_otlp_router

        return create_otlp_router
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
