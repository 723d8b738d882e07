"""`--sandbox bwrap`: a hostile agent (`agents/sandbox_probe.py`) tries each hole the sandbox closes, with
real bubblewrap, real processes and a real gateway on loopback; where it makes sense, the same agent
unsandboxed gets through, so each test can fail. docs/security.md lists the guarantees and these tests.
Each test of a Python agent runs it both ways it starts (`start`): cold, and forked from a warm
interpreter (the default), which must then have started every sandboxed agent of the test."""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.rigs import GatewayRig
from tests.runner.sandbox_rig import (
    AS_ROOT,
    LLM_STUB,
    PROBE,
    PYTHON,
    ROOT,
    SYSTEM_PYTHON,
    Start,
    calls,
    gone,
    host_processes,
    live_env,
    probe,
    run,
    sandbox,
    seen,
)
from tether.project import Project
from tether.runner import CommandAgent
from tether.runner.cgroups import Cgroups
from tether.runner.sandbox import (
    Command,
    SandboxLimits,
    gateway_address,
    project_hide,
)

pytestmark = [pytest.mark.bwrap, pytest.mark.usefixtures("bwrap_installed")]


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
        outside = asyncio.run(side_by_side(CommandAgent(probe("neighbours", 1.5, "tether-,ro-"))))
    finally:
        for name in names:
            Path("/dev/shm", name).unlink(missing_ok=True)
    start.check()
    for name, view in zip(names, inside, strict=True):
        beside = [entry for entry in view["beside_scratch"] if entry not in routes()]
        assert len(beside) == (1 if start.warm else 2) and view["scratch"] in beside
        assert all(other.startswith("tether-sandbox-") for other in beside if other != view["scratch"])
        assert view["shm"] == [name]
        assert view["pts"] == [view["terminal"], "ptmx"]
    # unsandboxed, each sees the other's scratch directory, file and terminal
    for view, other in zip(outside, reversed(outside), strict=True):
        assert other["scratch"] in view["beside_scratch"] and set(names) <= set(view["shm"])
        assert other["terminal"] in view["pts"]


# -- who the agent is on the host -------------------------------------------------------------------


def host_ids(marker: str) -> dict[str, list[str]]:
    """The ids the host's /proc gives the process named `marker` (empty: none runs)."""
    for entry in Path("/proc").iterdir():
        try:
            if (entry / "comm").read_text().strip() != marker:
                continue
            lines = (entry / "status").read_text().splitlines()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in lines if ":" in line)
        return {name: fields[name].split() for name in ("Uid", "Gid", "Groups")}
    return {}


def ids_while_it_runs(agent: CommandAgent, marker: str) -> dict[str, list[str]]:
    async def watch() -> dict[str, list[str]]:
        task = asyncio.create_task(agent.run({}, {"TETHER_ROLLOUT_ID": "ro-1"}, LLM_STUB, 60))
        ids: dict[str, list[str]] = {}
        while not task.done() and not ids:
            ids = host_ids(marker)
            await asyncio.sleep(0.02)
        result = await task
        assert result.error is None, result.stderr
        return ids

    return asyncio.run(watch())


@pytest.mark.skipif(not AS_ROOT, reason="as root: elsewhere agents run as Tether's own (unprivileged) user")
def test_as_root_the_agent_is_nobody_on_the_host_and_its_code_may_be_roots_only(
    start: Start, outside_tmp: Path
) -> None:
    """As root without --agent-user, the agent is `nobody` outside its user namespace, with no other
    group, cold and warm (and so is its warm interpreter); its code in a folder only root may enter (as
    under /root), a file only root may read, still runs. `--agent-user root` keeps uid 0 (cold here: one
    warm folder serves one user)."""
    folder = outside_tmp / "roots-only"
    folder.mkdir(mode=0o700)
    shutil.copyfile(PROBE, folder / PROBE.name)
    (folder / PROBE.name).chmod(0o600)
    marker = f"tether-{os.getpid() % 100000}"
    command = f"{PYTHON} {folder / PROBE.name} named {marker} 1"
    default = ids_while_it_runs(start.agent(command, sandbox=sandbox()), marker)
    as_root = ids_while_it_runs(CommandAgent(command, user="root", sandbox=sandbox()), marker)
    start.check()
    nobody = pwd.getpwnam("nobody")
    assert default == {"Uid": [str(nobody.pw_uid)] * 4, "Gid": [str(nobody.pw_gid)] * 4, "Groups": []}
    assert as_root["Uid"] == ["0"] * 4
    if start.warm is not None:
        zygotes = {os.stat(f"/proc/{z.process.pid}").st_uid for z in start.warm.zygotes.values() if z.process}
        assert zygotes == {nobody.pw_uid}


