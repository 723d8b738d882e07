"""`--sandbox` as a user gives it: `tether rollout` and `tether train` with the sandbox, the hostile agent
run both ways through the CLI, the default (`auto`), and bad setup refused in one line."""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.runner.sandbox_rig import (
    CLI_AGENTS,
    PYTHON,
    Start,
    gone,
    host_processes,
    probe,
    sandbox,
)
from tether.cli.main import main
from tether.runner import CommandAgent
from tether.runner.sandbox import (
    SandboxError,
)
from tether.store import RolloutStatus, SQLiteStore

pytestmark = [pytest.mark.bwrap, pytest.mark.usefixtures("bwrap_installed")]


def one_task(folder: Path) -> Path:
    tasks = folder / "tasks.jsonl"
    tasks.write_text('{"q": "hi"}\n')
    return tasks


NO_USERNS = (
    "bwrap: No permissions to create new namespace, likely because the kernel does not allow "
    "non-privileged user namespaces."
)


@pytest.fixture
def fake_bin() -> Iterator[Path]:
    """A folder for a stand-in bwrap, which the agent's user (as root: `nobody`, who runs bwrap) reaches."""
    folder = Path(tempfile.mkdtemp(prefix="tether-fake-bin-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


# -- bad setup --------------------------------------------------------------------------------------


def test_missing_bubblewrap_is_one_line_naming_the_fix() -> None:
    with pytest.raises(SandboxError, match="apt-get install bubblewrap"):
        CommandAgent("true", sandbox=sandbox(executable="no-such-bwrap"))


def test_through_the_cli_missing_bwrap_or_user_namespaces_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_bin: Path
) -> None:
    tasks = one_task(tmp_path)
    args = ["rollout", "--agent", "true", "--tasks", str(tasks), "--sandbox", "bwrap"]
    args += ["--upstream", "http://127.0.0.1:9/v1", "--project-dir", str(tmp_path)]
    monkeypatch.setenv("PATH", str(fake_bin))
    with pytest.raises(SystemExit, match="apt-get install bubblewrap"):
        main(args)
    (fake_bin / "bwrap").write_text(f"#!/bin/sh\necho '{NO_USERNS}' >&2\nexit 1\n")
    (fake_bin / "bwrap").chmod(0o755)
    with pytest.raises(SystemExit, match="enable unprivileged user namespaces") as refused:
        main(args)
    assert "\n" not in str(refused.value)


def test_sandbox_options_without_a_sandbox_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tasks = one_task(tmp_path)
    args = ["rollout", "--agent", "true", "--tasks", str(tasks), "--sandbox-env", "HOME"]
    with pytest.raises(SystemExit, match="is an option of the sandbox, which --sandbox none turns off"):
        main([*args, "--sandbox", "none", "--project-dir", str(tmp_path)])
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap: the default cannot sandbox, and says why
    with pytest.raises(SystemExit, match="--sandbox-env needs the sandbox, which cannot run here: .*apt-get"):
        main([*args, "--project-dir", str(tmp_path)])
    with pytest.raises(SystemExit, match="never reach agents"):
        main([*args, "--sandbox", "bwrap", "--sandbox-env", "TETHER_TOKEN", "--project-dir", str(tmp_path)])


# -- as a user runs it ------------------------------------------------------------------------------


def test_tether_rollout_with_the_sandbox_records_the_agents_call(
    tmp_path: Path, upstream_url: str, capsys: pytest.CaptureFixture[str], start: Start
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        "".join(json.dumps({"id": f"t{i}", "q": f"question {i}", "sleep": 0}) + "\n" for i in range(2))
    )
    args = ["rollout", "--agent", f"{PYTHON} {CLI_AGENTS / 'one_call_agent.py'}", "--tasks", str(tasks)]
    args += ["--reward", f"{CLI_AGENTS / 'reward.py'}:echoed", "--sandbox", "bwrap", "--n-workers", "2"]
    args += ["--upstream", upstream_url, "--upstream-token-ids", "--project-dir", str(tmp_path)]
    assert main(start.cli(*args)) == 0
    start.check(cli_rollouts=2)
    store = SQLiteStore(tmp_path / ".tether" / "store.db")
    try:
        rollouts = store.list_rollouts(limit=10)
        assert [r.status for r in rollouts] == [RolloutStatus.succeeded] * 2
        for rollout in rollouts:
            assert rollout.output == rollout.input["q"]
            assert len(store.query_spans(rollout_id=rollout.id, limit=10)) == 1
    finally:
        store.close()
    capsys.readouterr()


def hostile_rollout(project: Path, upstream_url: str, targets: Mapping[str, object], *extra: str) -> Any:
    """`tether rollout` of the hostile agent (`attack`) on one task, in `project`; what it managed."""
    tasks = Path(str(targets["tasks"]))
    pairs = " ".join(f"{name}={value}" for name, value in targets.items())
    args = ["rollout", "--agent", probe("attack", pairs), "--tasks", str(tasks), "--upstream", upstream_url]
    assert main([*args, "--project-dir", str(project), *extra]) == 0
    store = SQLiteStore(project / ".tether" / "store.db")
    try:
        (rollout,) = store.list_rollouts(limit=10)
        assert rollout.status == RolloutStatus.succeeded, rollout
        return json.loads(rollout.output or "{}")
    finally:
        store.close()


def test_a_hostile_agent_run_by_tether_rollout_fails_at_every_hole_in_the_sandbox_only(
    outside_tmp: Path,
    upstream_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    start: Start,
) -> None:
    """As a user runs it: the same agent, run by `tether rollout` with and without `--sandbox bwrap`,
    tries each hole; every one it finds unsandboxed is closed in the sandbox, and the gateway works."""
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret")
    tasks = outside_tmp / "tasks.jsonl"  # outside the project, as `--tasks data/train.jsonl` often is
    tasks.write_text(json.dumps({"id": "t0", "q": "hi", "note": "every task's answer"}) + "\n")
    other_scratch = Path(tempfile.mkdtemp(prefix="tether-agent-"))  # named as the runner names its own
    (other_scratch / "answer.txt").write_text("another rollout's work")
    postgres = socket.create_server(("127.0.0.1", 0))  # what PostgreSQL's port looks like to a client
    outcome: dict[str, dict[str, Any]] = {}
    try:
        sandboxed = start.cli("--sandbox", "bwrap", "--sandbox-memory", "256")
        for kind, extra in (("sandboxed", sandboxed), ("plain", ["--agent-cold", "--sandbox", "none"])):
            project = outside_tmp / kind
            project.mkdir()
            marker = f"tether-cli-daemon-{os.getpid()}-{kind}"
            targets: dict[str, object] = {"project": project, "tasks": tasks, "other_scratch": other_scratch}
            targets |= {"postgres": postgres.getsockname()[1], "memory_mib": 512, "marker": marker}
            outcome[kind] = hostile_rollout(project, upstream_url, targets, *extra)
            outcome[kind]["daemon_gone"] = gone(marker)
            for pid in host_processes(marker):
                os.kill(pid, 9)
    finally:
        postgres.close()
        shutil.rmtree(other_scratch)
    capsys.readouterr()
    start.check(cli_rollouts=1)
    inside, outside = outcome["sandboxed"], outcome["plain"]
    assert inside == {
        "gateway": 200,  # the one way out works
        "admin": "no token",  # no admin token to be found: no Tether process, no .tether/
        "processes": inside["processes"],
        "tether_visible": False,
        "inherited_secret": None,
        "secret": "FileNotFoundError",
        "task_file": "FileNotFoundError",  # not in its view, nor the project
        "other_scratch": "FileNotFoundError",
        "writes_outside": ["FileNotFoundError", "FileNotFoundError"],
        "postgres": "ConnectionRefusedError",
        "memory": False,
        "daemon_gone": True,
    }
    assert inside["processes"] <= 3  # bwrap's init, the relay, the agent
    # unsandboxed, as Tether's own user, the same agent gets through every one
    assert outside["gateway"] == 200 and outside["admin"] == 200  # the admin token, from the secret
    assert outside["processes"] > 3 and outside["tether_visible"] is True
    assert outside["inherited_secret"] == "aws-secret"
    assert outside["secret"] == (outside_tmp / "plain" / ".tether" / "secret").read_text()
    assert outside["task_file"] == tasks.read_text() and outside["other_scratch"] == ["answer.txt"]
    assert outside["writes_outside"] == [True, True] and outside["postgres"] == "connected"
    assert outside["memory"] is True and outside["daemon_gone"] is False


def test_tether_train_with_the_sandbox_trains_a_step_on_the_tiny_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One GRPO step of `tether train --sandbox bwrap`: the agent answers right only where it sees no
    process but its own (in the sandbox), and its calls reach the policy through the relay."""
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"t{i}", "q": f"q{i}"}) + "\n" for i in range(2)))
    args = ["train", "--agent", probe("sandboxed-echo"), "--tasks", str(tasks), "--model", "tiny-random"]
    args += ["--reward", f"{CLI_AGENTS / 'reward.py'}:echoed", "--group-size", "2", "--tasks-per-step", "1"]
    args += ["--steps", "1", "--val-every", "0", "--sandbox", "bwrap", "--project-dir", str(tmp_path)]
    assert main(args) == 0
    store = SQLiteStore(tmp_path / ".tether" / "store.db")
    try:
        rollouts = store.list_rollouts(limit=10)
        assert len(rollouts) == 2 and {r.status for r in rollouts} == {RolloutStatus.succeeded}
        for rollout in rollouts:
            assert rollout.output == rollout.input["q"]  # "not sandboxed" otherwise
            assert len(store.query_spans(rollout_id=rollout.id, limit=10)) == 1
    finally:
        store.close()
    (run_dir,) = (tmp_path / ".tether" / "runs").iterdir()
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps if s["kind"] == "train"] == [1]
    capsys.readouterr()


def default_rollout(project: Path, upstream_url: str) -> dict[str, Any]:
    """`tether rollout` without `--sandbox` of an agent that looks at its processes; what it saw."""
    tasks = project / "tasks.jsonl"
    tasks.write_text('{"id": "t0", "q": "hi"}\n')
    args = ["rollout", "--agent", probe("namespaces", os.getpid()), "--tasks", str(tasks)]
    assert main([*args, "--upstream", upstream_url, "--project-dir", str(project)]) == 0
    store = SQLiteStore(project / ".tether" / "store.db")
    try:
        (rollout,) = store.list_rollouts(limit=10)
        assert rollout.status == RolloutStatus.succeeded, rollout
        return dict(json.loads(rollout.output or "{}"))
    finally:
        store.close()


def test_by_default_agents_run_in_the_sandbox_and_without_bwrap_one_line_says_they_do_not(
    tmp_path: Path, upstream_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "with").mkdir()
    inside = default_rollout(tmp_path / "with", upstream_url)
    assert inside["pids"] <= 3 and not inside["pytest_visible"]  # its own PID namespace: sandboxed
    assert not [r for r in caplog.records if "WITHOUT a sandbox" in r.getMessage()]
    monkeypatch.setenv("PATH", str(tmp_path))  # a host without bubblewrap
    (tmp_path / "without").mkdir()
    outside = default_rollout(tmp_path / "without", upstream_url)
    assert outside["pytest_visible"]  # an ordinary child process of Tether's
    (said,) = [r.getMessage() for r in caplog.records if "WITHOUT a sandbox" in r.getMessage()]
    assert "apt-get install bubblewrap" in said and "--sandbox none" in said and "\n" not in said


@pytest.mark.skipif(os.geteuid() != 0, reason="as root: a bwrap that runs for root only")
def test_as_root_where_only_root_may_run_bwrap_agents_keep_uid_0_and_one_line_says_so(
    tmp_path: Path,
    upstream_url: str,
    fake_bin: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Unprivileged user namespaces off: by default, agents still run in the sandbox, as uid 0 (as root's
    did before), and one line names the fix; `--sandbox bwrap` is refused, naming it and the opt-out."""
    real = shutil.which("bwrap")
    script = f'#!/bin/sh\n[ "$(id -u)" = 0 ] || {{ echo "{NO_USERNS}" >&2; exit 1; }}\nexec {real} "$@"\n'
    (fake_bin / "bwrap").write_text(script)
    (fake_bin / "bwrap").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake_bin}{os.pathsep}{os.environ['PATH']}")
    inside = default_rollout(tmp_path, upstream_url)
    assert inside["pids"] <= 3 and not inside["pytest_visible"]  # in the sandbox all the same
    (said,) = [r.getMessage() for r in caplog.records if "as uid 0" in r.getMessage()]
    assert "enable unprivileged user namespaces" in said and "--agent-user root" in said and "\n" not in said
    args = ["rollout", "--agent", "true", "--tasks", str(one_task(tmp_path)), "--sandbox", "bwrap"]
    with pytest.raises(SystemExit, match="enable unprivileged user namespaces.*--agent-user root"):
        main([*args, "--upstream", upstream_url, "--project-dir", str(tmp_path)])


