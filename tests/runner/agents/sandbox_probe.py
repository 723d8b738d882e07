"""A hostile agent that tries the holes a sandbox must close, chosen by the first argument. It prints
one JSON line of what it managed (standard library only: it also runs under /usr/bin/python3)."""

import errno
import json
import os
import socket
import sys
import time
import urllib.error
import urllib.request


def attempt(action, *args):
    """What `action` returned, or the name of the error it raised."""
    try:
        result = action(*args)
    except (OSError, ValueError) as exc:
        return type(exc).__name__
    return True if result is None else result


def read(path):
    with open(path, "rb") as handle:
        return handle.read().decode(errors="replace")


def write(path):
    with open(path, "w") as handle:
        handle.write("the agent was here")


def call(path="/chat/completions", body=None):
    """A request to the gateway with the rollout's token; its status code."""
    base = os.environ["OPENAI_BASE_URL"] if path.startswith("/chat") else os.environ["TETHER_SERVER"]
    data = json.dumps(body or {"model": "policy", "messages": [{"role": "user", "content": "hi"}]}).encode()
    request = urllib.request.Request(
        base + path,
        data=data,
        headers={
            "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
            "Content-Type": "application/json",
        },
    )
    try:
        return urllib.request.urlopen(request, timeout=30).status
    except urllib.error.HTTPError as exc:
        return exc.code


def connect_tcp(host, port):
    with socket.create_connection((host, int(port)), timeout=5):
        return "connected"


def connect_unix(path):
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(path)
        return "connected"


def namespaces(sibling):
    # counts and flags, not the host's command lines: a busy host's would overflow the kept output
    pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
    cmdlines = [attempt(read, f"/proc/{pid}/cmdline") for pid in pids]
    return {
        "ns": {kind: os.readlink(f"/proc/self/ns/{kind}") for kind in ("pid", "ipc", "mnt", "net", "uts")},
        "pids": len(pids),
        "pytest_visible": any("pytest" in str(cmdline) for cmdline in cmdlines),
        "sibling_environ": attempt(read, f"/proc/{sibling}/environ"),
        "sibling_cmdline": attempt(read, f"/proc/{sibling}/cmdline"),
    }


def look(spec):
    """`list:PATH` lists a folder, `path:PATH` or `PATH` reads a file (`path:` keeps a path off the
    command line, which the sandbox shows files of)."""
    kind, _, path = spec.partition(":") if spec.startswith(("list:", "path:")) else ("path", "", spec)
    return attempt(listing if kind == "list" else read, path)


def listing(path):
    """A folder's names; a count where there are more than an agent's output would hold (an unsandboxed
    agent lists the host's /tmp, which can hold thousands)."""
    names = os.listdir(path)
    return names if len(names) <= 500 else f"{len(names)} names"


def files(project, other_scratch, *extra):
    outside = [os.path.join(project, "x"), os.path.join(other_scratch, "x"), "/tmp/tether-sandbox-probe"]
    return {
        "secret": attempt(read, os.path.join(project, ".tether", "secret")),
        "state_dir": attempt(os.listdir, os.path.join(project, ".tether")),
        "other_scratch": attempt(os.listdir, other_scratch),
        "extra": [look(spec) for spec in extra],
        "writes_outside": [attempt(write, path) for path in outside],
        "write_cwd": attempt(write, "mine.txt"),
        "home_is_cwd": os.environ.get("HOME") == os.getcwd(),
        "tmp": attempt(listing, "/tmp"),
        "own_code": attempt(read, __file__) is not None and os.path.exists(__file__),
        "beside_own_code": sorted(os.listdir(os.path.dirname(os.path.abspath(__file__)))),
    }


def network(port, unix_path):
    return {
        "gateway": call(),
        "admin": call("/admin/pause", {}),
        "host_port": attempt(connect_tcp, "127.0.0.1", port),
        "host_unix": attempt(connect_unix, unix_path),
        "outside": attempt(connect_tcp, "1.1.1.1", 80),
    }


def fork(count):
    children = []
    for _ in range(int(count)):
        try:
            pid = os.fork()
        except OSError as exc:
            return {"forked": len(children), "error": type(exc).__name__}
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        children.append(pid)
    for pid in children:
        os.kill(pid, 9)
    return {"forked": len(children), "error": None}