@pytest.mark.skipif(not AS_ROOT, reason="as root: elsewhere agents run as Tether's own (unprivileged) user")
def test_as_root_an_agent_cwd_only_root_may_enter_is_the_agents_and_what_it_makes_is_roots(
    outside_tmp: Path,
) -> None:
    folder = outside_tmp / "cwd"
    folder.mkdir(mode=0o700)
    (folder / "given").write_text("root's")
    (folder / "given").chmod(0o600)
    code = "open('made', 'w').write('x'); print(open('given').read())"
    result = run(CommandAgent(f"{PYTHON} -c {shlex.quote(code)}", cwd=str(folder), sandbox=sandbox()))
    assert result.error is None, result.stderr
    assert (result.output or "").strip() == "root's" and (folder / "made").stat().st_uid == 0


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
    """The agent's code at the root of its project, as `python agent.py` in a repository: it sees its
    folder, less the project's `.tether/` and `.git/` and the task file; nothing of the host but the
    system's parts (no home, no other project, no root-only file of /etc)."""
    project = Project.at(outside_tmp / "repo")
    project.authority()
    agent_file = project.root / "probe.py"
    shutil.copy(PROBE, agent_file)
    (project.root / "helpers.py").write_text("HELP = 1\n")  # a second module of the agent
    (project.root / ".git").mkdir()
    (project.root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    tasks = project.root / "data" / "tasks.jsonl"
    tasks.parent.mkdir()
    tasks.write_text('{"q": "2+2", "answer": "4"}\n')
    elsewhere = outside_tmp / "other-project"  # named nowhere: not in the sandbox at all
    elsewhere.mkdir()
    (elsewhere / "notes.txt").write_text("private")
    other_scratch = Path(tempfile.mkdtemp(prefix="tether-agent-"))
    (other_scratch / "answer.txt").write_text("another rollout's work")
    hide = [*project_hide(project.root), tasks]
    assert hide[:2] == [project.state_dir, project.root / ".git"]
    looks = [tasks, f"path:{elsewhere}/notes.txt", f"path:{project.root}/.git/HEAD", "path:/etc/shadow"]
    looks += [f"list:{Path.home()}", "list:/srv", f"list:{outside_tmp}"]
    command = f"{PYTHON} {agent_file} files {project.root} {other_scratch} {' '.join(map(str, looks))}"
    try:
        inside = seen(start.agent(command, sandbox=sandbox(hide=tuple(str(p) for p in hide))))
        outside = seen(CommandAgent(command))
    finally:
        shutil.rmtree(other_scratch)
    start.check()

    assert inside["own_code"] is True and "helpers.py" in inside["beside_own_code"]
    assert inside["secret"] == "FileNotFoundError" and inside["state_dir"] == []
    assert inside["other_scratch"] == "FileNotFoundError"
    assert {"data", ".git", ".tether"} <= set(inside["beside_own_code"])  # hidden: present, empty
    # in /tmp only scratch and relay folders, and the way to what is shown when it is in there
    assert all(
        name.startswith(("tether-agent-", "tether-sandbox-")) for name in set(inside["tmp"]) - routes()
    )
    task_file, notes, git_head, shadow, home, srv, projects = inside["extra"]
    assert (task_file, shadow) == (
        "",
        "",
    ) and notes == git_head == "FileNotFoundError"  # hidden, or not there
    assert home == "FileNotFoundError" or set(home) <= routes(Path.home(), outside_tmp)  # the way there
    assert srv == "FileNotFoundError" and projects == ["repo"]
    assert inside["writes_outside"] == ["OSError", "FileNotFoundError", "OSError"]  # read-only, or gone
    assert inside["write_cwd"] is True and inside["home_is_cwd"] is True
    # unsandboxed, as the same user, it reads the project's secret, its history, the other project
    assert outside["secret"] == project.secret_path.read_text()
    assert outside["extra"][:3] == [tasks.read_text(), "private", "ref: refs/heads/main\n"]
    assert "other-project" in outside["extra"][6] and outside["other_scratch"] == ["answer.txt"]
    assert outside["writes_outside"] == [True, True, True]
    Path("/tmp/tether-sandbox-probe").unlink()


def routes(folder: Path = Path("/tmp"), *more: Path) -> set[str]:
    """What a sandbox shows of `folder` (empty there, or not there at all) on the way to what it shows
    inside: the checkout (the probe, Tether's package), the Python environment and installation, and
    `more`."""
    paths = [ROOT.resolve(), Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(), *more]
    return {p.relative_to(folder).parts[0] for p in paths if p.is_relative_to(folder) and p != folder}


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


@pytest.fixture(params=["tmp", "elsewhere"])
def host_listeners(
    request: pytest.FixtureRequest, tmp_path: Path, outside_tmp: Path
) -> Iterator[tuple[int, str]]:
    """A TCP port on the host's loopback (as PostgreSQL's) and a Unix socket (as its socket) in /tmp,
    or in a folder of the host outside /tmp and /run (a server's own socket directory)."""
    tcp = socket.create_server(("127.0.0.1", 0))
    unix = socket.socket(socket.AF_UNIX)
    path = str((tmp_path if request.param == "tmp" else outside_tmp) / ".s.PGSQL.5432")
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


needs_cgroups = pytest.mark.skipif(
    not Cgroups().available(), reason="Tether may make no cgroup here (as root, or a delegated v2 subtree)"
)


def cgroups_of_this_process() -> list[Path]:
    return [found for parent in Cgroups().parents() for found in parent.glob(f"tether-{os.getpid()}-*")]


@needs_cgroups
def test_the_memory_cap_holds_for_the_whole_sandbox_not_each_process(start: Start) -> None:
    # Three processes of 160 MiB each pass a per-process limit of 256 MiB; the sandbox's cgroup holds
    # them to 256 MiB together, so at most one keeps its memory.
    limits = SandboxLimits(memory_mib=256)
    inside = seen(start.agent(probe("group-memory", 3, 160), sandbox=sandbox(limits=limits)))
    outside = seen(CommandAgent(probe("group-memory", 3, 160)))
    start.check()
    assert inside["held"] <= 1 and outside == {"held": 3, "children": 3}


@needs_cgroups
def test_as_root_the_process_cap_holds_without_agent_user(start: Start) -> None:
    # Linux applies no RLIMIT_NPROC to uid 0; the sandbox's cgroup counts its processes whoever runs it.
    limits = SandboxLimits(processes=16)
    inside = seen(start.agent(probe("fork", 40), sandbox=sandbox(limits=limits)))
    start.check()
    assert inside["error"] == "BlockingIOError" and inside["forked"] < 16
    assert not cgroups_of_this_process()  # each removed when its agent ended


def test_the_scratch_directory_holds_what_its_size_allows(
    start: Start,
) -> None:
    inside = seen(start.agent(probe("scratch", 24), sandbox=sandbox(limits=SandboxLimits(scratch_mib=8))))
    roomy = seen(start.agent(probe("scratch", 24), sandbox=sandbox(limits=SandboxLimits(scratch_mib=64))))
    start.check()
    assert inside["error"] == "ENOSPC" and inside["written_mib"] <= 8
    assert roomy == {"written_mib": 24, "error": None, "cwd": roomy["cwd"]}


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
