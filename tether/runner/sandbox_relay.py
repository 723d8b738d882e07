"""The two ends of a sandboxed agent's one way out: its loopback port, relayed to the gateway.

A sandbox has a network namespace of its own, so the host's loopback (the gateway, and every other
service listening there) is out of its reach. Tether listens on a Unix socket per sandbox (`serve_socket`,
forwarding to the gateway's host and port), and binds that socket into the sandbox. Inside, this file
runs as a script before the agent (`main`): it listens on 127.0.0.1:PORT of the sandbox's own loopback,
forwards each connection to the socket, sets the resource limits, starts the agent, and exits with the
agent's status. It runs with `python -I -S` and imports only light standard modules (threads rather than
asyncio, whose import alone would double the sandbox's start-up). A warm sandboxed agent's init
(`zygote_sandbox.py`) runs the same functions, in place of this script.
"""

from __future__ import annotations

import os
import resource
import signal
import socket
import sys
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio

CHUNK = 64 * 1024


# -- Tether's end -----------------------------------------------------------------------------------


async def serve_socket(path: str, host: str, port: int) -> asyncio.Server:
    """Connections on the Unix socket `path` go to the gateway at host:port, byte for byte."""
    import asyncio  # here, not at the top: the inside end must not pay for them
    import functools

    from tether.runner.splice import splice

    return await asyncio.start_unix_server(functools.partial(splice, host=host, port=port), path)


# -- inside the sandbox -----------------------------------------------------------------------------


class Settings:
    """The relay's options (a plain class: importing dataclasses costs more than the rest together)."""

    def __init__(self) -> None:
        self.port = 0
        self.socket = ""
        self.cpu = 0
        self.memory = 0
        self.processes = 0
        self.cgroups = ""  # descriptors of cgroup.procs files to join, comma-separated (cgroups.py)
        self.command: list[str] = []


def parse(argv: Sequence[str]) -> Settings:
    """`--NAME VALUE ... -- COMMAND...`, as `BwrapSandbox` writes it."""
    settings = Settings()
    args = list(argv)
    while args and args[0] != "--":
        name, value = args[0].removeprefix("--"), args[1]
        setattr(settings, name, value if name in ("socket", "cgroups") else int(value))
        del args[:2]
    settings.command = args[1:]
    return settings


def copy(source: socket.socket, sink: socket.socket) -> None:
    """One direction of a connection, until its end; then half-close the other side."""
    try:
        while chunk := source.recv(CHUNK):
            sink.sendall(chunk)
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def bridge(connection: socket.socket, path: str) -> None:
    with connection, socket.socket(socket.AF_UNIX) as upstream:
        try:
            upstream.connect(path)
        except OSError:
            return
        back = threading.Thread(target=copy, args=(upstream, connection), daemon=True)
        back.start()
        copy(connection, upstream)
        back.join()


def bind(port: int) -> socket.socket:
    """The loopback port, listening: connections wait there until `serve` accepts them."""
    return socket.create_server(("127.0.0.1", port))


def serve(server: socket.socket, path: str) -> None:
    def accept() -> None:
        while True:
            connection, _ = server.accept()
            threading.Thread(target=bridge, args=(connection, path), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()


def limit(kind: int, soft: int, hard: int) -> None:
    """Lower a limit; never above the hard limit the sandbox already has (only root may raise it)."""
    current = resource.getrlimit(kind)[1]
    if current != resource.RLIM_INFINITY:
        soft, hard = min(soft, current), min(hard, current)
    resource.setrlimit(kind, (soft, hard))


def set_limits(settings: Settings) -> None:
    """In the agent's process before it starts; 0 leaves a limit as it was. RLIMIT_NPROC counts this
    user's processes and threads in the sandbox's own user namespace."""
    limit(resource.RLIMIT_CORE, 0, 0)  # a killed agent leaves no core file in its scratch directory
    if settings.cpu:
        limit(resource.RLIMIT_CPU, settings.cpu, settings.cpu + 1)  # SIGXCPU, then SIGKILL a second later
    if settings.memory:
        # The data limit (heap and private anonymous memory), not the address space: runtimes reserve far
        # more address space than they use (V8 reserves gigabytes for WebAssembly, so a Node agent's fetch
        # could not even start under a 4 GiB RLIMIT_AS), and a reservation costs no memory.
        limit(resource.RLIMIT_DATA, settings.memory, settings.memory)
    if settings.processes:
        limit(resource.RLIMIT_NPROC, settings.processes, settings.processes)


def exit_status(code: int) -> int:
    """The agent's exit code; killed by a signal, 128 + the signal, with a line saying which."""
    if code >= 0:
        return code
    name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
    hint = {"SIGXCPU": " (the CPU-time limit, --sandbox-cpu)"}.get(name, "")
    print(f"tether sandbox: the agent was killed by {name}{hint}", file=sys.stderr)
    return 128 - code


def run_agent(settings: Settings) -> int:
    pid = os.fork()
    if pid == 0:
        try:
            set_limits(settings)
            os.execvp(settings.command[0], settings.command)
        except OSError as exc:  # as a shell says it
            print(
                f"tether sandbox: cannot start {settings.command[0]!r}: {exc.strerror or exc}",
                file=sys.stderr,
            )
        os._exit(127)
    _, status = os.waitpid(pid, 0)
    return exit_status(os.waitstatus_to_exitcode(status))


def join_cgroups(fds: Sequence[int]) -> None:
    """Move this process into each cgroup whose `cgroup.procs` descriptor it holds (`cgroups.py`), before
    it starts anything: every process of the sandbox after it is then in the cgroup too."""
    for fd in fds:
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)


def main(argv: Sequence[str]) -> int:
    settings = parse(argv)
    join_cgroups([int(fd) for fd in settings.cgroups.split(",") if fd])
    if settings.socket:
        serve(bind(settings.port), settings.socket)  # before the agent starts: its first call finds it
    return run_agent(settings)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
