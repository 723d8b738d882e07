"""Policy servers: what serves the policy being trained, behind one protocol (`base.PolicyServer`).

    server = open_policy_server("builtin", PolicyServerOptions(model="smollm2-135m"))

A server is a module with a factory, registered here by kind: adding one (vLLM, say) is a new module
plus one `register` line below. The trainer's loop knows only the protocol and this registry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tether.policy_server.base import PolicyServer, PolicyWeights, WeightsKind
from tether.registry import Registry


@dataclass(frozen=True)
class PolicyServerOptions:
    model: str
    name: str = "policy"  # the gateway upstream it registers as
    max_batch_size: int = 8
    threads: int | None = None


Factory = Callable[[PolicyServerOptions], PolicyServer]
SERVERS: Registry[Factory] = Registry("policy server")
register = SERVERS.register
kinds = SERVERS.kinds


def open_policy_server(kind: str, options: PolicyServerOptions) -> PolicyServer:
    return SERVERS.get(kind)(options)


def _builtin(options: PolicyServerOptions) -> PolicyServer:
    from tether.policy_server.builtin import BuiltinPolicyServer

    return BuiltinPolicyServer(
        options.model, name=options.name, max_batch_size=options.max_batch_size, threads=options.threads
    )


register("builtin", _builtin)

__all__ = [
    "PolicyServer",
    "PolicyServerOptions",
    "PolicyWeights",
    "WeightsKind",
    "kinds",
    "open_policy_server",
    "register",
]
