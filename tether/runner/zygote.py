"""A warm interpreter for Python agents (warm starts, the default), run as a script by the agent's own
interpreter:

    AGENT_PYTHON zygote.py SOCKET SCRIPT_DIR MODULE[,MODULE...] TETHER_PID [WARM_FOLDER]

It imports the modules once (only those of the standard library and site-packages, never the agent's
own code: `preload`), then binds SOCKET and forks one child per request there, from TETHER_PID only
(SO_PEERCRED); the child runs the agent exactly as `python SCRIPT ARGS` (or `python -m MODULE ARGS`)
would. The standard library only (Python 3.9 and later), and nothing of Tether: it runs in whatever
environment the agent's interpreter has. With WARM_FOLDER it runs in a sandbox of its own, gives itself
a PID namespace and /proc of its own (then TETHER_PID is outside it: it takes requests from outside its
PID namespace only), and each child confines itself before the agent's code runs (`zygote_sandbox.py`,
loaded from this file's folder, and the relay from WARM_FOLDER).

Protocol, one Unix-socket connection per agent: the zygote forks at once, and the child itself reads the
request (after it closed the listening socket), so that no rollout's request (its token among it) is
ever in the zygote's memory, which every later child inherits, nor within another child's reach. Tether
sends one JSON line `{"argv": [...], "cwd": ..., "env": {...}, "learn": PATH or null, "sandbox":
SETTINGS or null}` with three file descriptors (stdin, stdout, stderr; in a sandbox also the relay's
directory) attached; the child answers `{"pid": N}` (Tether takes the pid the kernel vouches for, as
Tether sees it; in its own process group already, before it runs any of the agent's code, so Tether
knows what to kill even if the zygote dies right after the fork), or `{"error": ...}`; then the zygote
answers `{"status": S, "cpu": SECONDS}` (a raw wait status, and the user and system CPU time of the
child and its waited-for children) when it ends. With `learn`, the child writes the names of every
module it had imported by its end to PATH, so that Tether can start a zygote that preloads those
(`tether/runner/warm.py`): the agent's process could have written anything there, and a successor
imports only what `preload` allows. When its stdin closes, the zygote takes no more requests and exits
once its children have ended.
Its first line on stdout is `{"ready": [modules], "refused": [modules]}` (those not imported: from
outside the standard library and site-packages); or `{"tether": MODULE}` (then it exits): importing
MODULE loaded Tether, which no agent may inherit, so Tether starts it again without MODULE; or
`{"unsafe": reason}` (then it exits): a module that starts a thread (a Python one or a native one) or
opens a socket at import is not safe to fork; in a sandbox, nor one that keeps any file open.
"""

from __future__ import annotations

import array
import atexit
import importlib
import importlib.machinery
import importlib.util
import json
import os
import runpy
import selectors
import signal
import site
import socket
import struct
import sys
import sysconfig
import threading
import traceback
from types import ModuleType, TracebackType
from typing import Any, NamedTuple, NoReturn

MAX_REQUEST_BYTES = 4 * 1024 * 1024
MAX_FDS = 8  # stdin, stdout, stderr, the relay's directory, its cgroup's (one, or two in cgroup v1)


