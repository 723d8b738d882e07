"""`tether train`'s step lines: one line per step in a log however narrow, a live bar on a terminal."""

from __future__ import annotations

import io

from rich.console import Console

from tether.cli.progress import held_out_score, step_line, step_progress

TRAIN = {
    "kind": "train",
    "step": 7,
    "reward_mean": 0.125,
    "reward_std": 0.331,
    "groups_used": 3,
    "rollouts_per_s": 0.55,
    "policy_version_after": 7,
    "train.loss": 0.0123,
    "train.clip_fraction": 0.0,
    "train.approx_kl": 0.0001,
    "train.seconds": 4.2,
}
VAL = {"kind": "val", "step": 8, "val_score": 0.625}


def test_a_log_gets_one_unwrapped_line_per_step() -> None:
    out = io.StringIO()
    console = Console(file=out, width=40, force_terminal=False)  # narrower than any step line
    with step_progress(console, total=12) as show:
        show(TRAIN)
        show(VAL)
    assert out.getvalue().splitlines() == [step_line(TRAIN), step_line(VAL)]
    assert "\r" not in out.getvalue() and "clip 0.000" in step_line(TRAIN)


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