def memory(mib):
    try:
        block = bytearray(int(mib) * 1024 * 1024)
    except MemoryError:
        return {"allocated": False}
    return {"allocated": len(block) > 0}


def group_memory(children, mib):
    """`children` processes that each hold `mib` MiB (written, so resident); how many hold it at once."""
    read_end, write_end = os.pipe()
    pids = []
    for index in range(int(children)):
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            try:
                block = b"x" * (int(mib) * 1024 * 1024)
                os.write(write_end, bytes([index]) if block else b"")
            except MemoryError:
                pass
            time.sleep(30)
            os._exit(0)
        pids.append(pid)
    os.close(write_end)
    os.set_blocking(read_end, False)
    reported, dead, deadline = set(), set(), time.monotonic() + 20
    while time.monotonic() < deadline and len(reported | dead) < len(pids):
        dead |= {i for i, pid in enumerate(pids) if i not in dead and os.waitpid(pid, os.WNOHANG)[0] == pid}
        try:
            reported |= set(os.read(read_end, 64))
        except BlockingIOError:
            time.sleep(0.05)
    time.sleep(0.5)  # a late kill for memory lands
    dead |= {i for i, pid in enumerate(pids) if i not in dead and os.waitpid(pid, os.WNOHANG)[0] == pid}
    for pid in pids:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
    return {"held": len(reported - dead), "children": len(pids)}


def scratch(mib):
    """Write `mib` MiB into the scratch directory (the working directory), 1 MiB at a time; how far it got."""
    chunk = b"x" * (1024 * 1024)
    written = 0
    try:
        with open("fill.bin", "wb") as out:
            for _ in range(int(mib)):
                out.write(chunk)
                out.flush()
                written += 1
            os.fsync(out.fileno())
    except OSError as exc:
        return {"written_mib": written, "error": errno.errorcode.get(exc.errno, str(exc.errno))}
    return {"written_mib": written, "error": None, "cwd": os.getcwd()}


def spin():
    while True:
        pass


def daemon(marker, then="exit"):
    """Double-fork a child that keeps calling the gateway; once it has made its first call, exit (or
    with `hang`, wait to be killed)."""
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):  # as a daemon does: it holds none of the agent's pipes
                os.dup2(null, fd)
            os.execv(sys.executable, [sys.executable, __file__, "daemon-loop", marker])
        os._exit(0)
    while not os.path.exists("daemon-called"):
        time.sleep(0.05)
    while then == "hang":
        time.sleep(1)
    return {"daemon": "started"}


def daemon_loop(marker):
    """Calls the gateway until killed: with the relay gone (its sandbox ended) it keeps trying, so only
    the end of its PID namespace stops it, never a failed call."""
    first = True
    while True:
        try:
            call()
        except OSError:  # refused, or no route any more
            pass
        if first:
            write("daemon-called")
            first = False
        time.sleep(0.2)


def admin_token_candidates(project):
    """Every admin token an agent can lay its hands on: Tether's variables (its own and any process's
    under /proc), the token file `tether serve` writes, and the one computed from the project's secret."""
    found = [os.environ.get("TETHER_TOKEN", "")]
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        environ = str(attempt(read, f"/proc/{pid}/environ")).split("\0")
        found += [entry.split("=", 1)[1] for entry in environ if entry.startswith("TETHER_TOKEN=")]
    token_file = str(attempt(read, os.path.join(project, ".tether", "admin_token")))
    if token_file.startswith("tadm-"):
        found.append(token_file.strip())
    secret = str(attempt(read, os.path.join(project, ".tether", "secret")))
    try:
        from tether.store.auth import TokenAuthority  # Tether's own code, which the agent can run

        found.append(TokenAuthority(bytes.fromhex(secret.strip())).admin_token)
    except (ImportError, ValueError):  # no secret to read
        pass
    return [token for token in dict.fromkeys(found) if token]


def admin_status(token):
    request = urllib.request.Request(
        os.environ["TETHER_SERVER"] + "/admin/status", headers={"Authorization": "Bearer " + token}
    )
    try:
        return urllib.request.urlopen(request, timeout=30).status
    except urllib.error.HTTPError as exc:
        return exc.code


