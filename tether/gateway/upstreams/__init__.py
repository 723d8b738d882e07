"""Upstreams: where a model call goes: any OpenAI-compatible server, or a policy server's own (the built-in
engine's is `tether.policy_server.builtin.EngineUpstream`).

Every upstream returns, besides the OpenAI response for the agent, a `CallRecord` with the exact token
ids and logprobs it produced. When an upstream cannot give token ids (a hosted API), they are recorded
as absent: the gateway never re-tokenizes text to invent them.
"""

from tether.gateway.upstreams.base import CallKind, CallRecord, ChoiceRecord, Upstream
from tether.gateway.upstreams.http import HTTPUpstream, HTTPUpstreamConfig
from tether.gateway.upstreams.replicas import ReplicaUpstream
from tether.gateway.upstreams.sse import StreamAborted, record_of_events, sse

__all__ = [
    "CallKind",
    "CallRecord",
    "ChoiceRecord",
    "HTTPUpstream",
    "HTTPUpstreamConfig",
    "ReplicaUpstream",
    "StreamAborted",
    "Upstream",
    "record_of_events",
    "sse",
]
