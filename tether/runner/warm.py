"""Warm interpreters for Python agents (warm starts, the CLI's default; `--agent-cold` opts out): one
zygote per interpreter imports the agent's heavy modules once and forks a child per rollout
(`tether/runner/zygote.py`), so a rollout skips Python's start-up and the framework imports.

Which modules: at first, the agent script's own top-level imports, read from its source
(`script_imports`); the zygote's first child then writes down every module it had imported by its end
(the framework's lazy imports too), and a successor zygote that preloads them all takes over, if it is as
safe to fork. Modules the user names (`--agent-preload`) replace both. Whatever the list, a zygote
imports only modules of the standard library and site-packages (never the agent's own code, nor
anything from its folder, the cwd or another folder on its path): the first child's list is the agent's
word, and names a successor refuses are logged once. Tether's own modules are never preloaded, and a
module whose import loads Tether is left out (the zygote starts again without it): an agent that imports
Tether imports its own copy, as it would cold. The child runs the script as `python SCRIPT ARGS` would:
argv, `__main__`, cwd, environment, standard streams, exit code, its own process group (so timeouts kill
its children too). Where a warm start cannot be exact, the agent starts cold, with one line that says
why: a command that is not `PYTHON SCRIPT.py ...` or `PYTHON -m MODULE ...`, a preloaded module that
starts a thread or opens a socket (in a sandbox: keeps any file open; the line names the module), and a
zygote that died twice.

A zygote takes requests from this process only (its pid, checked with SO_PEERCRED), on a socket it binds
once its imports are done, which no child keeps. With `--agent-user`, it runs as that user, its folder
that user's, in a folder that user may pass through but not list.

In `--sandbox bwrap` (`Confined`), the zygote runs in a bwrap sandbox of its own, started from copies of
`zygote.py` and `zygote_sandbox.py` in the warm folder, where each rollout's scratch directory is made
too; it gives itself a PID namespace of its own, and each child gives itself fresh namespaces before the
agent's code runs (`zygote_sandbox.py`), reaching the gateway through its relay directory, which Tether
sends it as a descriptor (the zygote never sees one).

A zygote that dies never makes an agent run twice: the forked child tells Tether its pid itself, in its
own process group already, before it runs any of the agent's code. A fork that got no pid ran nothing
(the agent starts cold instead); an agent whose zygote died after it started is killed with its group and
its attempt is the runner's loss (`AgentResult.runner_lost`): the pool closes it and gives the rollout a
new attempt (`Store.abandon`), never a second run inside the same attempt.
"""

from __future__ import annotations

import ast
import asyncio
import collections
import contextlib
import functools
import json
import logging
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tether.runner.sandbox import Command, Confined, socket_parent
from tether.runner.zygote import is_tether

ZYGOTE_SCRIPT = Path(__file__).with_name("zygote.py")
CONFINEMENT_SCRIPT = Path(__file__).with_name("zygote_sandbox.py")
READY_TIMEOUT_S = 120.0  # the imports of a large framework, on a busy machine
RESTARTS = 1  # a zygote that dies is started again once; after that, cold starts
PYTHON_NAME = re.compile(r"python(\d+(\.\d+)?)?$")
MAX_LEARNED = 20000  # module names a first run may report
MAX_LEARNED_BYTES = 4 * 1024 * 1024
CREDENTIALS = struct.calcsize("3i")  # struct ucred: pid, uid, gid
CREDENTIALS_SPACE = socket.CMSG_SPACE(CREDENTIALS)

log = logging.getLogger(__name__)


# The CPU seconds of every warm child that ended in this process, as its zygote measured them: a cold
# agent's are in the process's RUSAGE_CHILDREN, a warm one's are its zygote's until the zygote ends.
_forked_cpu = 0.0


def forked_cpu_seconds() -> float:
    """The user and system CPU time of the warm agents (and their waited-for children) ended so far."""
    return _forked_cpu


class ZygoteDied(RuntimeError):
    """The zygote ended while it ran an agent, or before it answered."""


def python_entry(argv: Sequence[str]) -> tuple[str, list[str]] | None:
    """(interpreter, the arguments after it) when `argv` runs a script or `-m module` with no interpreter
    flags; None for anything else, which starts cold."""
    if len(argv) < 2 or not PYTHON_NAME.match(os.path.basename(argv[0])):
        return None
    if (argv[1] == "-m" and len(argv) >= 3) or (argv[1].endswith(".py") and os.path.isfile(argv[1])):
        return argv[0], list(argv[1:])
    return None