def test_an_evaluator_above_the_agents_folder_is_hidden_and_the_agent_still_runs(tmp_path: Path) -> None:
    """The evaluator at a project's top, the agent in a folder below it: only the evaluator's file is
    hidden (its whole folder would hide the agent too), and the agent cannot read it."""
    project = tmp_path / "project"
    (project / "agent").mkdir(parents=True)
    (project / "checks.py").write_text(
        "def score(task, output):\n    return 1.0 if output == 'hidden' else 0.0\n"
    )
    agent = project / "agent" / "agent.py"
    agent.write_text(
        "from pathlib import Path\n"
        "checks = Path(__file__).resolve().parents[1] / 'checks.py'\n"
        "source = checks.read_text() if checks.exists() else ''\n"
        "print('read' if 'def score' in source else 'hidden')\n"
    )
    args = ["rollout", "--agent", f"{PYTHON} {agent}", "--tasks", str(one_task(tmp_path))]
    args += ["--reward", f"{project / 'checks.py'}:score", "--sandbox", "bwrap", "--run", "above"]
    args += ["--upstream", "http://127.0.0.1:9/v1", "--project-dir", str(tmp_path)]
    assert main(args) == 0
    [rollout] = SQLiteStore(tmp_path / ".tether" / "store.db").list_rollouts(run="above", limit=10)
    assert rollout.status == RolloutStatus.succeeded and rollout.output == "hidden", rollout.error


