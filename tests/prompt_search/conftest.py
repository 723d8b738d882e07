"""A search rig: the real gateway over a real SQLite store, the policy routed to a scripted upstream,
and the example agent (a plain script with its own hard-coded system prompt) run by the real runner."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.gateway.fake_upstream import Behaviour
from tests.prompt_search import scripted
from tests.rigs import GatewayRig, make_rig
from tether.prompt_search.search import SEARCH_MODE, Budget, CandidateRunner, OptimizerLLM, SearchContext
from tether.runner import AgentEndpoints, CommandAgent, Runner, RunnerConfig, load_callable
from tether.store import Rollout, Task

AGENT = scripted.EXAMPLE / "agent.py"
REWARD = f"{scripted.EXAMPLE / 'reward.py'}:correct"
AGENT_SYSTEM = "You are a helpful assistant. Answer with one word."


def tasks(name: str) -> list[Task]:
    lines = (scripted.EXAMPLE / name).read_text().splitlines()
    return [Task(id=item.pop("id"), input=item) for item in map(json.loads, lines)]


@dataclass
class SearchRig:
    rig: GatewayRig
    policy: scripted.Policy

    def context(
        self, budget: int, optimizer_url: str, algorithm: str, override: str = "replace", seed: int = 0
    ) -> SearchContext:
        runner = Runner(
            self.rig.store,
            CommandAgent(f"{sys.executable} {AGENT}"),
            AgentEndpoints(self.rig.url, self.rig.auth),
            load_callable(REWARD),
            RunnerConfig(n_workers=4, timeout_s=60),
        )
        candidates = CandidateRunner(self.rig.store, runner, Budget(budget), override_mode=override)
        val = tasks("val.jsonl")[:4]
        return SearchContext(
            candidates, OptimizerLLM(optimizer_url, "scripted"), tasks("train.jsonl"), val, algorithm, seed
        )


@pytest.fixture
def search_rig(tmp_path: Path) -> Iterator[SearchRig]:
    policy = scripted.Policy()
    with scripted.serve(policy) as url:
        for rig in make_rig(tmp_path, url, Behaviour()):
            yield SearchRig(rig, policy)


async def run_search(ctx: SearchContext, search):  # noqa: ANN001, ANN201
    try:
        return await search
    finally:
        await ctx.candidates_runner.runner.stop()


def search_rollouts(rig: SearchRig) -> list[Rollout]:
    return [r for r in rig.rig.store.list_rollouts(limit=10_000) if r.mode == SEARCH_MODE]
