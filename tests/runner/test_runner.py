"""The runner with real subprocess agents, a real gateway and the tiny engine."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import pytest

from tests.rigs import GatewayRig
from tether.contracts import AGENT_OUTPUT_SPAN, Origin, is_call_span
from tether.runner import (
    AgentEndpoints,
    AIRRules,
    CallableAgent,
    CommandAgent,
    Runner,
    RunnerConfig,
)
from tether.runner import warm as warm_module
from tether.runner.warm import WarmStarts
from tether.store import RolloutRequest, RolloutStatus, Task

AGENTS = Path(__file__).parent / "agents"
PYTHON = sys.executable


def running(pid: int) -> bool:
    """True while the process runs; a killed child nobody has reaped yet (a zombie) counts as dead."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def alive(pid: int) -> bool:
    """Whether the process is still running after SIGKILL has had a moment to land."""
    for _ in range(100):
        if not running(pid):
            return False
        time.sleep(0.05)
    return True


def exact_match(task: dict, output: str | None, trace: list) -> dict[str, float]:
    return {"correct": float(output == task["say"]), "calls": float(len(trace))}


def make_runner(rig: GatewayRig, agent, evaluator=None, **config) -> Runner:  # noqa: ANN001
    options = {"n_workers": 2, "timeout_s": 60, **config}
    return Runner(rig.store, agent, AgentEndpoints(rig.url, rig.auth), evaluator, RunnerConfig(**options))


def run(runner: Runner, requests: list[RolloutRequest]):  # noqa: ANN201
    async def main():  # noqa: ANN202
        try:
            return await runner.run(requests)
        finally:
            await runner.stop()

    return asyncio.run(main())


def requests_for(*inputs: dict, max_attempts: int = 1) -> list[RolloutRequest]:
    return [RolloutRequest(task=Task(input=i), max_attempts=max_attempts) for i in inputs]


def test_unmodified_openai_agent_with_evaluator(engine_rig: GatewayRig) -> None:
    agent = CommandAgent(f"{PYTHON} {AGENTS / 'qa_agent.py'}")
    runner = make_runner(engine_rig, agent, exact_match, primary_reward="correct")
    tasks = requests_for(*({"question": f"What is {i}+{i}?", "say": str(2 * i)} for i in range(4)))
    outcomes = run(runner, tasks)
    assert [o.status for o in outcomes] == [RolloutStatus.succeeded] * 4
    for outcome, task in zip(outcomes, tasks, strict=True):
        rollout = engine_rig.store.get_rollout(outcome.rollout_id)
        assert rollout.output == task.task.input["say"]
        assert outcome.calls == 2 and outcome.reward == 1.0
        rewards = {r.name: r for r in engine_rig.store.query_rewards(outcome.rollout_id)}
        assert rewards["correct"].primary and rewards["correct"].source == "evaluator"
        assert not rewards["calls"].primary and rewards["calls"].value == 2.0
        spans = engine_rig.store.query_spans(rollout_id=outcome.rollout_id)
        assert [s.attempt for s in spans] == [1, 1]
        assert all(s.attributes["choices"][0]["token_ids"] for s in spans)


def test_placeholders_fill_arguments(engine_rig: GatewayRig, tmp_path: Path) -> None:
    script = tmp_path / "echo_agent.py"
    script.write_text("import sys\nprint(repr(sys.argv[1:]))\n")
    agent = CommandAgent(f"{PYTHON} {script} --q {{question}} --n {{n}}")
    (outcome,) = run(make_runner(engine_rig, agent), requests_for({"question": "a b 'c'", "n": 3}))
    rollout = engine_rig.store.get_rollout(outcome.rollout_id)
    assert rollout.output == repr(["--q", "a b 'c'", "--n", "3"])


def test_missing_placeholder_fails_with_reason(engine_rig: GatewayRig) -> None:
    agent = CommandAgent(f"{PYTHON} -c pass {{nope}}")
    (outcome,) = run(make_runner(engine_rig, agent), requests_for({"question": "q"}))
    assert outcome.status == RolloutStatus.failed
    assert "{nope}" in (outcome.error or "")


