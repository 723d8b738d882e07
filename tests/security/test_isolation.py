"""Agents cannot read the project's secrets: the state directory and its files are private, an agent
starts in a scratch directory of its own with an environment that names no project path, and with
--agent-user it runs as another OS user who cannot read the secret even by its absolute path."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pwd
import shlex
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tether.cli.main import main
from tether.project import Project
from tether.runner import LLM, CommandAgent
from tether.store import RolloutStatus, SQLiteStore

LLM_STUB = LLM(base_url="http://127.0.0.1:9/v1", api_key="tro-none")
PROBE = """
import json, os, sys
def readable(path):
    try:
        open(path).read()
        return True
    except OSError as exc:
        return type(exc).__name__
print(json.dumps({"cwd": os.getcwd(), "env": sorted(k for k in os.environ if k.startswith("TETHER")),
                  "secret": readable(sys.argv[1]), "others": [readable(path) for path in sys.argv[2:]],
                  "relative": os.path.exists(".tether/secret"), "uid": os.getuid()}))
"""


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def probe(agent: CommandAgent) -> Any:
    result = asyncio.run(agent.run({}, {"TETHER_ROLLOUT_ID": "ro-1"}, LLM_STUB, 30))
    assert result.error is None, result.stderr
    return json.loads(result.output or "{}")


def test_state_files_are_private_and_looser_ones_are_tightened(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    project = Project.at(tmp_path)
    project.write_admin_token(project.authority())
    SQLiteStore(project.store_path).close()
    assert mode(project.state_dir) == 0o700
    assert {mode(p) for p in (project.secret_path, project.admin_token_path, project.store_path)} == {0o600}

    os.chmod(project.secret_path, 0o644)
    os.chmod(project.store_path, 0o644)
    os.chmod(project.state_dir, 0o755)
    with caplog.at_level(logging.WARNING):
        project.authority()
        SQLiteStore(project.store_path).close()
    assert mode(project.secret_path) == 0o600 and mode(project.store_path) == 0o600
    assert mode(project.state_dir) == 0o700
    assert sum("tightening" in message for message in caplog.messages) == 3


def test_an_agent_starts_in_its_own_scratch_directory_without_project_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = Project.at(tmp_path)
    project.authority()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TETHER_TOKEN", "tadm-secret")
    monkeypatch.setenv("TETHER_PROJECT_DIR", str(tmp_path))
    (tmp_path / "probe.py").write_text(PROBE)
    seen = probe(CommandAgent(f"{sys.executable} probe.py {project.secret_path}"))
    assert seen["cwd"] != str(tmp_path) and not str(seen["cwd"]).startswith(str(tmp_path))
    assert seen["relative"] is False  # `.tether/secret` from where it starts: not there
    assert seen["env"] == ["TETHER_ROLLOUT_ID"]
    assert not Path(str(seen["cwd"])).exists()  # the scratch directory is removed afterwards


SYSTEM_PYTHON = shutil.which("python3", path="/usr/bin")


@pytest.mark.skipif(os.geteuid() != 0 or SYSTEM_PYTHON is None, reason="needs root and /usr/bin/python3")
def test_an_agent_run_as_another_user_cannot_read_the_secret() -> None:
    # The project sits where the other user can walk to its state directory, opened up here, and read a
    # file beside the secret: what keeps the secret from it is the secret file's own mode.
    root = Path(tempfile.mkdtemp(prefix="tether-isolation-", dir="/tmp"))
    try:
        project = Project.at(root)
        project.authority()
        root.chmod(0o755)
        project.state_dir.chmod(0o755)
        beside = project.state_dir / "public"
        beside.write_text("anyone")
        beside.chmod(0o644)
        script = root / "probe.py"
        script.write_text(PROBE)
        script.chmod(0o644)
        agent = CommandAgent(f"/usr/bin/python3 {script} {project.secret_path} {beside}", user="nobody")
        seen = probe(agent)
    finally:
        shutil.rmtree(root)
    assert seen["uid"] != 0
    assert seen["others"] == [True]
    assert seen["secret"] == "PermissionError"


def test_an_unknown_agent_user_is_refused_up_front() -> None:
    with pytest.raises(ValueError, match="no such user"):
        CommandAgent("true", user="no-such-user-here")


@pytest.fixture
def roots_groups() -> Iterator[None]:
    """Tether as root with gid 0 among its supplementary groups, as a root login has it (a container's root
    may have none, and then an agent that kept Tether's groups could not be told from one that dropped
    them)."""
    before = os.getgroups()
    os.setgroups([0, *before])
    try:
        yield
    finally:
        os.setgroups(before)


GROUPS = "import json, os; print(json.dumps([os.getuid(), os.getgid(), os.getegid(), os.getgroups()]))"


@pytest.mark.usefixtures("roots_groups")
def test_an_agent_run_as_another_user_keeps_none_of_roots_groups() -> None:
    # `user=` alone would keep Tether's groups (root's gid 0 among them): the agent gets the user's
    # primary group and no supplementary group at all.
    uid, gid, egid, groups = probe(CommandAgent(f"/usr/bin/python3 -c {shlex.quote(GROUPS)}", user="nobody"))
    nobody = pwd.getpwnam("nobody")
    assert (uid, gid, egid, groups) == (nobody.pw_uid, nobody.pw_gid, nobody.pw_gid, [])
    assert 0 not in (uid, gid, egid, *groups)


def test_a_user_of_group_root_is_refused_as_agent_user(monkeypatch: pytest.MonkeyPatch) -> None:
    operator = pwd.struct_passwd(("operator", "x", 4321, 0, "", "/", "/bin/sh"))
    monkeypatch.setattr(pwd, "getpwnam", lambda name: operator)  # no such user on a test machine
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    with pytest.raises(ValueError, match="primary group is 0"):
        CommandAgent("true", user="operator")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
def test_root_as_agent_user_is_tethers_own_user() -> None:
    # `--agent-user root`: in the sandbox, agents keep uid 0 (by default, as root, they are `nobody`)
    assert CommandAgent("true", user="root").identity == {}


# -- as a user runs it: `tether rollout --agent-user` ------------------------------------------------


def tether_rollout(project: Path, upstream_url: str, agent: str, tasks: Path, *extra: str) -> list[Any]:
    """`tether rollout` of `agent` over `tasks`; each rollout's output, in task order."""
    args = ["rollout", "--agent", agent, "--tasks", str(tasks), "--upstream", upstream_url]
    args += ["--sandbox", "none"]  # what another OS user keeps from the agent, without a sandbox
    assert main([*args, "--no-air", "--project-dir", str(project), *extra]) == 0
    store = SQLiteStore(project / ".tether" / "store.db")
    try:
        rollouts = sorted(store.list_rollouts(limit=10), key=lambda r: str(r.input.get("id")))
        assert all(r.status == RolloutStatus.succeeded for r in rollouts), rollouts
        return [r.output for r in rollouts]
    finally:
        store.close()


