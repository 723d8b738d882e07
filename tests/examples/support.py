"""What the example tests share: loading an example's files as modules, and running its real agent the way a
user would, with `tether rollout` in a subprocess, then reading what the rollouts left in the store."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from tests.helpers import serve_app
from tests.integration.scripted_upstream import Script, Turn, create_scripted_upstream
from tether.project import Project
from tether.store import Reward, Rollout, RolloutStatus, Span, SQLiteStore

ROOT = Path(__file__).resolve().parents[2]
ROLLOUT_TIMEOUT = "120"  # seconds `tether rollout` gives each agent run


@dataclass(frozen=True)
class Example:
    """A folder under `examples/`: its files as modules, its agent's command line and its reward functions."""

    name: str

    @property
    def dir(self) -> Path:
        return ROOT / "examples" / self.name

    def load(self, module: str) -> ModuleType:
        """`{module}.py` of the example as the module `{example}_{module}`, loaded once (examples are not
        packages)."""
        module_name = f"{self.name}_{module}"
        if module_name in sys.modules:
            return sys.modules[module_name]
        spec = importlib.util.spec_from_file_location(module_name, self.dir / f"{module}.py")
        assert spec is not None and spec.loader is not None
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = loaded  # dataclasses look their module up here
        spec.loader.exec_module(loaded)
        return loaded

    def agent(self, *args: str) -> str:
        """The command that runs the example's `agent.py` with this Python."""
        return " ".join([sys.executable, str(self.dir / "agent.py"), *args])

    def reward(self, function: str) -> str:
        return f"{self.dir / 'reward.py'}:{function}"


@dataclass(frozen=True)
class Finished:
    """A rollout as `tether rollout` left it in the store, with its rewards and spans."""

    rollout: Rollout
    rewards: list[Reward]
    spans: list[Span]

    @property
    def reward_values(self) -> dict[str, float]:
        return {reward.name: reward.value for reward in self.rewards}

    @property
    def chat_calls(self) -> list[Span]:
        return [span for span in self.spans if span.name == "llm.chat"]

    def assert_first_call_asks(self, tools: list[str]) -> None:
        """The first chat call is recorded with token ids, offers `tools` and ends on the task's question."""
        calls = self.chat_calls
        assert calls and calls[0].attributes["prompt_token_ids"]
        request = calls[0].attributes["request"]
        assert [tool["function"]["name"] for tool in request["tools"]] == tools
        assert request["messages"][-1]["content"] == self.rollout.input["question"]


def run_rollouts(
    project: Path,
    agent: str,
    reward: str,
    tasks: list[dict],
    *args: str,
    env: Mapping[str, str] | None = None,
    timeout: float = 400,
) -> list[Finished]:
    """`tether rollout` of `agent` over `tasks` (written to a task file in `project`), scored by `reward`;
    checks that it exits 0 and that every task's rollout succeeded, and returns them from the store."""
    task_file = project / "tasks.jsonl"
    task_file.write_text("".join(json.dumps(task) + "\n" for task in tasks))
    command = [
        *(sys.executable, "-m", "tether.cli.main", "rollout"),
        *("--project-dir", str(project), "--agent", agent, "--tasks", str(task_file), "--reward", reward),
        *("--timeout", ROLLOUT_TIMEOUT, *args),
    ]
    full_env = {**os.environ, **env} if env is not None else None
    result = subprocess.run(command, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    rollouts = finished(project)
    assert len(rollouts) == len(tasks)
    for done in rollouts:
        assert done.rollout.status == RolloutStatus.succeeded, done.rollout.error
    return rollouts


def finished(project: Path) -> list[Finished]:
    store = SQLiteStore(Project.at(project).store_path)
    try:
        return [
            Finished(rollout, store.query_rewards(rollout.id), store.query_spans(rollout_id=rollout.id))
            for rollout in store.list_rollouts(limit=10_000)
        ]
    finally:
        store.close()


@dataclass(frozen=True)
class ScriptedUpstream:
    """A scripted model server, and the `tether rollout` options that make it the policy's upstream."""

    script: Script
    rollout_args: tuple[str, ...]


@contextmanager
def scripted_upstream(*turns: Turn) -> Iterator[ScriptedUpstream]:
    """A model that plays `turns`, for the tool calls a tiny model never makes."""
    script = Script(list(turns))
    with serve_app(create_scripted_upstream(script)) as url:
        options = ("--upstream", f"{url}/v1", "--upstream-model", "scripted", "--upstream-token-ids")
        yield ScriptedUpstream(script, options)


TASKS_COMMAND = re.compile(r"^[ \t]*python (examples/\w+/tasks\.py(?:[^\n]*\\\n)*[^\n]*)$", re.MULTILINE)


def script_task_files(script: Path, out_dir: Path) -> tuple[Path, Path]:
    """Run the `python examples/X/tasks.py ...` command of a pipeline or demo script as it stands there
    (the first one without --spider; `${VAR:-default}` sizes at their defaults), writing to `out_dir`;
    returns its train and val files."""
    for match in TASKS_COMMAND.finditer(script.read_text()):
        text = re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", match.group(1).replace("\\\n", " "))
        args = shlex.split(text)
        if "--spider" not in args:
            break
    else:
        raise AssertionError(f"{script}: no tasks.py command")
    args[args.index("--out-dir") + 1] = str(out_dir)
    subprocess.run([sys.executable, *args], cwd=ROOT, check=True, capture_output=True, timeout=300)
    return out_dir / "train.jsonl", out_dir / "val.jsonl"
