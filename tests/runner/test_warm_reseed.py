"""Warm children do not share random numbers: every child forked from one warm interpreter that had
numpy and `random` imported before the fork draws its own numbers from both global generators, as a
cold start would. Real zygote, real agent process (`agents/random_agent.py`)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from tether.runner import LLM, CommandAgent
from tether.runner.warm import WarmStarts

AGENT = Path(__file__).parent / "agents" / "random_agent.py"
LLM_STUB = LLM(base_url="http://127.0.0.1:9/v1", api_key="tro-none")
# numpy's thread pools started at import would make the zygote refuse to fork.
ONE_THREAD = {name: "1" for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
CHILDREN = 4


def draw(agent: CommandAgent, rollout: int) -> dict[str, Any]:
    result = asyncio.run(agent.run({}, {"TETHER_ROLLOUT_ID": f"ro-{rollout}"}, LLM_STUB, 60))
    assert result.ok, result.stderr
    drawn: dict[str, Any] = json.loads(result.output or "{}")
    return drawn


def test_every_warm_child_draws_its_own_numpy_and_random_numbers(warm: WarmStarts) -> None:
    agent = CommandAgent(f"{sys.executable} {AGENT}", env=ONE_THREAD, warm=warm)
    draws = [draw(agent, rollout) for rollout in range(CHILDREN)]

    # Every child was forked, with numpy already imported in the interpreter it was forked from: the
    # generators' state before the fork was the same for all of them.
    assert not warm.cold, warm.cold
    assert warm.forked == CHILDREN
    assert [d["preloaded"] for d in draws] == [True] * CHILDREN
    # At most two zygotes (the first, and the successor it taught what to preload) for four children:
    # children forked from one zygote, from one and the same parent state, differ too.
    assert len(warm.retired) <= 1
    numpy_draws = [d["numpy"] for d in draws]
    random_draws = [d["random"] for d in draws]
    assert len(set(numpy_draws)) == CHILDREN, numpy_draws
    assert len(set(random_draws)) == CHILDREN, random_draws
