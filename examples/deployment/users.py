"""A simulated user population for a served agent: each user asks one arithmetic word problem in a named
session, the unmodified agent (examples/arith_agent/agent.py) answers through the session's base URL and
key, and the user rates the answer later, and not always: after a random delay, thumbs up when the
number is right, with a share of ratings flipped (noise) and a share of users who never rate.

Nothing here knows the policy or the canary: a user sees only the agent's answer."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

AGENT = Path(__file__).resolve().parents[1] / "arith_agent" / "agent.py"


@dataclass(frozen=True)
class Behaviour:
    delay_s: tuple[float, float] = (0.2, 3.0)  # how long after the answer a user rates it
    flip: float = 0.1  # ratings that say the opposite of the answer's correctness
    silent: float = 0.2  # users who never rate
    concurrency: int = 8  # sessions at once


@dataclass
class Visit:
    session: str
    arm: str
    canary: int | None
    correct: bool
    rated: str | None  # "up", "down" or None


@dataclass
class Users:
    url: str
    deploy_key: str
    reward_key: str
    problems: list[dict[str, Any]]
    behaviour: Behaviour = field(default_factory=Behaviour)
    seed: int = 0

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._lock = threading.Lock()
        self._timers: list[threading.Timer] = []
        self._count = 0

    def visit(self, count: int, prefix: str) -> list[Visit]:
        """`count` users, `behaviour.concurrency` at a time; their ratings arrive later (`settle`)."""
        names = [f"{prefix}-{self._next()}" for _ in range(count)]
        with ThreadPoolExecutor(self.behaviour.concurrency) as pool:
            return list(pool.map(self._one, names))

    def settle(self) -> None:
        """Wait for every rating still on its way."""
        for timer in list(self._timers):
            timer.join()

    def _next(self) -> int:
        with self._lock:
            self._count += 1
            return self._count

    def _draw(self) -> tuple[dict[str, Any], float, bool, bool]:
        with self._lock:  # one seeded stream, drawn under a lock: the same users whatever the threads do
            rng = self._rng
            problem = rng.choice(self.problems)
            return (
                problem,
                rng.uniform(*self.behaviour.delay_s),
                rng.random() < self.behaviour.flip,
                (rng.random() < self.behaviour.silent),
            )

    def _one(self, name: str) -> Visit:
        problem, delay, flip, silent = self._draw()
        deploy = {"Authorization": f"Bearer {self.deploy_key}"}
        opened = httpx.post(
            f"{self.url}/sessions/open",
            json={"session": name, "input": {"question": problem["question"]}},
            headers=deploy,
            timeout=60,
        ).json()
        env = {**os.environ, "OPENAI_BASE_URL": opened["base_url"], "OPENAI_API_KEY": opened["api_key"]}
        done = subprocess.run(
            [sys.executable, str(AGENT), problem["question"]],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        httpx.post(f"{self.url}/sessions/{name}/end", headers=deploy, timeout=60)
        answer = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
        correct = _is(answer, problem["answer"])
        rated = None if silent else ("up" if correct != flip else "down")
        if rated is not None:
            timer = threading.Timer(delay, self._rate, args=(name, rated))
            self._timers.append(timer)
            timer.start()
        return Visit(name, opened.get("arm", "incumbent"), opened.get("canary"), correct, rated)

    def _rate(self, name: str, thumbs: str) -> None:
        httpx.post(
            f"{self.url}/sessions/{name}/rewards",
            json={"thumbs": thumbs, "by": "simulated-user"},
            headers={"Authorization": f"Bearer {self.reward_key}"},
            timeout=60,
        ).raise_for_status()


def _is(answer: str, expected: float) -> bool:
    try:
        return abs(float(answer) - float(expected)) < 1e-6
    except ValueError:
        return False


def load_problems(path: Path) -> list[dict[str, Any]]:
    """The questions and answers of an arith task file (the answer stays with the user)."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [{"question": row["question"], "answer": row["reference"]["answer"]} for row in rows]
