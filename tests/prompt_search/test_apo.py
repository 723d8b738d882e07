"""APO beam search end to end: the real gateway and runner, the example agent (its code untouched), a
scripted policy whose answers depend on the system message it gets, and a scripted optimizer."""

from __future__ import annotations

import asyncio

from tests.prompt_search import scripted
from tests.prompt_search.conftest import AGENT_SYSTEM, SearchRig, run_search, search_rollouts
from tether.prompt_search.apo import APOConfig, run_apo, select_beam
from tether.prompt_search.search import Candidate, extract_prompt, lost_placeholders

MATH = "You are a math tutor. Answer with one word."
BOTH = "You know math and geography. Answer with one word."
BOTH_AGAIN = "Math and geography questions: answer with one word."
GEO = "You know geography. Answer with one word."
SCRIPT = [
    "The prompt names no subject.",  # round 1, critique of c0
    scripted.prompt(MATH),  # c1
    scripted.prompt(BOTH),  # c2
    "It is good already.",  # round 2, critique of c2 (the best)
    scripted.prompt(BOTH),  # c3: same text as c2
    scripted.prompt(BOTH_AGAIN),  # c4
    "It forgets geography.",  # round 2, critique of c1
    scripted.prompt(GEO),  # c5
    scripted.prompt(MATH + " Be exact."),  # c6
]


def test_apo_improves_the_agents_prompt_through_the_gateway(search_rig: SearchRig) -> None:
    optimizer = scripted.Optimizer(list(SCRIPT))
    config = APOConfig(beam_width=2, branch_factor=2, rounds=2, batch_size=2, val_batch_size=4, budget=35)
    with scripted.serve(optimizer) as optimizer_url:
        ctx = search_rig.context(config.budget, optimizer_url, "apo")
        result = asyncio.run(run_search(ctx, run_apo(ctx, config)))

    # The starting prompt is the agent's own, read from its first recorded call.
    assert result.initial.text == AGENT_SYSTEM
    assert result.initial.score == 0.0
    assert result.best.text == BOTH and result.best.score == 1.0
    by_id = {c.id: c for c in result.candidates}
    assert by_id["c1"].score == 0.5 and by_id["c3"].status == "rejected"
    assert by_id["c3"].reason == "same text as c2"
    assert by_id["c5"].score == 0.5 and by_id["c5"].parents == ["c1"]
    # 1 baseline + 4 initial + (2 + 4 + 4) round 1 + (2 + 4) + (2 + 4 + 4) round 2 (c3 cost nothing).
    assert result.spent == 31
    assert len(search_rollouts(search_rig)) == 31
    assert result.optimizer_calls == len(optimizer.requests) == 9

    # The optimizer read the runs: the critique request shows the agent's answers and rewards.
    critique = optimizer.requests[0]["messages"][1]["content"]
    assert AGENT_SYSTEM in critique and "I do not know." in critique and "reward: 0" in critique
    # and saw each task as its agent does: without the reference, which a prompt could pass on to it
    assert "task: {'question': " in critique and "reference" not in critique


def test_the_gateway_puts_the_candidate_in_the_agents_calls(search_rig: SearchRig) -> None:
    optimizer = scripted.Optimizer(list(SCRIPT[:3]))
    config = APOConfig(beam_width=1, branch_factor=2, rounds=1, batch_size=2, val_batch_size=4, budget=40)
    with scripted.serve(optimizer) as optimizer_url:
        ctx = search_rig.context(config.budget, optimizer_url, "apo")
        result = asyncio.run(run_search(ctx, run_apo(ctx, config)))

    store = search_rig.rig.store
    seen: dict[str, set[str]] = {}
    for rollout in search_rollouts(search_rig):
        candidate = rollout.metadata["prompt_search"].get("candidate", "baseline")
        for span in store.query_spans(rollout_id=rollout.id, name="llm.chat"):
            seen.setdefault(candidate, set()).add(span.attributes["request"]["messages"][0]["content"])
    assert seen == {"baseline": {AGENT_SYSTEM}, "c0": {AGENT_SYSTEM}, "c1": {MATH}, "c2": {BOTH}}
    # What the policy received is what was recorded.
    assert {r["messages"][0]["content"] for r in search_rig.policy.requests} == {AGENT_SYSTEM, MATH, BOTH}

    # The history: one resource version per candidate, then the best again, marked.
    history = [store.get_resource("system", v).value for v in range(1, len(result.candidates) + 2)]
    assert [h["candidate"] for h in history] == ["c0", "c1", "c2", "c2"]
    assert history[2]["score"] == 1.0 and history[2]["parents"] == ["c0"]
    assert history[-1]["best"] is True and store.get_resource("system").value["text"] == BOTH


def test_budget_is_never_exceeded(search_rig: SearchRig) -> None:
    optimizer = scripted.Optimizer(list(SCRIPT))
    config = APOConfig(beam_width=2, branch_factor=2, rounds=3, batch_size=2, val_batch_size=4, budget=20)
    with scripted.serve(optimizer) as optimizer_url:
        ctx = search_rig.context(config.budget, optimizer_url, "apo")
        result = asyncio.run(run_search(ctx, run_apo(ctx, config)))
    # After round 1 (15 rollouts), c2's training batch takes 2; its first child needs 4 of the 3 left.
    assert result.spent == 17 and len(search_rollouts(search_rig)) == 17
    assert result.stopped == "rollout budget spent"
    assert result.candidates[-1].reason == "no budget left to score it"


def test_a_rewrite_that_lost_a_placeholder_is_rejected_unrun(search_rig: SearchRig) -> None:
    initial = "Answer {style}: you know math. One word."
    optimizer = scripted.Optimizer(
        [
            "Name geography.",
            scripted.prompt("You know math and geography."),
            scripted.prompt(BOTH + " {style}"),
        ]
    )
    config = APOConfig(beam_width=1, branch_factor=2, rounds=1, batch_size=2, val_batch_size=4, budget=30)
    with scripted.serve(optimizer) as optimizer_url:
        ctx = search_rig.context(config.budget, optimizer_url, "apo")
        result = asyncio.run(run_search(ctx, run_apo(ctx, config, initial)))
    lost, kept = result.candidates[1], result.candidates[2]
    assert lost.status == "rejected" and lost.reason == "lost placeholder {style}" and not lost.scores
    assert kept.status == "scored" and kept.score == 1.0
    # initial 4 + training batch 2 + one child 4: the rejected rewrite cost nothing.
    assert result.spent == 10


def test_text_helpers() -> None:
    assert lost_placeholders("Hi {name}, {{literal}} {tone}", "Hello {name}") == ["tone"]
    assert lost_placeholders("Hi {name}", "{name}!") == []
    assert extract_prompt("x <new_prompt>a</new_prompt> y <new_prompt>\n b \n</new_prompt>") == "b"
    assert extract_prompt("  just this  ") == "just this"
    pool = [Candidate("a", "", "initial", scores={"t": 0.5}, status="scored")]
    pool += [Candidate("b", "", "rewrite", scores={"t": 1.0}, status="scored")]
    pool += [Candidate("c", "", "rewrite", scores={"t": 0.5}, status="scored")]
    pool += [Candidate("d", "", "rewrite", status="rejected")]
    assert [c.id for c in select_beam(pool, 2)] == ["b", "a"]