@pytest.mark.skipif(os.geteuid() != 0 or SYSTEM_PYTHON is None, reason="needs root and /usr/bin/python3")
@pytest.mark.usefixtures("roots_groups")
def test_tether_rollout_with_agent_user_runs_the_agent_without_roots_groups(
    tmp_path: Path, upstream_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "t0"}\n')
    agent = f"/usr/bin/python3 -c {shlex.quote(GROUPS)}"
    (as_nobody,) = tether_rollout(tmp_path / "nobody", upstream_url, agent, tasks, "--agent-user", "nobody")
    (as_tether,) = tether_rollout(tmp_path / "tether", upstream_url, agent, tasks)
    capsys.readouterr()
    uid, gid, egid, groups = json.loads(as_nobody)
    nobody = pwd.getpwnam("nobody")
    assert (uid, gid, egid, groups) == (nobody.pw_uid, nobody.pw_gid, nobody.pw_gid, [])
    assert 0 not in (uid, gid, egid, *groups)
    # without --agent-user the agent is Tether's own user, root here, gid 0 and all
    assert 0 in json.loads(as_tether)[3]


READ_TASKS = """
import sys
try:
    print(open(sys.argv[1]).read().strip())
except OSError as exc:
    print(type(exc).__name__)
"""


@pytest.mark.skipif(os.geteuid() != 0 or SYSTEM_PYTHON is None, reason="needs root and /usr/bin/python3")
def test_a_task_file_with_references_the_agent_user_can_read_is_warned_about(
    tmp_path: Path, upstream_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The warning comes exactly when the agent can read the file (and finds the answer in it)."""
    folder = Path(tempfile.mkdtemp(prefix="tether-tasks-", dir="/tmp"))
    folder.chmod(0o755)  # open to all, as a shared data folder is
    try:
        tasks = folder / "tasks.jsonl"
        tasks.write_text(
            json.dumps({"id": "t0", "question": "?", "reference": {"answer": "ANSWER-42"}}) + "\n"
        )
        reward = ["--reward", f"{Path(__file__).parent / 'agents' / 'reference_reward.py'}:finds"]
        agent = f"/usr/bin/python3 -c {shlex.quote(READ_TASKS)} {tasks}"
        seen = {}
        for mode in (0o644, 0o600):
            tasks.chmod(mode)
            args = (tmp_path / f"{mode:o}", upstream_url, agent, tasks, "--agent-user", "nobody", *reward)
            (output,) = tether_rollout(*args)
            seen[mode] = ("holds tasks with a 'reference'" in capsys.readouterr().err, output)
    finally:
        shutil.rmtree(folder)
    warned, output = seen[0o644]
    assert warned and "ANSWER-42" in output
    assert seen[0o600] == (False, "PermissionError")
