"""vLLM's settings and its command-line group; importing this starts and imports nothing of vLLM."""

from __future__ import annotations

import argparse
import os
import shlex
from dataclasses import dataclass

ENGINE_ENV = "TETHER_ENGINE"


@dataclass(frozen=True)
class VLLMOptions:
    # The URLs of servers the user started (`--policy-server`), else how many Tether starts, with which
    # Python, extra arguments and first port (0: free ones).
    urls: tuple[str, ...] = ()
    replicas: int = 1
    python: str | None = None
    args: tuple[str, ...] = ()
    port: int = 0


def add_args(parser: argparse.ArgumentParser) -> None:
    """Which engine serves the policy (the built-in one in this process, or vLLM: started by Tether, or
    servers the user started), and vLLM's own options."""
    group = parser.add_argument_group("policy engine")
    group.add_argument(
        "--engine",
        choices=["builtin", "vllm"],
        default=os.environ.get(ENGINE_ENV) or "builtin",
        help=f"builtin: Tether's engine in this process; vllm: a vLLM server that Tether starts from its "
        f"own environment (default: ${ENGINE_ENV}, else builtin)",
    )
    group.add_argument(
        "--policy-server",
        metavar="URL[,URL...]",
        help="serve the policy with these running vLLM servers (replicas), instead of starting one; each "
        "needs --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True (checked at start)",
    )
    group.add_argument(
        "--vllm-python",
        metavar="PATH",
        help="the Python of the vLLM environment (default: $TETHER_VLLM_PYTHON, else .venv-vllm/bin/python; "
        "`make setup-vllm` creates it)",
    )
    group.add_argument("--vllm-replicas", type=int, default=1, metavar="N", help="vLLM servers to start")
    group.add_argument(
        "--vllm-port", type=int, default=0, metavar="PORT", help="first vLLM port (default: free ports)"
    )
    group.add_argument(
        "--vllm-args",
        default="",
        metavar="ARGS",
        help="extra arguments for the vLLM servers Tether starts, as one string, e.g. "
        "'--gpu-memory-utilization 0.8 --max-model-len 4096'",
    )


def chosen(args: argparse.Namespace) -> bool:
    """Whether the command line asks for vLLM (`--engine vllm`, or running servers)."""
    return bool(getattr(args, "policy_server", None)) or getattr(args, "engine", "builtin") == "vllm"


def options_from_args(args: argparse.Namespace) -> VLLMOptions:
    if args.vllm_replicas < 1:
        raise ValueError("--vllm-replicas must be at least 1")
    return VLLMOptions(
        urls=tuple(u.strip() for u in (args.policy_server or "").split(",") if u.strip()),
        replicas=args.vllm_replicas,
        python=args.vllm_python,
        args=tuple(shlex.split(args.vllm_args)),
        port=args.vllm_port,
    )