def script_imports(path: str) -> list[str]:
    """The absolute imports a script makes at module level (inside `if` and `try` too, not in functions),
    in order: what its every run imports before it does anything."""
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"), path)
    except (OSError, SyntaxError, ValueError):
        return []
    names: list[str] = []
    for node in _module_level(tree.body):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return [name for name in dict.fromkeys(names) if name != "__future__"]


def _module_level(body: Sequence[ast.stmt]) -> list[ast.stmt]:
    nodes: list[ast.stmt] = []
    for node in body:
        nodes.append(node)
        if isinstance(node, ast.If):
            nodes += _module_level(node.body) + _module_level(node.orelse)
        elif isinstance(node, ast.Try):
            nodes += _module_level(node.body) + _module_level(node.orelse) + _module_level(node.finalbody)
            for handler in node.handlers:
                nodes += _module_level(handler.body)
    return nodes


@dataclass
class Started:
    """A child the zygote forked: its pid and the connection that will bring its wait status."""

    pid: int
    lines: Lines
    key: str  # its zygote's, in WarmStarts
    learn: str | None = None  # where the child writes the modules it imported (the zygote's first child)

    async def wait(self) -> int:
        """Its exit code as asyncio reports one (negative: killed by that signal)."""
        line = await self.lines.next()
        if "status" not in line:
            raise ZygoteDied("the warm interpreter ended while the agent ran")
        global _forked_cpu
        _forked_cpu += float(line.get("cpu") or 0.0)
        return os.waitstatus_to_exitcode(int(line["status"]))

    def close(self) -> None:
        self.lines.connection.close()