class ImportsTether(Exception):
    """Importing this module loaded Tether."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class Preloaded(NamedTuple):
    loaded: list[str]  # imported, in this order
    refused: list[str]  # not imported: they resolve outside the standard library and site-packages
    unsafe: str | None  # why forking is not safe now (naming the module whose import made it so), or None


def is_tether(name: str) -> bool:
    return name == "tether" or name.startswith("tether.")


def preload(names: list[str], script_dir: str, sandboxed: bool = False) -> Preloaded:
    """Import each module that the operator installed (`Trust`); never the agent's own code, nor any
    module from a folder outside the standard library and site-packages (the agent's folder, the cwd, a
    PYTHONPATH entry), whose code would otherwise run in the zygote and then in every later child. Public
    modules go first: a private C accelerator imported before its package (`_asyncio` before `asyncio`,
    as a sorted list has them) leaves the package half-wired (asyncio then keeps two registries of
    running tasks, and `asyncio.current_task()` is None inside a task). Tether's own modules are never
    imported; a module whose import loads Tether raises ImportsTether (a module cannot be unloaded: the
    zygote is started again without it). Stops at the first import that makes forking unsafe."""
    trust = Trust(script_dir, list(sys.path))
    watch = "tether" not in sys.modules  # else `unsafe_reason` says so: no module is to blame
    loaded: list[str] = []
    refused: list[str] = []
    agent_path = sys.path[:]
    sys.path[:] = trust.search_path  # what preloaded code imports in turn cannot come from elsewhere
    try:
        for name in sorted(dict.fromkeys(names), key=lambda name: name.startswith("_")):
            if is_tether(name):
                continue
            outcome = trust.import_module(name)
            if outcome is None:
                refused.append(name)
            elif outcome:
                loaded.append(name)
            if watch and "tether" in sys.modules:
                raise ImportsTether(name)
            reason = unsafe_reason(sandboxed)
            if reason:
                return Preloaded(loaded, refused, f"importing {name}: {reason}")
    finally:
        sys.path[:] = agent_path
    return Preloaded(loaded, refused, unsafe_reason(sandboxed))


class Trust:
    """Where a module may be imported from in the zygote: built in, frozen, or a file under the standard
    library's or site-packages' folders (the interpreter's own and the operator's installed modules), and
    not in the agent's folder. A name is resolved without importing anything: its top-level package on
    the path the agent will have (so that a module of the agent's folder that shadows an installed one
    is refused), then each submodule once its (trusted) package is imported."""

    def __init__(self, script_dir: str, agent_path: list[str]) -> None:
        self.script_dir = os.path.realpath(script_dir)
        self.roots = trusted_roots()
        self.agent_path = [entry for entry in agent_path if isinstance(entry, str)]
        self.search_path = [entry for entry in self.agent_path if entry and self.trusted_path(entry)]

    def trusted_path(self, path: str) -> bool:
        real = os.path.realpath(path)
        if _inside(real, self.script_dir) or real == self.script_dir:
            return False
        return any(real == root or _inside(real, root) for root in self.roots)

    def trusted(self, spec: importlib.machinery.ModuleSpec | None) -> bool:
        if spec is None:
            return False
        if spec.origin in ("built-in", "frozen"):
            return True
        places = list(spec.submodule_search_locations or [])
        if spec.has_location and spec.origin:
            places.append(spec.origin)
        return bool(places) and all(self.trusted_path(place) for place in places)

    def import_module(self, name: str) -> bool | None:
        """Import `name` if every level of it is trusted: True when imported, None when refused, False
        when its import failed (it fails, with its message, in the agent itself)."""
        parts = name.split(".")
        if not all(part.isidentifier() for part in parts) or "__main__" in parts:
            return None
        for depth in range(1, len(parts) + 1):
            prefix = ".".join(parts[:depth])
            try:
                spec = self.top_level_spec(prefix) if depth == 1 else importlib.util.find_spec(prefix)
            except (ImportError, ValueError):
                return None
            if not self.trusted(spec):
                return None
            try:
                importlib.import_module(prefix)
            except Exception:
                return False
        return True

    def top_level_spec(self, top: str) -> importlib.machinery.ModuleSpec | None:
        """Where `top` would come from in the agent, found without running any code."""
        for finder in (importlib.machinery.BuiltinImporter, importlib.machinery.FrozenImporter):
            spec = finder.find_spec(top)
            if spec is not None:
                return spec
        return importlib.machinery.PathFinder.find_spec(top, self.agent_path)


def trusted_roots() -> list[str]:
    """The standard library's and site-packages' folders of this interpreter."""
    paths = sysconfig.get_paths()
    roots = [paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths]
    if hasattr(site, "getsitepackages"):
        roots += site.getsitepackages()
    return sorted({os.path.realpath(root) for root in roots})


def _inside(path: str, folder: str) -> bool:
    return os.path.realpath(path).startswith(os.path.realpath(folder) + os.sep)


class Sandboxing(NamedTuple):
    """A sandboxed zygote's helpers, loaded by path and kept out of `sys.modules` (the agent's)."""

    confinement: ModuleType  # zygote_sandbox.py
    relay: ModuleType  # sandbox_relay.py


def load_sandboxing(folder: str) -> Sandboxing:
    here = os.path.dirname(os.path.abspath(__file__))
    return Sandboxing(
        _load(os.path.join(here, "zygote_sandbox.py"), "_tether_zygote_sandbox"),
        _load(os.path.join(folder, "sandbox_relay.py"), "_tether_sandbox_relay"),
    )


def _load(path: str, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def unsafe_reason(sandboxed: bool = False) -> str | None:
    """Why forking this process would not give each child what a fresh interpreter has, or None. In a
    sandbox, a file a preloaded module keeps open would be every child's, outside its own view."""
    if "tether" in sys.modules:  # before any preload (a .pth file, sitecustomize): none can avoid it
        return "the interpreter imports tether at start-up"
    others = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    if others:
        return f"a preloaded module started a thread ({', '.join(others)})"
    tasks = _thread_count()
    if tasks > 1:  # threads started by C code (or by _thread) are not in threading.enumerate()
        return f"a preloaded module started {tasks - 1} native thread{'s' if tasks > 2 else ''}"
    sockets = [fd for fd in _open_fds() if _is_socket(fd)]
    if sockets:
        return f"a preloaded module opened a socket (fd {sockets[0]})"
    held = held_fds()
    if sandboxed and held:
        return f"a preloaded module keeps a file open (fd {held[0]}: {_target(held[0])})"
    return None