def options(pairs):
    """`name=value` arguments: paths given so, Tether does not take them for files the agent needs
    (which the sandbox would keep visible), as it would a path argument of the agent's own."""
    return dict(pair.split("=", 1) for pair in pairs)


def attack(*pairs):
    """Every hole at once, as one agent run by `tether rollout`: the gateway (which must work), the admin
    API with a stolen token, Tether's process and environment, the project, the task file, another
    rollout's scratch directory, writing outside its own, PostgreSQL's port, memory, and a daemon that
    would outlive it. The daemon's command line carries `marker`, for the test to look for."""
    given = options(pairs)
    project, other = given["project"], given["other_scratch"]
    pids = [p for p in os.listdir("/proc") if p.isdigit()]
    cmdlines = [attempt(read, f"/proc/{pid}/cmdline") for pid in pids]
    admin = [admin_status(token) for token in admin_token_candidates(project)]
    found = {
        "gateway": call(),
        "admin": 200 if 200 in admin else (admin[0] if admin else "no token"),
        "processes": len(pids),
        "tether_visible": any("pytest" in str(cmdline) for cmdline in cmdlines),  # Tether runs in pytest
        "inherited_secret": os.environ.get("AWS_SECRET_ACCESS_KEY"),
        "secret": attempt(read, os.path.join(project, ".tether", "secret")),
        "task_file": attempt(read, given["tasks"]),
        "other_scratch": attempt(os.listdir, other),
        "writes_outside": [attempt(write, os.path.join(d, "x")) for d in (project, other)],
        "postgres": attempt(connect_tcp, "127.0.0.1", given["postgres"]),
        "memory": memory(given["memory_mib"])["allocated"],
    }
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)", given["marker"]])
        os._exit(0)
    return found


def neighbours(seconds, keep=""):
    """What an agent sees of another one running beside it: it leaves a file in /dev/shm and opens a
    terminal, waits, lists the folder its scratch directory is in, /dev/shm and /dev/pts, and waits again
    (so that one started a little later sees it too). `keep` (prefixes, comma-separated) lists only the
    entries that start with one of them: a host's /tmp and /dev/shm can hold thousands, more than an
    agent's output may be."""
    write(os.path.join("/dev/shm", os.environ["TETHER_ROLLOUT_ID"]))
    terminal = os.openpty()
    time.sleep(float(seconds))
    seen = {
        "scratch": os.path.basename(os.getcwd()),
        "beside_scratch": kept(os.listdir(os.path.dirname(os.getcwd())), keep),
        "shm": kept(os.listdir("/dev/shm"), keep),
        "pts": sorted(os.listdir("/dev/pts")),
        "terminal": os.path.basename(os.ttyname(terminal[1])),
    }
    time.sleep(float(seconds))
    return seen


def kept(entries, keep):
    prefixes = tuple(keep.split(",")) if keep else ("",)
    return sorted(entry for entry in entries if entry.startswith(prefixes))


def named(marker, seconds):
    """Named `marker` (its `comm`, which the host's /proc shows too) while it waits: the test finds it."""
    with open("/proc/self/comm", "w") as handle:
        handle.write(marker)
    time.sleep(float(seconds))
    return {"uid": os.getuid()}


def sandboxed_echo():
    """An ordinary agent (one model call, the task's `q` on stdout) that answers only inside a sandbox:
    where it sees other processes than its own, it answers wrong."""
    call()
    task = json.loads(os.environ["TETHER_TASK"])
    alone = len([p for p in os.listdir("/proc") if p.isdigit()]) <= 3
    return task["q"] if alone else "not sandboxed"


MODES = {
    "env": lambda: {"env": dict(os.environ)},
    "namespaces": namespaces,
    "files": files,
    "network": network,
    "fork": fork,
    "memory": memory,
    "group-memory": group_memory,
    "scratch": scratch,
    "spin": spin,
    "daemon": daemon,
    "daemon-loop": daemon_loop,
    "attack": attack,
    "neighbours": neighbours,
    "named": named,
    "sandboxed-echo": sandboxed_echo,
}

result = MODES[sys.argv[1]](*sys.argv[2:])
print(result if isinstance(result, str) else json.dumps(result))