@dataclass
class Zygote:
    """One warm interpreter: a process, its socket, and the modules it holds. It is a plain subprocess
    (not one of an event loop's) and ends when its stdin closes, so it never outlives Tether."""

    python: str
    modules: list[str]
    folder: str
    learned: bool  # its modules are those of a finished run (or the user's): nothing to learn
    key: str  # in WarmStarts: the interpreter, and the sandbox it runs in, if any
    wrap: tuple[str, ...] = ()  # the command it runs under (its sandbox's bwrap, up to `--`)
    warm_folder: str | None = None  # with `wrap`: where the zygote's scripts and the rollouts' folders are
    process: subprocess.Popen[bytes] | None = None
    loaded: list[str] = field(default_factory=list)
    setting: tuple[str, dict[str, str], dict[str, Any]] = ("", {}, {})  # script dir, env, identity

    @property
    def socket_path(self) -> str:
        return os.path.join(self.folder, "zygote.sock")

    async def start(self, script_dir: str, env: Mapping[str, str], identity: Mapping[str, Any]) -> str | None:
        """Start it; None when ready, else why it cannot be used. A module whose import loads Tether is
        dropped and the zygote started again without it (an import cannot be undone in a process)."""
        self.setting = (script_dir, dict(env), dict(identity))
        while True:
            answer = await self._start_once(script_dir, env, identity)
            if isinstance(answer, str):
                return answer
            culprit = answer.get("tether")
            if culprit in self.modules:
                log.info("warm interpreter for %s: %s imports tether; not preloaded", self.python, culprit)
                self.modules = [name for name in self.modules if name != culprit]
                self.stop()
                continue
            if "ready" not in answer:
                self.stop()
                return str(answer.get("unsafe", answer))
            self.loaded = list(answer["ready"])
            refused = [str(name) for name in answer.get("refused") or []]
            if refused:
                log.info(
                    "warm interpreter for %s does not preload %s: outside the standard library and "
                    "site-packages (the agent imports them itself, as cold)",
                    self.key,
                    ", ".join(refused),
                )
            return None

    async def _start_once(
        self, script_dir: str, env: Mapping[str, str], identity: Mapping[str, Any]
    ) -> dict[str, Any] | str:
        """Start the process; its first line, or why it did not start."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)
        argv = [self.python, str(ZYGOTE_SCRIPT), self.socket_path, script_dir, ",".join(self.modules)]
        argv.append(str(os.getpid()))  # the only process whose requests it takes
        if self.warm_folder is not None:
            argv[1] = os.path.join(self.warm_folder, ZYGOTE_SCRIPT.name)
            argv = [*self.wrap, *argv, self.warm_folder]
        try:
            self.process = subprocess.Popen(
                argv,
                env=dict(env),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                cwd=self.folder if self.warm_folder is None else None,  # one --agent-user can enter
                start_new_session=True,
                **({} if self.wrap else identity),  # a sandbox's wrap becomes the agent's user itself
            )
            assert self.process.stdout is not None
            first = await asyncio.wait_for(asyncio.to_thread(self.process.stdout.readline), READY_TIMEOUT_S)
        except (OSError, TimeoutError) as exc:
            self.stop()
            return f"the warm interpreter did not start: {exc}"
        try:
            return dict(json.loads(first))
        except (TypeError, ValueError):
            return {"unsafe": f"the warm interpreter did not start ({first[:200]!r})"}

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    async def fork(
        self,
        argv: Sequence[str],
        cwd: str,
        env: Mapping[str, str],
        fds: Sequence[int],
        learn: bool = False,
        sandbox: Mapping[str, Any] | None = None,
    ) -> Started:
        loop = asyncio.get_running_loop()
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        lines = Lines(connection)
        try:
            connection.setblocking(False)
            await loop.sock_connect(connection, self.socket_path)
            learn_path = os.path.join(self.folder, "learned.json") if learn else None
            message = {"argv": list(argv), "cwd": cwd, "env": dict(env), "learn": learn_path}
            message["sandbox"] = None if sandbox is None else dict(sandbox)
            request = json.dumps(message).encode() + b"\n"
            connection.setblocking(True)  # one local message with its descriptors, taken at once
            socket.send_fds(connection, [request], list(fds))
            connection.setblocking(False)
            answer = await lines.next()  # from the child itself: no pid, no agent code ran
        except OSError as exc:
            connection.close()
            raise ZygoteDied(f"the warm interpreter did not take the agent: {exc}") from None
        except BaseException:  # cancelled: the child, if it started, must not run on unwatched
            _give_up(lines)
            raise
        if not isinstance(answer.get("pid"), int):  # none, or one the kernel did not vouch for
            connection.close()
            if not answer:
                raise ZygoteDied("the warm interpreter ended before the agent started")
            raise ZygoteDied(f"the warm interpreter refused the agent: {answer.get('error', answer)}")
        return Started(int(answer["pid"]), lines, self.key, learn_path)

    def retire(self) -> None:
        """No more agents: it exits once those it runs have ended (its stdin closes)."""
        if self.process is not None and self.process.stdin is not None:
            self.process.stdin.close()

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()


def _give_up(lines: Lines) -> None:
    """Tether stops waiting for a child it asked for. With the connection shut for reading, a child that
    has not told its pid yet cannot (it exits and runs nothing); one that has is killed with its group."""
    with contextlib.suppress(OSError, ValueError):
        lines.connection.shutdown(socket.SHUT_RD)
        lines.read_available()
    lines.connection.close()
    for message in lines.messages:
        if isinstance(message.get("pid"), int):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(message["pid"], signal.SIGKILL)


class Lines:
    """JSON lines from a zygote connection (two may arrive in one read). A child's `{"pid": N}` is
    taken at the kernel's word (SO_PASSCRED): the pid of the process that sent it, as this process sees
    it, which a child in a sandboxed zygote's PID namespace cannot know itself."""

    def __init__(self, connection: socket.socket) -> None:
        self.connection = connection
        connection.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.partial = b""
        self.messages: collections.deque[dict[str, Any]] = collections.deque()
        self.ended = False

    async def next(self) -> dict[str, Any]:
        """The next message; {} when the zygote closed the connection first."""
        while not self.messages and not self.ended:
            await _readable(self.connection)
            self.read_available()
        return self.messages.popleft() if self.messages else {}

    def read_available(self) -> None:
        """What has arrived, without waiting (the connection does not block)."""
        while not self.ended:
            try:
                data, ancillary, _, _ = self.connection.recvmsg(4096, CREDENTIALS_SPACE)
            except (BlockingIOError, InterruptedError):
                return
            if not data:
                self.ended = True
                return
            self._take(data, _sender(ancillary))

    def _take(self, data: bytes, sender: int | None) -> None:
        """The kernel never joins two writers' data in one read: `sender` sent all of `data`."""
        *lines, self.partial = (self.partial + data).split(b"\n")
        for line in lines:
            message = dict(json.loads(line))
            if "pid" in message:
                message["pid"] = sender
            self.messages.append(message)


def _sender(ancillary: list[tuple[int, int, bytes]]) -> int | None:
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and len(payload) >= CREDENTIALS:
            pid = struct.unpack("3i", payload[:CREDENTIALS])[0]
            return pid or None  # 0: from outside this process's PID namespace
    return None


async def _readable(connection: socket.socket) -> None:
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(connection.fileno(), wake)
    try:
        await ready
    finally:
        loop.remove_reader(connection.fileno())


