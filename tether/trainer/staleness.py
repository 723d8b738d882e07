"""Async training's staleness rule, per token: a generated token more than `max_staleness` policy versions
older than the learner's is left out of the loss; a transition with no trained token left is dropped.

A merged transition can hold calls made under different versions (the policy was swapped between two of
an agent's calls), so each token is judged by the version of the call that generated it
(`Transition.response_versions`); a transition without per-token versions is judged by its
`policy_version` as a whole. Unknown versions are never stale."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from tether.adapters import Transition


@dataclass
class StalenessReport:
    dropped: int = 0  # transitions with no trained token fresh enough
    masked_tokens: int = 0  # stale tokens left out of the loss in transitions that were kept
    mean: float = 0.0  # versions behind the learner, over the generated tokens (or transitions) judged


def fresh_transitions(
    transitions: Sequence[Transition], current: int | Callable[[Transition], int], max_staleness: int
) -> tuple[list[Transition], StalenessReport]:
    """The transitions with their stale tokens masked, the wholly stale ones dropped. `current`: the
    version served now, or, with several policies, a function giving that of a transition's policy."""
    report = StalenessReport()
    kept: list[Transition] = []
    behind: list[int] = []
    for transition in transitions:
        now = current(transition) if callable(current) else current
        if not transition.response_versions:
            lag = now - (transition.policy_version or now)
            behind.append(lag)
            if lag <= max_staleness:
                kept.append(transition)
            else:
                report.dropped += 1
            continue
        fresh = _mask_stale(transition, now, max_staleness)
        behind += [now - version for version in transition.trained_versions()]
        if fresh.trained_tokens == 0 and transition.trained_tokens > 0:
            report.dropped += 1
            continue
        report.masked_tokens += transition.trained_tokens - fresh.trained_tokens
        kept.append(fresh)
    report.mean = statistics.fmean(behind) if behind else 0.0
    return kept, report


def _mask_stale(transition: Transition, current: int, max_staleness: int) -> Transition:
    mask = [
        0 if version is not None and current - version > max_staleness else keep
        for keep, version in zip(transition.loss_mask, transition.response_versions, strict=True)
    ]
    if mask == transition.loss_mask:
        return transition
    versions = [v for m, v in zip(mask, transition.response_versions, strict=True) if m and v is not None]
    return replace(transition, loss_mask=mask, policy_version=min(versions) if versions else None)
