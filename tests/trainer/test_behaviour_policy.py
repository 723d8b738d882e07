"""The behaviour policy the learner divides by is the one the engine sampled from.

Calls made at temperature 0.7 and top-p 0.9 through the real gateway and the built-in engine (tiny-random)
become transitions carrying their sampler; the learner, scoring them under the same transformation,
starts its update at ratio 1 up to numerics. Scored as the raw softmax (what the learner did before), the
same tokens are far from 1. Greedy calls are refused for RL with a message naming them; forced training
temperatures reach the calls; dynamic sampling refills a batch of equal-reward groups, and launches
only the groups still missing given the signal already found.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import openai
import pytest

from tether.adapters import build_transitions
from tether.algorithms import Sample
from tether.algorithms.advantages import UnreproducibleSampling, assign_advantages
from tether.contracts import CallAttr
from tether.learner.policy import PolicyTrainer, TrainConfig
from tether.runner import CallableAgent
from tether.sampling import RAW, Sampler
from tether.store import SQLiteStore, Task
from tether.store.auth import TokenAuthority
from tether.trainer.loop import Trainer, TrainerConfig, signal_groups

TASKS = [Task(id=f"t{i}", input={"question": f"Tell me about {i}."}) for i in range(4)]


def agent_at(temperature: float, top_p: float = 1.0):  # noqa: ANN201
    async def agent(task: dict, llm) -> str:  # noqa: ANN001
        client = openai.AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key, max_retries=0)
        reply = await client.chat.completions.create(
            model=llm.model,
            messages=[{"role": "user", "content": task["question"]}],
            max_tokens=12,
            temperature=temperature,
            top_p=top_p,
        )
        return reply.choices[0].message.content or ""

    return agent


def length_reward(task: dict, output: str | None) -> float:
    return float(len(output or ""))


def constant_reward(task: dict, output: str | None) -> float:
    return 1.0


def trainer_for(tmp_path: Path, **overrides: object) -> Trainer:
    options: dict[str, object] = {
        "model": "tiny-random",
        "steps": 1,
        "group_size": 3,
        "tasks_per_step": 2,
        "n_workers": 6,
        "val_every": 0,
        "checkpoint_every": 0,
        "timeout_s": 600,  # a loaded machine may stall a call; a timed-out rollout has no reward
        # The learner's default precision, which must be the engine's: on a CPU with native bf16 an autocast
        # learner moved the first ratio by ~4e-3 (at temperature 1 too).
        "policy": TrainConfig(model="tiny-random", lr=1e-3, micro_batch_tokens=4096),
        **overrides,
    }
    store = SQLiteStore(tmp_path / "store.db")
    return Trainer(TrainerConfig(**options), tmp_path / "run", store, TokenAuthority.generate())


def unfinished(trainer: Trainer) -> str:
    """The rollouts that did not succeed, with their errors: why a step's numbers are off."""
    return "; ".join(
        f"{r.id} ({r.status.value}): {r.error}"
        for r in trainer.store.list_rollouts(limit=1000)
        if r.status.value != "succeeded"
    )


def train_transitions(trainer: Trainer):  # noqa: ANN201
    rollouts = [r for r in trainer.store.list_rollouts(limit=1000) if r.mode == "train"]
    return build_transitions(trainer.store, rollouts).transitions


def test_first_update_ratio_is_one_at_temperature_07(tmp_path: Path) -> None:
    trainer = trainer_for(tmp_path)
    result = trainer.fit(CallableAgent(agent_at(0.7, 0.9)), TASKS[:2], (), length_reward)
    step = next(r for r in result.history if r["kind"] == "train")
    assert abs(step["train.mean_ratio"] - 1.0) < 1e-3
    assert step["train.truncated_fraction"] == 0.0

    transitions = train_transitions(trainer)
    assert {t.sampler for t in transitions} == {Sampler(temperature=0.7, top_p=0.9)}
    learner = PolicyTrainer(TrainConfig(model="tiny-random"))  # the weights that sampled them
    scored = learner.logprobs(transitions)
    worst = max_gap(transitions, scored)
    assert worst < 1e-3
    # The raw softmax, which the learner used to score, is not the behaviour policy at 0.7.
    raw = learner.logprobs([_with_sampler(t, RAW) for t in transitions])
    gap = max_gap(transitions, raw)
    assert gap > 0.1


def max_gap(transitions, scored: list[list[float]]) -> float:  # noqa: ANN001
    """The largest gap between a scored and a recorded logprob."""
    return max(
        abs(a - b)
        for t, logprobs in zip(transitions, scored, strict=True)
        for a, b in zip(logprobs, t.response_logprobs, strict=True)
    )


