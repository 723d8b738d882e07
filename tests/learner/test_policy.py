from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tests.learner_rig import PROMPT, transition
from tether.adapters.transitions import Transition
from tether.algorithms import Sample, assign_advantages
from tether.algorithms.advantages import AdvantageBatch, AdvantageReport
from tether.learner import PolicyTrainer, TrainConfig, TrainingDiverged
from tether.learner.batches import plan_micro_batches
from tether.learner.policy import policy_loss
from tether.models.catalog import TINY_RANDOM, resolve_model

GOOD = [2131, 4387, 3658, 2]
BAD = [28, 9981, 555]


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return resolve_model(TINY_RANDOM, tmp_path_factory.mktemp("models"))


def config(tiny_path: Path, **overrides) -> TrainConfig:
    return TrainConfig(model=str(tiny_path), **overrides)


def make(
    rollout: str,
    response: list[int],
    reward: float = 0.0,
    *,
    call: int = 0,
    mask: list[int] | None = None,
    prompt: list[int] | None = None,
) -> Transition:
    return transition(rollout, response, reward, call=call, logprob=0.0, prompt=prompt, mask=mask)


def record_own_logprobs(trainer: PolicyTrainer, transitions: list[Transition]) -> None:
    """Stand in for the engine: record the current policy's logprobs (0.0 at untrained tokens)."""
    for t, logprobs in zip(transitions, trainer.logprobs(transitions), strict=True):
        t.response_logprobs = [lp if m else 0.0 for lp, m in zip(logprobs, t.loss_mask, strict=True)]


def trainable(trainer: PolicyTrainer) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}


def same_params(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[n], b[n]) for n in a)


def test_policy_loss_hand_computed() -> None:
    mask = torch.tensor([[True]])
    behaviour = torch.tensor([[0.0]])

    def loss_and_grad(ratio: float, advantage: float, tis_cap: float | None) -> tuple[float, float]:
        logp = torch.tensor([[math.log(ratio)]], requires_grad=True)
        loss, _ = policy_loss(logp, behaviour, torch.tensor([[advantage]]), mask, 0.2, 0.28, tis_cap)
        loss.sum().backward()
        return float(loss.detach()), float(logp.grad)

    # Inside the trust region: -ratio * A, gradient -ratio * A.
    assert loss_and_grad(1.1, 1.0, 2.0) == pytest.approx((-1.1, -1.1))
    # A > 0 above 1 + clip_high, or A < 0 below 1 - clip_low: clipped, no gradient.
    assert loss_and_grad(1.5, 1.0, 2.0) == pytest.approx((-1.28, 0.0))
    assert loss_and_grad(0.5, -1.0, 2.0) == pytest.approx((0.8, 0.0))
    # A < 0 with a large ratio: the unclipped branch, truncated at tis_cap in value and gradient.
    assert loss_and_grad(1.5, -1.0, 2.0) == pytest.approx((1.5, 1.5))
    assert loss_and_grad(3.0, -1.0, 2.0) == pytest.approx((2.0, 2.0))
    assert loss_and_grad(3.0, -1.0, None) == pytest.approx((3.0, 3.0))


def test_plan_micro_batches() -> None:
    assert plan_micro_batches([10, 30, 20, 25], budget=60) == [[1, 3], [2, 0]]
    assert plan_micro_batches([100, 5, 5], budget=50) == [[0], [1, 2]]
    assert plan_micro_batches([], budget=50) == []


