"""The options that bound what one agent may send with its rollout token (`rollout`, `train`, `serve`,
`optimize-prompt`): one request's body, and the spans of its attempt (`tether.limits.AgentQuota`)."""

from __future__ import annotations

import argparse

from tether.limits import (
    MIB,
    AgentQuota,
)


def agent_quota(args: argparse.Namespace) -> AgentQuota:
    """The quota the options ask for (the defaults where a command has none of them)."""
    default = AgentQuota()
    request_mib = getattr(args, "max_request_mb", None)
    span_mib = getattr(args, "max_span_mb_per_attempt", None)
    return AgentQuota(
        max_request_bytes=default.max_request_bytes if request_mib is None else int(request_mib * MIB),
        max_spans=getattr(args, "max_spans_per_attempt", None) or default.max_spans,
        max_span_bytes=default.max_span_bytes if span_mib is None else int(span_mib * MIB),
    )
