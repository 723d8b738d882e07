"""The mistakes a new user is most likely to make, each through the command line: every one stops the
command with at most two lines that name the problem and the fix, never a traceback."""

from __future__ import annotations

import re
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tether.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
ARITH = ROOT / "examples" / "arith_agent"
AGENT = f"{sys.executable} {ARITH / 'agent.py'}"
REWARD = f"{ARITH / 'reward.py'}:correct"


@dataclass(frozen=True)
class Mistake:
    name: str
    argv: Callable[[Path], list[str]]  # the command line, given the project folder
    says: str  # a regular expression the message must match: the problem and the fix

    def __repr__(self) -> str:
        return self.name


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def tasks(folder: Path) -> str:
    return write(folder / "tasks.jsonl", '{"id": "t1", "question": "1 + 1", "reference": {"answer": 2}}\n')


def rollout(folder: Path, *more: str) -> list[str]:
    return ["rollout", "--tasks", tasks(folder), *in_project(folder), *more]


def train(folder: Path, *more: str) -> list[str]:
    return ["train", "--tasks", tasks(folder), *in_project(folder), *more]


def in_project(folder: Path) -> list[str]:
    return ["--project-dir", str(folder), "--model", "tiny-random"]


MISTAKES = [
    Mistake(
        "agent script not there",
        lambda f: rollout(f, "--agent", "python my_agent.py", "--reward", REWARD),
        r"runs my_agent\.py, which is not a file in .*: give its path from there, or an absolute one",
    ),
    Mistake(
        "agent command empty",
        lambda f: rollout(f, "--agent", "", "--reward", REWARD),
        r"the agent command is empty",
    ),
    Mistake(
        "agent command unparsable",
        lambda f: rollout(f, "--agent", "python 'agent.py", "--reward", REWARD),
        r"cannot parse the agent command",
    ),
    Mistake(
        "placeholder the tasks lack",
        lambda f: rollout(f, "--agent", f"{AGENT} {{prompt}}", "--reward", REWARD),
        r"uses \{prompt\}, which the task does not have \(task fields: question",
    ),
    Mistake(
        "placeholder naming the private reference",
        lambda f: rollout(f, "--agent", f"{AGENT} {{reference}}", "--reward", REWARD),
        r"reference",
    ),
    Mistake(
        "reward function missing",
        lambda f: rollout(f, "--agent", AGENT, "--reward", f"{ARITH / 'reward.py'}:score"),
        r"has no function 'score'",
    ),
    Mistake(
        "reward file missing",
        lambda f: rollout(f, "--agent", AGENT, "--reward", "my_reward.py:score"),
        r"no such file: my_reward\.py",
    ),
    Mistake(
        "reward without a function",
        lambda f: rollout(f, "--agent", AGENT, "--reward", str(ARITH / "reward.py")),
        r"expected 'module:function' or 'file\.py:function'",
    ),
    Mistake(
        "references but no reward",
        lambda f: rollout(f, "--agent", AGENT),
        r"only an evaluator reads, and no --reward was given: add --reward MODULE:FUNCTION",
    ),
    Mistake(
        "task file missing",
        lambda f: ["rollout", "--agent", AGENT, "--tasks", str(f / "nope.jsonl"), "--project-dir", str(f)],
        r"nope\.jsonl: cannot read the task file: No such file or directory",
    ),
    Mistake(
        "task file with a bad line",
        lambda f: [
            *("rollout", "--agent", AGENT, "--project-dir", str(f), "--tasks"),
            write(f / "bad.jsonl", '{"id": "a"}\n{"id": "b",\n'),
        ],
        r"bad\.jsonl:2: not valid JSON",
    ),
    Mistake(
        "task file empty",
        lambda f: ["rollout", "--agent", AGENT, "--project-dir", str(f), "--tasks", write(f / "e.jsonl", "")],
        r"e\.jsonl: the task file holds no tasks",
    ),
    Mistake(
        "task ids repeated",
        lambda f: [
            *("rollout", "--agent", AGENT, "--project-dir", str(f), "--tasks"),
            write(f / "d.jsonl", '{"id": "a"}\n{"id": "a"}\n'),
        ],
        r"d\.jsonl: task id 'a' appears twice",
    ),
    Mistake(
        "held-out file missing",
        lambda f: train(f, "--agent", AGENT, "--reward", REWARD, "--val-tasks", str(f / "val.jsonl")),
        r"val\.jsonl: cannot read the task file",
    ),
    Mistake(
        "a model that does not load",
        lambda f: train(f, "--agent", AGENT, "--reward", REWARD, "--model", str(f / "no-model")),
        r"cannot load model .*: expected one of smollm2-135m, tiny-random or a local folder containing "
        r"config\.json",
    ),
    Mistake(
        "a policy server that is not one",
        lambda f: train(f, "--agent", AGENT, "--reward", REWARD, "--policy-server", "sglang"),
        r"--policy-server 'sglang' is neither a kind \(builtin, openai, vllm\) nor the URLs",
    ),
    Mistake(
        "a group of one for GRPO",
        lambda f: train(f, "--agent", AGENT, "--reward", REWARD, "--group-size", "1"),
        r"grpo compares rollouts of a task: --group-size must be at least 2",
    ),
    Mistake(
        "resume with nothing to resume",
        lambda f: train(f, "--agent", AGENT, "--reward", REWARD, "--resume"),
        r"--resume found no checkpoint under",
    ),
    Mistake(
        "demonstrations from a run that does not exist",
        lambda f: train(f, "--agent", AGENT, "--reward", REWARD, "--from-run", "ghost", "--sft-steps", "1"),
        r"--from-run: run 'ghost' has no rollouts",
    ),
    Mistake(
        "an agent user that does not exist",
        lambda f: rollout(f, "--agent", AGENT, "--reward", REWARD, "--agent-user", "no-such-user-here"),
        r"--agent-user 'no-such-user-here': no such user on this machine",
    ),
    Mistake(
        "a password in the store URL",
        lambda f: rollout(f, "--agent", AGENT, "--reward", REWARD, "--store", "postgresql://u:pw@db/t"),
        r"--store has a password in its URL.*PGPASSWORD",
    ),
    Mistake(
        "config file missing",
        lambda f: ["train", "--config", str(f / "run.toml")],
        r"run\.toml: cannot read the config file: No such file or directory",
    ),
    Mistake(
        "config key misspelt",
        lambda f: ["train", "--config", write(f / "run.toml", "[sampling]\ngroup_sise = 4\n")],
        r"run\.toml:2: unknown key sampling\.group_sise; \[sampling\] takes group_size",
    ),
    Mistake(
        "config value of the wrong type",
        lambda f: [
            *("train", "--agent", AGENT, "--tasks", tasks(f), "--config"),
            write(f / "run.toml", '[sampling]\ngroup_size = "eight"\n'),
        ],
        r"run\.toml:2: sampling\.group_size = \"eight\" is not a whole number",
    ),
    Mistake(
        "exporting a run that does not exist",
        lambda f: ["export", "--run", "ghost", "--out", str(f / "out"), "--project-dir", str(f)],
        r"tether export: no run 'ghost'",
    ),
]