def test_ratio_is_one_on_policy_and_clipping_when_shifted(tiny_path: Path) -> None:
    trainer = PolicyTrainer(config(tiny_path, bf16=True))
    assert trainer.bf16
    items = [make("a", GOOD, 1.0), make("b", BAD, 0.0)]
    record_own_logprobs(trainer, items)
    batch = assign_advantages(items)
    metrics = trainer.step(batch)
    assert metrics.mean_ratio == pytest.approx(1.0, abs=1e-6)
    assert metrics.clip_fraction == 0.0 and metrics.truncated_fraction == 0.0
    assert metrics.approx_kl == pytest.approx(0.0, abs=1e-9)
    assert metrics.tokens == len(GOOD) + len(BAD) and metrics.samples == 2 and metrics.rollouts == 2
    assert metrics.entropy > 0 and metrics.grad_norm > 0 and metrics.ref_kl is None
    assert metrics.step == 1 and metrics.seconds > 0 and metrics.peak_rss_mb > 0

    # Recorded logprobs 0.5 lower: ratio ~ e^0.5 > 1 + clip_high, so the positive-advantage tokens clip.
    record_own_logprobs(trainer, items)
    for t in items:
        t.response_logprobs = [lp - 0.5 for lp in t.response_logprobs]
    shifted = trainer.step(assign_advantages(items))
    assert shifted.mean_ratio == pytest.approx(math.exp(0.5), rel=1e-4)
    assert shifted.clip_fraction == pytest.approx(len(GOOD) / (len(GOOD) + len(BAD)))
    assert shifted.truncated_fraction == 0.0

    # 1.0 lower: ratio ~ e > tis_cap for every token.
    record_own_logprobs(trainer, items)
    for t in items:
        t.response_logprobs = [lp - 1.0 for lp in t.response_logprobs]
    assert trainer.step(assign_advantages(items)).truncated_fraction == 1.0


def test_masked_tokens_do_not_change_loss_or_gradients(tiny_path: Path) -> None:
    mask = [1, 1, 0, 0, 1, 1]
    response = [2131, 4387, 28, 9981, 3658, 2]

    def one_step(garbage: list[float] | None) -> tuple[dict[str, torch.Tensor], float, float]:
        trainer = PolicyTrainer(config(tiny_path, lr=1e-2, bf16=False))
        items = [make("a", response, 1.0, mask=mask), make("b", BAD, 0.0)]
        record_own_logprobs(trainer, items)
        for t in items:
            t.response_logprobs = [lp - 0.1 for lp in t.response_logprobs]  # some off-policyness
        if garbage is not None:
            items[0].response_logprobs[2:4] = garbage
        metrics = trainer.step(assign_advantages(items))
        return trainable(trainer), metrics.loss, metrics.grad_norm

    clean_params, clean_loss, clean_norm = one_step(None)
    for garbage in ([1e4, -1e9], [math.nan, math.inf]):
        params, loss, norm = one_step(garbage)
        assert (loss, norm) == (clean_loss, clean_norm)
        assert same_params(params, clean_params)


@pytest.mark.parametrize("share", [False, True], ids=["padded", "packed"])
def test_micro_batching_does_not_change_the_step(tiny_path: Path, share: bool) -> None:
    items = [
        make("a", GOOD, 1.0),
        make("a", BAD, 1.0, call=1, prompt=PROMPT + [5, 6, 7]),
        make("b", BAD, 0.0),
        make("c", GOOD[:2], 0.5, prompt=PROMPT[:4]),
    ]
    results = []
    for budget in (4096, 1):
        trainer = PolicyTrainer(
            config(tiny_path, bf16=False, micro_batch_tokens=budget, share_prefixes=share)
        )
        record_own_logprobs(trainer, items)
        for t in items:
            t.response_logprobs = [lp - 0.1 for lp in t.response_logprobs]
        results.append(trainer.step(assign_advantages(items)))
    together, alone = results
    assert (together.micro_batches, alone.micro_batches) == (1, 4)
    assert together.rollouts == 3 and together.samples == 4
    if share:  # together, the shared prompt runs once
        assert alone.padded_tokens == alone.forward_tokens > together.forward_tokens
    else:
        assert alone.padded_tokens == alone.forward_tokens < together.padded_tokens
    for name in ("loss", "mean_ratio", "clip_fraction", "entropy", "grad_norm"):
        assert getattr(alone, name) == pytest.approx(getattr(together, name), rel=1e-4, abs=1e-6), name


