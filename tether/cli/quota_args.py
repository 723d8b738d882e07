"""The options that bound what one agent may send with its rollout token (`rollout`, `train`, `serve`,
`optimize-prompt`): one request's body, and the spans of its attempt (`tether.limits.AgentQuota`)."""

from __future__ import annotations

import argparse

from tether.limits import (
    DEFAULT_MAX_ATTEMPT_SPAN_BYTES,
    DEFAULT_MAX_ATTEMPT_SPANS,
    MAX_BODY_BYTES,
    MIB,
    REQUEST_OPTION,
    SPAN_BYTES_OPTION,
    SPANS_OPTION,
    AgentQuota,
)


def _positive_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _positive_mib(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of MiB, got {text!r}") from None
    if not value * MIB >= 1 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of MiB, got {text}")
    return value


def add_agent_quota_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "agent quotas",
        "what one agent may send with its rollout token; its model calls the gateway records are never "
        "counted against them. Refused requests get a 413 (one request too large) or a 429 (the "
        "attempt's quota is used up), naming the option that raises the limit",
    )
    group.add_argument(
        REQUEST_OPTION,
        dest="max_request_mb",
        type=_positive_mib,
        default=MAX_BODY_BYTES / MIB,
        metavar="MIB",
        help="refuse (413) a request body larger than this: a model call, a store API request, an OTLP "
        "export (compressed or not)",
    )
    group.add_argument(
        SPANS_OPTION,
        dest="max_spans_per_attempt",
        type=_positive_count,
        default=DEFAULT_MAX_ATTEMPT_SPANS,
        metavar="N",
        help="spans an attempt's agent may send (OTLP, the tracer, POST /store/spans); past it they are "
        "refused (429) and the rest of the attempt runs as usual",
    )
    group.add_argument(
        SPAN_BYTES_OPTION,
        dest="max_span_mb_per_attempt",
        type=_positive_mib,
        default=DEFAULT_MAX_ATTEMPT_SPAN_BYTES / MIB,
        metavar="MIB",
        help="MiB of spans (names, attributes, events) an attempt's agent may send; past it they are "
        "refused (429). The runner reads an attempt's spans back whole to score it: this bounds that",
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
