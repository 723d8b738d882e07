"""`--sandbox bwrap`: a hostile agent (`agents/sandbox_probe.py`) tries each hole the sandbox closes, with
real bubblewrap, real processes and a real gateway on loopback; where it makes sense, the same agent
unsandboxed gets through, so each test can fail. docs/security.md lists the guarantees and these tests.
Each test of a Python agent runs it both ways it starts (`start`): cold, and forked from a warm
interpreter (the default), which must then have started every sandboxed agent of the test."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.rigs import GatewayRig
from tether.cli import rollout_cmd
from tether.cli.main import main
from tether.project import Project
from tether.runner import LLM, AgentEndpoints, CommandAgent
from tether.runner.agents import AgentResult
from tether.runner.sandbox import (
    BwrapSandbox,
    Command,
    SandboxError,
    SandboxLimits,
    SandboxOptions,
    gateway_address,
    project_hide,
)
from tether.runner.warm import WarmStarts
from tether.store import RolloutRequest, RolloutStatus, SQLiteStore, Task

AGENTS = Path(__file__).parent / "agents"
PROBE = AGENTS / "sandbox_probe.py"
CLI_AGENTS = Path(__file__).parents[1] / "cli" / "agents"
ROOT = Path(__file__).parents[2]
PYTHON = sys.executable
SYSTEM_PYTHON = "/usr/bin/python3"
LLM_STUB = LLM(base_url="http://127.0.0.1:9/v1", api_key="tro-none")
AS_ROOT = os.geteuid() == 0

pytestmark = pytest.mark.bwrap


@pytest.fixture(autouse=True)
def bwrap_installed() -> None:
    if shutil.which("bwrap") is None:
        pytest.fail("bubblewrap is not installed: run scripts/ensure_bwrap.sh (make test does)")


def sandbox(**options: Any) -> BwrapSandbox:
    return BwrapSandbox(SandboxOptions(**options))


class Start:
    """How a test's sandboxed agents start: cold (`--agent-cold`), or warm, and then every one warm.
    `cli` gives `tether rollout` the flag and records its WarmStarts, to count them there too."""

    def __init__(self, warm: bool, monkeypatch: pytest.MonkeyPatch) -> None:
        self.warm = WarmStarts() if warm else None
        self.made: list[WarmStarts] = []
        self.sandboxed = 0
        recorded = self.made

        class Recorded(WarmStarts):
            def __init__(self, modules: Any = None) -> None:
                super().__init__(modules)
                recorded.append(self)

        monkeypatch.setattr(rollout_cmd, "WarmStarts", Recorded)

    def agent(self, template: str, **options: Any) -> CommandAgent:
        """A sandboxed agent (`sandbox=` in options), started as this test starts them."""
        self.sandboxed += 1
        return CommandAgent(template, warm=self.warm, **options)

    def cli(self, *args: str) -> list[str]:
        return list(args) if self.warm is not None else [*args, "--agent-cold"]

    def check(self, cli_rollouts: int = 0) -> None:
        """Every sandboxed agent started warm, none cold (a warm start that fell back would prove nothing)."""
        if self.warm is None:
            return
        if cli_rollouts:
            assert [(w.cold, w.forked) for w in self.made] == [({}, cli_rollouts)]
        else:
            assert self.warm.cold == {} and self.warm.forked == self.sandboxed > 0

    def close(self) -> None:
        if self.warm is not None:
            self.warm.close()


@pytest.fixture(params=["cold", "warm"])
def start(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Start]:
    starting = Start(request.param == "warm", monkeypatch)
    yield starting
    starting.close()


def probe(mode: str, *args: object, python: str = PYTHON) -> str:
    return " ".join([python, str(PROBE), mode, *(str(a) for a in args)])


def run(agent: CommandAgent, env: dict[str, str] | None = None, timeout_s: float = 60) -> AgentResult:
    return asyncio.run(agent.run({}, env or {"TETHER_ROLLOUT_ID": "ro-1"}, LLM_STUB, timeout_s))


def seen(agent: CommandAgent, env: dict[str, str] | None = None) -> dict[str, Any]:
    result = run(agent, env)
    assert result.error is None, result.stderr
    return json.loads(result.output or "{}")


def live_env(rig: GatewayRig) -> tuple[str, dict[str, str]]:
    """A claimed rollout of the rig's store, and the environment the runner gives its agent."""
    (rollout,) = rig.store.enqueue([RolloutRequest(task=Task(input={"q": "hi"}))])
    assert rig.store.claim("worker") is not None
    return rollout.id, AgentEndpoints(rig.url, rig.auth).env(rollout, 1)


