"""Credit assignment: from rollout rewards to a per-transition advantage and loss weight.

A rollout is the sequence of its transitions ordered by `call_index`. Its per-call rewards are
`r_k = step_reward_k`, plus the rollout's final `reward` on the last call, and the return from call k is
the discounted reward-to-go `G_k = sum_{j>=k} gamma**(j-k) * r_j`. The rollout's return is `G_0`; with
gamma=1 it is the final reward plus the sum of the step rewards.

Rollouts of the same task form a group (GRPO): `group_id`, falling back to `task_id`. Advantages are
relative to the group, so a group whose returns are all equal carries no learning signal.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal, cast

from tether.adapters.transitions import Transition
from tether.contracts import ADVANTAGE_METHODS
from tether.sampling import sampler_problems

AdvantageMethod = Literal["grpo", "drgrpo", "rloo"]
METHODS: tuple[str, ...] = ADVANTAGE_METHODS


def advantage_method(name: str) -> AdvantageMethod:
    if name not in METHODS:
        raise ValueError(f"unknown advantage method {name!r}: expected one of {', '.join(METHODS)}")
    return cast(AdvantageMethod, name)


# Returns within this distance of each other count as equal (zero-variance group).
ZERO_VARIANCE_TOL = 1e-9
IMITATION: str = "sft"  # the report method of a supervised batch (`imitation_batch`)


class DemonstrationInRLBatch(ValueError):
    """A demonstration (another model's text) offered to an RL update: RL trains only on the policy's
    own tokens, with the logprobs it recorded when it generated them."""


class UnreproducibleSampling(ValueError):
    """Tokens whose sampling distribution the learner cannot score (greedy calls, logprobs of unverified
    provenance) offered to an RL update: their importance ratio would be wrong (`tether.sampling`)."""


@dataclass
class Sample:
    """A transition with its advantage and its loss weight.

    `weight` is this transition's share of its rollout's trained tokens, so the weights of one rollout
    sum to 1 however many calls it made: in the loss each rollout counts once (see PolicyTrainer).
    """

    transition: Transition
    advantage: float
    weight: float = 1.0
    # One advantage per response token, when they differ along the response (on-policy distillation's
    # per-token signal); `advantage` is then their mean over the trained tokens, for reports.
    token_advantages: list[float] | None = None

    @property
    def advantages(self) -> float | list[float]:
        """What the learner scales each token's surrogate by: one value, or one per response token."""
        return self.advantage if self.token_advantages is None else self.token_advantages

    @property
    def rollout_id(self) -> str:
        return self.transition.rollout_id


@dataclass
class AdvantageReport:
    method: str
    gamma: float
    per_call_returns: bool
    transitions: int = 0
    rollouts: int = 0
    groups: int = 0
    groups_used: int = 0
    groups_zero_variance: int = 0  # all returns equal, singletons included
    groups_dropped: int = 0  # zero-variance groups left out (drop_zero_variance=True)
    groups_singleton: int = 0  # groups of one rollout: no baseline, advantage 0
    rollouts_used: int = 0
    samples: int = 0
    empty_transitions: int = 0  # transitions without any trained token, never sampled
    mean_return: float = 0.0
    mean_abs_advantage: float = 0.0


@dataclass
class AdvantageBatch:
    samples: list[Sample]
    report: AdvantageReport
    returns: dict[str, float] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.samples)


def group_key(transition: Transition) -> str:
    return transition.group_id if transition.group_id is not None else transition.task_id


def calls_by_rollout(transitions: Iterable[Transition]) -> dict[str, list[Transition]]:
    """Each rollout's transitions in call order (the first-seen order of rollouts is kept)."""
    calls: dict[str, list[Transition]] = defaultdict(list)
    for transition in transitions:
        calls[transition.rollout_id].append(transition)
    return {rid: sorted(items, key=lambda t: t.call_index) for rid, items in calls.items()}


