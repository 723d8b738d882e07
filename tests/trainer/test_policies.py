"""Several policies in one run (`--policy NAME=lora:rR`): a LoRA adapter per agent label, served side by
side by one engine (each row of a mixed batch decoding exactly as its own adapter alone), each trained on
its own calls with its own optimizer and versions, checkpointed and resumed exactly; an agent label that
maps to no policy stops the run."""

from __future__ import annotations

import asyncio
import itertools
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.engines.test_transformers_engine import assert_close, make_adapter, prompt_of
from tests.trainer.test_loop import TASKS, assert_same, learner_state, length_reward, train_rollouts
from tests.trainer.test_loop import make_trainer as loop_trainer
from tether.contracts import CallAttr
from tether.engines import SamplingParams
from tether.engines.transformers_engine import TransformersEngine
from tether.learner.policy import PolicyTrainer
from tether.runner import CallableAgent
from tether.trainer.loop import Trainer, TrainerConfig
from tether.trainer.policies import PolicySpec, PolicySpecError, check_policies, parse_policy

POLICIES = [PolicySpec("writer", lora_r=4), PolicySpec("rewriter", lora_r=8, lr=1e-2)]


def two_role_agent(roles: tuple[str, ...] = ("writer", "rewriter")):  # noqa: ANN201
    """An agent whose roles ask for their own model names, as the SQL agent's writer and rewriter do."""

    async def agent(task: dict, llm) -> str:  # noqa: ANN001
        client = openai.AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key, max_retries=0)
        text = task["question"]
        for role in roles:
            reply = await client.chat.completions.create(
                model=role, messages=[{"role": "user", "content": f"{role}: {text}"}], max_tokens=6
            )
            text = reply.choices[0].message.content or ""
        return text

    return agent


def distinct_rewards() -> Callable[[dict, str | None], float]:
    """A reward of its own for every rollout, so every group has variance and all its samples are
    trained on (the tiny model's random replies can tie in length, and a tied group is skipped)."""
    counter = itertools.count()

    def reward(task: dict, output: str | None) -> float:
        return float(next(counter))

    return reward


def make_trainer(tmp_path: Path, **overrides: object) -> Trainer:
    return loop_trainer(tmp_path, **{"val_every": 0, "policies": POLICIES, **overrides})


def own_learners(trainer: Trainer) -> dict[str, PolicyTrainer]:
    learners = {spec.name: PolicyTrainer(spec.train_config(trainer.config.policy)) for spec in POLICIES}
    trainer.learners = dict(learners)
    return learners


def test_each_policy_trains_its_own_calls_and_serves_its_own_versions(tmp_path: Path) -> None:
    trainer = make_trainer(tmp_path)
    learners = own_learners(trainer)
    before = {name: learner_state(learner)["weights"] for name, learner in learners.items()}
    result = trainer.fit(CallableAgent(two_role_agent()), TASKS, [], distinct_rewards())

    train = [r for r in result.history if r["kind"] == "train"]
    assert [r["step"] for r in train] == [1, 2]
    for record, version in zip(train, (1, 2), strict=True):
        assert record["policy_version.writer"] == record["policy_version.rewriter"] == version
        assert record["samples.writer"] == record["samples.rewriter"] == 8  # one call each, 8 rollouts
        assert {"train.writer.loss", "train.rewriter.loss"} <= set(record)
    # each policy has its own rank, learning rate and weights, and each was updated
    assert learners["writer"].config.lora_r == 4 and learners["rewriter"].config.lr == 1e-2
    for name, learner in learners.items():
        after = learner_state(learner)["weights"]
        assert any(not (after[key] == before[name][key]).all() for key in after), name
    assert train[0]["train.rewriter.lr"] == pytest.approx(1e-2) and train[0]["train.writer.lr"] == 5e-3
    # every call names the policy that generated it and the version it served then
    store = trainer.store
    for rollout in store.list_rollouts(limit=1000):
        spans = sorted(store.query_spans(rollout_id=rollout.id), key=lambda s: s.start_time)
        assert [s.attributes[CallAttr.UPSTREAM] for s in spans] == ["writer", "rewriter"]
        step = rollout.metadata["step"]
        assert {s.attributes[CallAttr.POLICY_VERSION] for s in spans} == {step}
    for name in ("writer", "rewriter"):
        assert sorted(p.name for p in (tmp_path / "run" / "policies" / name).iterdir()) == ["v1", "v2"]
        assert (tmp_path / "run" / "checkpoint" / name).is_dir()


