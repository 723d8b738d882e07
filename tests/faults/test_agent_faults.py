"""Agents that hang on every attempt or die from a signal: retried, then finished with the reason,
and the calls each attempt made are kept (complements tests/runner, which covers a crash with an exit
code and a single hanging attempt)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from tests.rigs import GatewayRig
from tether.runner import AgentEndpoints, CommandAgent, Runner, RunnerConfig
from tether.store import RolloutRequest, RolloutStatus, Task

HANGS = "import time\ntime.sleep(600)\n"
KILLS_ITSELF = """
import os, signal
from openai import OpenAI
OpenAI(max_retries=0).chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}])
os.kill(os.getpid(), signal.SIGKILL)
"""


def run_agent(rig: GatewayRig, script: Path, timeout_s: float, max_attempts: int):  # noqa: ANN201
    runner = Runner(
        rig.store,
        CommandAgent(f"{sys.executable} {script}"),
        AgentEndpoints(rig.url, rig.auth),
        None,
        RunnerConfig(n_workers=1, timeout_s=timeout_s, heartbeat_s=0.2),
    )

    async def main():  # noqa: ANN202
        try:
            return await runner.run([RolloutRequest(task=Task(), max_attempts=max_attempts)])
        finally:
            await runner.stop()

    (outcome,) = asyncio.run(main())
    return outcome


def test_an_agent_hanging_on_every_attempt_times_out_with_the_reason(rig: GatewayRig, tmp_path: Path) -> None:
    script = tmp_path / "hang.py"
    script.write_text(HANGS)
    outcome = run_agent(rig, script, timeout_s=1.5, max_attempts=2)
    assert outcome.status == RolloutStatus.timed_out and outcome.attempts == 2
    attempts = rig.store.list_attempts(outcome.rollout_id)
    assert [a.status for a in attempts] == [RolloutStatus.timed_out] * 2
    assert all("timed out after 1.5s" in (a.error or "") for a in attempts)
    assert "timed out after 1.5s" in (rig.store.get_rollout(outcome.rollout_id).error or "")


def test_an_agent_killed_by_a_signal_is_retried_then_failed(rig: GatewayRig, tmp_path: Path) -> None:
    script = tmp_path / "kill.py"
    script.write_text(KILLS_ITSELF)
    outcome = run_agent(rig, script, timeout_s=60, max_attempts=2)
    assert outcome.status == RolloutStatus.failed and outcome.attempts == 2
    assert "killed by SIGKILL" in (outcome.error or "")
    attempts = rig.store.list_attempts(outcome.rollout_id)
    assert [a.status for a in attempts] == [RolloutStatus.failed] * 2
    spans = rig.store.query_spans(rollout_id=outcome.rollout_id)
    assert sorted(s.attempt for s in spans) == [1, 2]