class WarmStarts:
    """The zygotes of one agent command, started on first use, keyed by interpreter.

    `modules=None` preloads each script's own top-level imports. `fork` returns None when this command
    starts cold (the reason is logged once). Sandboxed zygotes are keyed by their sandbox too."""

    def __init__(self, modules: Sequence[str] | None = None) -> None:
        self.modules = None if modules is None else _without_tether(modules)
        self.zygotes: dict[str, Zygote] = {}
        self.retired: list[Zygote] = []  # replaced by a successor, ending when their agents do
        # keyed by zygote: its interpreter, and its sandbox if any (`_key`)
        self.learning: set[str] = set()  # zygotes whose first run is telling what it imports
        self.failures: dict[str, int] = {}
        self.cold: dict[str, str] = {}  # why it starts cold
        self.forked = 0  # agents started warm
        self.folder = tempfile.mkdtemp(prefix="tether-warm-", dir=socket_parent())
        self.warm_folder: str | None = None  # for sandboxed agents (`sandbox_folder`)
        self._wraps: dict[tuple[str, ...], str] = {}  # sandboxed zygotes' keys
        self._locks: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}

    @property
    def lock(self) -> asyncio.Lock:
        """One lock per event loop (a test may run each rollout in a loop of its own)."""
        loop = asyncio.get_running_loop()
        if loop not in self._locks:
            self._locks = {loop: asyncio.Lock()}
        return self._locks[loop]

    def __getstate__(self) -> dict[str, Any]:  # zygotes are processes of this host: a copy starts its own
        return {"modules": self.modules}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["modules"])  # type: ignore[misc]

    async def fork(
        self,
        command: Command,
        base_env: Mapping[str, str],
        fds: Sequence[int],
        confined: Confined | None = None,
    ) -> Started | None:
        entry = python_entry(command.argv)
        if entry is None:
            self._go_cold(
                command.argv[0], "the agent command is not `PYTHON SCRIPT.py ...` or `PYTHON -m MODULE ...`"
            )
            return None
        python, args = entry
        zygote = await self._zygote(python, args, base_env, command.identity, confined)
        if zygote is None:
            return None
        learn = not zygote.learned and zygote.key not in self.learning
        if learn:
            self.learning.add(zygote.key)
        sandbox = None if confined is None else confined.settings
        # A sandboxed child reaches the gateway through its relay directory, sent as a descriptor: the
        # zygote sees no rollout's relay.
        relay = [] if confined is None else [os.open(confined.relay_dir, os.O_PATH | os.O_DIRECTORY)]
        sent = [*fds, *relay, *(confined.cgroup_fds if confined else ())]  # its cgroup's: joined first
        try:
            started = await zygote.fork([python, *args], command.cwd, command.env, sent, learn, sandbox)
        except ZygoteDied as exc:  # this agent starts cold; a dead zygote is restarted by the next one
            log.warning("%s", exc)
            return None
        finally:
            for fd in relay:
                os.close(fd)
        self.forked += 1
        return started

    async def _zygote(
        self,
        python: str,
        args: list[str],
        env: Mapping[str, str],
        identity: Mapping[str, Any],
        confined: Confined | None,
    ) -> Zygote | None:
        key = self._key(python, confined)
        async with self.lock:
            if key in self.cold:
                return None
            zygote = self.zygotes.get(key)
            if zygote is not None and zygote.alive:
                return zygote
            if zygote is not None:  # dead: started again once, with what it held
                self.failures[key] = self.failures.get(key, 0) + 1
                if self.failures[key] > RESTARTS:
                    self._go_cold(key, "its warm interpreter died twice")
                    return None
                log.warning("the warm interpreter of %s died; starting it again", key)
                modules, learned = zygote.modules, zygote.learned
            else:
                modules = self.modules if self.modules is not None else _learned(args)
                learned = self.modules is not None
            parent = None if confined is None else confined.folder
            wrap = () if confined is None else confined.wrap
            zygote = Zygote(python, modules, self._folder(identity, parent), learned, key, wrap, parent)
            reason = await zygote.start(_script_dir(args), confined.env if confined else env, identity)
            if reason is not None:
                self._go_cold(key, reason)
                return None
            log.info("warm interpreter for %s holds %s", key, ", ".join(zygote.loaded) or "no module")
            self.zygotes[key] = zygote
            return zygote

    def _key(self, python: str, confined: Confined | None) -> str:
        if confined is None:
            return python
        number = self._wraps.setdefault(confined.wrap, str(len(self._wraps) + 1))
        return f"{python} (sandbox {number})"

    def _folder(self, identity: Mapping[str, Any], parent: str | None = None) -> str:
        """A folder for one zygote's socket, the agent user's when there is one (Tether's folder above it
        then lets that user pass, not list; a sandbox's warm folder is that user's already)."""
        folder = tempfile.mkdtemp(dir=parent or self.folder)
        if identity:
            if parent is None:
                os.chmod(self.folder, 0o711)
            shutil.chown(folder, user=identity["user"], group=identity["group"])
        return folder

    def sandbox_folder(self, identity: Mapping[str, Any]) -> str:
        """The warm folder of sandboxed agents: the zygote's scripts, each zygote's socket, and each
        rollout's scratch directory, which only the zygotes' sandboxes see whole."""
        if self.warm_folder is None:
            folder = tempfile.mkdtemp(prefix="tether-sandbox-warm-", dir=socket_parent())
            for script in (ZYGOTE_SCRIPT, CONFINEMENT_SCRIPT):
                shutil.copyfile(script, os.path.join(folder, script.name))
            if identity:
                shutil.chown(folder, user=identity["user"], group=identity["group"])
            self.warm_folder = folder
        return self.warm_folder

    def _go_cold(self, python: str, reason: str) -> None:
        if python not in self.cold:
            self.cold[python] = reason
            log.warning("warm start: %s starts cold: %s", python, reason)

    async def finished(self, started: Started) -> None:
        """After the agent `started` ended. The zygote's first child told what it imported by its end (the
        framework's lazy imports too): a successor zygote preloads all of it and takes over, if safe."""
        if started.learn is None:
            return
        modules = _learned_modules(started.learn)
        current = self.zygotes.get(started.key)
        if not modules or current is None or not current.alive:
            return
        script_dir, env, identity = current.setting
        parent = current.warm_folder
        successor = Zygote(
            current.python, modules, self._folder(identity, parent), True, current.key, current.wrap, parent
        )
        reason = await successor.start(script_dir, env, identity)
        if reason is not None:
            log.info("warm interpreter for %s keeps the script's imports only: %s", current.key, reason)
            return
        async with self.lock:
            self.zygotes[started.key] = successor
        current.retire()
        self.retired.append(current)

    def close(self) -> None:
        for zygote in [*self.zygotes.values(), *self.retired]:
            zygote.stop()
        self.zygotes.clear()
        self.retired.clear()
        for folder in (self.folder, self.warm_folder):
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)