@pytest.mark.parametrize("lora", [True, False], ids=["lora", "full"])
def test_training_moves_logprobs_towards_the_rewarded_response(tiny_path: Path, lora: bool) -> None:
    trainer = PolicyTrainer(config(tiny_path, lora=lora, lr=5e-3 if lora else 1e-3, seed=1))
    items = [make("good", GOOD, 1.0), make("bad", BAD, 0.0)]
    before = [sum(lp) for lp in trainer.logprobs(items)]
    for _ in range(4):
        record_own_logprobs(trainer, items)  # on-policy, as if freshly sampled
        trainer.step(assign_advantages(items))
    after = [sum(lp) for lp in trainer.logprobs(items)]
    assert after[0] > before[0] + 1.0
    assert after[1] < before[1] - 1.0


def test_kl_to_reference(tiny_path: Path) -> None:
    items = [make("good", GOOD, 1.0), make("bad", BAD, 0.0)]
    for lora in (True, False):
        trainer = PolicyTrainer(config(tiny_path, lora=lora, lr=5e-3 if lora else 1e-3, kl_coef=0.1))
        record_own_logprobs(trainer, items)
        first = trainer.step(assign_advantages(items))
        assert first.ref_kl == pytest.approx(0.0, abs=1e-9) and first.kl_loss == pytest.approx(0.0, abs=1e-9)
        record_own_logprobs(trainer, items)
        second = trainer.step(assign_advantages(items))
        assert second.ref_kl is not None and second.ref_kl > 0 and second.kl_loss > 0


def test_nan_advantage_raises_without_applying_the_step(tiny_path: Path) -> None:
    trainer = PolicyTrainer(config(tiny_path))
    items = [make("a", GOOD, 1.0), make("b", BAD, 0.0)]
    record_own_logprobs(trainer, items)
    before = trainable(trainer)
    poisoned = [Sample(items[0], math.nan, 1.0), Sample(items[1], -1.0, 1.0)]
    with pytest.raises(TrainingDiverged, match="non-finite loss"):
        trainer.step(poisoned)
    assert same_params(trainable(trainer), before) and trainer.step_count == 0
    assert all(p.grad is None for p in trainer.params)
    assert trainer.step(assign_advantages(items)).step == 1
    assert not same_params(trainable(trainer), before)


def test_bad_inputs(tiny_path: Path) -> None:
    trainer = PolicyTrainer(config(tiny_path, max_seq_len=16))
    with pytest.raises(ValueError, match="max_seq_len"):
        trainer.step([Sample(make("a", GOOD * 3), 1.0, 1.0)])
    with pytest.raises(ValueError, match="nothing to train"):
        trainer.step([Sample(make("a", GOOD, mask=[0] * len(GOOD)), 1.0, 1.0)])
    broken = make("a", GOOD)
    broken.loss_mask = [1]
    with pytest.raises(ValueError, match="lengths"):
        trainer.logprobs([broken])
    assert trainer.logprobs([make("a", [])]) == [[]]