@pytest.mark.parametrize("mistake", MISTAKES, ids=[m.name for m in MISTAKES])
def test_each_mistake_is_one_or_two_lines_naming_the_fix(mistake: Mistake, tmp_path: Path) -> None:
    assert_refused(mistake.argv(tmp_path), mistake.says)


def test_a_port_in_use_names_another(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = ["serve", "--model", "tiny-random", "--port", str(port), "--project-dir", str(tmp_path)]
        assert_refused(argv, rf"cannot bind 127\.0\.0\.1:{port}: Address already in use")


def test_a_run_name_taken_by_other_tasks_names_fresh(tmp_path: Path) -> None:
    assert main(rollout(tmp_path, "--agent", AGENT, "--reward", REWARD, "--run", "mine")) == 0
    other = write(tmp_path / "other.jsonl", '{"id": "t9", "question": "2 + 2", "reference": {"answer": 4}}\n')
    argv = [*rollout(tmp_path, "--agent", AGENT, "--reward", REWARD, "--run", "mine"), "--tasks", other]
    assert_refused(argv, r"the task file changed since run 'mine' started: .*--fresh")


def assert_refused(argv: list[str], says: str) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    message = str(stopped.value.code)
    assert stopped.value.code not in (0, None), message
    assert "Traceback" not in message and len(message.strip().splitlines()) <= 2, message
    assert re.search(says, message), message


def test_calls_cut_at_the_servers_own_output_cap_are_named_with_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An agent whose client sends no max_tokens gets the engine's 512 tokens at most: a framework then
    fails on a reply cut short, so the summary says which setting to give."""
    agent = tmp_path / "agent" / "agent.py"
    agent.parent.mkdir()
    agent.write_text(
        "from openai import OpenAI\n"
        "messages = [{'role': 'user', 'content': 'go'}]\n"
        "reply = OpenAI().chat.completions.create(model='policy', messages=messages)\n"
        "print(reply.choices[0].finish_reason)\n"
    )
    argv = rollout(tmp_path, "--agent", f"{sys.executable} {agent}", "--reward", REWARD, "--sandbox", "none")
    assert main(argv) == 0
    said = " ".join("".join(capsys.readouterr()).split())
    assert "1 model call stopped at the policy server's own output cap" in said
    assert "set max_tokens in the agent's client" in said