def calls(rig: GatewayRig, rollout_id: str) -> int:
    return len(rig.store.query_spans(rollout_id=rollout_id, limit=1000))


def host_processes(marker: str) -> list[int]:
    """Host pids whose command line carries `marker` and that are running (a zombie is dead)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker.encode() in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


def gone(marker: str) -> bool:
    """Whether no process with `marker` runs, allowing a killed one a moment to be reaped."""
    for _ in range(100):
        if not host_processes(marker):
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def outside_tmp() -> Iterator[Path]:
    """A folder outside /tmp (which the sandbox empties anyway), as a real project directory is: in the
    checkout, unless the checkout itself is under /tmp."""
    base = ROOT / "build"
    if str(ROOT.resolve()).startswith(("/tmp/", os.path.realpath(tempfile.gettempdir()) + "/")):
        base = Path.home() / ".cache" / "tether-sandbox-tests"
    base.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="sandbox-test-", dir=base))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


# -- namespaces -------------------------------------------------------------------------------------


def test_the_agent_sees_no_other_process_and_lives_in_namespaces_of_its_own(start: Start) -> None:
    sibling = subprocess.Popen(
        [PYTHON, "-c", "import time; time.sleep(60)", "sibling-secret-arg"],
        env={"TETHER_TOKEN": "tadm-sibling-secret", "PATH": os.defpath},
    )
    try:
        inside = seen(start.agent(probe("namespaces", sibling.pid), sandbox=sandbox()))
        outside = seen(CommandAgent(probe("namespaces", sibling.pid)))
    finally:
        sibling.kill()
        sibling.wait()
    start.check()
    host = {kind: os.readlink(f"/proc/self/ns/{kind}") for kind in ("pid", "ipc", "mnt", "net", "uts")}
    assert all(inside["ns"][kind] != host[kind] for kind in host)
    assert inside["pids"] <= 3  # bwrap's init, the relay, the agent
    assert not inside["pytest_visible"]
    assert inside["sibling_environ"] == "FileNotFoundError"
    assert inside["sibling_cmdline"] == "FileNotFoundError"
    # unsandboxed, the same agent sees Tether and reads its sibling's command line and environment
    assert outside["pytest_visible"]
    assert "sibling-secret-arg" in outside["sibling_cmdline"]
    assert "tadm-sibling-secret" in outside["sibling_environ"]
    assert outside["ns"] == host


def test_two_agents_at_once_share_no_folder_shared_memory_or_terminal(start: Start) -> None:
    """Run side by side, each sees beside its scratch directory only its own relay directory (warm: none,
    it gets its relay as a descriptor), in /dev/shm only its own file, in /dev/pts only its own terminal
    (warm: children of one zygote, whose sandbox holds every rollout's scratch directory)."""
    names = [f"ro-{os.getpid()}-{i}" for i in range(2)]

    async def side_by_side(agent: CommandAgent) -> list[dict[str, Any]]:
        runs = [agent.run({}, {"TETHER_ROLLOUT_ID": name}, LLM_STUB, 60) for name in names]
        results = await asyncio.gather(*runs)
        assert all(result.error is None for result in results), [result.stderr for result in results]
        return [json.loads(result.output or "{}") for result in results]

    inside = asyncio.run(side_by_side(start.agent(probe("neighbours", 1.5), sandbox=sandbox())))
    start.sandboxed += 1  # two runs of the one agent
    try:
        outside = asyncio.run(side_by_side(CommandAgent(probe("neighbours", 1.5))))
    finally:
        for name in names:
            Path("/dev/shm", name).unlink(missing_ok=True)
    start.check()
    for name, seen in zip(names, inside, strict=True):
        beside = seen["beside_scratch"]
        assert len(beside) == (1 if start.warm else 2) and seen["scratch"] in beside
        assert all(other.startswith("tether-sandbox-") for other in beside if other != seen["scratch"])
        assert seen["shm"] == [name]
        assert seen["pts"] == [seen["terminal"], "ptmx"]
    # unsandboxed, each sees the other's scratch directory, file and terminal
    for seen, other in zip(outside, reversed(outside), strict=True):
        assert other["scratch"] in seen["beside_scratch"] and set(names) <= set(seen["shm"])
        assert other["terminal"] in seen["pts"]


# -- the environment --------------------------------------------------------------------------------


def test_the_environment_is_an_allow_list(monkeypatch: pytest.MonkeyPatch, start: Start) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-secret")
    monkeypatch.setenv("WANDB_API_KEY", "wandb-secret")
    monkeypatch.setenv("MY_SETTING", "passed on purpose")
    monkeypatch.setenv("LC_TIME", "C.UTF-8")
    runner_env = {"TETHER_ROLLOUT_ID": "ro-1", "OPENAI_API_KEY": "tro-token", "TETHER_TASK": "{}"}
    inside = seen(start.agent(probe("env"), sandbox=sandbox(env_names=("MY_SETTING",))), runner_env)["env"]
    outside = seen(CommandAgent(probe("env")), runner_env)["env"]
    start.check()

    assert not {"AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "WANDB_API_KEY"} & set(inside)
    assert {key: inside[key] for key in runner_env} == runner_env
    assert inside["MY_SETTING"] == "passed on purpose" and inside["LC_TIME"] == "C.UTF-8"
    assert inside["PATH"] == os.environ["PATH"]
    assert inside["HOME"] == inside["PWD"] == inside["TMPDIR"]  # the scratch directory
    allowed = {"PATH", "HOME", "PWD", "TMPDIR", "LANG", "LANGUAGE", "TZ", "TERM", "MY_SETTING", *runner_env}
    # what a program adds itself (a pyenv shim sets PYENV_*; the shell SHLVL) is not Tether's environment
    added = {key for key in inside if key.startswith(("PYENV", "_PYENV")) or key in ("SHLVL", "_")}
    assert set(inside) - added - allowed <= {key for key in inside if key.startswith("LC_")}
    assert outside["AWS_SECRET_ACCESS_KEY"] == "aws-secret"  # unsandboxed, it inherits them


# -- the file system --------------------------------------------------------------------------------


def test_the_file_system_is_read_only_but_the_scratch_and_the_project_is_hidden(
    outside_tmp: Path, start: Start
) -> None:
    project = Project.at(outside_tmp / "repo")  # the agent's code lives in the project, as in a repository
    project.authority()
    agent_file = project.root / "agents" / "probe.py"
    agent_file.parent.mkdir()
    shutil.copy(PROBE, agent_file)
    tasks = project.root / "data" / "tasks.jsonl"
    tasks.parent.mkdir()
    tasks.write_text('{"q": "2+2", "answer": "4"}\n')
    elsewhere = Project.at(outside_tmp / "other-project")  # holds nothing the agent needs: hidden whole
    elsewhere.root.mkdir()
    (elsewhere.root / "notes.txt").write_text("private")
    other_scratch = Path(tempfile.mkdtemp(prefix="tether-agent-"))
    (other_scratch / "answer.txt").write_text("another rollout's work")
    hide = [*project_hide(project.root, [str(agent_file), PYTHON]), tasks, elsewhere.root]
    assert hide[0] == project.state_dir and project_hide(elsewhere.root, [PYTHON]) == [elsewhere.root]
    command = f"{PYTHON} {agent_file} files {project.root} {other_scratch} {tasks} {elsewhere.root}/notes.txt"
    try:
        inside = seen(start.agent(command, sandbox=sandbox(hide=tuple(str(p) for p in hide))))
        outside = seen(CommandAgent(command))
    finally:
        shutil.rmtree(other_scratch)
    start.check()

    assert inside["own_code"] is True  # the agent's own file, inside the project, is still there
    assert inside["secret"] == "FileNotFoundError" and inside["state_dir"] == []
    assert inside["other_scratch"] == "FileNotFoundError"
    # in /tmp only scratch and relay folders, and the way to the Python environment when it is in there
    prefix = Path(sys.prefix).resolve()
    route = {prefix.relative_to("/tmp").parts[0]} if prefix.is_relative_to("/tmp") else set()
    assert all(name.startswith(("tether-agent-", "tether-sandbox-")) for name in set(inside["tmp"]) - route)
    assert inside["extra"] == [
        "",
        "FileNotFoundError",
    ]  # the task file reads empty; the other project is gone
    assert inside["writes_outside"] == ["OSError", "FileNotFoundError", "OSError"]  # read-only, or gone
    assert inside["write_cwd"] is True and inside["home_is_cwd"] is True
    # unsandboxed, as the same user, it reads the project's secret and writes where it likes
    assert outside["secret"] == project.secret_path.read_text()
    assert outside["extra"][0] == tasks.read_text() and outside["other_scratch"] == ["answer.txt"]
    assert outside["writes_outside"] == [True, True, True]
    Path("/tmp/tether-sandbox-probe").unlink()


def test_an_interpreter_of_a_virtual_environment_under_tmp_runs_with_its_environment(
    tmp_path: Path, start: Start
) -> None:
    """/tmp is emptied in the sandbox, but a project checked out there runs from its own environment.
    Warm, the agent is a script (a `-c` command starts cold), in the virtual environment too."""
    venv = Path(tempfile.mkdtemp(prefix="sandbox-venv-"))
    try:
        subprocess.run([PYTHON, "-m", "venv", "--without-pip", str(venv)], check=True)
        (venv / "secret.txt").write_text("hidden")
        (venv / "lib" / "marker.txt").write_text("kept")
        code = (
            "import json, os, sys; p = sys.prefix; m = p + '/lib/marker.txt'; "
            "print(json.dumps([p, os.path.isfile(m), os.path.getsize(p + '/secret.txt')]))"
        )
        command = f"{venv}/bin/python -I -c {json.dumps(code)}"
        if start.warm is not None:
            (venv / "agent.py").write_text(code + "\n")
            command = f"{venv}/bin/python {venv / 'agent.py'}"
        inside = seen(start.agent(command, sandbox=sandbox(hide=(str(venv / "secret.txt"),))))
    finally:
        shutil.rmtree(venv)
    assert inside == [str(venv), True, 0]  # its own prefix, its files there, a hidden file still empty
    start.check()


# -- the network ------------------------------------------------------------------------------------


@pytest.fixture
def host_listeners(tmp_path: Path) -> Iterator[tuple[int, str]]:
    """A TCP port on the host's loopback (as PostgreSQL's) and a Unix socket in /tmp (as its socket)."""
    tcp = socket.create_server(("127.0.0.1", 0))
    unix = socket.socket(socket.AF_UNIX)
    path = str(tmp_path / ".s.PGSQL.5432")
    unix.bind(path)
    unix.listen()
    yield tcp.getsockname()[1], path
    tcp.close()
    unix.close()


def test_the_agent_reaches_the_gateway_and_nothing_else(
    rig: GatewayRig, host_listeners: tuple[int, str], start: Start
) -> None:
    port, unix_path = host_listeners
    rollout_id, env = live_env(rig)
    inside = seen(start.agent(probe("network", port, unix_path), sandbox=sandbox()), env)
    start.check()
    assert inside["gateway"] == 200 and calls(rig, rollout_id) == 1  # recorded, through the relay
    assert inside["admin"] in (401, 403)  # the same port serves the admin API: not to a rollout token
    assert inside["host_port"] == "ConnectionRefusedError"  # the sandbox's loopback is its own
    assert inside["host_unix"] == "FileNotFoundError"
    assert inside["outside"] == "OSError"  # no route out at all
    outside = seen(CommandAgent(probe("network", port, unix_path)), env)
    assert outside["host_port"] == "connected" and outside["host_unix"] == "connected"


def test_a_gateway_on_another_host_is_relayed_under_the_sandboxs_loopback() -> None:
    env = {"TETHER_SERVER": "http://10.0.0.5:8123", "OPENAI_BASE_URL": "http://10.0.0.5:8123/rollouts/r/v1"}
    box = sandbox()
    command = Command(["true"], "/tmp", env, {"PATH": "/usr/bin", "AWS_SECRET_ACCESS_KEY": "x"})
    inner = box.environment(command, gateway_address(env), 8123)
    assert inner["OPENAI_BASE_URL"] == "http://127.0.0.1:8123/rollouts/r/v1"
    assert inner["TETHER_SERVER"] == "http://127.0.0.1:8123" and "AWS_SECRET_ACCESS_KEY" not in inner


# -- limits -----------------------------------------------------------------------------------------


@pytest.mark.skipif(AS_ROOT and not os.path.exists(SYSTEM_PYTHON), reason="as root, needs /usr/bin/python3")
def test_the_process_limit_stops_a_fork_bomb(start: Start) -> None:
    # Linux does not apply RLIMIT_NPROC to uid 0: as root, the agent runs as `nobody` (--agent-user), with
    # a Python that user can run.
    user, python = ("nobody", SYSTEM_PYTHON) if AS_ROOT else (None, PYTHON)
    limits = SandboxLimits(processes=16)
    inside = seen(start.agent(probe("fork", 40, python=python), user=user, sandbox=sandbox(limits=limits)))
    outside = seen(CommandAgent(probe("fork", 40, python=python), user=user))
    start.check()
    assert inside["error"] == "BlockingIOError" and inside["forked"] < 16
    assert outside == {"forked": 40, "error": None}


def test_the_memory_limit_stops_a_large_allocation(start: Start) -> None:
    limits = SandboxLimits(memory_mib=256)
    inside = seen(start.agent(probe("memory", 512), sandbox=sandbox(limits=limits)))
    outside = seen(CommandAgent(probe("memory", 512)))
    start.check()
    assert inside == {"allocated": False} and outside == {"allocated": True}


def test_the_cpu_limit_kills_a_spinning_agent(start: Start) -> None:
    result = run(start.agent(probe("spin"), sandbox=sandbox(limits=SandboxLimits(cpu_s=1))))
    start.check()
    assert result.exit_code == 128 + 24  # SIGXCPU at the soft limit (SIGKILL a second later if caught)
    assert "killed by SIGXCPU (the CPU-time limit" in (result.error or "")


# -- nothing outlives the sandbox -------------------------------------------------------------------


def test_a_double_forked_daemon_dies_with_the_agent(rig: GatewayRig, start: Start) -> None:
    rollout_id, env = live_env(rig)
    marker = f"tether-daemon-{os.getpid()}-a"
    result = run(start.agent(probe("daemon", marker), sandbox=sandbox()), env)
    assert result.error is None, result.stderr
    start.check()
    assert calls(rig, rollout_id) >= 1  # the daemon was alive and calling the gateway
    assert gone(marker)

    _, env = live_env(rig)
    unsandboxed = f"tether-daemon-{os.getpid()}-b"
    assert run(CommandAgent(probe("daemon", unsandboxed)), env).error is None
    survivors = host_processes(unsandboxed)
    for pid in survivors:
        os.kill(pid, 9)
    assert survivors  # unsandboxed, it outlives the agent


def test_a_killed_sandbox_takes_its_daemon_with_it(rig: GatewayRig, start: Start) -> None:
    """A timeout and Ctrl-C end an agent the same way: its process group is killed (here: cancelled)."""
    rollout_id, env = live_env(rig)
    marker = f"tether-daemon-{os.getpid()}-c"
    agent = start.agent(probe("daemon", marker, "hang"), sandbox=sandbox())

    async def cancel_once_the_daemon_calls() -> None:
        task = asyncio.create_task(agent.run({}, env, LLM_STUB, 600))
        while calls(rig, rollout_id) == 0:
            await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_once_the_daemon_calls())
    assert gone(marker)
    start.check()


# -- bad setup --------------------------------------------------------------------------------------


def test_missing_bubblewrap_is_one_line_naming_the_fix() -> None:
    with pytest.raises(SandboxError, match="apt-get install bubblewrap"):
        CommandAgent("true", sandbox=sandbox(executable="no-such-bwrap"))


def test_through_the_cli_missing_bwrap_or_user_namespaces_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"q": "hi"}\n')
    args = ["rollout", "--agent", "true", "--tasks", str(tasks), "--sandbox", "bwrap"]
    args += ["--upstream", "http://127.0.0.1:9/v1", "--project-dir", str(tmp_path)]
    fake = tmp_path / "bin"
    fake.mkdir()
    monkeypatch.setenv("PATH", str(fake))
    with pytest.raises(SystemExit, match="apt-get install bubblewrap"):
        main(args)
    (fake / "bwrap").write_text(
        "#!/bin/sh\necho 'bwrap: No permissions to create new namespace, likely because the kernel does not "
        "allow non-privileged user namespaces.' >&2\nexit 1\n"
    )
    (fake / "bwrap").chmod(0o755)
    with pytest.raises(SystemExit, match="enable unprivileged user namespaces") as refused:
        main(args)
    assert "\n" not in str(refused.value)


def test_sandbox_options_without_a_sandbox_are_refused(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"q": "hi"}\n')
    args = ["rollout", "--agent", "true", "--tasks", str(tasks), "--sandbox-env", "HOME"]
    with pytest.raises(SystemExit, match="add --sandbox bwrap"):
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
        for kind, extra in (("sandboxed", sandboxed), ("plain", ["--agent-cold"])):
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
        "task_file": "",  # the task file reads empty
        "other_scratch": "FileNotFoundError",
        "writes_outside": ["OSError", "FileNotFoundError"],  # the project read-only, /tmp's others gone
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


def test_the_sandbox_with_the_kubernetes_runner_is_refused_naming_the_jobs_boundary(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"q": "hi"}\n')
    template = Path(__file__).parent / "k8s" / "job.yaml.j2"
    args = ["rollout", "--agent", "true", "--tasks", str(tasks), "--sandbox", "bwrap", "--runner", "k8s"]
    args += ["--job-template", str(template), "--project-dir", str(tmp_path)]
    with pytest.raises(SystemExit, match="with --runner k8s the Job's pod is the boundary") as refused:
        main(args)
    assert "\n" not in str(refused.value)