def _with_sampler(transition, sampler: Sampler):  # noqa: ANN001, ANN202
    from dataclasses import replace

    return replace(transition, sampler=sampler)


def test_greedy_training_calls_are_refused_by_name(tmp_path: Path) -> None:
    trainer = trainer_for(tmp_path)
    with pytest.raises(SystemExit, match=r"greedy decoding.*--train-temperature"):
        trainer.fit(CallableAgent(agent_at(0.0)), TASKS[:2], (), length_reward)
    transitions = train_transitions(trainer)
    with pytest.raises(UnreproducibleSampling, match="rollout"):
        assign_advantages(transitions)
    learner = PolicyTrainer(TrainConfig(model="tiny-random", bf16=False))
    samples = [Sample(t, advantage=1.0, weight=1.0) for t in transitions]
    with pytest.raises(UnreproducibleSampling):
        learner.step(samples)


def test_train_temperature_is_forced_on_training_calls_only(tmp_path: Path) -> None:
    trainer = trainer_for(tmp_path, train_sampling={"temperature": 1.0}, val_every=0)
    result = trainer.fit(CallableAgent(agent_at(0.0)), TASKS[:2], TASKS[2:3], length_reward)
    assert result.steps == 1
    samplers = {}
    for rollout in trainer.store.list_rollouts(limit=1000):
        for span in trainer.store.query_spans(rollout_id=rollout.id):
            samplers.setdefault(rollout.mode, set()).add(
                Sampler.from_attr(span.attributes[CallAttr.SAMPLING])
            )
    assert samplers["train"] == {Sampler(temperature=1.0)}
    assert samplers["val"] == {Sampler(temperature=0.0)}


def signal_reward() -> Callable[[dict, str | None], float]:
    """Rewards that vary within the groups of tasks marked `signal` (a reward of its own per rollout) and
    are all equal elsewhere: which groups carry signal is known, whatever the tiny model replies."""
    counter = itertools.count()

    def reward(task: dict, output: str | None) -> float:
        return float(next(counter)) if task.get("signal") else 1.0

    return reward


def marked_tasks(*signal: bool) -> list[Task]:
    return [
        Task(id=f"t{i}", input={"question": f"Tell me about {i}.", "signal": s}) for i, s in enumerate(signal)
    ]


def launch_rounds(trainer: Trainer) -> list[tuple[int, int]]:
    """The train step's rounds of groups, in launch order: (groups launched, of them with signal). A
    round's groups are named `TASK@stepN` (the first round) or `TASK@stepN.K`."""
    groups: dict[int, set[str]] = defaultdict(set)
    for rollout in trainer.store.list_rollouts(limit=1000):
        if rollout.mode == "train" and rollout.group_id is not None:
            groups[round_of(rollout.group_id)].add(rollout.group_id)
    rewards: dict[str, set[float]] = defaultdict(set)
    for t in train_transitions(trainer):
        rewards[str(t.group_id)].add(t.reward)
    return [(len(groups[r]), sum(len(rewards[g]) > 1 for g in groups[r])) for r in sorted(groups)]


def round_of(group_id: str) -> int:
    label = group_id.rsplit("@", 1)[1]
    return int(label.split(".")[1]) if "." in label else 0


def assert_launches_only_the_missing_groups(
    rounds: list[tuple[int, int]], first: int, wanted: int, cap: int
) -> None:
    """Each round after the first launches the groups still missing for `wanted` with signal, given the
    signal of the rounds before it (never beyond `cap`); the last round leaves the step complete."""
    assert rounds[0][0] == first, rounds
    launched = with_signal = 0
    for number, (groups, signal) in enumerate(rounds):
        if number:
            assert groups == min(wanted - with_signal, cap - launched) > 0, rounds
        launched, with_signal = launched + groups, with_signal + signal
    assert with_signal >= wanted or launched == cap, rounds


def test_dynamic_sampling_refills_up_to_the_cap(tmp_path: Path) -> None:
    # Every reward equal: no group has signal, so the step keeps launching groups until the cap.
    trainer = trainer_for(tmp_path, min_signal_groups=2, max_groups_per_step=4)
    result = trainer.fit(CallableAgent(agent_at(1.0)), TASKS, (), constant_reward)
    step = next(r for r in result.history if r["kind"] == "train")
    assert step["groups_generated"] == 4 and step["groups_with_signal"] == 0
    assert step["zero_variance_fraction"] == 1.0
    assert step["rollouts"] == 4 * 3
    assert "skipped" in step
    assert launch_rounds(trainer) == [(2, 0), (2, 0)]