def _learned_modules(path: str) -> list[str]:
    """What the first child wrote (the agent's own process could have written anything): module names,
    never a program's `__main__`, which would run at import. The successor zygote imports only those
    of the standard library and site-packages among them (`zygote.preload`)."""
    try:
        with open(path, encoding="utf-8") as source:
            names = json.loads(source.read(MAX_LEARNED_BYTES))
    except (OSError, ValueError):
        return []
    if not isinstance(names, list):
        return []
    names = [name for name in names[:MAX_LEARNED] if isinstance(name, str) and _module_name(name)]
    return _without_tether(names)


def _module_name(name: str) -> bool:
    parts = name.split(".")
    return all(part.isidentifier() for part in parts) and "__main__" not in parts


def _learned(args: list[str]) -> list[str]:
    return [] if args[0] == "-m" else _without_tether(script_imports(args[0]))


def _without_tether(names: Iterable[str]) -> list[str]:
    """Never preloaded: an agent that imports Tether gets a copy of its own, as it would cold."""
    return [name for name in names if not is_tether(name)]


def _script_dir(args: list[str]) -> str:
    return os.getcwd() if args[0] == "-m" else os.path.dirname(os.path.abspath(args[0]))


class ChildPipes:
    """/dev/null for the child's stdin and two pipes for its stdout and stderr. `child_fds` go to the
    zygote (which hands them to the child); `close_child_ends` drops Tether's copies once it holds them,
    so the readers see the end of output when the child and its own children are gone."""

    def __init__(self) -> None:
        self.out_read, out_write = os.pipe()
        self.err_read, err_write = os.pipe()
        self.child_fds = [os.open(os.devnull, os.O_RDONLY), out_write, err_write]

    def close_child_ends(self) -> None:
        for fd in self.child_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.child_fds = []

    async def readers(self) -> tuple[asyncio.StreamReader, asyncio.StreamReader]:
        loop = asyncio.get_running_loop()
        readers = []
        for fd in (self.out_read, self.err_read):
            reader = asyncio.StreamReader()
            protocol = functools.partial(asyncio.StreamReaderProtocol, reader)
            await loop.connect_read_pipe(protocol, os.fdopen(fd, "rb", 0))
            readers.append(reader)
        return readers[0], readers[1]

    def close(self) -> None:
        """Without readers (the agent never started): every descriptor."""
        self.close_child_ends()
        for fd in (self.out_read, self.err_read):
            with contextlib.suppress(OSError):
                os.close(fd)
