"""The reflective Pareto search: pool logic, then a run end to end with a reflection and a merge."""

from __future__ import annotations

import asyncio
import random
import re
from collections import Counter
from typing import Any

from tests.prompt_search import scripted
from tests.prompt_search.conftest import AGENT_SYSTEM, SearchRig, run_search, search_rollouts
from tether.prompt_search.pareto import (
    ParetoConfig,
    pareto_pool,
    pick_pair,
    pick_parent,
    run_pareto,
    task_wins,
)
from tether.prompt_search.search import Candidate

PROMPTS = {
    "math": "You know math. Answer with one word.",
    "geography": "You know geography. Answer with one word.",
}
MERGED = "You know math and geography. Answer with one word."


def scored(cid: str, **scores: float) -> Candidate:
    return Candidate(cid, cid, "rewrite", scores=dict(scores), status="scored")


def test_the_pool_keeps_candidates_best_on_some_task() -> None:
    a = scored("a", t1=1.0, t2=0.0, t3=0.0)
    b = scored("b", t1=0.0, t2=1.0, t3=0.5)
    c = scored("c", t1=0.5, t2=0.5, t3=0.5)  # best on nothing alone, but ties b on t3
    d = scored("d", t1=0.0, t2=0.0, t3=0.0)  # best on nothing
    e = scored("e", t1=0.0, t2=1.0, t3=0.0)  # ties b on t2, but b dominates it
    assert pareto_pool([a, b, c, d, e]) == {"a": 1, "b": 2, "c": 1}
    assert task_wins([a, b, c, d]) == {"a": ["t1"], "b": ["t2", "t3"], "c": ["t3"]}
    assert pareto_pool([Candidate("x", "", "initial")]) == {}


def test_parents_are_drawn_by_wins() -> None:
    rng = random.Random(1)
    draws = Counter(pick_parent({"a": 1, "b": 3}, rng) for _ in range(4000))
    assert 0.7 < draws["b"] / 4000 < 0.8
    for _ in range(50):
        first, second = pick_pair({"a": 1, "b": 3, "c": 2}, rng)
        assert first != second


def _topic_of_failures(body: dict[str, Any]) -> str:
    text = body["messages"][1]["content"].split("Runs where it did well")[0]
    return re.search(r"\[(math|geography)\]", text).group(1)


def answer(body: dict[str, Any]) -> str:
    if "combine" in body["messages"][0]["content"]:
        return scripted.prompt(MERGED)
    return scripted.prompt(PROMPTS[_topic_of_failures(body)])


def test_reflection_then_merge(search_rig: SearchRig) -> None:
    optimizer = scripted.Optimizer([answer] * 10)
    config = ParetoConfig(
        budget=60, minibatch_size=1, val_batch_size=4, merge_probability=1.0, max_iterations=8
    )
    with scripted.serve(optimizer) as optimizer_url:
        ctx = search_rig.context(config.budget, optimizer_url, "pareto")
        result = asyncio.run(run_search(ctx, run_pareto(ctx, config)))

    initial, first = result.candidates[:2]
    assert initial.text == AGENT_SYSTEM and initial.score == 0.0
    assert first.origin == "reflection" and first.parents == ["c0"] and first.score == 0.5
    # The pool then holds the one-topic prompt alone (it dominates c0); reflecting on a failure gives the
    # other topic (better on that one-task minibatch), and the two are merged into the best prompt.
    by_text = {c.text: c for c in result.candidates if c.status == "scored"}
    assert set(by_text) == {AGENT_SYSTEM, *PROMPTS.values(), MERGED}
    merge = by_text[MERGED]
    assert merge.origin == "merge" and result.best is merge and merge.score == 1.0
    assert {by_text[p].id for p in PROMPTS.values()} == set(merge.parents)
    assert "Runs where it failed" in optimizer.requests[0]["messages"][1]["content"]
    assert result.spent == len(search_rollouts(search_rig)) <= config.budget


def test_stops_at_the_budget(search_rig: SearchRig) -> None:
    optimizer = scripted.Optimizer([answer] * 10)
    config = ParetoConfig(budget=15, minibatch_size=2, val_batch_size=4, merge_probability=1.0)
    with scripted.serve(optimizer) as optimizer_url:
        ctx = search_rig.context(config.budget, optimizer_url, "pareto")
        result = asyncio.run(run_search(ctx, run_pareto(ctx, config)))
    # 5 to start, 8 for the first reflection, then one minibatch of 2: nothing more can start.
    assert result.spent == 15 == len(search_rollouts(search_rig))
    assert result.stopped == "rollout budget spent"