def test_dynamic_sampling_launches_no_group_the_signal_found_makes_needless(tmp_path: Path) -> None:
    # Every group carries signal: the first round's two groups complete the step, none more is launched.
    trainer = trainer_for(tmp_path, min_signal_groups=2, max_groups_per_step=4)
    result = trainer.fit(CallableAgent(agent_at(1.0)), marked_tasks(*[True] * 4), (), signal_reward())
    step = next(r for r in result.history if r["kind"] == "train")
    assert step["failed_rollouts"] == 0, unfinished(trainer)
    assert step["groups_generated"] == step["groups_with_signal"] == 2
    assert step["rollouts"] == 2 * 3
    assert launch_rounds(trainer) == [(2, 2)]

    # Half the tasks carry signal; seed 1 shuffles one of them into the first round: each refill
    # launches only the groups still missing after the signal already found (one, then one more).
    mixed = trainer_for(tmp_path / "mixed", min_signal_groups=2, max_groups_per_step=4, seed=1)
    history = mixed.fit(
        CallableAgent(agent_at(1.0)), marked_tasks(True, False, True, False), (), signal_reward()
    ).history
    step = next(r for r in history if r["kind"] == "train")
    assert step["failed_rollouts"] == 0, unfinished(mixed)
    rounds = launch_rounds(mixed)
    assert rounds[0] == (2, 1), rounds
    assert_launches_only_the_missing_groups(rounds, first=2, wanted=2, cap=4)
    assert step["groups_generated"] == sum(groups for groups, _ in rounds)
    assert step["groups_with_signal"] == signal_groups(train_transitions(mixed)) == 2


def test_dynamic_sampling_refills_up_to_the_cap_in_async_mode(tmp_path: Path) -> None:
    # Async: once tasks_per_step groups are in and too few carry signal, more are launched in the places
    # of those consumed, until the cap; every step of a run with no signal takes the cap's groups.
    trainer = trainer_for(tmp_path, async_mode=True, steps=2, min_signal_groups=2, max_groups_per_step=5)
    assert trainer.config.groups_ahead == 4  # fewer than the cap: the refill must launch more
    result = trainer.fit(CallableAgent(agent_at(1.0)), TASKS, (), constant_reward)
    steps = [r for r in result.history if r["kind"] == "train"]
    assert len(steps) == 2
    # A rollout that failed has no reward (0.0 for training), which would put signal in its group.
    assert all(step["failed_rollouts"] == 0 for step in steps), unfinished(trainer)
    for step in steps:
        assert step["groups_generated"] == 5 and step["groups_with_signal"] == 0
        assert step["zero_variance_fraction"] == 1.0
        assert step["rollouts"] == 5 * 3
        assert step["stale_dropped"] == 0
        assert "skipped" in step
    launched = {r.group_id for r in trainer.store.list_rollouts(limit=1000) if r.mode == "train"}
    assert 2 * 5 <= len(launched) <= 2 * 5 + trainer.config.groups_ahead

    # Varied rewards: the step stops launching once two groups carry signal.
    varied = trainer_for(
        tmp_path / "varied", async_mode=True, steps=1, min_signal_groups=2, max_groups_per_step=5
    )
    history = varied.fit(CallableAgent(agent_at(1.0)), TASKS, (), length_reward).history
    step = next(r for r in history if r["kind"] == "train")
    assert 2 <= step["groups_generated"] <= 5
    assert step["groups_with_signal"] >= 2 or step["groups_generated"] == 5
    assert step["groups_generated"] == 2 or step["groups_with_signal"] <= 2


@pytest.mark.parametrize("max_staleness", [0, 1])
def test_async_generation_is_throttled_not_dropped(tmp_path: Path, max_staleness: int) -> None:
    # Groups generate while the trainer updates, at most (max_staleness + 1) x tasks_per_step at once:
    # every sample is consumed within max_staleness versions, so none is thrown away.
    trainer = trainer_for(tmp_path, async_mode=True, steps=3, max_staleness=max_staleness)
    assert trainer.config.groups_ahead == 2 * (max_staleness + 1)
    result = trainer.fit(CallableAgent(agent_at(1.0)), TASKS, (), length_reward)
    steps = [r for r in result.history if r["kind"] == "train"]
    assert len(steps) == 3
    assert all(r["stale_dropped"] == 0 for r in steps)
    assert all(r["staleness_mean"] <= max_staleness for r in steps)
    launched = {r.group_id for r in trainer.store.list_rollouts(limit=1000) if r.mode == "train"}
    assert len(launched) <= 3 * 2 + trainer.config.groups_ahead  # consumed, plus at most one window
