"""A warm child that confines itself as `--sandbox bwrap` confines a cold agent (a warm start, the
default, with `--sandbox bwrap`). Standard library only: `zygote.py` loads it from its own folder, in
the agent's interpreter, and keeps it out of `sys.modules`.

The zygote runs in a bubblewrap sandbox of its own (`BwrapSandbox.zygote_wrap`) that holds only what
every rollout of the command shares: the read-only system with the same paths hidden and /tmp, /var/tmp
and /run emptied, plus the warm folder, where Tether makes each rollout's scratch directory (its relay
directory, with the gateway's socket, is outside: the child gets it as a descriptor with its request,
which only the relay keeps). The zygote first gives itself a PID namespace and /proc of its own
(`isolate`), so that it sees none of the host's processes. `confine` runs in the forked child before any
of the agent's code, and gives it what bwrap gives a cold agent, none of it shared with the zygote or a
sibling:

    child (C1): new user, mount, network, IPC, UTS, PID (and cgroup) namespaces; the warm folder covered
        but for its own scratch (read-write); its own /dev/shm and /dev/pts; its loopback up. It waits
        for C2 and exits with its status.
    init (C2, PID 1): its own /proc (/proc/sys and the like read-only); user namespaces disabled (the
        limit of one, used by a last user namespace mapping the agent's own ids, as bwrap does); no
        capabilities, no new privileges; the relay's loopback port. It forks the agent, relays, reaps
        every orphan and exits with the agent's status, which ends the PID namespace and all in it.
    agent (C3): the resource limits, then `confine` returns and the zygote runs the agent's code.

C1 dies with the zygote and C2 with C1 (PR_SET_PDEATHSIG), as bwrap's `--die-with-parent` would.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct
import sys
from types import ModuleType
from typing import Any, NoReturn

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 1, 24, 38, 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
HOSTNAME = "tether-sandbox"
SHM_OPTIONS = "mode=0755,size=67108864"  # as the cold sandbox's --size 64 MiB --tmpfs /dev/shm
COVERED_PROC = ("sys", "sysrq-trigger", "irq", "bus")  # as bwrap's --proc covers them
FAILED = "tether sandbox: the warm sandbox could not be set up: "

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]


class SetupError(OSError):
    """A step of the confinement failed; the child exits before any of the agent's code runs."""


def confine(settings: dict[str, Any], relay: ModuleType, relay_dir: int | None) -> None:
    """In the forked child: returns in the agent's own process only, once it is confined; the child
    and the sandbox's init exit here with the agent's status. `relay_dir` (a descriptor Tether sent with
    the request) holds the gateway's socket: the relay reaches it through the descriptor, which the
    agent does not keep."""
    zygote_uid, zygote_gid = os.getuid(), os.getgid()
    _die_with_parent()
    _unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWPID)
    _libc.unshare(CLONE_NEWCGROUP)  # may fail: as bwrap's --unshare-cgroup-try
    _map_ids(0, zygote_uid, 0, zygote_gid)  # root here, so that devpts can be mounted
    socket.sethostname(HOSTNAME)
    _loopback_up()
    _mount_own_files(settings["folder"], settings["scratch"], settings.get("scratch_bytes", 0))
    _exit_after(os.fork())  # C1 waits; C2 goes on, as PID 1 of the new PID namespace
    _die_with_parent()
    os.setsid()  # as bwrap's --new-session
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NOEXEC | MS_NODEV)
    _disable_user_namespaces(settings["uid"], settings["gid"])
    options = relay.parse(settings["relay"])
    if options.socket:
        if relay_dir is None:
            raise SetupError("no relay directory came with the request")
        options.socket = f"/proc/self/fd/{relay_dir}/{os.path.basename(options.socket)}"
    server = relay.bind(options.port) if options.socket else None
    _drop_capabilities()
    agent = os.fork()
    if agent == 0:
        if server is not None:
            server.close()
        if relay_dir is not None:
            os.close(relay_dir)
        relay.set_limits(options)
        return
    if server is not None:
        relay.serve(server, options.socket)
    os._exit(_reap_until(agent, relay))


def isolate() -> None:
    """The zygote's own PID namespace and /proc, before it imports anything: it sees its children only,
    none of the host's processes (nor Tether). Returns in the namespace's PID 1; the process it started
    from waits for it and exits as it does. Its /proc, whole, lets each child mount its own."""
    uid, gid = os.getuid(), os.getgid()
    _unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID)
    _map_ids(uid, uid, gid, gid)
    _exit_after(os.fork())
    _die_with_parent()
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NOEXEC | MS_NODEV)


def trial(folder: str, relay: ModuleType) -> str | None:
    """At the zygote's start, a child confined as an agent would be, which then exits: None when it
    was, else why not (its agents then start cold, rather than each fail)."""
    own = [os.path.join(folder, f".trial-{os.getpid()}-scratch")]
    for path in own:
        os.mkdir(path, 0o700)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        os.dup2(write, 2)
        settings = {"folder": folder, "scratch": own[0], "relay": ["--"]}
        try:
            confine({**settings, "uid": os.getuid(), "gid": os.getgid()}, relay, None)
        except Exception as exc:
            fail(exc)
        os._exit(0)
    os.close(write)
    with open(read, "rb") as source:
        said = source.read().decode(errors="replace").strip().splitlines()
    _, status = os.waitpid(pid, 0)
    for path in own:
        os.rmdir(path)
    if status == 0:
        return None
    return said[-1].removeprefix(FAILED) if said else f"exit status {os.waitstatus_to_exitcode(status)}"


