from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from tests.tracing.conftest import TracingRig, run_agent
from tether.store import SQLiteStore
from tether.tracing import configure, current_span, emit_reward, flush, span, traced

AGENTS = Path(__file__).parent / "agents"


def dead_server() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_agent_subprocess_spans_and_rewards_reach_the_store(rig: TracingRig) -> None:
    agent = rig.agent()
    run_agent(AGENTS / "tracer_agent.py", agent.env)

    spans = {s.name: s for s in rig.store.query_spans(rollout_id=agent.rollout_id)}
    assert set(spans) == {"agent.run", "search", "llm.think", "llm.inner", "tool:fetch", "grade"}
    root = spans["agent.run"]
    assert root.parent_id is None and root.status == "ok"
    assert root.attributes == {"task": "find cats", "hits": 1}
    assert {s.trace_id for s in spans.values()} == {root.trace_id}
    assert {s.attempt for s in spans.values()} == {1}
    for name in ("search", "llm.think", "tool:fetch", "grade"):
        assert spans[name].parent_id == root.span_id, name
    assert spans["llm.inner"].parent_id == spans["llm.think"].span_id
    assert spans["llm.inner"].attributes == {"tokens": 12}
    assert [(e.name, e.attributes) for e in spans["llm.inner"].events] == [("first_token", {"position": 0})]
    failed = spans["tool:fetch"]
    assert (failed.status, failed.status_message) == ("error", "fetch failed")
    assert failed.events[0].attributes["exception.type"] == "ConnectionError"

    rewards = {r.name: r for r in rig.store.query_rewards(agent.rollout_id)}
    assert rewards["reward"].value == 0.75 and rewards["reward"].primary
    assert rewards["reward"].span_id == spans["grade"].span_id
    assert (rewards["reward"].source, rewards["reward"].attempt) == ("agent", 1)
    assert rewards["format"].span_id == root.span_id and not rewards["format"].primary


def test_configured_store_gets_spans_in_process(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "store.db")
    rollout_id = store.start_session().rollout.id
    configure(store=store, rollout_id=rollout_id, attempt=1)

    @traced()
    async def fetch() -> str:
        return "page"

    async def agent() -> None:
        async with span("agent.run", step=0) as root:
            assert current_span() is root
            await asyncio.gather(fetch(), fetch())
            with pytest.raises(KeyError), span("lookup"):
                raise KeyError("missing")
            with span("judged") as judged:
                judged.set_status("error", "wrong answer")
                emit_reward(0.0, span_id="feedface00000000")

    asyncio.run(agent())
    assert current_span() is None

    spans = store.query_spans(rollout_id=rollout_id)
    by_name = {s.name: s for s in spans}
    fetch_name = "test_configured_store_gets_spans_in_process.<locals>.fetch"
    assert sorted(s.name for s in spans) == ["agent.run", "judged", "lookup", fetch_name, fetch_name]
    root = by_name["agent.run"]
    assert all(s.parent_id == root.span_id for s in spans if s is not root)
    assert (by_name["lookup"].status, by_name["lookup"].status_message) == ("error", "'missing'")
    assert (by_name["judged"].status, by_name["judged"].status_message) == ("error", "wrong answer")
    [reward] = store.query_rewards(rollout_id)
    assert (reward.value, reward.span_id, reward.attempt) == (0.0, "feedface00000000", 1)
    store.close()


def test_separate_roots_get_separate_traces(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "store.db")
    rollout_id = store.start_session().rollout.id
    configure(store=store, rollout_id=rollout_id)
    for _ in range(2):
        with span("root"), span("child"):
            pass
    spans = store.query_spans(rollout_id=rollout_id)
    assert len({s.trace_id for s in spans}) == 2
    assert len({s.span_id for s in spans}) == 4
    store.close()


def test_dead_server_never_raises_into_the_agent(caplog: pytest.LogCaptureFixture) -> None:
    configure(server=dead_server(), token="tro-x.y", rollout_id="x")
    for _ in range(2):
        with span("root", weird=object()) as root:
            root.add_event("e", payload=b"\x00")
            with span("child"):
                pass
    flush()
    warnings = [r for r in caplog.records if r.name == "tether.tracing"]
    assert len(warnings) == 1 and "dropped" in warnings[0].getMessage()
    with pytest.raises(RuntimeError, match="not recorded"):
        emit_reward(1.0)


def test_dead_server_agent_subprocess_exits_cleanly(rig: TracingRig) -> None:
    agent = rig.agent()
    result = run_agent(AGENTS / "spans_only_agent.py", agent.env | {"TETHER_SERVER": dead_server()})
    assert result.stdout.strip() == "agent finished"
    assert result.stderr.count("tether tracing: dropped") == 1


def test_without_a_destination_spans_are_dropped_and_rewards_refused() -> None:
    with span("root") as root:
        root.set_attribute("k", "v")
    with pytest.raises(RuntimeError, match="TETHER_SERVER"):
        emit_reward(1.0)


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        configure(store=SQLiteStore.in_memory())
    with pytest.raises(ValueError):
        configure(server="http://x", rollout_id="r")
    with pytest.raises(ValueError, match="finite"):
        emit_reward(float("nan"))
    with span("s") as current, pytest.raises(ValueError):
        current.set_status("fine")
