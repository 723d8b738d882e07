"""What a hostile agent can do to a warm interpreter and to the agents it forks: nothing of the agent's
own code (nor any module from a folder outside the standard library and site-packages) runs in the
zygote, even named by the first run's learned list; a child takes no other rollout's request and gets
no fork of its own; no child finds an earlier sibling's token in what it inherited; each child draws
its own random numbers. Real processes, as `tether rollout` runs them warm (the default)."""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import re
import secrets
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from tether.runner import LLM, CommandAgent
from tether.runner.agents import AgentResult
from tether.runner.sandbox import BwrapSandbox, SandboxOptions
from tether.runner.warm import WarmStarts, _learned_modules

AGENTS = Path(__file__).parent / "agents"
PYTHON = sys.executable
SYSTEM_PYTHON = "/usr/bin/python3"
LLM_STUB = LLM(base_url="http://127.0.0.1:9/v1", api_key="tro-none")
OWN_MODULES = {"ownpkg", "ownpkg.sub", "lazypkg", "lazypkg.mod", "writable_mod"}
ONE_THREAD = {name: "1" for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}


def run(agent: CommandAgent, env: dict[str, str] | None = None, timeout_s: float = 60) -> AgentResult:
    return asyncio.run(agent.run({}, env or {"TETHER_ROLLOUT_ID": "ro-1"}, LLM_STUB, timeout_s))


def report(result: AgentResult) -> dict[str, Any]:
    assert result.ok, (result.error, result.stderr)
    return dict(json.loads(result.output or "{}"))


def importers(marker: Path) -> dict[int, set[str]]:
    """The pids that imported the agent's own modules, and which."""
    seen: dict[int, set[str]] = {}
    for line in marker.read_text().splitlines() if marker.exists() else []:
        pid, name = line.split()
        seen.setdefault(int(pid), set()).add(name)
    return seen


def test_the_agents_own_packages_never_run_in_a_warm_interpreter_nor_in_its_successor(
    warm: WarmStarts, tmp_path: Path
) -> None:
    """`ownpkg.sub` (a dotted module-level import: resolving it must not import `ownpkg`), and what the
    first run imported lazily (its own `lazypkg.mod`, `writable_mod` from a writable PYTHONPATH folder),
    which the learned list hands the successor zygote: each is imported by each agent's own process."""
    writable = tmp_path / "writable"
    writable.mkdir()
    (writable / "writable_mod.py").write_text((AGENTS / "own_package" / "ownpkg" / "__init__.py").read_text())
    marker = tmp_path / "imports"
    env = {"IMPORT_MARKER": str(marker), "PYTHONPATH": str(writable)}
    agent = CommandAgent(f"{PYTHON} {AGENTS / 'own_package' / 'agent.py'}", env=env, warm=warm)
    first = report(run(agent))
    assert importers(marker) == {first["pid"]: OWN_MODULES}
    later = [report(run(agent)) for _ in range(2)]
    assert warm.forked == 3 and len(warm.retired) == 1, "every run warm, the later ones from a successor"
    successor = warm.zygotes[PYTHON]
    assert {"ownpkg.sub", "lazypkg.mod", "writable_mod"} <= set(successor.modules)  # as the first run said
    assert "json" in successor.loaded
    assert not {"ownpkg", "lazypkg", "writable_mod"} & {name.split(".")[0] for name in successor.loaded}
    seen = importers(marker)
    assert set(seen) == {run["pid"] for run in [first, *later]}, "a zygote imported the agent's code"
    assert all(names == OWN_MODULES for names in seen.values())  # each run imported all itself


def test_a_learned_list_keeps_module_names_only(tmp_path: Path) -> None:
    """The first child writes the list; the agent's code could have written anything there."""
    learned = tmp_path / "learned.json"
    names = ["json", "xml.dom", "os; import evil", "pkg.__main__", "__main__", 7, "", "a..b", "tether.cli"]
    learned.write_text(json.dumps(names))
    assert _learned_modules(str(learned)) == ["json", "xml.dom"]
    learned.write_text('{"json": 1}')
    assert _learned_modules(str(learned)) == []


def test_a_warm_child_cannot_take_another_rollouts_request_nor_ask_for_a_fork(warm: WarmStarts) -> None:
    """The thief looks for 4 s: on every socket it inherited (accept()), and at the zygote's own socket
    (a request as Tether's), while four other rollouts are forked from the same zygote."""
    probe = CommandAgent(f"{PYTHON} {AGENTS / 'warm_probe.py'} report", warm=warm)
    thief = CommandAgent(f"{PYTHON} {AGENTS / 'fd_thief.py'} 4", warm=warm)
    env = {"TETHER_ROLLOUT_ID": "ro-1"}

    async def meanwhile() -> tuple[AgentResult, list[AgentResult]]:
        await probe.run({}, env, LLM_STUB, 30)  # the zygote is up
        stealing = asyncio.create_task(thief.run({}, env, LLM_STUB, 30))
        others = []
        for _ in range(4):
            await asyncio.sleep(0.5)
            others.append(await probe.run({}, env, LLM_STUB, 30))
        return await stealing, others

    stolen, others = asyncio.run(meanwhile())
    seen = report(stolen)
    assert seen["listening"] == 0 and seen["stolen"] == 0, seen
    assert seen["asked"] and not [answer for answer in seen["asked"] if "pid" in str(answer)], seen
    assert [report(other)["preloaded"] for other in others] == [True] * 4
    assert warm.forked == 6