def test_a_two_policy_run_resumes_exactly(tmp_path: Path) -> None:
    """Stopped at step 1's checkpoint and resumed: both adapters, both optimizers and both versions are
    where the uninterrupted run had them after step 1, and step 2 runs on the same tasks with version 1
    of each policy."""
    straight = make_trainer(tmp_path / "straight", tasks_per_step=3)
    straight_learners = own_learners(straight)
    stopped = tmp_path / "stopped"
    after_step_1: dict[str, Any] = {}

    def watch(record: dict[str, Any]) -> None:
        if record["kind"] == "train" and record["step"] == 1:
            after_step_1.update({n: learner_state(learner) for n, learner in straight_learners.items()})
        if record["kind"] == "train" and record["step"] == 2:
            shutil.copytree(straight.run_dir / "checkpoint", stopped / "run" / "checkpoint")

    straight.on_step = watch
    straight.fit(CallableAgent(two_role_agent()), TASKS, [], length_reward)

    resumed = make_trainer(stopped, tasks_per_step=3)
    resumed_learners = own_learners(resumed)
    on_resume: dict[str, Any] = {}
    agent = two_role_agent()

    async def first_watching(task: dict, llm) -> str:  # noqa: ANN001
        if not on_resume:
            on_resume.update({n: learner_state(learner) for n, learner in resumed_learners.items()})
        return await agent(task, llm)

    result = resumed.fit(CallableAgent(first_watching), TASKS, [], length_reward, resume=True)
    assert set(on_resume) == {"writer", "rewriter"}
    assert_same(on_resume, after_step_1)
    assert result.history[0] == straight.history[0]
    assert train_rollouts(resumed) == [row for row in train_rollouts(straight) if row[0] == 1]
    spans = [
        s for r in resumed.store.list_rollouts(limit=100) for s in resumed.store.query_spans(rollout_id=r.id)
    ]
    assert {(s.attributes[CallAttr.UPSTREAM], s.attributes[CallAttr.POLICY_VERSION]) for s in spans} == {
        ("writer", 1),
        ("rewriter", 1),
    }
    last = [r for r in result.history if r["kind"] == "train"][-1]
    assert last["policy_version.writer"] == last["policy_version.rewriter"] == 2


def test_an_agent_label_with_no_policy_stops_the_run_naming_it(tmp_path: Path) -> None:
    trainer = make_trainer(tmp_path, steps=1)
    own_learners(trainer)
    with pytest.raises(SystemExit, match=r"'checker' \(\d+ calls\).*Policies: writer, rewriter"):
        trainer.fit(CallableAgent(two_role_agent(("writer", "checker"))), TASKS[:1], [], length_reward)


def test_a_fixed_agent_beside_two_policies_is_served_and_left_untrained(tmp_path: Path) -> None:
    trainer = make_trainer(tmp_path, steps=1, fixed_agents={"checker": None})
    own_learners(trainer)
    result = trainer.fit(
        CallableAgent(two_role_agent(("writer", "checker", "rewriter"))), TASKS[:1], [], distinct_rewards()
    )
    (record,) = [r for r in result.history if r["kind"] == "train"]
    assert record["samples.writer"] == record["samples.rewriter"] == 8  # 2 groups of 4, one call each
    upstreams = {
        s.attributes[CallAttr.UPSTREAM]
        for r in trainer.store.list_rollouts(limit=100)
        for s in trainer.store.query_spans(rollout_id=r.id)
    }
    assert upstreams == {"writer", "rewriter", "base"}


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("writer", "expected NAME=lora"),
        ("writer=full", "only LoRA policies"),
        ("writer=lora:r0", "neither rR"),
        ("writer=lora:lr=-1", "neither rR"),
        ("base=lora", "expected NAME=lora"),
        ("*=lora", "expected NAME=lora"),
    ],
)
def test_bad_policy_specs_are_refused(text: str, error: str) -> None:
    with pytest.raises(PolicySpecError, match=error):
        parse_policy(text)


