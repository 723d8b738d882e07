"""The command line is made from the settings trees: every flag the commands accepted before the trees is
still accepted as it was (tests/cli/flags.json: spelling, destination, default, choices, kind), `--help`
lists them, and `--config FILE` / `--print-config` read and write the same tree the flags do."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tether.cli.main import build_parser, main

SNAPSHOT = Path(__file__).parent / "flags.json"
AGENTS = Path(__file__).parent / "agents"


def accepted_flags(parser: argparse.ArgumentParser, path: str, found: dict[str, dict[str, Any]]) -> None:
    """Every command's flags as tests/cli/flags.json records them."""
    flags: dict[str, Any] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                accepted_flags(sub, f"{path} {name}".strip(), found)
            continue
        if isinstance(action, argparse._HelpAction):
            continue
        default = "==SUPPRESS==" if action.default is argparse.SUPPRESS else action.default
        entry = {
            "dest": action.dest,
            "default": default
            if isinstance(default, str | int | float | bool | list | None)
            else repr(default),
            "kind": type(action).__name__,
            "nargs": action.nargs,
            "choices": list(action.choices) if action.choices else None,
            "required": action.required,
        }
        for spelling in action.option_strings or [f"<{action.dest}>"]:
            flags[spelling] = entry
    found[path or "tether"] = flags


def test_every_flag_the_commands_accepted_is_accepted_as_it_was() -> None:
    before = json.loads(SNAPSHOT.read_text())
    now: dict[str, dict[str, Any]] = {}
    accepted_flags(build_parser(), "", now)
    assert set(before) <= set(now)  # commands added since are new, not changed
    for command, flags in before.items():
        for spelling, entry in flags.items():
            assert now[command].get(spelling) == entry, f"tether {command} {spelling}"


def test_help_lists_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    before = json.loads(SNAPSHOT.read_text())
    for command in ("train", "rollout", "serve", "optimize-prompt"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        shown = capsys.readouterr().out
        hidden = {"--upstream-key", "--judge-key", "--teacher-key", "--optimizer-key"}
        for spelling in before[command]:
            if spelling.startswith("--") and spelling not in hidden:
                assert spelling in shown, f"tether {command} --help lacks {spelling}"
        assert "--config" in shown and "--print-config" in shown


def printed(capsys: pytest.CaptureFixture[str], *words: str) -> str:
    assert main([*words, "--print-config"]) == 0
    return capsys.readouterr().out


TRAIN = ["train", "--agent", "python agent.py --q {q}", "--tasks", "tasks.jsonl"]


def test_print_config_then_config_gives_the_same_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    given = [*TRAIN, "--lr", "3e-5", "--reward", "a.py:f", "--reward", "b.py:g", "--full", "--ray"]
    toml = printed(capsys, *given, "--sandbox-show", "/data", "--time-budget", "inf")
    assert 'command = "python agent.py --q {q}"' in toml and 'reward = ["a.py:f", "b.py:g"]' in toml
    assert "lr = 3e-05" in toml and "full = true" in toml and 'ray = "local"' in toml
    assert "time_budget = +inf" in toml
    file = tmp_path / "run.toml"
    file.write_text(toml)
    assert printed(capsys, "train", "--config", str(file)) == toml  # --agent and --tasks from the file


def test_flags_override_the_file_and_a_list_flag_replaces_its_list(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "run.toml"
    file.write_text(
        '[agent]\ncommand = "python a.py"\n[tasks]\nfile = "t.jsonl"\n'
        '[learner]\nlr = 0.001\nalgorithm = "rloo"\n[rewards]\nreward = ["a.py:f", "b.py:g"]\n'
    )
    toml = printed(capsys, "train", "--config", str(file), "--lr", "0.5", "--reward", "c.py:h")
    assert "lr = 0.5" in toml and 'algorithm = "rloo"' in toml
    assert 'reward = ["c.py:h"]' in toml
    kept = printed(capsys, "train", f"--config={file}")
    assert 'reward = ["a.py:f", "b.py:g"]' in kept and "lr = 0.001" in kept


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[agent]\ncommand = "x"\ncomand = "y"\n',
            r"run.toml:3: unknown key agent.comand; \[agent\] takes command, ",
        ),
        ("[agnet]\nx = 1\n", r"run.toml:1: unknown table \[agnet\]; the tables are run, agent, "),
        (
            '\n[learner]\n\nalgorithm = "ppo"\n',
            r"run.toml:4: learner.algorithm = \"ppo\" is not accepted; one of grpo, ",
        ),
        ('[sampling]\ngroup_size = "8"\n', r"run.toml:2: sampling.group_size = \"8\" is not a whole number"),
        ("[learner]\nfull = 1\n", r"run.toml:2: learner.full = 1 is not a true or false"),
        ("[rewards]\nreward = 'a.py:f'\n", r"run.toml:2: rewards.reward is a list"),
        (
            "[quota]\nmax_spans_per_attempt = 0\n",
            r"run.toml:2: quota.max_spans_per_attempt = 0: must be at least 1",
        ),
        ("[learner\n", r"run.toml: not valid TOML"),
    ],
)
def test_a_bad_config_file_is_one_line_naming_the_key_file_and_line(
    tmp_path: Path, text: str, message: str
) -> None:
    file = tmp_path / "run.toml"
    file.write_text(text)
    with pytest.raises(SystemExit, match=message) as refused:
        main([*TRAIN, "--config", str(file)])
    assert str(refused.value).startswith("tether train: ") and "\n" not in str(refused.value)


