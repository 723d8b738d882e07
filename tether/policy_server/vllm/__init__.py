"""vLLM as Tether's policy server (`--engine vllm` managed, `--policy-server URL,...` external).

See `server.py` for how versions are loaded and replicas watched, `launch.py` for the managed process.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from tether.policy_server.vllm.launch import (
    INSTALL_COMMAND,
    LaunchSpec,
    VLLMInstall,
    VLLMProcess,
    VLLMSetupError,
    find_vllm,
)
from tether.policy_server.vllm.replica import Replica, VLLMError, check_capabilities
from tether.policy_server.vllm.server import (
    ADAPTERS_KEPT,
    VLLMPolicyServer,
    connect_external,
    model_has_tool_template,
    start_managed,
)

if TYPE_CHECKING:
    from tether.policy_server import PolicyServerOptions

PROGRESS_EVERY_S = 10.0


def open_vllm(options: PolicyServerOptions) -> VLLMPolicyServer:
    vllm = options.vllm
    if vllm.urls:
        return connect_external(
            vllm.urls, name=options.name, need_pause=options.need_pause, policies=options.policies
        )
    from tether.models.catalog import resolve_model

    install = find_vllm(vllm.python)
    model_dir = resolve_model(options.model)
    log_dir = options.log_dir or Path(tempfile.gettempdir())
    tools_template = not model_has_tool_template(model_dir)
    specs = [
        LaunchSpec(
            model_dir,
            port=vllm.port + index if vllm.port else 0,
            lora_rank=options.lora_rank,
            max_loras=ADAPTERS_KEPT * max(1, options.policies),
            extra_args=vllm.args,
            log_path=log_dir / f"vllm-{options.name}-{index}.log",
            tools_template=tools_template,
        )
        for index in range(vllm.replicas)
    ]
    return start_managed(install, specs, name=options.name, on_wait=progress_line())


def progress_line() -> Callable[[float, str], None]:
    """A readiness reporter: one line on stderr every few seconds while vLLM starts."""
    last = [0.0]

    def report(elapsed: float, line: str) -> None:
        if elapsed - last[0] >= PROGRESS_EVERY_S:
            last[0] = elapsed
            print(f"waiting for vLLM to be ready ({elapsed:.0f}s): {line}", file=sys.stderr, flush=True)

    return report


__all__ = [
    "INSTALL_COMMAND",
    "LaunchSpec",
    "Replica",
    "VLLMError",
    "VLLMInstall",
    "VLLMPolicyServer",
    "VLLMProcess",
    "VLLMSetupError",
    "check_capabilities",
    "connect_external",
    "find_vllm",
    "open_vllm",
    "start_managed",
]