def test_policy_specs_parse_and_conflicts_are_refused() -> None:
    assert parse_policy("writer=lora") == PolicySpec("writer", 16, None)
    assert parse_policy("rewriter=lora:r8:lr=2e-4") == PolicySpec("rewriter", 8, 2e-4)
    with pytest.raises(PolicySpecError, match="two policies named writer"):
        check_policies([PolicySpec("writer"), PolicySpec("writer", 8)], ())
    with pytest.raises(PolicySpecError, match="both a trained policy and a fixed agent: checker"):
        check_policies([PolicySpec("checker")], ["checker"])
    with pytest.raises(ValueError, match="local learner"):
        TrainerConfig(model="tiny-random", policies=POLICIES, learner="ray")


def test_async_two_policies_judge_staleness_by_each_policys_own_version(tmp_path: Path) -> None:
    """With --max-staleness 0 each step's groups start after the previous update, so every token is of
    its own policy's current version: staleness 0 everywhere. Judged against the default policy (never
    loaded, version 0) the tokens would look -1 versions behind."""
    trainer = make_trainer(tmp_path, async_mode=True, checkpoint_every=0, max_staleness=0, steps=3)
    own_learners(trainer)
    result = trainer.fit(CallableAgent(two_role_agent()), TASKS, [], distinct_rewards())
    train = [r for r in result.history if r["kind"] == "train"]
    assert [r["step"] for r in train] == [1, 2, 3]
    assert all(r["samples.writer"] == r["samples.rewriter"] == 8 for r in train)
    assert [r["policy_version.writer"] for r in train] == [1, 2, 3]
    assert all(r["stale_dropped"] == 0 and r["staleness_mean"] == 0 for r in train)


async def test_each_row_of_a_mixed_batch_decodes_as_its_own_adapter_alone(
    tiny_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two policies' adapters in one batch of the built-in engine, on the same prompts: each row's tokens
    and logprobs are those its own adapter gives decoded alone (and the two adapters decode differently,
    so a row run with the other's adapter shows)."""
    engine = TransformersEngine(str(tiny_path), max_batch_size=4)
    try:
        for seed, spec in enumerate(POLICIES, start=1):
            engine.load_adapter(str(make_adapter(tiny_path, tmp_path / spec.name, seed)), policy=spec.name)
        names = [spec.name for spec in POLICIES]
        prompts = [prompt_of(engine, text) for text in ("first prompt", "the second one")]
        params = SamplingParams(max_tokens=12, temperature=0)
        alone = {
            (p, n): (await engine.generate(prompt, params, policy=n))[0]
            for p, prompt in enumerate(prompts)
            for n in names
        }
        for p in range(len(prompts)):
            assert alone[(p, names[0])].token_ids != alone[(p, names[1])].token_ids

        batches = forward_batches(engine, monkeypatch)
        rows = [(p, n) for p in range(len(prompts)) for n in names]
        together = await asyncio.gather(*(engine.generate(prompts[p], params, policy=n) for p, n in rows))
        assert any(set(names) <= set(batch) for batch in batches), batches  # really one mixed batch
        for row, (generation, _) in zip(rows, together, strict=True):
            assert generation.token_ids == alone[row].token_ids, row
            assert_close(generation.logprobs, alone[row].logprobs)
    finally:
        engine.close()


def forward_batches(engine: TransformersEngine, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """From now on, the policies of every forward pass's rows, pass by pass."""
    seen: list[list[str]] = []
    forward = engine._forward

    def recording(policies: list[str], **inputs: Any) -> Any:
        seen.append(list(policies))
        return forward(policies, **inputs)

    monkeypatch.setattr(engine, "_forward", recording)
    return seen