def test_an_environment_default_sits_below_the_file_and_the_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TETHER_ENGINE", "vllm")
    assert 'engine = "vllm"' in printed(capsys, *TRAIN)
    assert 'engine = "builtin"' in printed(capsys, *TRAIN, "--engine", "builtin")
    file = tmp_path / "run.toml"
    file.write_text('[server]\nengine = "builtin"\n')
    assert 'engine = "builtin"' in printed(capsys, *TRAIN, "--config", str(file))
    monkeypatch.setenv("TETHER_ENGINE", "vlm")
    with pytest.raises(SystemExit, match=r"^tether: \$TETHER_ENGINE='vlm' is not one of builtin, vllm$"):
        main(TRAIN)


def test_a_missing_config_file_and_a_command_without_one(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"nothing.toml: cannot read the config file"):
        main([*TRAIN, "--config", str(tmp_path / "nothing.toml")])
    with pytest.raises(SystemExit, match=r"^tether plot: --config: this command takes no config file$"):
        main(["plot", str(tmp_path), "--config", str(tmp_path / "x.toml")])


def test_a_train_run_keeps_its_config_and_the_file_resumes_it(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"t{i}", "q": f"q{i}", "sleep": 0}) + "\n" for i in range(2)))
    command = [
        *("train", "--agent", f"{sys.executable} {AGENTS / 'one_call_agent.py'}", "--tasks", str(tasks)),
        *("--reward", f"{AGENTS / 'reward.py'}:echoed", "--model", "tiny-random", "--group-size", "2"),
        *("--tasks-per-step", "1", "--steps", "1", "--val-every", "0", "--project-dir", str(tmp_path)),
    ]
    assert main(command) == 0
    (run_dir,) = (tmp_path / ".tether" / "runs").iterdir()
    kept = (run_dir / "config.toml").read_text()
    assert f'name = "{run_dir.name}"' in kept and "fresh = false" in kept and "steps = 1" in kept
    edited = kept.replace("steps = 1\n", "steps = 2\n")
    (run_dir / "config.toml").write_text(edited)
    assert main(["train", "--config", str(run_dir / "config.toml")]) == 0
    assert [p.name for p in (tmp_path / ".tether" / "runs").iterdir()] == [run_dir.name]  # resumed
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in steps if r["kind"] == "train"] == [1, 2]