def test_crash_is_retried_then_failed_and_calls_are_kept(engine_rig: GatewayRig) -> None:
    agent = CommandAgent(f"{PYTHON} {AGENTS / 'misbehaving_agent.py'} crash_after_call")
    (outcome,) = run(make_runner(engine_rig, agent), requests_for({}, max_attempts=2))
    assert outcome.status == RolloutStatus.failed and outcome.attempts == 2
    assert "exited with code 3" in (outcome.error or "") and "something broke" in (outcome.error or "")
    attempts = engine_rig.store.list_attempts(outcome.rollout_id)
    assert [a.status for a in attempts] == [RolloutStatus.failed, RolloutStatus.failed]
    spans = engine_rig.store.query_spans(rollout_id=outcome.rollout_id)
    assert sorted(s.attempt for s in spans if is_call_span(s.name)) == [1, 2]
    # and what each failed attempt printed, kept apart from the calls for whoever runs the agent
    kept = [s for s in spans if s.name == AGENT_OUTPUT_SPAN]
    assert [s.attempt for s in kept] == [1, 2] and {s.origin for s in kept} == {Origin.RUNNER}
    assert all("something broke" in s.attributes["stderr"] and s.attributes["exit_code"] == 3 for s in kept)


def test_a_crash_is_reported_by_its_exception_not_by_what_a_library_logs_after_it(
    engine_rig: GatewayRig,
) -> None:
    agent = CommandAgent(f"{PYTHON} {AGENTS / 'noisy_crash_agent.py'}")
    (outcome,) = run(make_runner(engine_rig, agent), requests_for({}))
    assert outcome.error == (
        "agent exited with code 1: RuntimeError: max_output_tokens reached: the reply was cut at 512 tokens"
    )
    [kept] = [
        s for s in engine_rig.store.query_spans(rollout_id=outcome.rollout_id) if s.origin == Origin.RUNNER
    ]
    assert "[non-fatal] Tracing: max retries reached" in kept.attributes["stderr"]


def test_hanging_agent_times_out_and_its_process_group_is_killed(
    engine_rig: GatewayRig, tmp_path: Path
) -> None:
    pid_file = tmp_path / "child.pid"
    agent = CommandAgent(f"{PYTHON} {AGENTS / 'misbehaving_agent.py'} hang {pid_file}")
    (outcome,) = run(make_runner(engine_rig, agent, timeout_s=4), requests_for({}))
    assert outcome.status == RolloutStatus.timed_out
    assert "timed out" in (outcome.error or "")
    assert not alive(int(pid_file.read_text()))


def test_agent_reports_its_own_reward(engine_rig: GatewayRig) -> None:
    agent = CommandAgent(f"{PYTHON} {AGENTS / 'misbehaving_agent.py'} self_reward")
    (outcome,) = run(make_runner(engine_rig, agent), requests_for({}))
    assert outcome.status == RolloutStatus.succeeded and outcome.reward == 0.75
    (reward,) = [r for r in engine_rig.store.query_rewards(outcome.rollout_id) if r.source == "agent"]
    assert reward.value == 0.75 and reward.primary


def test_foreign_key_fails_the_rollout_with_the_reason(engine_rig: GatewayRig) -> None:
    agent = CommandAgent(f"{PYTHON} {AGENTS / 'misbehaving_agent.py'} foreign_token")
    (outcome,) = run(make_runner(engine_rig, agent), requests_for({}))
    assert outcome.status == RolloutStatus.failed
    assert "AuthenticationError" in (outcome.error or "")
    spans = engine_rig.store.query_spans(rollout_id=outcome.rollout_id)
    assert [span.name for span in spans] == [AGENT_OUTPUT_SPAN]  # no call: only what the agent printed


def test_garbage_output_is_bounded(engine_rig: GatewayRig) -> None:
    agent = CommandAgent(f"{PYTHON} {AGENTS / 'misbehaving_agent.py'} garbage")
    (outcome,) = run(make_runner(engine_rig, agent), requests_for({}))
    rollout = engine_rig.store.get_rollout(outcome.rollout_id)
    assert outcome.status == RolloutStatus.succeeded
    assert rollout.output is not None and "garbage" in rollout.output


def test_truncated_calls_get_an_automatic_step_reward(engine_rig: GatewayRig) -> None:
    agent = CommandAgent(f"{PYTHON} {AGENTS / 'qa_agent.py'}")
    runner = make_runner(engine_rig, agent, exact_match, air=AIRRules(truncated=-0.5))
    (outcome,) = run(runner, requests_for({"question": "Tell me a long story.", "say": "x", "max_tokens": 1}))
    air = [r for r in engine_rig.store.query_rewards(outcome.rollout_id) if r.source == "air"]
    spans = {s.span_id for s in engine_rig.store.query_spans(rollout_id=outcome.rollout_id)}
    assert air and all(r.name == "air:truncated" and r.value == -0.5 and r.span_id in spans for r in air)


