"""`tether.train(settings)`: the settings tree in, what the command refuses out as one SettingsError."""

from __future__ import annotations

from pathlib import Path

import pytest

import tether


def test_train_names_the_settings_it_needs() -> None:
    with pytest.raises(tether.SettingsError, match=r"^tether train: set agent.command, tasks.file$"):
        tether.train(tether.TrainSettings())


def test_train_refuses_what_the_command_line_refuses(tmp_path: Path) -> None:
    settings = tether.TrainSettings()
    settings.agent.command = "python agent.py"
    settings.tasks.file = str(tmp_path / "missing.jsonl")
    settings.store.project_dir = str(tmp_path)
    with pytest.raises(tether.SettingsError, match=r"missing.jsonl"):
        tether.train(settings)
    with pytest.raises(TypeError, match="TrainSettings"):
        tether.train({"agent": "python agent.py"})  # type: ignore[arg-type]