def rewards_to_go(calls: Sequence[Transition], gamma: float = 1.0) -> list[float]:
    """G_k for each call of one rollout, given in call order; the final reward comes from the last call."""
    if not calls:
        return []
    rewards = [float(t.step_reward) for t in calls]
    rewards[-1] += float(calls[-1].reward)
    returns = [0.0] * len(rewards)
    running = 0.0
    for k in range(len(rewards) - 1, -1, -1):
        running = rewards[k] + gamma * running
        returns[k] = running
    return returns


def rollout_returns(transitions: Iterable[Transition], gamma: float = 1.0) -> dict[str, float]:
    """The return G_0 of each rollout: final reward plus step rewards, discounted over the call order."""
    return {rid: rewards_to_go(calls, gamma)[0] for rid, calls in calls_by_rollout(transitions).items()}


def group_advantages(values: Sequence[float], method: AdvantageMethod, eps: float = 1e-6) -> list[float]:
    """Advantages of the members of one group.

    grpo:   (r - mean) / (std + eps), std being the population std (divides by n, not n - 1).
    drgrpo: r - mean (Dr. GRPO: no std scaling, which would up-weight near-uniform groups).
    rloo:   r - mean of the other members (= n / (n - 1) * (r - mean)); 0 for a group of one.
    """
    n = len(values)
    if n == 0:
        return []
    total = math.fsum(values)
    mean = total / n
    if method == "grpo":
        std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / n)
        return [(v - mean) / (std + eps) for v in values]
    if method == "drgrpo":
        return [v - mean for v in values]
    if method == "rloo":
        if n == 1:
            return [0.0]
        return [v - (total - v) / (n - 1) for v in values]
    raise ValueError(f"unknown advantage method {method!r}: expected one of {', '.join(METHODS)}")


def is_zero_variance(values: Sequence[float]) -> bool:
    return max(values) - min(values) <= ZERO_VARIANCE_TOL


def assign_advantages(
    transitions: Iterable[Transition],
    *,
    method: AdvantageMethod = "grpo",
    gamma: float = 1.0,
    drop_zero_variance: bool = True,
    per_call_returns: bool = False,
) -> AdvantageBatch:
    """Turn transitions into weighted, advantage-carrying samples.

    By default each rollout gets one advantage from its return G_0 relative to its group, broadcast to
    all its transitions. With `per_call_returns`, every call is scored by its own reward-to-go G_k and
    normalised against all the calls of its group pooled together (each call is one value in
    `group_advantages`); simple, but note that later calls have fewer rewards left to collect.

    Groups whose values are all equal (singletons included) are dropped unless `drop_zero_variance`
    is False, in which case their samples are kept with advantage 0 (they still count in the loss
    normalisation and in an optional KL term). Transitions with no trained token are never sampled.
    """
    method = advantage_method(method)
    items = list(transitions)
    refuse_demonstrations(items)
    refuse_unreproducible_sampling(items)
    rollouts = calls_by_rollout(items)
    report = AdvantageReport(method=method, gamma=gamma, per_call_returns=per_call_returns)
    report.transitions, report.rollouts = len(items), len(rollouts)

    to_go = {rid: rewards_to_go(calls, gamma) for rid, calls in rollouts.items()}
    for rid, values in to_go.items():
        if not all(math.isfinite(v) for v in values):
            raise ValueError(f"rollout {rid!r} has a non-finite reward or step reward")
    returns = {rid: values[0] for rid, values in to_go.items()}

    groups: dict[str, list[str]] = defaultdict(list)
    for rid, calls in rollouts.items():
        groups[group_key(calls[0])].append(rid)
    report.groups = len(groups)

    advantage_of: dict[int, float] = {}  # id(transition) -> advantage
    for rids in groups.values():
        if len(rids) == 1:
            report.groups_singleton += 1
        members = [(t, to_go[rid][k]) for rid in rids for k, t in enumerate(rollouts[rid])]
        values = [g for _, g in members] if per_call_returns else [returns[rid] for rid in rids]
        if is_zero_variance(values):
            report.groups_zero_variance += 1
            if drop_zero_variance:
                report.groups_dropped += 1
                continue
        report.groups_used += 1
        report.rollouts_used += len(rids)
        advantages = group_advantages(values, method)
        if per_call_returns:
            advantage_of.update((id(t), a) for (t, _), a in zip(members, advantages, strict=True))
        else:
            for rid, advantage in zip(rids, advantages, strict=True):
                advantage_of.update((id(t), advantage) for t in rollouts[rid])

    samples = weighted_samples(items, advantage_of)
    report.samples = len(samples)
    report.empty_transitions = sum(1 for t in items if id(t) in advantage_of and t.trained_tokens == 0)
    report.mean_return = math.fsum(returns.values()) / len(returns) if returns else 0.0
    if samples:
        report.mean_abs_advantage = math.fsum(abs(s.advantage) for s in samples) / len(samples)
    return AdvantageBatch(samples=samples, report=report, returns=returns)