def held_fds() -> list[int]:
    """The descriptors above stderr this process holds (not the one that lists them)."""
    return [fd for fd in _open_fds() if fd > 2 and _target(fd) is not None]


def _target(fd: int) -> str | None:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


def _thread_count() -> int:
    """The threads of this process, as the kernel counts them (1 where /proc cannot tell)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def _open_fds() -> list[int]:
    try:
        return [int(fd) for fd in os.listdir("/proc/self/fd")]
    except OSError:
        return []


def _is_socket(fd: int) -> bool:
    return (_target(fd) or "").startswith("socket:")


def receive(connection: socket.socket, sandboxed: bool = False) -> tuple[dict[str, Any], list[int]]:
    """One request: its JSON and the descriptors that came with it (stdin, stdout, stderr; in a sandbox
    also the relay's directory, then its cgroup's `cgroup.procs` files, as many as the request says)."""
    buffer, fds = b"", []
    while not buffer.endswith(b"\n"):
        data, ancillary, _, _ = connection.recvmsg(
            65536, socket.CMSG_SPACE(MAX_FDS * array.array("i").itemsize)
        )
        if not data:
            raise ConnectionError("the request ended early")
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds += array.array("i", payload[: len(payload) - len(payload) % 4]).tolist()
        buffer += data
        if len(buffer) > MAX_REQUEST_BYTES:
            raise ConnectionError("the request is too large")
    request = json.loads(buffer)
    count = 4 + int((request.get("sandbox") or {}).get("cgroups", 0)) if sandboxed else 3
    if len(fds) != count:
        for fd in fds:
            os.close(fd)
        raise ConnectionError(f"expected {count} descriptors, got {len(fds)}")
    return request, fds


def start_child(connection: socket.socket, sandbox: Sandboxing | None) -> NoReturn:
    """In the forked child (its own session already): read the request, tell Tether its pid, run it. A
    child that could not tell Tether (gone, or dead) runs nothing."""
    try:
        request, fds = receive(connection, sandbox is not None)
    except (OSError, ValueError, ConnectionError) as exc:
        _answer(connection, {"error": str(exc)})
        os._exit(1)
    told = _answer(connection, {"pid": os.getpid()})
    connection.close()
    if not told:
        os._exit(1)
    run_child(request, fds, sandbox)


def run_child(request: dict[str, Any], fds: list[int], sandbox: Sandboxing | None = None) -> NoReturn:
    """Become the agent's process, run its code, exit as its interpreter would."""
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.set_wakeup_fd(-1)
    for target, fd in enumerate(fds[:3]):
        os.dup2(fd, target)
        os.close(fd)
    _reopen_std_streams()
    learn: int | str | None = request.get("learn")
    if sandbox is not None:
        sandbox.relay.join_cgroups(fds[4:])  # first: every process it starts is in its cgroup
        learn = _confine(request, sandbox, fds[3])
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    _reseed()
    code = _run_main(request["argv"][1:])
    if learn is not None:
        _write_modules(learn)
    os._exit(code)


