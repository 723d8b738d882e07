"""Runs one vLLM server for Tether and makes sure it never outlives Tether (standard library only).

Tether starts this file with the vLLM environment's Python, as `python supervise.py -- VLLM ARGS...`,
with a pipe as its stdin. It starts vLLM in a process group of its own, then waits. When the pipe closes
(Tether exited, was killed with -9, or crashed) or it is sent SIGTERM/SIGINT, it stops the whole group:
SIGTERM, then SIGKILL after a grace period. vLLM's own exit code becomes this process's. Should this
process itself be killed with -9 (a Ray worker's children are, when the worker exits), the kernel sends
vLLM SIGTERM (Linux's parent-death signal), and vLLM stops its own engine processes.

vLLM's processes talk over Unix sockets it names at random in the temporary directory, and leaves them
there when it is stopped (seven per server here): this process gives vLLM a folder of its own for them,
and removes it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading

GRACE_S = 15.0
RPC_PATH_ENV = "VLLM_RPC_BASE_PATH"
SOCKET_PATH_MAX = 107  # Linux's sun_path, less its terminating NUL
RPC_NAME_BYTES = 1 + 20 + 1 + 36  # "/tether-vllm-XXXXXXXX/" and a uuid4


def rpc_folder() -> str | None:
    """A new folder for vLLM's sockets, in the temporary directory unless its path is too long for a
    socket; None when the caller chose vLLM's folder already."""
    if os.environ.get(RPC_PATH_ENV):
        return None
    parent = tempfile.gettempdir()
    if len(parent) + RPC_NAME_BYTES > SOCKET_PATH_MAX:
        parent = "/tmp"
    return tempfile.mkdtemp(prefix="tether-vllm-", dir=parent)


def stop_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to vLLM's group, SIGKILL after the grace period; then SIGKILL whatever is left of the
    group (a child the server left behind) even when the server itself exited."""
    if process.poll() is None:
        _signal_group(process.pid, signal.SIGTERM)
        try:
            process.wait(GRACE_S)
        except subprocess.TimeoutExpired:
            _signal_group(process.pid, signal.SIGKILL)
            process.wait()
    _signal_group(process.pid, signal.SIGKILL)


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def watch_stdin(process: subprocess.Popen[bytes]) -> None:
    """Block until stdin closes: the parent is gone, or asked us to stop by closing the pipe."""
    with contextlib.suppress(OSError, ValueError):
        while sys.stdin.buffer.read(1024):
            pass
    stop_group(process)


def _term_when_parent_dies() -> None:
    """In the child, before exec: SIGTERM when this supervisor dies (Linux; elsewhere nothing)."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print("usage: supervise.py -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    command = argv[argv.index("--") + 1 :]
    folder = rpc_folder()
    env = {**os.environ, RPC_PATH_ENV: folder} if folder else None
    try:
        return supervise(command, env)
    finally:
        if folder:
            shutil.rmtree(folder, ignore_errors=True)


def supervise(command: list[str], env: dict[str, str] | None) -> int:
    process = subprocess.Popen(
        command, start_new_session=True, stdin=subprocess.DEVNULL, env=env, preexec_fn=_term_when_parent_dies
    )

    def on_signal(signum: int, frame: object) -> None:
        # Not in the handler itself: it interrupts `process.wait()` below, which holds the lock that
        # reaping takes, so waiting here would never end (and the server would stay a zombie).
        threading.Thread(target=stop_group, args=(process,), daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    threading.Thread(target=watch_stdin, args=(process,), daemon=True).start()
    code = process.wait()
    stop_group(process)  # vLLM's own children, should the server have left any
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.stdout.flush()
    # os._exit: the stdin watcher is blocked in a read, and a normal exit would wait on its lock.
    os._exit(main(sys.argv[1:]))
