"""`tether train`'s step lines: one line per step in a log however narrow, a live bar on a terminal."""

from __future__ import annotations

import io

from rich.console import Console

from tether.experiment.progress import held_out_score, step_line, step_progress

TRAIN = {
    "kind": "train",
    "step": 7,
    "reward_mean": 0.125,
    "reward_std": 0.331,
    "groups_used": 3,
    "groups": 8,
    "rollouts_per_s": 0.55,
    "policy_version_after": 7,
    "train.loss": 0.0,
    "train.clip_fraction": 0.0,
    "train.approx_kl": 0.0,
    "train.entropy": 0.4123,
    "train.grad_norm": 0.7311,
    "train.optimizer_steps": 1,
    "train.seconds": 11.9,
    "rollout_seconds": 18.12,
    "update_seconds": 11.93,
    "swap_seconds": 1.2,
    "step_seconds": 31.24,
}
VAL = {"kind": "val", "step": 8, "val_score": 0.625}


def test_a_log_gets_one_unwrapped_line_per_step() -> None:
    out = io.StringIO()
    console = Console(file=out, width=40, force_terminal=False)  # narrower than any step line
    with step_progress(console, total=12) as show:
        show(TRAIN)
        show(VAL)
    assert out.getvalue().splitlines() == [step_line(TRAIN), step_line(VAL)]
    assert "\r" not in out.getvalue()


def test_a_step_line_says_what_the_step_learned_from_and_where_its_seconds_went() -> None:
    assert step_line(TRAIN) == (
        "step   7  reward 0.125±0.331  signal 3/8 groups  entropy 0.412  grad 0.731  "
        "31.2s (rollouts 18.1, update 11.9, swap 1.2)"
    )


def test_the_surrogate_loss_shows_only_when_it_can_differ_from_zero() -> None:
    assert "loss" not in step_line(TRAIN) and "clip" not in step_line(TRAIN)
    epochs = {**TRAIN, "train.optimizer_steps": 2, "train.loss": 0.0123, "train.clip_fraction": 0.25}
    assert "loss +0.0123  clip 0.250" in step_line(epochs)
    skipped = {k: v for k, v in TRAIN.items() if not k.startswith("train.") and k != "update_seconds"}
    line = step_line({**skipped, "groups_used": 0, "skipped": "every group had the same reward"})
    assert "signal 0/8 groups  no update" in line and line.endswith("31.2s (rollouts 18.1, swap 1.2)")


def test_a_terminal_gets_the_bar_and_the_lines() -> None:
    out = io.StringIO()
    console = Console(file=out, width=200, force_terminal=True, color_system=None)
    with step_progress(console, total=12) as show:
        show(TRAIN)
    text = out.getvalue()
    assert step_line(TRAIN) in text and "training" in text and "7/12" in text


def test_an_imitation_step_shows_the_demonstrations_nll_not_the_surrogate_loss() -> None:
    sft = {**TRAIN, "phase": "sft", "rollouts": 8, "train.loss": -1.0, "train.nll": 0.925}
    line = step_line(sft)
    assert "sft  8 demonstrations  nll 0.9250" in line and "loss" not in line and "reward" not in line


def test_a_validation_line_shows_the_score_with_its_interval_when_recorded() -> None:
    recorded = {**VAL, "val_ci_low": 0.46875, "val_ci_high": 0.78125, "val_rewards": {"t1": 1.0}}
    assert step_line(recorded) == "step   8  held-out accuracy 0.625 (95% CI 0.469 to 0.781)"
    assert step_line(VAL) == "step   8  held-out accuracy 0.625"  # a run from before intervals
    assert held_out_score(None, recorded) == "-" and held_out_score(0.5) == "0.500"
