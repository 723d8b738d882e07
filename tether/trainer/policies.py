"""Several trained policies in one run: a LoRA adapter per agent label, each with its own learner
(adapter, optimizer state, learning rate), version counter, weights folder and metrics.

    --policy writer=lora:r16 --policy rewriter=lora:r8:lr=2e-4 --fixed-agent checker

A policy's name is the model alias its agent asks for: the gateway routes that alias to the policy's
adapter, and every call records the upstream (the policy) and version that generated it. A run without
`--policy` has one policy, `policy`, serving every alias that is not fixed (the layout of earlier runs:
`policies/vN`, `checkpoint/`). With policies, each has `policies/NAME/vN` and `checkpoint/NAME/`.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from tether.adapters.transitions import Transition
from tether.algorithms.advantages import AdvantageBatch, Sample
from tether.contracts import DEFAULT_ROUTE, POLICY_UPSTREAM
from tether.learner.config import TrainConfig

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
RESERVED = frozenset({DEFAULT_ROUTE, "base"})  # the default route, and the frozen base model's upstream


class PolicySpecError(ValueError):
    pass


@dataclass(frozen=True)
class PolicySpec:
    """One trained policy: its name (the model alias routed to it), LoRA rank and learning rate."""

    name: str
    lora_r: int = 16
    lr: float | None = None  # None: the run's --lr

    def train_config(self, base: TrainConfig) -> TrainConfig:
        """The run's update settings with this policy's rank and learning rate."""
        return replace(base, lora_r=self.lora_r, lr=base.lr if self.lr is None else self.lr)


def parse_policy(text: str) -> PolicySpec:
    """`NAME=lora:rR[:lr=X]` (`NAME=lora` takes rank 16 and the run's learning rate)."""
    name, sep, kind = text.partition("=")
    if not sep or not _NAME.fullmatch(name) or name in RESERVED or name.startswith("fixed:"):
        raise PolicySpecError(
            f"--policy {text!r}: expected NAME=lora:rR[:lr=X], NAME the model alias its agent asks for "
            f"(letters, digits, _ . -; not {', '.join(sorted(RESERVED))})"
        )
    parts = kind.split(":")
    if parts[0] != "lora":
        raise PolicySpecError(f"--policy {text!r}: only LoRA policies (lora:rR) can share one base model")
    rank, lr = 16, None
    for part in parts[1:]:
        if re.fullmatch(r"r\d+", part) and int(part[1:]) > 0:
            rank = int(part[1:])
        elif part.startswith("lr=") and _positive(part[3:]):
            lr = float(part[3:])
        else:
            raise PolicySpecError(f"--policy {text!r}: {part!r} is neither rR (a rank > 0) nor lr=X (> 0)")
    return PolicySpec(name, rank, lr)


def _positive(text: str) -> bool:
    try:
        return float(text) > 0
    except ValueError:
        return False


def check_policies(specs: Sequence[PolicySpec], fixed: Iterable[str]) -> None:
    """Refuse two policies of one name, and a name that is also a fixed agent."""
    names = [spec.name for spec in specs]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise PolicySpecError(f"two policies named {', '.join(twice)}: each adapter needs its own name")
    both = sorted(set(names) & set(fixed))
    if both:
        raise PolicySpecError(f"both a trained policy and a fixed agent: {', '.join(both)}")


def policy_of(transition: Transition, names: Sequence[str]) -> str | None:
    """The policy a transition trains: the one that generated it (its upstream), else the one named like
    its agent (a demonstration, rendered from another model's calls); a single policy trains all."""
    if len(names) == 1 and names[0] == POLICY_UPSTREAM:
        return POLICY_UPSTREAM
    for candidate in (transition.policy, transition.agent):
        if candidate in names:
            return candidate
    return None


def split_batch(batch: AdvantageBatch, names: Sequence[str]) -> dict[str, AdvantageBatch]:
    """Each policy's share of one batch: its samples, their advantages as the whole batch computed them
    (a rollout's reward is shared by all its agents). Policies with no sample are left out."""
    parts: dict[str, list[Sample]] = defaultdict(list)
    for sample in batch.samples:
        name = policy_of(sample.transition, names)
        if name is not None:
            parts[name].append(sample)
    return {
        name: AdvantageBatch(samples, replace(batch.report), dict(batch.returns))
        for name, samples in parts.items()
    }