# -- the child, C1 ------------------------------------------------------------------------------------


def _mount_own_files(folder: str, scratch: str, scratch_bytes: int = 0) -> None:
    """The warm folder (every rollout's scratch directory, the zygote's socket) covered by an empty
    tmpfs that shows only this rollout's own, itself a tmpfs of `scratch_bytes` where that is given;
    /dev/shm and /dev/pts of its own."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    if os.path.dirname(scratch) != folder:
        raise SetupError(f"{scratch} is not in the warm folder {folder}")
    scratch_fd = _open_path(scratch)  # before the folder is covered
    _mount("tmpfs", folder, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    if scratch_bytes:
        os.close(scratch_fd)
        os.mkdir(scratch, 0o755)
        _mount("tmpfs", scratch, "tmpfs", MS_NOSUID | MS_NODEV, f"mode=0777,size={scratch_bytes}")
    else:
        _bind(scratch_fd, scratch)
    _remount_read_only(folder)
    _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, SHM_OPTIONS)
    _mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620")


def _bind(fd: int, path: str) -> None:
    """The directory open as `fd` at `path`, in the folder's fresh tmpfs; `fd` closed, since an open
    descriptor would lead back to the uncovered folder."""
    os.mkdir(path, 0o755)
    try:
        _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND)
    finally:
        os.close(fd)


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(probe, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(probe, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))


def _exit_after(pid: int) -> None:
    """In the parent: wait for `pid` and exit as it did. In the child (pid 0): return."""
    if pid == 0:
        return
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        os._exit(1)
    code = os.waitstatus_to_exitcode(status)
    os._exit(code if code >= 0 else 128 - code)


# -- the sandbox's init, C2 ---------------------------------------------------------------------------


def _disable_user_namespaces(uid: int, gid: int) -> None:
    """As bwrap's --disable-userns: this user namespace may hold one more, which the agent gets, mapping
    its own ids (those of the cold sandbox's agent); the agent cannot raise the limit from inside it."""
    _write("/proc/sys/user/max_user_namespaces", "1")
    for name in COVERED_PROC:
        path = f"/proc/{name}"
        if os.path.exists(path):
            _mount(path, path, None, MS_BIND | MS_REC)
            _remount_read_only(path, MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _unshare(CLONE_NEWUSER)
    _map_ids(uid, 0, gid, 0)
    try:
        _unshare(CLONE_NEWUSER)
    except SetupError:
        return
    raise SetupError("creating user namespaces was not disabled")


def _drop_capabilities() -> None:
    """No capability in any set, none to gain by exec (as bwrap's --cap-drop ALL), no new privileges."""
    for cap in range(_last_capability() + 1):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() != 22:  # EINVAL
            raise _error("dropping a capability from the bounding set")
    _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable: twice, all zero
    if _libc.capset(header, data) != 0:
        raise _error("capset")
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise _error("prctl(PR_SET_NO_NEW_PRIVS)")


def _last_capability() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap", encoding="ascii") as source:
            return int(source.read())
    except (OSError, ValueError):
        return 63


def _reap_until(agent: int, relay: ModuleType) -> int:
    """As PID 1: reap every process that ends (orphans come here) until the agent has; its status."""
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return 1
        if pid == agent:
            code: int = relay.exit_status(os.waitstatus_to_exitcode(status))
            sys.stderr.flush()
            return code


# -- system calls -------------------------------------------------------------------------------------


def _die_with_parent() -> None:
    parent = os.getppid()
    if _libc.prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0) != 0:  # SIGKILL
        raise _error("prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != parent:  # it died before the line above
        os._exit(1)


def _unshare(flags: int) -> None:
    if _libc.unshare(flags) != 0:
        raise _error(f"unshare({flags:#x})")


def _map_ids(uid: int, outer_uid: int, gid: int, outer_gid: int) -> None:
    """One id of this new user namespace for one of its parent's, as an unprivileged process may."""
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {outer_uid} 1")
    _write("/proc/self/gid_map", f"{gid} {outer_gid} 1")


def _mount(source: str | None, target: str, kind: str | None, flags: int, data: str | None = None) -> None:
    encoded = [None if text is None else text.encode() for text in (source, target, kind, data)]
    if _libc.mount(encoded[0], encoded[1], encoded[2], flags, encoded[3]) != 0:
        raise _error(f"mount {kind or source} on {target}")


def _remount_read_only(path: str, extra: int = MS_NOSUID | MS_NODEV) -> None:
    """Read-only, keeping the flags the mount has (a mount copied from the zygote's cannot lose them)."""
    _mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | extra)


def _open_path(path: str) -> int:
    return os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _error(what: str) -> SetupError:
    code = ctypes.get_errno()
    return SetupError(code, f"{what}: {os.strerror(code)}")


def fail(exc: BaseException) -> NoReturn:
    """A step failed: say which, as bwrap does, and run nothing."""
    print(f"{FAILED}{exc}", file=sys.stderr, flush=True)
    os._exit(1)