def test_the_sandbox_with_the_kubernetes_runner_is_refused_naming_the_jobs_boundary(tmp_path: Path) -> None:
    tasks = one_task(tmp_path)
    template = Path(__file__).parent / "k8s" / "job.yaml.j2"
    args = ["rollout", "--agent", "true", "--tasks", str(tasks), "--sandbox", "bwrap", "--runner", "k8s"]
    args += ["--job-template", str(template), "--project-dir", str(tmp_path)]
    with pytest.raises(SystemExit, match="with --runner k8s the Job's pod is the boundary") as refused:
        main(args)
    assert "\n" not in str(refused.value)


VIEW_PROBE = """
import json, pathlib, socket
found = {}
for name, path in json.loads(pathlib.Path(__file__).with_name("targets.json").read_text()).items():
    if name == "socket":
        try:
            with socket.socket(socket.AF_UNIX) as client:
                client.connect(path)
            found[name] = "connected"
        except OSError as exc:
            found[name] = type(exc).__name__
        continue
    try:
        with open(path, "rb") as handle:
            found[name] = "read" if handle.read() else "empty"
    except OSError as exc:
        found[name] = type(exc).__name__
print(json.dumps(found))
"""


def test_by_default_the_agent_sees_no_history_store_secret_or_socket_of_the_host(
    outside_tmp: Path, upstream_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Through `tether rollout` without a sandbox flag (the default: bwrap here): the project's git history,
    a store kept outside the project, /etc's secrets, another project's secret and a Unix socket outside
    /tmp are each out of the agent's reach; with `--sandbox none` the same agent reaches every one."""
    other = outside_tmp / "other-project" / ".tether"
    other.mkdir(parents=True)
    (other / "secret").write_text("another project's secret")
    sockets = outside_tmp / "sockets"  # a socket folder outside /tmp and /run, as PostgreSQL's may be
    sockets.mkdir()
    listening = socket.socket(socket.AF_UNIX)
    listening.bind(str(sockets / "db.sock"))
    listening.listen()
    seen: dict[str, dict[str, str]] = {}
    try:
        for kind, extra in (("default", []), ("plain", ["--sandbox", "none"])):
            project = outside_tmp / kind
            (project / ".git").mkdir(parents=True)
            (project / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
            (project / "agent").mkdir()
            (project / "agent" / "probe.py").write_text(VIEW_PROBE)
            store = outside_tmp / f"{kind}-store" / "store.db"
            store.parent.mkdir()
            targets = {
                "git_history": str(project / ".git" / "HEAD"),
                "store": str(store),
                "etc_shadow": "/etc/shadow",
                "other_project": str(other / "secret"),
                "socket": str(sockets / "db.sock"),
            }
            (project / "agent" / "targets.json").write_text(json.dumps(targets))
            agent = f"{PYTHON} {project / 'agent' / 'probe.py'}"
            args = ["rollout", "--agent", agent, "--tasks", str(one_task(project))]
            args += ["--upstream", upstream_url, "--store", str(store), "--project-dir", str(project)]
            args += ["--run", "view", *extra]
            assert main(args) == 0
            [rollout] = SQLiteStore(store).list_rollouts(run="view", limit=10)
            seen[kind] = json.loads(rollout.output or "{}")
    finally:
        listening.close()
    capsys.readouterr()
    reached = {"git_history": "read", "store": "read", "etc_shadow": "read", "other_project": "read"}
    assert seen["plain"] == {**reached, "socket": "connected"}  # as root, unsandboxed: everything
    hidden = {"FileNotFoundError", "PermissionError", "empty"}
    assert all(seen["default"][name] in hidden for name in reached), seen["default"]
    assert seen["default"]["socket"] in {"FileNotFoundError", "ConnectionRefusedError", "PermissionError"}
