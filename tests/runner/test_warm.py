"""`--agent-warm`: a Python agent forked from a warm interpreter behaves exactly as its cold start, real
processes both ways (`agents/warm_probe.py` reports how it was started); where a warm start cannot be
exact, the agent starts cold and says why."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shlex
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tether.runner import LLM, CommandAgent
from tether.runner import warm as warm_module
from tether.runner.agents import AgentResult
from tether.runner.sandbox import BwrapSandbox, SandboxOptions
from tether.runner.warm import WarmStarts, python_entry, script_imports

Installer = Callable[[dict[str, str]], str]  # the `installed_python` fixture (conftest.py)

AGENTS = Path(__file__).parent / "agents"
PROBE = AGENTS / "warm_probe.py"
PYTHON = sys.executable
LLM_STUB = LLM(base_url="http://127.0.0.1:9/v1", api_key="tro-none")
ENV = {"TETHER_ROLLOUT_ID": "ro-1", "PROBE_VALUE": "per-rollout"}


def run(agent: CommandAgent, env: dict[str, str] | None = None, timeout_s: float = 60) -> AgentResult:
    return asyncio.run(agent.run({}, env or ENV, LLM_STUB, timeout_s))


def both(template: str, warm: WarmStarts, **options: Any) -> tuple[AgentResult, AgentResult]:
    """The same command cold, then warm."""
    return run(CommandAgent(template, **options)), run(CommandAgent(template, warm=warm, **options))


def probe(*args: object, python: str = PYTHON) -> str:
    return shlex.join([python, str(PROBE), *(str(a) for a in args)])


def alive(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if marker.encode() in (entry / "cmdline").read_bytes():
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    found.append(int(entry.name))
        except (OSError, IndexError):
            continue
    return found


def test_a_warm_agent_is_started_exactly_as_its_cold_start(warm: WarmStarts, tmp_path: Path) -> None:
    cold, hot = both(probe("report", "an arg"), warm, cwd=str(tmp_path))
    assert cold.ok and hot.ok, (cold.stderr, hot.stderr)
    seen = {name: json.loads(result.output or "{}") for name, result in (("cold", cold), ("warm", hot))}
    assert seen["cold"]["preloaded"] is False
    assert seen["warm"]["preloaded"] is True  # its import was loaded before the script ran: warm
    same = (
        "argv",
        "name",
        "file",
        "path0",
        "cwd",
        "env",
        "environ",
        "rollout",
        "prefix",
        "pgid_is_pid",
        "stdin",
    )
    for key in same:
        assert seen["warm"][key] == seen["cold"][key], key
    assert seen["warm"]["argv"] == [str(PROBE), "report", "an arg"]
    assert seen["warm"]["name"] == "__main__" and seen["warm"]["path0"] == str(AGENTS)
    assert seen["warm"]["cwd"] == str(tmp_path) and seen["warm"]["env"] == "per-rollout"
    assert hot.stdout.splitlines()[0] == cold.stdout.splitlines()[0] == "noise line"


def test_after_the_first_run_the_warm_interpreter_also_holds_its_lazy_imports(warm: WarmStarts) -> None:
    agent = CommandAgent(probe("lazy"), warm=warm)
    seen = [json.loads(run(agent).output or "{}")["lazy_preloaded"] for _ in range(3)]
    assert seen == [False, True, True]  # the first child told its successor what it imported
    assert len(warm.retired) == 1 and warm.zygotes[PYTHON].learned


def test_learned_imports_load_packages_before_their_private_accelerators(warm: WarmStarts) -> None:
    """Sorted, `_asyncio` comes before `asyncio`; imported first, it leaves asyncio with two registries of
    current tasks, and every library that asks for the running task (sniffio: httpx, openai) fails."""
    agent = CommandAgent(f"{PYTHON} {AGENTS / 'asyncio_agent.py'}", warm=warm)
    assert [run(agent).output for _ in range(3)] == ["True"] * 3
    assert warm.zygotes[PYTHON].learned and "_asyncio" in warm.zygotes[PYTHON].modules


def test_each_warm_child_draws_its_own_random_numbers(warm: WarmStarts) -> None:
    agent = CommandAgent(probe("report"), warm=warm)
    draws = {json.loads(run(agent).output or "{}")["random"] for _ in range(3)}
    assert len(draws) == 3


@pytest.mark.parametrize(
    ("mode", "code", "stderr_has"),
    [
        (("exit", 3), 3, "before exit"),
        (("raise",), 1, "RuntimeError: the probe failed on purpose"),
        (("kill-self",), -signal.SIGTERM, ""),
    ],
)
def test_exit_codes_and_tracebacks_are_those_of_a_cold_start(
    warm: WarmStarts, mode: tuple[object, ...], code: int, stderr_has: str
) -> None:
    cold, hot = both(probe(*mode), warm)
    assert cold.exit_code == hot.exit_code == code
    assert stderr_has in cold.stderr and stderr_has in hot.stderr
    assert hot.error == cold.error
    assert "Traceback" not in hot.stderr or "zygote" not in hot.stderr  # no frame of the warm machinery


def test_a_script_that_forks_behaves_as_it_does_cold(warm: WarmStarts) -> None:
    cold, hot = both(probe("fork"), warm)
    assert cold.ok and hot.ok
    assert hot.stdout == cold.stdout == "child\nparent after child\n"


def test_a_script_that_daemonizes_behaves_as_it_does_cold(warm: WarmStarts) -> None:
    for label, options in (("cold", {}), ("warm", {"warm": warm})):
        marker = f"9{os.getpid()}{len(label)}"
        result = run(CommandAgent(probe("daemon", marker), **options))  # type: ignore[arg-type]
        try:
            assert result.ok and result.output == "launched", (label, result)
            assert alive(marker), f"{label}: the daemon left the agent's group and outlives it, as cold"
        finally:
            for pid in alive(marker):
                os.kill(pid, signal.SIGKILL)


def test_a_script_with_its_own_signal_handler_gets_the_timeouts_term(warm: WarmStarts) -> None:
    cold = run(CommandAgent(probe("handler")), timeout_s=3)
    hot = run(CommandAgent(probe("handler"), warm=warm), timeout_s=3)
    for result in (cold, hot):
        assert result.timed_out and result.exit_code == 7
        assert result.stdout == "waiting\ngot term\n"


def test_a_timeout_kills_the_warm_agents_whole_group(warm: WarmStarts) -> None:
    marker = f"8{os.getpid()}"
    result = run(CommandAgent(probe("hang", marker), warm=warm), timeout_s=2)
    assert result.timed_out and "timed out" in (result.error or "")
    for _ in range(100):
        if not alive(marker):
            break
        time.sleep(0.05)
    assert not alive(marker), "the agent's child outlived the timeout"


def test_an_agent_of_another_interpreter_gets_a_zygote_of_that_interpreter(warm: WarmStarts) -> None:
    other = "/usr/bin/python3"
    if not Path(other).exists() or os.path.realpath(other) == os.path.realpath(PYTHON):
        pytest.fail("the test needs a system Python besides the project's virtual environment")
    agent = CommandAgent(probe("report", python=other), warm=warm)
    seen = json.loads(run(agent).output or "{}")
    assert seen["preloaded"] is True and seen["prefix"] == "/usr"
    assert set(warm.zygotes) == {other}


def cold_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "starts cold" in r.getMessage()]


@pytest.mark.parametrize(
    ("source", "why"),
    [
        (
            "import threading, time\n"
            "threading.Thread(target=time.sleep, args=(3600,), name='import-time-worker', daemon=True)"
            ".start()\n",
            "a preloaded module started a thread (import-time-worker)",
        ),
        # a thread threading.enumerate() does not list (as C code's threads are not): the kernel counts it
        ("import _thread, time\n_thread.start_new_thread(time.sleep, (3600,))\n", "started 1 native thread"),
        ("import socket\nHELD = socket.socket()\n", "a preloaded module opened a socket (fd "),
    ],
    ids=["thread", "native-thread", "socket"],
)
def test_an_import_that_is_not_safe_to_fork_starts_cold_says_why_once_and_still_runs(
    warm: WarmStarts, installed_python: Installer, caplog: pytest.LogCaptureFixture, source: str, why: str
) -> None:
    python = installed_python({"threaded_import.py": source})  # installed: a zygote would preload it
    agent = CommandAgent(f"{python} {AGENTS / 'threaded_agent.py'}", warm=warm)
    with caplog.at_level(logging.WARNING, logger="tether.runner.warm"):
        first, second = run(agent), run(agent)
    assert first.output == second.output == "cold"
    assert warm.cold[python].startswith("importing threaded_import: ") and why in warm.cold[python]
    (line,) = cold_warnings(caplog)  # one line for the command, naming the module, not one per rollout
    assert line == f"warm start: {python} starts cold: {warm.cold[python]}"


def test_an_agent_whose_helper_imports_tether_runs_warm_without_tether_preloaded(
    warm: WarmStarts, installed_python: Installer, caplog: pytest.LogCaptureFixture
) -> None:
    """The helper is installed, so a zygote would preload it (and Tether, installed too, with it); a
    module cannot be unloaded, so the zygote starts again without it, and the learned successor too."""
    python = installed_python(
        {
            "tether_helper.py": "import tether\n\nVERSION = tether.__version__\n",
            "tether/__init__.py": '__version__ = "0.1.0"\n',
        }
    )
    agent = CommandAgent(f"{python} {AGENTS / 'tether_helper_agent.py'}", warm=warm)
    with caplog.at_level(logging.INFO, logger="tether.runner.warm"):
        results = [run(agent) for _ in range(3)]
    for result in results:
        assert result.ok, result.stderr
        seen = json.loads(result.output or "{}")
        assert seen == {"tether": False, "tether_helper": False, "xml.dom.minidom": True, "helper": "0.1.0"}
    assert python not in warm.cold and not cold_warnings(caplog)
    zygote = warm.zygotes[python]
    assert zygote.learned and len(warm.retired) == 1  # the successor that learned the run's imports
    for names in (zygote.modules, zygote.loaded):
        assert "tether_helper" not in names
        assert not [name for name in names if name == "tether" or name.startswith("tether.")]
    assert "xml.dom.minidom" in zygote.loaded
    assert "tether_helper imports tether; not preloaded" in caplog.text


def test_tether_named_to_preload_is_left_out() -> None:
    starts = WarmStarts(["tether", "tether.runner", "json", "tetherish"])
    try:
        assert starts.modules == ["json", "tetherish"]
    finally:
        starts.close()


def test_a_dead_zygote_is_started_again_once_then_agents_start_cold(warm: WarmStarts) -> None:
    agent = CommandAgent(probe("report"), warm=warm)
    outcomes = []
    for _ in range(3):
        result = run(agent)
        assert result.ok, result.stderr  # no rollout is lost to a dead zygote
        outcomes.append(json.loads(result.output or "{}")["preloaded"])
        zygote = warm.zygotes.get(PYTHON)
        if zygote is not None and zygote.process is not None and zygote.alive:
            os.kill(zygote.process.pid, signal.SIGKILL)
            zygote.process.wait()
    assert outcomes == [True, True, False]
    assert "died twice" in warm.cold[PYTHON]


def test_a_zygote_that_dies_mid_rollout_fails_that_attempt_clearly(warm: WarmStarts) -> None:
    agent = CommandAgent(probe("handler"), warm=warm)

    async def kill_the_zygote_meanwhile() -> AgentResult:
        running = asyncio.create_task(agent.run({}, ENV, LLM_STUB, 30))
        while PYTHON not in warm.zygotes:
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)
        process = warm.zygotes[PYTHON].process
        assert process is not None
        os.kill(process.pid, signal.SIGKILL)
        return await running

    result = asyncio.run(kill_the_zygote_meanwhile())
    assert result.error is not None and "warm interpreter ended" in result.error
    assert not result.timed_out
    assert result.runner_lost  # the runner's failure, not the agent's: the pool gives it a new attempt


def test_a_zygote_that_dies_right_after_the_fork_never_runs_the_agent_twice(
    warm: WarmStarts, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The zygote forks and dies before it could answer. The child itself tells Tether its pid, so Tether
    kills it (and its group) and reports the attempt lost, instead of starting the agent cold beside it."""
    monkeypatch.setattr(warm_module, "ZYGOTE_SCRIPT", AGENTS / "zygote_dies_after_fork.py")
    marker = f"7{os.getpid()}"
    try:
        result = run(CommandAgent(probe("hang", marker), warm=warm), timeout_s=8)
        for _ in range(100):
            if not alive(marker):
                break
            time.sleep(0.05)
        assert not alive(marker), "the warm child outlived its dead zygote"
        assert not result.timed_out, "the agent was started cold as well"
        assert result.runner_lost and "warm interpreter ended while the agent ran" in (result.error or "")
    finally:
        for pid in alive(marker):
            os.kill(pid, signal.SIGKILL)


