"""Policy servers: what serves the policy, behind one protocol (`base.PolicyServer`), for every command.

    server = open_policy_server("builtin", PolicyServerOptions(model="smollm2-135m"))

A kind is a subpackage with its options (and their command-line group) and a factory, registered here:
`builtin` (Tether's engine in this process), `vllm` (started by Tether, or running servers) and `openai`
(any OpenAI-compatible server, `--upstream URL`, never trained). Adding one is a new subpackage plus one
`register` line below. The commands and the trainer know only the protocol and this registry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tether.policy_server.base import (
    PolicyServer,
    PolicyServerError,
    PolicyWeights,
    ServesSeveralPolicies,
    WeightsKind,
)
from tether.policy_server.builtin.options import BuiltinOptions
from tether.policy_server.openai import OpenAIOptions
from tether.policy_server.vllm.options import VLLMOptions
from tether.registry import Registry


@dataclass(frozen=True)
class PolicyServerOptions:
    """What every kind is told, and each kind's own options."""

    model: str
    name: str = "policy"  # the gateway upstream it registers as
    log_dir: Path | None = None  # where a server in another process writes its log
    need_pause: bool = False  # async training: calls are held around each weight swap
    lora_rank: int = 16
    policies: int = 1  # LoRA policies served side by side (vLLM sizes --max-loras for them)
    builtin: BuiltinOptions = field(default_factory=BuiltinOptions)
    vllm: VLLMOptions = field(default_factory=VLLMOptions)
    openai: OpenAIOptions | None = None


Factory = Callable[[PolicyServerOptions], PolicyServer]
SERVERS: Registry[Factory] = Registry("policy server")
register = SERVERS.register
kinds = SERVERS.kinds


def open_policy_server(kind: str, options: PolicyServerOptions) -> PolicyServer:
    return SERVERS.get(kind)(options)


def _builtin(options: PolicyServerOptions) -> PolicyServer:
    from tether.policy_server.builtin import BuiltinPolicyServer

    return BuiltinPolicyServer(options.model, options.builtin, name=options.name)


def _vllm(options: PolicyServerOptions) -> PolicyServer:
    from tether.policy_server.vllm import open_vllm

    return open_vllm(options)


def _openai(options: PolicyServerOptions) -> PolicyServer:
    from tether.policy_server.openai import OpenAIPolicyServer

    if options.openai is None:
        raise PolicyServerError("the openai policy server needs a base URL (--upstream URL)")
    return OpenAIPolicyServer(options.openai, name=options.name)


register("builtin", _builtin)
register("vllm", _vllm)
register("openai", _openai)

__all__ = [
    "BuiltinOptions",
    "OpenAIOptions",
    "PolicyServer",
    "PolicyServerError",
    "PolicyServerOptions",
    "PolicyWeights",
    "ServesSeveralPolicies",
    "VLLMOptions",
    "WeightsKind",
    "kinds",
    "open_policy_server",
    "register",
]
