"""`tether train`'s sampling and update options: explained in --help, checked before any model loads, and
carried to the run (a forced training temperature reaches every training call)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.test_train_runs import train_args
from tether.cli.main import main
from tether.contracts import CallAttr
from tether.sampling import Sampler
from tether.store import SQLiteStore


def test_help_explains_the_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = capsys.readouterr().out
    for option in (
        "--train-temperature",
        "--min-signal-groups",
        "--ppo-epochs",
        "--mini-batches",
        "--loss-agg",
        "--clip-low",
        "--clip-high",
        "--tis-cap",
        "--tis-mode",
        "--retire-after",
    ):
        assert option in text
    # --max-staleness throttles generation (the capacity rule) and masks stale tokens; nothing is dropped
    # after it was generated, as the option once did.
    staleness = "".join(text.split("--max-staleness N ", 1)[1].split("--seed", 1)[0].split())  # unwrapped
    assert "dropsamples" not in staleness
    assert "(N+1)x--tasks-per-stepgroupsgenerateatonce" in staleness
    assert "maskedoutoftheloss" in staleness


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--train-temperature", "0"], "--train-temperature must be in"),
        (["--ppo-epochs", "0"], "ppo_epochs and mini_batches must be >= 1"),
        (["--tis-mode", "mask", "--tis-cap", "0"], "tis_cap must be above 1"),
        (["--min-signal-groups", "4", "--max-groups-per-step", "2"], "cannot hold --min-signal-groups 4"),
        (["--retire-after", "0"], "--retire-after must be at least 1"),
    ],
)
def test_bad_options_are_one_line_errors(tmp_path: Path, extra: list[str], message: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([*train_args(tmp_path, steps=1), *extra])
    assert message in str(exit_info.value)
    assert not (tmp_path / ".tether" / "runs").exists()  # refused before the run began


def test_forced_temperature_reaches_the_training_calls(tmp_path: Path) -> None:
    assert main([*train_args(tmp_path, steps=1), "--train-temperature", "0.8"]) == 0
    store = SQLiteStore(tmp_path / ".tether" / "store.db")
    samplers = {
        Sampler.from_attr(span.attributes.get(CallAttr.SAMPLING))
        for rollout in store.list_rollouts(limit=100)
        if rollout.mode == "train"
        for span in store.query_spans(rollout_id=rollout.id)
        if CallAttr.SAMPLING in span.attributes  # a call the engine answered (not one cut by a timeout)
    }
    assert samplers == {Sampler(temperature=0.8)}