def refuse_demonstrations(transitions: Sequence[Transition]) -> None:
    demonstrations = [t for t in transitions if t.demonstration]
    if demonstrations:
        first = demonstrations[0]
        raise DemonstrationInRLBatch(
            f"{len(demonstrations)} demonstration transition(s) (rollout {first.rollout_id!r} first) in an "
            "RL batch: RL trains only on tokens the policy generated; train on demonstrations with "
            "--algorithm sft or the --sft-steps warm start"
        )


def batch_mass(samples: Sequence[Sample], loss_agg: str) -> float:
    """What a batch's loss is divided by: the sum of rollout weights ("rollout": every rollout counts
    once) or of trained tokens ("token": every token counts once)."""
    return math.fsum(sample_mass(s, loss_agg) for s in samples)


def sample_mass(sample: Sample, loss_agg: str) -> float:
    return float(sample.transition.trained_tokens) if loss_agg == "token" else sample.weight


def refuse_unreproducible_sampling(transitions: Sequence[Transition]) -> None:
    """Raise UnreproducibleSampling naming the calls whose sampler an RL learner cannot score."""
    samplers = {
        f"rollout {t.rollout_id!r} call {t.call_index}"
        + (f" (agent {t.agent})" if t.agent else ""): t.sampler
        for t in transitions
        if not t.demonstration
    }
    problem = sampler_problems(samplers)
    if problem is not None:
        raise UnreproducibleSampling(problem)


def imitation_batch(transitions: Iterable[Transition]) -> AdvantageBatch:
    """A supervised batch: every transition with advantage 1, each rollout weighted once. Demonstrations
    (no recorded logprobs) and the policy's own good rollouts may both be in it."""
    items = list(transitions)
    rollouts = calls_by_rollout(items)
    report = AdvantageReport(method=IMITATION, gamma=1.0, per_call_returns=False)
    report.transitions, report.rollouts, report.rollouts_used = len(items), len(rollouts), len(rollouts)
    report.groups = report.groups_used = len({group_key(calls[0]) for calls in rollouts.values()})
    samples = weighted_samples(items, {id(t): 1.0 for t in items})
    report.samples = len(samples)
    report.empty_transitions = sum(1 for t in items if t.trained_tokens == 0)
    report.mean_abs_advantage = 1.0 if samples else 0.0
    return AdvantageBatch(samples=samples, report=report)


def weighted_samples(items: list[Transition], advantage_of: dict[int, float]) -> list[Sample]:
    """Samples of the transitions with an advantage and a trained token, in input order; weight = the
    transition's share of its rollout's trained tokens."""
    kept = [t for t in items if id(t) in advantage_of and t.trained_tokens > 0]
    rollout_tokens: dict[str, int] = defaultdict(int)
    for t in kept:
        rollout_tokens[t.rollout_id] += t.trained_tokens
    return [
        Sample(
            transition=t,
            advantage=advantage_of[id(t)],
            weight=t.trained_tokens / rollout_tokens[t.rollout_id],
        )
        for t in kept
    ]
