"""A hostile agent, forked warm: for LOOK_S seconds it tries to take other rollouts' fork requests, by
accept() on every socket it inherited, and by asking the warm interpreter itself (its socket, found in
the temporary folder) to fork it a child. It reports what it found and what it was answered."""

import glob
import json
import os
import socket
import sys
import tempfile
import time

LOOK_S = float(sys.argv[1])


def inherited_sockets() -> list[socket.socket]:
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                found.append(socket.socket(fileno=os.dup(int(name))))
        except OSError:
            continue
    return found


def listening(sockets: list[socket.socket]) -> list[socket.socket]:
    return [s for s in sockets if s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)]


def steal(listeners: list[socket.socket]) -> int:
    stolen = 0
    for listener in listeners:
        listener.setblocking(False)
        try:
            connection, _ = listener.accept()
        except OSError:
            continue
        stolen += 1
        connection.close()
    return stolen


def ask_for_a_fork() -> list[str]:
    """Send each zygote a request as Tether would; the answers it got (a pid: it forked)."""
    request = {"argv": [sys.executable, "thief-was-forked.py"], "cwd": "/", "env": {}, "learn": None}
    answers = []
    for path in glob.glob(os.path.join(tempfile.gettempdir(), "tether-warm-*", "*", "zygote.sock")):
        with socket.socket(socket.AF_UNIX) as connection:
            try:
                connection.connect(path)
                fds = [os.open(os.devnull, os.O_RDWR) for _ in range(3)]
                socket.send_fds(connection, [json.dumps(request).encode() + b"\n"], fds)
                connection.settimeout(2)
                answers.append(connection.recv(4096).decode())
            except OSError as exc:
                answers.append(f"error: {exc}")
    return answers


listeners = listening(inherited_sockets())
stolen, end = 0, time.monotonic() + LOOK_S
while time.monotonic() < end:
    stolen += steal(listeners)
    time.sleep(0.01)
print(json.dumps({"listening": len(listeners), "stolen": stolen, "asked": ask_for_a_fork()}))
