"""Reflective Pareto search over prompts (in the spirit of GEPA).

The pool holds the candidates that are best (ties included) on at least one validation task, less those
another pool candidate dominates (as good everywhere, better somewhere). Each
iteration either mutates or merges:

- mutate: pick a parent from the pool, weighted by how many validation tasks it wins; run it on a small
  batch of training tasks; ask the optimizer model to reflect on the failed runs and write a better
  prompt; run the child on the same tasks, and only when it beats its parent there score it on the
  validation subset (so weak children cost a minibatch, not a validation pass);
- merge (with `merge_probability`, when the pool has two or more): ask the optimizer to combine two pool
  candidates, keeping what each one wins, and score the result on the validation subset.

It stops when the rollout budget cannot pay for the next step, or after `max_iterations`.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from tether.prompt_search.search import (
    Candidate,
    SearchContext,
    SearchResult,
    Trace,
    extract_prompt,
    mean,
    render_traces,
    start,
)

REFLECT_SYSTEM = (
    "You improve the system prompt of an AI agent by reflecting on its failed runs. Keep every "
    "{placeholder} of the prompt exactly as it is. Answer with the new prompt only, between <new_prompt> "
    "and </new_prompt>."
)
MERGE_SYSTEM = (
    "You combine two system prompts of an AI agent into one that keeps the strengths of both. Keep every "
    "{placeholder} exactly as it is. Answer with the new prompt only, between <new_prompt> and </new_prompt>."
)


@dataclass
class ParetoConfig:
    budget: int = 64  # agent rollouts, all included
    minibatch_size: int = 3  # training rollouts a reflection reads (and the child's first test)
    val_batch_size: int = 4
    merge_probability: float = 0.25
    max_iterations: int = 100
    success_threshold: float = 1.0  # a run with a lower reward is a failure to reflect on
    seed: int = 0

    def __post_init__(self) -> None:
        if min(self.budget, self.minibatch_size, self.val_batch_size, self.max_iterations) < 1:
            raise ValueError(
                "budget, minibatch size, validation batch size and iterations must be at least 1"
            )
        if not 0.0 <= self.merge_probability <= 1.0:
            raise ValueError("merge probability must be between 0 and 1")


# -- the pool -----------------------------------------------------------------------------------------


def pareto_pool(candidates: Sequence[Candidate]) -> dict[str, int]:
    """Candidate id -> number of validation tasks it is best on (ties all win), for the candidates that win
    at least one and that no other such candidate dominates; in the order of `candidates`."""
    wins = task_wins(candidates)
    front = [c for c in candidates if c.id in wins]
    return {c.id: len(wins[c.id]) for c in front if not any(_dominates(other, c) for other in front)}


def _dominates(a: Candidate, b: Candidate) -> bool:
    """`a` is at least as good as `b` on every task `b` was scored on, and better on one."""
    if a is b or not set(b.scores) <= set(a.scores):
        return False
    return all(a.scores[t] >= b.scores[t] for t in b.scores) and any(
        a.scores[t] > b.scores[t] for t in b.scores
    )


def pick_parent(pool: dict[str, int], rng: random.Random) -> str:
    ids = list(pool)
    return rng.choices(ids, weights=[pool[i] for i in ids], k=1)[0]


def pick_pair(pool: dict[str, int], rng: random.Random) -> tuple[str, str]:
    first = pick_parent(pool, rng)
    rest = {cid: wins for cid, wins in pool.items() if cid != first}
    return first, pick_parent(rest, rng)


# -- requests to the optimizer ------------------------------------------------------------------------


def reflect_request(prompt: str, failed: Sequence[Trace], passed: Sequence[Trace]) -> str:
    text = (
        f"The agent's system prompt:\n<prompt>\n{prompt}\n</prompt>\n\n"
        f"Runs where it failed (reward: higher is better):\n\n{render_traces(failed)}\n\n"
    )
    if passed:
        text += f"Runs where it did well:\n\n{render_traces(passed, limit=2)}\n\n"
    return text + "What went wrong, and how should the prompt change? Then write the improved prompt."


def merge_request(first: Candidate, second: Candidate, wins: dict[str, list[str]]) -> str:
    def block(c: Candidate, label: str) -> str:
        won = ", ".join(wins.get(c.id, [])) or "none"
        return f"Prompt {label} (best on tasks: {won}):\n<prompt>\n{c.text}\n</prompt>"

    ask = "Write one prompt that does well on all of these tasks."
    return f"{block(first, 'A')}\n\n{block(second, 'B')}\n\n{ask}"


def task_wins(candidates: Sequence[Candidate]) -> dict[str, list[str]]:
    """Candidate id -> the validation tasks it is best on."""
    scored = [c for c in candidates if c.scores]
    out: dict[str, list[str]] = {}
    for task in sorted({t for c in scored for t in c.scores}):
        present = [c for c in scored if task in c.scores]
        best = max(c.scores[task] for c in present)
        for c in present:
            if c.scores[task] == best:
                out.setdefault(c.id, []).append(task)
    return out


# -- the search ---------------------------------------------------------------------------------------


async def run_pareto(
    ctx: SearchContext, config: ParetoConfig, initial_text: str | None = None
) -> SearchResult:
    initial = await start(ctx, initial_text)
    if initial.status != "scored":
        return await ctx.finish(initial, "budget too small to score the initial prompt")
    for iteration in range(1, config.max_iterations + 1):
        scored = [c for c in ctx.candidates if c.status == "scored"]
        pool = pareto_pool(scored)
        by_id = {c.id: c for c in scored}
        if len(pool) >= 2 and ctx.rng.random() < config.merge_probability:
            stopped = await _merge(ctx, [by_id[i] for i in pick_pair(pool, ctx.rng)], iteration)
        else:
            stopped = await _mutate(ctx, config, by_id[pick_parent(pool, ctx.rng)], iteration)
        if stopped is not None:
            return await ctx.finish(initial, stopped)
    return await ctx.finish(initial, f"{config.max_iterations} iterations done")


async def _merge(ctx: SearchContext, parents: list[Candidate], iteration: int) -> str | None:
    first, second = parents
    if not ctx.budget.can_afford(len(ctx.val_tasks)):
        return "rollout budget spent"
    wins = task_wins([c for c in ctx.candidates if c.status == "scored"])
    answer = await ctx.optimizer.complete(MERGE_SYSTEM, merge_request(first, second, wins))
    child = ctx.new(extract_prompt(answer), "merge", [first.id, second.id], iteration)
    if await ctx.check_child(child, f"{first.text}\n{second.text}") and not await ctx.score(child):
        return "rollout budget spent"
    return None


async def _mutate(ctx: SearchContext, config: ParetoConfig, parent: Candidate, iteration: int) -> str | None:
    runner = ctx.candidates_runner
    tasks = ctx.sample_train(config.minibatch_size)
    pairs = await runner.run(parent, tasks, "train")
    if not pairs:
        return "rollout budget spent"
    failed = [t for _, t in pairs if t.reward < config.success_threshold]
    if not failed:
        return None  # nothing to learn from this minibatch
    passed = [t for _, t in pairs if t.reward >= config.success_threshold]
    answer = await ctx.optimizer.complete(REFLECT_SYSTEM, reflect_request(parent.text, failed, passed))
    child = ctx.new(extract_prompt(answer), "reflection", [parent.id], iteration)
    if not await ctx.check_child(child, parent.text):
        return None
    child_pairs = await runner.run(child, [task for task, _ in pairs], "minibatch")
    if not child_pairs:
        await ctx.reject(child, "no budget left to try it")
        return "rollout budget spent"
    parent_score = mean([t.reward for _, t in pairs[: len(child_pairs)]])
    child_score = mean([t.reward for _, t in child_pairs])
    if child_score <= parent_score:
        await ctx.reject(child, f"minibatch {child_score:.2f} <= parent {parent_score:.2f}")
        return None
    if not await ctx.score(child):
        await ctx.reject(child, "no budget left to score it")
        return "rollout budget spent"
    return None
