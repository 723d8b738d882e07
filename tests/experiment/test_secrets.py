"""The keys a run needs come from the environment or a file, never from its settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.cli.main import build_parser
from tether.cli.secrets import secrets_of
from tether.contracts import JUDGE_KEY_ENV, TEACHER_KEY_ENV, UPSTREAM_KEY_ENV
from tether.experiment.secrets import Secrets


def test_each_key_comes_from_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(JUDGE_KEY_ENV, "judge-secret")
    monkeypatch.setenv(TEACHER_KEY_ENV, "")
    monkeypatch.delenv(UPSTREAM_KEY_ENV, raising=False)
    found = Secrets.from_environment()
    assert (found.judge_key, found.teacher_key, found.upstream_key) == ("judge-secret", None, None)


def test_the_command_lines_key_file_wins_over_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(JUDGE_KEY_ENV, "from-the-environment")
    monkeypatch.setenv(TEACHER_KEY_ENV, "teacher-secret")
    key = tmp_path / "judge.key"
    key.write_text("from-the-file\n")
    args = build_parser().parse_args(["train", "--agent", "a", "--tasks", "t", "--judge-key-file", str(key)])
    found = secrets_of(args)
    assert (found.judge_key, found.teacher_key) == ("from-the-file", "teacher-secret")
