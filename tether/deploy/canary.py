"""The canary's rule, with no server in it: which sessions a canary serves, how its rewards compare with
the incumbent's, and when that comparison promotes it or rolls it back.

A session goes to the canary by a hash of its name (the same name always the same way, whatever server
asks), with probability `share`. The comparison takes the rewarded sessions of each arm opened while the
canary ran (the same users, the same hours) and the 95% bootstrap interval of mean(canary) -
mean(incumbent). The rule, once each arm has `min_sessions` rewarded sessions:

- promote when the interval's low end is above `-margin` (with the default margin 0: the canary is
  better, and the interval says so);
- roll back when its high end is below 0 (the canary is worse, and the interval says so), or when the
  canary has `max_sessions` rewarded sessions and is still not shown better: it had its chance;
- otherwise wait for more rewards.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from tether.rewards.intervals import difference_interval

INCUMBENT = "incumbent"
CANARY = "canary"
Verdict = Literal["wait", "promote", "rollback"]


@dataclass(frozen=True)
class CanaryRule:
    share: float = 0.1  # of new sessions served by the canary
    min_sessions: int = 20  # rewarded sessions in each arm before any verdict
    max_sessions: int = 200  # rewarded canary sessions after which one not shown better is rolled back
    margin: float = 0.0  # promote when the interval's low end is above -margin
    confidence: float = 0.95

    def check(self) -> None:
        if not 0.0 < self.share < 1.0:
            raise ValueError(f"the canary's share is between 0 and 1 (10% or 0.1), not {self.share}")
        if self.min_sessions < 2 or self.max_sessions < self.min_sessions:
            raise ValueError(
                "the canary needs at least 2 rewarded sessions per arm, and max sessions >= min sessions "
                f"(given {self.min_sessions} and {self.max_sessions})"
            )
        if self.margin < 0:
            raise ValueError(f"the canary's margin is >= 0, not {self.margin}")


def arm_of(session: str, share: float) -> str:
    """The arm that serves `session`: the canary for a `share` of names, by a hash of the name."""
    digest = hashlib.sha256(session.encode()).digest()
    return CANARY if int.from_bytes(digest[:8], "big") / 2**64 < share else INCUMBENT


@dataclass(frozen=True)
class Comparison:
    """Each arm's rewarded sessions, their means, and the interval of canary minus incumbent."""

    incumbent: int
    canary: int
    incumbent_mean: float | None
    canary_mean: float | None
    low: float | None  # of mean(canary) - mean(incumbent); None until each arm has two sessions
    high: float | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def compare(
    incumbent: Sequence[float], canary: Sequence[float], confidence: float = 0.95, resamples: int = 2_000
) -> Comparison:
    low = high = None
    if len(incumbent) >= 2 and len(canary) >= 2:
        low, high = difference_interval(incumbent, canary, confidence, resamples)
    return Comparison(len(incumbent), len(canary), _mean(incumbent), _mean(canary), low, high)


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    reason: str
    comparison: Comparison


def decide(rule: CanaryRule, comparison: Comparison) -> Decision:
    """The rule's verdict on a comparison (see the module's docstring)."""
    c = comparison
    if min(c.incumbent, c.canary) < rule.min_sessions or c.low is None or c.high is None:
        return Decision(
            "wait",
            f"{c.canary} canary and {c.incumbent} incumbent sessions rewarded; "
            f"{rule.min_sessions} of each are needed",
            c,
        )
    interval = f"canary - incumbent {_signed(c.low)} to {_signed(c.high)}"
    if c.low > -rule.margin:
        return Decision("promote", f"{interval}: above {_signed(-rule.margin)}", c)
    if c.high < 0:
        return Decision("rollback", f"{interval}: below 0", c)
    if c.canary >= rule.max_sessions:
        return Decision("rollback", f"{interval} after {c.canary} canary sessions: not shown better", c)
    return Decision("wait", f"{interval}: not yet decided", c)


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _signed(value: float) -> str:
    return f"{value:+.3f}"
