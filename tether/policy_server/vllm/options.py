"""vLLM's settings and its command-line group; importing this starts and imports nothing of vLLM."""

from __future__ import annotations

import argparse
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
