"""Settings trees to TOML and back: what `dump_config` writes, `read_config` reads to the same tree."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tether.config.commands import OptimizePromptSettings, RolloutSettings, ServeSettings, TrainSettings
from tether.config.files import ConfigFileError, dump_config, read_config
from tether.config.option import tree_settings


def tree_from(values: dict[str, object], tree_type: type) -> object:
    tree = tree_type()
    for key, value in values.items():
        section, name = key.split(".")
        setattr(getattr(tree, section), name, value)
    return tree


@pytest.mark.parametrize("tree_type", [TrainSettings, RolloutSettings, ServeSettings, OptimizePromptSettings])
def test_every_default_tree_reads_back_as_itself(tmp_path: Path, tree_type: type) -> None:
    file = tmp_path / "settings.toml"
    file.write_text(dump_config(tree_type(), "a header\nof two lines"))
    assert file.read_text().startswith("# a header\n# of two lines\n")
    assert tree_from(read_config(file, tree_type), tree_type) == tree_type()


def test_odd_values_survive_the_round_trip(tmp_path: Path) -> None:
    tree = TrainSettings()
    tree.agent.command = 'python "agent.py" --q {question} \\ ü\n'
    tree.schedule.time_budget = float("inf")
    tree.learner.lr = 1e-7
    tree.rewards.reward = ["a.py:f", 'judge:"R".md']
    tree.sandbox.show = []
    tree.validation.k = 8
    file = tmp_path / "settings.toml"
    file.write_text(dump_config(tree))
    assert tree_from(read_config(file, TrainSettings), TrainSettings) == tree


def test_paths_and_floats_are_read_as_their_setting_holds_them(tmp_path: Path) -> None:
    file = tmp_path / "settings.toml"
    file.write_text('[export]\nout = "rows.jsonl"\n')
    from tether.config.commands import TransitionsExportSettings

    assert read_config(file, TransitionsExportSettings) == {"export.out": Path("rows.jsonl")}
    file.write_text("[learner]\nlr = 1\n")
    (value,) = read_config(file, TrainSettings).values()
    assert value == 1.0 and isinstance(value, float)


def test_a_key_outside_its_commands_tree_is_refused(tmp_path: Path) -> None:
    file = tmp_path / "settings.toml"
    file.write_text("[learner]\nlr = 0.1\n")  # a train setting, not a rollout one
    with pytest.raises(ConfigFileError, match=r"settings.toml:1: unknown table \[learner\]"):
        read_config(file, RolloutSettings)


def test_every_setting_has_help_and_one_destination_per_tree() -> None:
    for tree_type in (TrainSettings, RolloutSettings, ServeSettings, OptimizePromptSettings):
        settings = tree_settings(tree_type)
        assert all(setting.flag.help for setting in settings), tree_type
        dests = [setting.dest for setting in settings]
        assert len(dests) == len(set(dests)), tree_type
        sections = [field.name for field in dataclasses.fields(tree_type)]
        assert {setting.section for setting in settings} == set(sections)
