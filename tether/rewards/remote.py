"""A reward-model server as a reward source (`--reward http://HOST:PORT/PATH`).

The contract, one POST per rollout with a JSON body

    {"task": {...the whole task, reference included...}, "output": "...final line..." or null,
     "calls": [{"request": {...chat request as the agent sent it...}, "reply": "...text..."}, ...],
     "agent_reported": [{"name": "...", "status": "...", "status_message": ..., "attributes": {...}}, ...]}

`calls` are the model calls the gateway recorded; `agent_reported` the spans the agent sent about itself
(tool runs, claimed calls), as it sent them: nobody checked those (`evidence.py`).

answered 200 with `{"reward": X}` or `{"rewards": {"NAME": X, ...}}` (finite numbers). A failed
connection, a timeout, a 429 or a 5xx is retried `retries` times; any other status, or an answer out of
the contract, fails that rollout's reward with the server's words quoted, never a silent 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import httpx

from tether.rewards.evidence import recorded_calls, reported_spans
from tether.rewards.judge import RETRIED_STATUS, timed_out
from tether.runner.rewards import RewardError
from tether.store.records import Span


def read_verdict(answer: Any) -> dict[str, float]:
    """The rewards of a 200 answer, or RewardError saying how it breaks the contract."""
    if isinstance(answer, dict) and "reward" in answer:
        values = {"reward": answer["reward"]}
    elif isinstance(answer, dict) and isinstance(answer.get("rewards"), dict) and answer["rewards"]:
        values = answer["rewards"]
    else:
        raise RewardError(
            f'the reward server answered {str(answer)[:300]!r}; expected {{"reward": X}} or '
            '{"rewards": {"NAME": X}}'
        )
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise RewardError(f"the reward server's reward {name!r} is {value!r}, not a finite number")
    return {str(name): float(value) for name, value in values.items()}


@dataclass(frozen=True)
class RemoteReward:
    """`remote(task, output, trace) -> {name: value}`: plain data, so it pickles to Ray workers."""

    url: str
    timeout_s: float = 60.0
    retries: int = 2

    def __call__(self, task: dict[str, Any], output: str | None, trace: list[Span]) -> dict[str, float]:
        body = {
            "task": task,
            "output": output,
            "calls": recorded_calls(trace),
            "agent_reported": reported_spans(trace),
        }
        problem, tries = "", 0
        with httpx.Client(timeout=self.timeout_s) as client:
            for _ in range(self.retries + 1):
                tries += 1
                try:
                    response = client.post(self.url, json=body)
                except httpx.TimeoutException as exc:
                    problem = timed_out(self.timeout_s, exc)
                    continue
                except httpx.HTTPError as exc:
                    problem = f"{type(exc).__name__}: {exc}"
                    continue
                if response.status_code == 200:
                    try:
                        return read_verdict(response.json())
                    except ValueError as exc:  # RewardError is one; so is a body that is not JSON
                        raise RewardError(f"reward server {self.url}: {exc}") from None
                problem = f"status {response.status_code}: {response.text[:300]}"
                if response.status_code not in RETRIED_STATUS:
                    break
        times = "1 try" if tries == 1 else f"{tries} tries"
        raise RewardError(f"reward server {self.url} gave no reward after {times} ({problem})")