def test_checkpoint_round_trip(tiny_path: Path, tmp_path: Path) -> None:
    items = [make("good", GOOD, 1.0), make("bad", BAD, 0.0)]
    cfg = config(tiny_path, lr=5e-3, warmup_steps=5)
    trainer = PolicyTrainer(cfg)
    for _ in range(2):
        record_own_logprobs(trainer, items)
        trainer.step(assign_advantages(items))
    record_own_logprobs(trainer, items)
    batch = assign_advantages(items)
    trainer.save_checkpoint(tmp_path / "ckpt", extra={"data_position": 7})
    after_save = torch.rand(3)

    resumed = PolicyTrainer(cfg)
    assert not same_params(trainable(resumed), trainable(trainer))
    assert resumed.load_checkpoint(tmp_path / "ckpt") == {"data_position": 7}
    assert torch.equal(torch.rand(3), after_save)
    assert resumed.step_count == 2 and resumed.scheduler.get_last_lr() == trainer.scheduler.get_last_lr()
    assert same_params(trainable(resumed), trainable(trainer))
    state, resumed_state = trainer.optimizer.state_dict()["state"], resumed.optimizer.state_dict()["state"]
    assert state.keys() == resumed_state.keys()
    assert all(torch.equal(state[k]["exp_avg_sq"], resumed_state[k]["exp_avg_sq"]) for k in state)
    # The same next step from both gives the same weights: optimizer moments and lr schedule were restored.
    trainer.step(batch)
    resumed.step(batch)
    assert same_params(trainable(resumed), trainable(trainer))
    assert (tmp_path / "ckpt" / "policy" / "adapter_config.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_saved_adapter_serves_the_trained_policy(tiny_path: Path, tmp_path: Path) -> None:
    from tether.engines import SamplingParams
    from tether.engines.transformers_engine import TransformersEngine

    trainer = PolicyTrainer(config(tiny_path, lr=5e-3, bf16=False))
    items = [make("good", GOOD, 1.0), make("bad", BAD, 0.0)]
    for _ in range(2):
        record_own_logprobs(trainer, items)
        trainer.step(assign_advantages(items))
    target = tmp_path / "adapter"
    trainer.save_adapter(target)
    assert trainer.save_adapter(target) == target  # replacing an existing adapter works
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adapter"]

    engine = TransformersEngine(str(tiny_path), name="tiny")
    try:
        assert engine.load_adapter(str(target)) == 1
        generation, _ = asyncio.run(engine.generate(PROMPT, SamplingParams(max_tokens=12, temperature=0.0)))
    finally:
        engine.close()
    served = make("served", generation.token_ids)
    ours = trainer.logprobs([served])[0]
    assert max(abs(a - b) for a, b in zip(ours, generation.logprobs, strict=True)) < 1e-4


def test_full_fine_tuning_saves_a_servable_model(tiny_path: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    trainer = PolicyTrainer(config(tiny_path, lora=False, lr=1e-3, bf16=False))
    items = [make("good", GOOD, 1.0), make("bad", BAD, 0.0)]
    record_own_logprobs(trainer, items)
    trainer.step(assign_advantages(items))
    saved = trainer.save_adapter(tmp_path / "model")
    assert AutoTokenizer.from_pretrained(saved).eos_token_id == 2
    model = AutoModelForCausalLM.from_pretrained(saved).eval()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([PROMPT + GOOD])).logits[0].float()
    expected = torch.log_softmax(logits, -1)[len(PROMPT) - 1 : -1].gather(1, torch.tensor(GOOD)[:, None])
    assert trainer.logprobs([items[0]])[0] == pytest.approx(expected.squeeze(1).tolist(), abs=1e-4)


def test_per_token_advantages_push_each_token_its_own_way(tiny_path: Path) -> None:
    """On-policy distillation's samples carry one advantage per token: with +1 on the first two tokens
    and -1 on the last two of one response, a step raises the first pair's logprobs and lowers the third
    (the fourth, an end token, shares too many parameters with the others to move alone in one step of
    a random model); their mean, 0, broadcast over the row would move nothing."""
    trainer = PolicyTrainer(config(tiny_path, lr=1e-3, bf16=False))
    item = make("a", GOOD, 0.0)
    record_own_logprobs(trainer, [item])
    before = trainer.logprobs([item])[0]
    sample = Sample(transition=item, advantage=0.0, token_advantages=[1.0, 1.0, -1.0, -1.0])
    batch = AdvantageBatch(samples=[sample], report=AdvantageReport("opd", 0.0, False))
    trainer.step(batch)
    after = trainer.logprobs([item])[0]
    moved = [a - b for a, b in zip(after, before, strict=True)]
    assert moved[0] > 0 and moved[1] > 0 and moved[2] < 0, moved
    assert moved[0] + moved[1] - moved[2] - moved[3] > 1.0, moved


def test_token_advantages_of_the_wrong_length_are_refused(tiny_path: Path) -> None:
    trainer = PolicyTrainer(config(tiny_path, bf16=False))
    item = make("a", GOOD, 0.0)
    record_own_logprobs(trainer, [item])
    sample = Sample(transition=item, advantage=0.0, token_advantages=[1.0])
    with pytest.raises(ValueError, match="1 token advantages for a response of 4 tokens"):
        trainer.step(AdvantageBatch(samples=[sample], report=AdvantageReport("opd", 0.0, False)))
