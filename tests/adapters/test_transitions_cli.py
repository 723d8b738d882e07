"""`tether transitions export` on a store in a temporary project directory."""

from __future__ import annotations

import argparse
from pathlib import Path

import orjson
import pytest

from tests.adapters.calls import call_span, reward
from tether.adapters import read_jsonl
from tether.cli import transitions_cmd
from tether.project import Project
from tether.store import RolloutRequest, RolloutStatus, SQLiteStore, Task

PROMPT, REPLY, OBS = [1, 10, 11], [20, 2], [198, 1, 30]


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="tether")
    transitions_cmd.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(list(argv))
    return args.command_main(args)


def finished_rollout(store: SQLiteStore, status: RolloutStatus, *, mode: str = "train") -> str:
    store.enqueue([RolloutRequest(task=Task(input={}), mode=mode)])
    claim = store.claim("worker")
    assert claim is not None
    rollout_id = claim.rollout.id
    store.add_spans(
        [
            call_span(rollout_id, PROMPT, REPLY, agent="writer"),
            call_span(rollout_id, [5], [6], agent="checker"),
            call_span(rollout_id, PROMPT + REPLY + OBS, [21, 2], agent="writer"),
        ]
    )
    store.add_rewards([reward(rollout_id, 1.0 if status == RolloutStatus.succeeded else 0.0)])
    store.update_status(rollout_id, status)
    return rollout_id


@pytest.fixture
def project(tmp_path: Path) -> Path:
    store = SQLiteStore(Project.at(tmp_path).store_path)
    finished_rollout(store, RolloutStatus.succeeded)
    finished_rollout(store, RolloutStatus.failed)
    finished_rollout(store, RolloutStatus.succeeded, mode="eval")
    store.start_session()
    store.close()
    return tmp_path


def test_export_writes_jsonl_and_prints_the_report(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "t.jsonl"
    assert run("transitions", "export", "--out", str(out), "--project-dir", str(project)) == 0
    transitions = read_jsonl(out)
    assert len(transitions) == 9 and {t.mode for t in transitions} == {"train", "eval"}
    printed = capsys.readouterr().out
    assert f"wrote 9 transitions to {out}" in printed
    assert "9 transitions (" in printed and "from 9 LLM calls in 3 rollouts" in printed


def test_filters_and_merge(project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "t.jsonl"
    argv = ["--out", str(out), "--project-dir", str(project), "--status", "succeeded", "--mode", "train"]
    assert run("transitions", "export", *argv, "--agent", "writer", "--merge") == 0
    lines = out.read_bytes().splitlines()
    assert len(lines) == 2
    row = orjson.loads(lines[0])
    assert row["agent"] == "writer" and row["reward"] == 1.0 and row["loss_mask"] == [1, 1]
    printed = capsys.readouterr().out
    assert "merge chains broken: agent_changed 1" in printed
    assert "calls skipped: agent_not_selected 1" in printed

    assert run("transitions", "export", *argv, "--merge") == 0
    rows = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert [row["agent"] for row in rows] == ["writer", "checker", "writer"]


def test_merge_of_consecutive_calls(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "elsewhere.db"
    store = SQLiteStore(db)
    rollout_id = store.start_session().rollout.id
    store.add_spans([call_span(rollout_id, PROMPT, REPLY), call_span(rollout_id, PROMPT + REPLY + OBS, [21])])
    store.close()
    out = tmp_path / "t.jsonl"
    assert (
        run("transitions", "export", "--out", str(out), "--db", str(db), "--status", "running", "--merge")
        == 0
    )
    (merged,) = read_jsonl(out)
    assert merged.response_ids == REPLY + OBS + [21] and merged.loss_mask == [1, 1, 0, 0, 0, 1]
    printed = capsys.readouterr().out
    assert "1 calls merged" in printed and "1 rollouts had no final reward" in printed


def test_hf_format_saves_a_dataset(project: Path, tmp_path: Path) -> None:
    import datasets

    out = tmp_path / "ds"
    assert (
        run("transitions", "export", "--out", str(out), "--format", "hf", "--project-dir", str(project)) == 0
    )
    assert datasets.load_from_disk(str(out)).num_rows == 9


def test_bad_db_path_is_a_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "store.db"
    with pytest.raises(SystemExit, match="no store database at .*nope"):
        run("transitions", "export", "--out", str(tmp_path / "t.jsonl"), "--db", str(missing))
    assert not missing.parent.exists()

    with pytest.raises(SystemExit, match="run `tether serve` first"):
        run("transitions", "export", "--out", str(tmp_path / "t.jsonl"), "--project-dir", str(tmp_path))

    not_a_db = tmp_path / "junk.db"
    not_a_db.write_text("this is not sqlite " * 100)
    with pytest.raises(SystemExit, match="tether transitions: cannot open store database"):
        run("transitions", "export", "--out", str(tmp_path / "t.jsonl"), "--db", str(not_a_db))
    assert not (tmp_path / "t.jsonl").exists()


def test_bad_status_is_rejected_by_argparse(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        run("transitions", "export", "--out", "x.jsonl", "--status", "done")
    assert "invalid choice: 'done'" in capsys.readouterr().err


def test_exports_name_the_policy_that_generated_each_call(project: Path, tmp_path: Path) -> None:
    import datasets

    out = tmp_path / "t.jsonl"
    assert run("transitions", "export", "--out", str(out), "--project-dir", str(project)) == 0
    assert {t.policy for t in read_jsonl(out)} == {"policy"}  # the calls' upstream
    folder = tmp_path / "ds"
    assert (
        run("transitions", "export", "--out", str(folder), "--format", "hf", "--project-dir", str(project))
        == 0
    )
    assert set(datasets.load_from_disk(str(folder))["policy"]) == {"policy"}