def test_a_warm_agent_cancelled_at_any_moment_leaves_nothing_running(warm: WarmStarts) -> None:
    """Cancelled while the zygote forks it, before Tether watches it, or while it runs: a child that told
    its pid is killed with its group, one that had not yet finds no one to tell and runs nothing."""
    marker = f"5{os.getpid()}"
    agent = CommandAgent(probe("hang", marker), warm=warm)

    async def cancel_each_at_another_moment() -> None:
        await agent.run({}, ENV, LLM_STUB, 0.5)  # the zygote is up
        for step in range(30):
            running = asyncio.create_task(agent.run({}, ENV, LLM_STUB, 30))
            await asyncio.sleep(step * 0.0005)
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await running

    try:
        asyncio.run(cancel_each_at_another_moment())
        for _ in range(100):
            if not alive(marker):
                break
            time.sleep(0.05)
        assert not alive(marker), "a cancelled warm agent still runs"
    finally:
        for pid in alive(marker):
            os.kill(pid, signal.SIGKILL)


def test_non_python_agents_and_sandboxed_ones_with_a_working_directory_start_cold(
    warm: WarmStarts, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    sandboxed = CommandAgent(
        probe("report"), cwd=str(tmp_path), sandbox=BwrapSandbox(SandboxOptions()), warm=warm
    )
    assert sandboxed.warm is None
    assert "sandboxed agents with --agent-cwd start cold" in caplog.text
    shell = CommandAgent("echo hello", warm=warm)
    assert run(shell).output == "hello"
    assert "echo" in warm.cold and "not `PYTHON SCRIPT.py" in warm.cold["echo"]


def test_a_sandboxed_warm_agent_is_started_exactly_as_its_cold_start_in_the_sandbox(
    warm: WarmStarts,
) -> None:
    """In `--sandbox bwrap` too (the isolation itself, both ways: tests/runner/test_sandbox.py)."""
    sandboxed = {"sandbox": BwrapSandbox(SandboxOptions()), "env": {"PROBE_VALUE": "per-rollout"}}
    cold, hot = both(probe("report", "an arg"), warm, **sandboxed)
    assert cold.ok and hot.ok, (cold.stderr, hot.stderr)
    assert warm.forked == 1 and not warm.cold
    seen = {name: json.loads(result.output or "{}") for name, result in (("cold", cold), ("warm", hot))}
    assert (seen["cold"]["preloaded"], seen["warm"]["preloaded"]) == (False, True)
    for key in ("argv", "name", "file", "path0", "env", "rollout", "prefix", "pgid_is_pid", "stdin"):
        assert seen["warm"][key] == seen["cold"][key], key
    for started in seen.values():  # each in a scratch directory of its own, its HOME and TMPDIR
        environ = started["environ"]
        assert environ["HOME"] == environ["TMPDIR"] == environ["PWD"] == started["cwd"]
        assert os.path.basename(started["cwd"]).startswith("tether-agent-")
    assert set(seen["warm"]["environ"]) == set(seen["cold"]["environ"])
    assert hot.stdout.splitlines()[0] == cold.stdout.splitlines()[0] == "noise line"


def test_a_sandboxed_warm_interpreter_also_learns_its_lazy_imports(warm: WarmStarts) -> None:
    agent = CommandAgent(probe("lazy"), sandbox=BwrapSandbox(SandboxOptions()), warm=warm)
    seen = [json.loads(run(agent).output or "{}")["lazy_preloaded"] for _ in range(3)]
    assert seen == [False, True, True] and warm.forked == 3 and not warm.cold
    assert len(warm.retired) == 1 and all(zygote.wrap for zygote in warm.zygotes.values())


def test_what_a_warm_interpreter_preloads_is_the_scripts_module_level_imports(tmp_path: Path) -> None:
    script = tmp_path / "agent.py"
    script.write_text(
        "from __future__ import annotations\n"
        "import os, json as j\n"
        "from openai import OpenAI\n"
        "from . import sibling\n"
        "try:\n    import orjson\nexcept ImportError:\n    orjson = None\n"
        "if True:\n    from xml.dom import minidom\n"
        "def f():\n    import sqlite3\n"
    )
    assert script_imports(str(script)) == ["os", "json", "openai", "orjson", "xml.dom"]
    assert python_entry([PYTHON, str(script), "x"]) == (PYTHON, [str(script), "x"])
    assert python_entry([PYTHON, "-m", "pkg.mod"]) == (PYTHON, ["-m", "pkg.mod"])
    assert python_entry([PYTHON, "-u", str(script)]) is None  # interpreter flags: cold
    assert python_entry(["node", "agent.js"]) is None
