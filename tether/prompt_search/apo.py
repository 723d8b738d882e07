"""APO: automatic prompt optimization by beam search with textual gradients.

Each round, for each prompt of the beam: run the agent on a batch of training tasks with it, ask the
optimizer model for a critique of the prompt from those runs (the textual gradient), ask it
`branch_factor` times to rewrite the prompt from the critique, score each rewrite on the validation
subset, and keep the best `beam_width` of the beam and its children. A rewrite that lost a
`{placeholder}` of its parent is rejected without running it. The rollout budget is granted before
any rollout starts: a batch is cut to what is left, and a candidate is scored only when the whole
validation subset fits, so the search never runs past it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tether.prompt_search.search import (
    Candidate,
    SearchContext,
    SearchResult,
    Trace,
    extract_prompt,
    render_traces,
    start,
)

CRITIC_SYSTEM = (
    "You improve the system prompt of an AI agent. You read runs of the agent and explain, briefly and "
    "concretely, what in the prompt made it fail and what should change."
)
REWRITE_SYSTEM = (
    "You rewrite the system prompt of an AI agent. Keep every {placeholder} of the prompt exactly as it is. "
    "Answer with the new prompt only, between <new_prompt> and </new_prompt>."
)


@dataclass
class APOConfig:
    beam_width: int = 2
    branch_factor: int = 2
    rounds: int = 3
    batch_size: int = 4  # training rollouts per beam prompt per round, read by the critique
    val_batch_size: int = 4  # the validation subset every candidate is scored on
    budget: int = 64  # agent rollouts, all included
    seed: int = 0

    def __post_init__(self) -> None:
        if min(self.beam_width, self.branch_factor, self.batch_size, self.val_batch_size, self.budget) < 1:
            raise ValueError("beam width, branch factor, batch sizes and budget must be at least 1")
        if self.rounds < 0:
            raise ValueError("rounds must be at least 0")


def critique_request(prompt: str, traces: Sequence[Trace]) -> str:
    return (
        f"The agent's system prompt:\n<prompt>\n{prompt}\n</prompt>\n\n"
        f"Runs of the agent with it (reward: higher is better):\n\n{render_traces(traces)}\n\n"
        "Why did the prompt lead to the low rewards, and what should change? Give a short critique."
    )


def rewrite_request(prompt: str, critique: str, index: int, count: int) -> str:
    return (
        f"The agent's system prompt:\n<prompt>\n{prompt}\n</prompt>\n\nA critique of it:\n{critique}\n\n"
        f"Write an improved prompt that addresses the critique (variant {index + 1} of {count}; make it "
        "differ from the others). Answer with <new_prompt>...</new_prompt>."
    )


def select_beam(pool: Sequence[Candidate], width: int) -> list[Candidate]:
    """The best `width` scored candidates; on equal scores the older one stays."""
    ranked = sorted(
        (c for c in pool if c.status == "scored"), key=lambda c: (-(c.score or 0.0), pool.index(c))
    )
    return ranked[:width]


async def run_apo(ctx: SearchContext, config: APOConfig, initial_text: str | None = None) -> SearchResult:
    initial = await start(ctx, initial_text)
    if initial.status != "scored":
        return await ctx.finish(initial, "budget too small to score the initial prompt")
    beam = [initial]
    for round_number in range(1, config.rounds + 1):
        children, stopped = await _expand(ctx, config, beam, round_number)
        beam = select_beam([*beam, *children], config.beam_width)
        if stopped is not None:
            return await ctx.finish(initial, stopped)
    return await ctx.finish(initial, f"{config.rounds} rounds done")


async def _expand(
    ctx: SearchContext, config: APOConfig, beam: Sequence[Candidate], round_number: int
) -> tuple[list[Candidate], str | None]:
    """The scored children of this round's beam, and why the search must stop (None: it may go on)."""
    children: list[Candidate] = []
    for parent in beam:
        pairs = await ctx.candidates_runner.run(parent, ctx.sample_train(config.batch_size), "train")
        if not pairs:
            return children, "rollout budget spent"
        critique = await ctx.optimizer.complete(
            CRITIC_SYSTEM, critique_request(parent.text, [t for _, t in pairs])
        )
        for index in range(config.branch_factor):
            answer = await ctx.optimizer.complete(
                REWRITE_SYSTEM, rewrite_request(parent.text, critique, index, config.branch_factor)
            )
            child = ctx.new(extract_prompt(answer), "rewrite", [parent.id], round_number)
            child.critique = critique
            if not await ctx.check_child(child, parent.text):
                continue
            if not await ctx.score(child):
                await ctx.reject(child, "no budget left to score it")
                return children, "rollout budget spent"
            children.append(child)
    return children, None