def test_python_callable_agent(engine_rig: GatewayRig) -> None:
    import openai

    async def agent(task: dict, llm) -> str:  # noqa: ANN001
        client = openai.AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key, max_retries=0)
        reply = await client.chat.completions.create(
            model=llm.model, messages=[{"role": "user", "content": task["question"]}], max_tokens=3
        )
        return reply.choices[0].message.content or ""

    outcomes = run(
        make_runner(engine_rig, CallableAgent(agent)), requests_for({"question": "hi"}, {"question": "yo"})
    )
    assert all(o.status == RolloutStatus.succeeded and o.calls == 1 for o in outcomes)


def test_interrupt_cancels_running_rollouts_cleanly(engine_rig: GatewayRig, tmp_path: Path) -> None:
    agent = CommandAgent(f"{PYTHON} {AGENTS / 'misbehaving_agent.py'} hang {tmp_path / 'pid'}")
    runner = make_runner(engine_rig, agent, n_workers=1)

    async def main() -> str:
        runner.start()
        (rollout,) = await runner.enqueue(requests_for({}))
        while not (tmp_path / "pid").exists():
            await asyncio.sleep(0.05)
        await runner.stop()
        return rollout.id

    rollout_id = asyncio.run(main())
    rollout = engine_rig.store.get_rollout(rollout_id)
    assert rollout.status == RolloutStatus.cancelled and rollout.error == "interrupted"
    assert not alive(int((tmp_path / "pid").read_text()))


def test_a_nul_byte_in_a_task_fails_only_that_attempt(engine_rig: GatewayRig, tmp_path: Path) -> None:
    script = tmp_path / "echo_agent.py"
    script.write_text("import sys\nprint(sys.argv[1])\n")
    agent = CommandAgent(f"{PYTHON} {script} {{q}}")
    outcomes = run(make_runner(engine_rig, agent), requests_for({"q": "a\x00b"}, {"q": "fine"}))
    assert [o.status for o in outcomes] == [RolloutStatus.failed, RolloutStatus.succeeded]
    assert "null byte" in (outcomes[0].error or "")
    assert engine_rig.store.list_rollouts(status=RolloutStatus.running) == []


class ExplodingAgent:
    """An agent whose launcher itself raises (not a failure of the agent's own code)."""

    async def run(self, task: dict, env: object, llm: object, timeout_s: float) -> object:
        raise RuntimeError("the sandbox could not be created")


def test_an_agent_launcher_that_raises_fails_the_attempt_not_the_run(engine_rig: GatewayRig) -> None:
    runner = make_runner(engine_rig, ExplodingAgent())
    outcomes = run(runner, requests_for({"q": 1}, {"q": 2}))
    assert [o.status for o in outcomes] == [RolloutStatus.failed] * 2
    assert all("the sandbox could not be created" in (o.error or "") for o in outcomes)


def test_an_attempt_whose_warm_interpreter_died_is_the_runners_loss_and_is_run_again(
    rig: GatewayRig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each warm interpreter dies right after it forks the agent: the agent is killed and its attempt
    closed as lost, without using up the rollout's only attempt; the zygote is restarted once, dies again,
    and the third attempt starts cold and succeeds. No attempt ran the agent twice."""
    monkeypatch.setattr(warm_module, "ZYGOTE_SCRIPT", AGENTS / "zygote_dies_after_fork.py")
    warm = WarmStarts()
    try:
        agent = CommandAgent(f"{PYTHON} {AGENTS / 'warm_probe.py'} report", warm=warm)
        (outcome,) = run(make_runner(rig, agent), requests_for({}, max_attempts=1))
    finally:
        warm.close()
    assert outcome.status == RolloutStatus.succeeded and outcome.attempts == 3
    attempts = rig.store.list_attempts(outcome.rollout_id)
    assert [a.status for a in attempts] == [RolloutStatus.timed_out] * 2 + [RolloutStatus.succeeded]
    assert all("warm interpreter ended while the agent ran" in (a.error or "") for a in attempts[:2])
    assert json.loads(rig.store.get_rollout(outcome.rollout_id).output or "{}")["preloaded"] is False
    assert rig.store.get_rollout(outcome.rollout_id).worker_losses == 2


def test_stop_beside_a_wake_ends_every_idle_worker(engine_rig: GatewayRig) -> None:
    # A wake() just before stop() completes the idle workers' event wait as their cancel arrives: the
    # cancel must still end them (an asyncio.wait_for there swallowed it, and stop() waited forever).
    runner = make_runner(engine_rig, CallableAgent(lambda task, llm: "x"), n_workers=8)

    async def main() -> bool:
        runner.start()
        await asyncio.sleep(0.2)  # every worker has found no work and waits for a wake
        runner.pool.wake()
        try:
            await asyncio.wait_for(runner.stop(), 10)
        except TimeoutError:
            return False
        return True

    for _ in range(5):
        assert asyncio.run(main()), "a worker outlived stop()"