def test_no_warm_child_finds_an_earlier_siblings_token(warm: WarmStarts) -> None:
    """Each child searches all of its memory (what it inherited from the zygote) for another rollout's
    token; nor is any token in the zygote's own memory."""
    agent = CommandAgent(f"{PYTHON} {AGENTS / 'token_hunter.py'}", warm=warm)
    tokens = [f"tro-hunt-{secrets.token_hex(8)}" for _ in range(4)]
    for token in tokens:
        assert report(run(agent, {"TETHER_ROLLOUT_ID": "ro-1", "HUNT_TOKEN": token})) == {"others": []}
    assert warm.forked == 4
    for zygote in [*warm.zygotes.values(), *warm.retired]:
        if zygote.process is not None and zygote.alive:
            assert not set(tokens) & tokens_in_memory(zygote.process.pid)


def tokens_in_memory(pid: int) -> set[str]:
    found: set[str] = set()
    pattern = re.compile(rb"tro-hunt-[0-9a-f]{16}")
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as memory:
        for line in maps:
            span, perms = line.split()[:2]
            if not perms.startswith("r") or "[vvar]" in line or "[vsyscall]" in line:
                continue
            start, end = (int(part, 16) for part in span.split("-"))
            try:
                memory.seek(start)
                found |= {match.decode() for match in pattern.findall(memory.read(end - start))}
            except (OSError, ValueError, OverflowError):
                continue
    return found


def test_each_warm_child_draws_its_own_numbers_from_random_and_numpy(warm: WarmStarts) -> None:
    agent = CommandAgent(f"{PYTHON} {AGENTS / 'random_agent.py'}", env=ONE_THREAD, warm=warm)
    draws = [report(run(agent)) for _ in range(3)]
    assert [draw["preloaded"] for draw in draws] == [True] * 3, warm.cold  # numpy was in the zygote
    assert len({draw["random"] for draw in draws}) == 3
    assert len({draw["numpy"] for draw in draws}) == 3


@pytest.mark.skipif(
    os.geteuid() != 0 or not Path(SYSTEM_PYTHON).exists(), reason="needs root and /usr/bin/python3"
)
def test_an_agent_user_without_a_sandbox_starts_warm_as_that_user(warm: WarmStarts) -> None:
    probe = shlex.join([SYSTEM_PYTHON, str(AGENTS / "warm_probe.py"), "report"])
    agent = CommandAgent(probe, user="nobody", warm=warm)
    seen = [report(run(agent)) for _ in range(2)]
    assert [started["preloaded"] for started in seen] == [True, True], warm.cold
    assert not warm.cold and warm.forked == 2
    zygote = warm.zygotes[SYSTEM_PYTHON]
    assert zygote.process is not None
    assert os.stat(f"/proc/{zygote.process.pid}").st_uid == pwd.getpwnam("nobody").pw_uid


def test_a_sandboxed_warm_interpreter_sees_its_own_children_only(warm: WarmStarts) -> None:
    """In `--sandbox bwrap` the zygote has a PID namespace and /proc of its own (a child that broke out
    of its own confinement would find no host process there), and Tether still kills by the host's pids."""
    if shutil.which("bwrap") is None:
        pytest.fail("bubblewrap is not installed: run scripts/ensure_bwrap.sh (make test does)")
    probe = f"{PYTHON} {AGENTS / 'warm_probe.py'} report"
    agent = CommandAgent(probe, sandbox=BwrapSandbox(SandboxOptions()), warm=warm)
    assert report(run(agent))["preloaded"] is True and warm.forked == 1
    (zygote,) = warm.zygotes.values()
    assert zygote.process is not None
    own_namespace = os.readlink("/proc/self/ns/pid")
    inner = [
        pid for pid in descendants(zygote.process.pid) if os.readlink(f"/proc/{pid}/ns/pid") != own_namespace
    ]
    assert inner, "the zygote runs in Tether's PID namespace"
    host = [entry for entry in os.listdir("/proc") if entry.isdigit()]
    for pid in inner:
        seen = [entry for entry in os.listdir(f"/proc/{pid}/root/proc") if entry.isdigit()]
        assert len(seen) <= 2 < len(host), seen  # itself, at most one child: none of the host's


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def test_a_sandboxed_warm_child_gets_its_relay_as_a_descriptor_it_does_not_keep(warm: WarmStarts) -> None:
    """No rollout's relay directory is in the folder the zygote sees; the agent holds none of it (nor
    anything else: the first run, which reports its imports, is the one that holds that file)."""
    if shutil.which("bwrap") is None:
        pytest.fail("bubblewrap is not installed: run scripts/ensure_bwrap.sh (make test does)")
    lister = f"{PYTHON} {AGENTS / 'fd_lister.py'} 1.5"
    agent = CommandAgent(lister, sandbox=BwrapSandbox(SandboxOptions()), warm=warm)
    env = {"TETHER_ROLLOUT_ID": "ro-1"}

    async def look_while_it_runs() -> tuple[AgentResult, list[str]]:
        await agent.run({}, env, LLM_STUB, 30)
        running = asyncio.create_task(agent.run({}, env, LLM_STUB, 30))
        await asyncio.sleep(1.0)
        assert warm.warm_folder is not None
        folder = os.listdir(warm.warm_folder)
        return await running, folder

    result, folder = asyncio.run(look_while_it_runs())
    assert report(result) == {"fds": [0, 1, 2]} and warm.forked == 2
    assert [name for name in folder if name.startswith("tether-agent-")], folder  # it ran, with its scratch
    assert not [name for name in folder if name.startswith("tether-sandbox-")], folder
