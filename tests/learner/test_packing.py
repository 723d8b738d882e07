"""Prefix-shared packing (tether/learner/packing.py): the layout, and an update equal to the padded one."""
# ruff: noqa: F811  (the fixtures one_thread and tiny_path come from test_policy, and are used by name)

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from tests.learner.test_policy import one_thread, tiny_path  # noqa: F401  (fixtures, used by name)
from tests.learner_rig import transition
from tether.adapters.transitions import Transition
from tether.algorithms import assign_advantages
from tether.learner import PolicyTrainer, TrainConfig
from tether.learner.batches import collate, collate_packed
from tether.learner.packing import pack_rows, packed_layout


def groups(count: int = 3, size: int = 8, seed: int = 0) -> list[Transition]:
    """`count` groups of `size` samples; each group shares a prompt, every prompt a system prefix, and one
    rollout made a second call that extends its first (the multi-turn case)."""
    rng = random.Random(seed)
    system = [1] + [rng.randrange(100, 5000) for _ in range(20)]
    out = []
    for g in range(count):
        prompt = system + [rng.randrange(100, 5000) for _ in range(30)]
        for s in range(size):
            response = [rng.randrange(100, 5000) for _ in range(rng.randrange(3, 25))]
            reward = float(rng.random() > 0.5)
            t = transition(f"r{g}-{s}", response, reward, prompt=prompt, logprob=-2.0)
            t.group_id, t.task_id = f"g{g}", f"t{g}"
            out.append(t)
    first = out[0]
    tool_reply = [rng.randrange(100, 5000) for _ in range(6)]
    later = transition(
        first.rollout_id,
        [11, 12, 13],
        first.reward,
        call=1,
        logprob=-2.0,
        prompt=list(first.prompt_ids) + list(first.response_ids) + tool_reply,
    )
    later.group_id, later.task_id = first.group_id, first.task_id
    out.append(later)
    return out


def test_a_shared_prefix_is_laid_out_once() -> None:
    rows = pack_rows([[1, 2, 3, 4], [1, 2, 3, 9, 9], [1, 2, 7], [5, 6]], row_tokens=100)
    (row,) = rows
    # Sorted: [1,2,3,4], [1,2,3,9,9], [1,2,7], [5,6]; each reuses its predecessor's common prefix.
    assert row.token_ids == [1, 2, 3, 4, 9, 9, 7, 5, 6]
    assert row.position_ids == [0, 1, 2, 3, 3, 4, 2, 0, 1]
    assert row.paths == [[0, 1, 2, 3], [0, 1, 2, 4, 5], [0, 1, 6], [7, 8]]
    assert row.members == [0, 1, 2, 3]


def test_rows_close_at_their_width_and_a_long_sequence_goes_alone() -> None:
    rows = pack_rows([[1, 2, 3, 4], [1, 2, 3, 5], [1, 2, 3, 6], list(range(10, 30))], row_tokens=6)
    assert [row.token_ids for row in rows] == [[1, 2, 3, 4, 5, 6], list(range(10, 30))]


def test_each_token_attends_to_its_own_sequence_only() -> None:
    layout = packed_layout([[1, 2, 3], [1, 2, 4]], [1, 1], row_tokens=10, pad_id=0)
    mask = layout.attention_mask[0, 0]
    # Columns: 1 2 3 4 — token 4 (column 3) sees 1 and 2 and itself, never 3.
    assert mask[3].tolist() == [True, True, False, True]
    assert mask[2].tolist() == [True, True, True, False]
    # Both responses are predicted from their own last prompt column (the shared token 2, column 1).
    assert layout.gather.tolist() == [[1], [1]]
    assert layout.tokens == 4


def test_packed_micro_batch_runs_fewer_tokens_with_the_same_targets() -> None:
    batch = groups()
    indices = list(range(len(batch)))
    padded = collate(batch, indices, pad_id=0)
    packed = collate_packed(batch, indices, pad_id=0, row_tokens=4096)
    for name in ("targets", "valid", "mask", "behaviour"):
        assert torch.equal(getattr(padded, name), getattr(packed, name)), name
    assert packed.tokens < 0.5 * padded.tokens


def update_gradient(
    path: Path, batch: list[Transition], share: bool, **options: object
) -> dict[str, torch.Tensor]:
    """The gradient of one update of `batch` (before clipping), read as the optimizer would see it."""
    trainer = PolicyTrainer(TrainConfig(model=str(path), share_prefixes=share, lr=0.0, **options))  # type: ignore[arg-type]
    grads: dict[str, torch.Tensor] = {}
    clip = trainer._clip_gradients

    def capture() -> float:
        for name, param in trainer.model.named_parameters():
            if param.grad is not None:
                grads[name] = param.grad.detach().double().clone()
        return clip()

    trainer._clip_gradients = capture  # type: ignore[method-assign]
    trainer.step(assign_advantages(batch))
    return grads


def assert_same_gradient(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys() and a
    flat_a = torch.cat([a[n].flatten() for n in a])
    flat_b = torch.cat([b[n].flatten() for n in a])
    assert torch.nn.functional.cosine_similarity(flat_a, flat_b, dim=0) >= 0.99999
    for name in a:
        scale = a[name].abs().max().clamp_min(1e-12)
        assert (a[name] - b[name]).abs().max() / scale <= 1e-4, name


@pytest.mark.parametrize("lora", [True, False], ids=["lora", "full"])
def test_packed_gradient_equals_the_per_sample_gradient(tiny_path: Path, lora: bool) -> None:
    batch = groups()
    assert_same_gradient(
        update_gradient(tiny_path, batch, False, lora=lora),
        update_gradient(tiny_path, batch, True, lora=lora),
    )


def test_a_changed_prompt_changes_the_packed_gradient(tiny_path: Path) -> None:
    """The control: the comparison above can tell batches apart."""
    batch = groups()
    changed = groups()
    changed[3].prompt_ids = list(changed[3].prompt_ids)
    changed[3].prompt_ids[-2] += 1
    with pytest.raises(AssertionError):
        assert_same_gradient(
            update_gradient(tiny_path, batch, False), update_gradient(tiny_path, changed, True)
        )


def test_packed_logprobs_equal_padded_logprobs_in_small_micro_batches(tiny_path: Path) -> None:
    batch = groups()
    padded = PolicyTrainer(TrainConfig(model=str(tiny_path), share_prefixes=False)).logprobs(batch)
    # Narrow rows and micro-batches: the prefix is repeated across rows, never split inside one.
    narrow = TrainConfig(model=str(tiny_path), packed_row_tokens=80, micro_batch_tokens=200)
    packed = PolicyTrainer(narrow).logprobs(batch)
    for a, b in zip(padded, packed, strict=True):
        torch.testing.assert_close(torch.tensor(b), torch.tensor(a), rtol=1e-5, atol=1e-5)


def test_the_step_reports_the_tokens_it_ran(tiny_path: Path) -> None:
    batch = groups()
    full = sum(len(t.prompt_ids) + len(t.response_ids) for t in batch)
    padded = PolicyTrainer(TrainConfig(model=str(tiny_path), share_prefixes=False)).step(
        assign_advantages(batch)
    )
    packed = PolicyTrainer(TrainConfig(model=str(tiny_path))).step(assign_advantages(batch))
    assert padded.forward_tokens == padded.sample_tokens == packed.sample_tokens == full
    assert packed.forward_tokens < 0.5 * full