def _confine(request: dict[str, Any], sandbox: Sandboxing, relay_dir: int) -> int | None:
    """Confine this child (`zygote_sandbox.py`); the file it will write its modules to, opened while the
    warm folder is still in view."""
    try:
        held = [fd for fd in held_fds() if fd != relay_dir]
        if held:
            raise OSError(f"the child holds a descriptor of the zygote's (fd {held[0]}: {_target(held[0])})")
        path = request.get("learn")
        learn = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600) if path else None
        sandbox.confinement.confine(request["sandbox"], sandbox.relay, relay_dir)
    except Exception as exc:
        sandbox.confinement.fail(exc)
    # `tempfile` caches its folder from the zygote's TMPDIR, which the sandboxed agent does not see.
    tempfile = sys.modules.get("tempfile")
    if tempfile is not None:
        tempfile.tempdir = None  # type: ignore[attr-defined]
    return learn


def _write_modules(sink: int | str) -> None:
    try:
        with open(sink, "w", encoding="utf-8") as stream:
            json.dump(sorted(name for name in sys.modules if not name.startswith("__")), stream)
    except OSError:
        pass  # nothing learned: the zygote keeps what it has


def _reopen_std_streams() -> None:
    sys.stdin = open(0, closefd=False, encoding=sys.stdin.encoding, errors=sys.stdin.errors)
    sys.stdout = open(1, "w", closefd=False, encoding=sys.stdout.encoding, errors=sys.stdout.errors)
    sys.stderr = open(2, "w", closefd=False, encoding=sys.stderr.encoding, errors="backslashreplace")
    sys.stdout.reconfigure(line_buffering=False)
    sys.stderr.reconfigure(line_buffering=True)


def _reseed() -> None:
    """`random` reseeds itself after a fork; numpy's legacy global generator does not."""
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()


def _run_main(args: list[str]) -> int:
    """Run `SCRIPT ARGS` or `-m MODULE ARGS` as __main__; the exit code a fresh interpreter would give."""
    code = 0
    try:
        if args[0] == "-m":
            sys.argv = [args[1], *args[2:]]
            sys.path[0] = os.getcwd()
            runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(args)
            sys.path[0] = os.path.dirname(os.path.abspath(args[0]))
            runpy.run_path(args[0], run_name="__main__")
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except KeyboardInterrupt:
        _flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException as exc:
        trace = _agent_frames(exc.__traceback__)
        sys.excepthook(type(exc), exc.with_traceback(trace), trace)
        code = 1
    return _shut_down(code)


def _agent_frames(trace: TracebackType | None) -> TracebackType | None:
    """The traceback from the agent's own first frame: this file's and runpy's are not the agent's."""
    while trace is not None and (
        trace.tb_frame.f_code.co_filename == __file__ or "runpy" in trace.tb_frame.f_code.co_filename
    ):
        trace = trace.tb_next
    return trace


def _exit_code(value: object) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return value & 0xFF
    print(value, file=sys.stderr)
    return 1


def _shut_down(code: int) -> int:
    """What interpreter shutdown does that os._exit skips: join threads, run atexit, flush."""
    try:
        threading._shutdown()  # type: ignore[attr-defined]  # the interpreter's join of its threads
        atexit._run_exitfuncs()
    except BaseException:
        traceback.print_exc()
    _flush()
    return code


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


