"""Policy servers: what serves the policy being trained, behind one protocol (`base.PolicyServer`).

    server = open_policy_server("builtin", PolicyServerOptions(model="smollm2-135m"))

A server is a module with a factory, registered here by kind: adding one (vLLM, say) is a new module
plus one `register` line below. The trainer's loop knows only the protocol and this registry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tether.policy_server.base import PolicyServer, PolicyWeights, ServesSeveralPolicies, WeightsKind
from tether.registry import Registry


@dataclass(frozen=True)
class PolicyServerOptions:
    model: str
    name: str = "policy"  # the gateway upstream it registers as
    max_batch_size: int = 8
    threads: int | None = None
    # Servers in other processes (vLLM): the URLs of ones the user started, else how many to start,
    # with which Python, extra arguments, first port (0: free ones) and where their logs go.
    urls: tuple[str, ...] = ()
    replicas: int = 1
    engine_python: str | None = None
    engine_args: tuple[str, ...] = ()
    port: int = 0
    lora_rank: int = 16
    log_dir: Path | None = None
    need_pause: bool = False
    policies: int = 1  # LoRA policies served side by side (vLLM sizes --max-loras for them)


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


def _vllm(options: PolicyServerOptions) -> PolicyServer:
    from tether.policy_server.vllm import open_vllm

    return open_vllm(options)


register("builtin", _builtin)
register("vllm", _vllm)

__all__ = [
    "PolicyServer",
    "PolicyServerOptions",
    "PolicyWeights",
    "ServesSeveralPolicies",
    "WeightsKind",
    "kinds",
    "open_policy_server",
    "register",
]
