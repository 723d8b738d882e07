"""What the sandbox's tests share: the hostile probe agent (`agents/sandbox_probe.py`), how a test's
sandboxed agents start (`Start`: cold, or warm and then every one warm), and ways to look at the host."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.rigs import GatewayRig
from tether.experiment import inputs
from tether.runner import LLM, AgentEndpoints, CommandAgent
from tether.runner.agents import AgentResult
from tether.runner.sandbox import BwrapSandbox, SandboxOptions
from tether.runner.warm import WarmStarts
from tether.store import RolloutRequest, Task

AGENTS = Path(__file__).parent / "agents"
PROBE = AGENTS / "sandbox_probe.py"
CLI_AGENTS = Path(__file__).parents[1] / "cli" / "agents"
ROOT = Path(__file__).parents[2]
PYTHON = sys.executable
SYSTEM_PYTHON = "/usr/bin/python3"
LLM_STUB = LLM(base_url="http://127.0.0.1:9/v1", api_key="tro-none")
AS_ROOT = os.geteuid() == 0


def sandbox(**options: Any) -> BwrapSandbox:
    return BwrapSandbox(SandboxOptions(**options))


class Start:
    """How a test's sandboxed agents start: cold (`--agent-cold`), or warm, and then every one warm.
    `cli` gives `tether rollout` the flag and records its WarmStarts, to count them there too."""

    def __init__(self, warm: bool, monkeypatch: pytest.MonkeyPatch) -> None:
        self.warm = WarmStarts() if warm else None
        self.made: list[WarmStarts] = []
        self.sandboxed = 0
        recorded = self.made

        class Recorded(WarmStarts):
            def __init__(self, modules: Any = None) -> None:
                super().__init__(modules)
                recorded.append(self)

        monkeypatch.setattr(inputs, "WarmStarts", Recorded)

    def agent(self, template: str, **options: Any) -> CommandAgent:
        """A sandboxed agent (`sandbox=` in options), started as this test starts them."""
        self.sandboxed += 1
        return CommandAgent(template, warm=self.warm, **options)

    def cli(self, *args: str) -> list[str]:
        return list(args) if self.warm is not None else [*args, "--agent-cold"]

    def check(self, cli_rollouts: int = 0) -> None:
        """Every sandboxed agent started warm, none cold (a warm start that fell back would prove nothing)."""
        if self.warm is None:
            return
        if cli_rollouts:
            assert [(w.cold, w.forked) for w in self.made] == [({}, cli_rollouts)]
        else:
            assert self.warm.cold == {} and self.warm.forked == self.sandboxed > 0

    def close(self) -> None:
        if self.warm is not None:
            self.warm.close()


def probe(mode: str, *args: object, python: str = PYTHON) -> str:
    return " ".join([python, str(PROBE), mode, *(str(a) for a in args)])


def run(agent: CommandAgent, env: dict[str, str] | None = None, timeout_s: float = 60) -> AgentResult:
    return asyncio.run(agent.run({}, env or {"TETHER_ROLLOUT_ID": "ro-1"}, LLM_STUB, timeout_s))


def seen(agent: CommandAgent, env: dict[str, str] | None = None) -> dict[str, Any]:
    result = run(agent, env)
    assert result.error is None, result.stderr
    return json.loads(result.output or "{}")


def live_env(rig: GatewayRig) -> tuple[str, dict[str, str]]:
    """A claimed rollout of the rig's store, and the environment the runner gives its agent."""
    (rollout,) = rig.store.enqueue([RolloutRequest(task=Task(input={"q": "hi"}))])
    assert rig.store.claim("worker") is not None
    return rollout.id, AgentEndpoints(rig.url, rig.auth).env(rollout, 1)


def calls(rig: GatewayRig, rollout_id: str) -> int:
    return len(rig.store.query_spans(rollout_id=rollout_id, limit=1000))


def host_processes(marker: str) -> list[int]:
    """Host pids whose command line carries `marker` and that are running (a zombie is dead)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker.encode() in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


def gone(marker: str) -> bool:
    """Whether no process with `marker` runs, allowing a killed one a moment to be reaped."""
    for _ in range(100):
        if not host_processes(marker):
            return True
        time.sleep(0.05)
    return False