class Zygote:
    def __init__(self, listener: socket.socket, tether_pid: int, sandbox: Sandboxing | None = None) -> None:
        self.listener = listener
        self.tether_pid = tether_pid
        self.sandbox = sandbox
        self.children: dict[int, socket.socket] = {}  # pid -> the connection that asked for it
        self.retired = False
        self.selector = selectors.DefaultSelector()
        self.wake_read, self.wake_write = os.pipe()
        os.set_blocking(self.wake_read, False)
        os.set_blocking(self.wake_write, False)

    def serve(self) -> None:
        signal.set_wakeup_fd(self.wake_write)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        self.selector.register(self.listener, selectors.EVENT_READ)
        self.selector.register(self.wake_read, selectors.EVENT_READ)
        self.selector.register(0, selectors.EVENT_READ)  # Tether's pipe: its end is Tether's end
        while True:
            for key, _ in self.selector.select():
                if key.fileobj is self.listener:
                    if not self.retired:
                        self.accept()
                elif key.fileobj == 0:
                    if not os.read(0, 4096):
                        self.retire()
                else:
                    self.reap()
            if self.retired and not self.children:
                return

    def retire(self) -> None:
        """Tether is gone or has a successor: no more requests; the running children are still reaped."""
        self.retired = True
        self.selector.unregister(0)
        self.selector.unregister(self.listener)
        self.listener.close()

    def accept(self) -> None:
        connection, _ = self.listener.accept()
        if not peer_is_tether(connection, self.tether_pid):
            connection.close()  # a request from anyone else (an agent, say) forks nothing
            return
        pid = os.fork()
        if pid == 0:
            # Before anything else, the child drops the listening socket (no request of another rollout
            # can reach it); then its own process group (Tether's timeout kills the group, children
            # included), then its pid, from the child itself: if the zygote dies now, Tether still learns
            # whom to kill.
            self.close_in_child()
            os.setsid()
            start_child(connection, self.sandbox)
        self.children[pid] = connection

    def close_in_child(self) -> None:
        """The child keeps none of the zygote's descriptors but its own connection: not the socket, nor
        another agent's connection (through which it could answer for that agent)."""
        self.selector.close()
        self.listener.close()
        for other in self.children.values():
            other.close()
        os.close(self.wake_read)
        os.close(self.wake_write)

    def reap(self) -> None:
        try:
            while os.read(self.wake_read, 4096):
                pass
        except BlockingIOError:
            pass
        while self.children:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            connection = self.children.pop(pid, None)
            if connection is not None:
                _answer(connection, {"status": status, "cpu": usage.ru_utime + usage.ru_stime})
                connection.close()


def peer_is_tether(connection: socket.socket, tether_pid: int) -> bool:
    """Whether Tether's own process (by pid, as its uid or root) made this connection (SO_PEERCRED)."""
    try:
        credentials = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return False
    pid, uid, _ = struct.unpack("3i", credentials)
    return pid == tether_pid and uid in (0, os.getuid(), _overflow_uid())


def _overflow_uid() -> int:
    """The uid a sandboxed zygote sees for a user its namespace does not map (Tether, root, with an
    agent user's zygote)."""
    try:
        with open("/proc/sys/kernel/overflowuid", encoding="ascii") as source:
            return int(source.read())
    except (OSError, ValueError):
        return 65534


def _answer(connection: socket.socket, message: dict[str, Any]) -> bool:
    """Send one line; False when Tether stopped listening (a running child still runs, reaped as usual)."""
    try:
        connection.sendall(json.dumps(message).encode() + b"\n")
    except OSError:
        return False
    return True


def main() -> int:
    socket_path, script_dir, modules, tether_pid = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    sandbox = load_sandboxing(sys.argv[5]) if len(sys.argv) > 5 else None
    if sandbox is not None:
        try:
            sandbox.confinement.isolate()
        except OSError as exc:
            print(
                json.dumps({"unsafe": f"the warm interpreter cannot isolate itself here ({exc})"}), flush=True
            )
            return 0
        tether_pid = 0  # outside its PID namespace now, as no child of its is
        failed = sandbox.confinement.trial(sys.argv[5], sandbox.relay)
        if failed:
            print(json.dumps({"unsafe": f"a child cannot confine itself here ({failed})"}), flush=True)
            return 0
    sys.path[0] = script_dir  # the agent's folder, as its own interpreter would have it, not this one's
    try:
        done = preload([name for name in modules.split(",") if name], script_dir, sandbox is not None)
    except ImportsTether as exc:
        print(json.dumps({"tether": exc.name}), flush=True)
        return 0
    if done.unsafe:
        print(json.dumps({"unsafe": done.unsafe}), flush=True)
        return 0
    listener = listen(socket_path)  # only now: no preloaded module ever held it
    print(json.dumps({"ready": done.loaded, "refused": done.refused}), flush=True)
    Zygote(listener, tether_pid, sandbox).serve()
    return 0


def listen(path: str) -> socket.socket:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.set_inheritable(False)
    listener.bind(path)
    listener.listen(64)
    return listener


if __name__ == "__main__":
    sys.exit(main())
