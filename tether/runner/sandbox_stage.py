"""As root, bwrap for an unprivileged agent: the paths it shows, staged where that user can reach them.

Tether as root runs each sandbox as an unprivileged user (`nobody` unless `--agent-user` names another),
so that nothing in it is uid 0 on the host. That user could not pass `/root` (0700) to bind a project,
virtual environment or Python installation there, as bwrap run by root could. This script, run by
Tether as root with `python -I -S`, gives bwrap a mount namespace of its own (nothing of it reaches the
host's) in which each path the sandbox shows is mounted in a fresh tmpfs over `--stage DIR` (`DIR/0`,
`DIR/1`, ...; `--rw PATH`, an `--agent-cwd`, at `DIR/rw`), then becomes that user (no other group) and
runs bwrap, which binds each where it was (read-only, but `--rw`). With `--idmap` (`nobody`, Tether's
default), each is an idmapped mount where the file system allows one: what root owns there is the
user's own, so that the agent reads (and in `--rw`, writes) what it is shown as it did as uid 0, and
what it makes there is root's on disk; elsewhere, and for another `--agent-user`, a plain bind, which
the user reads as its own permissions let it.

    sandbox_stage.py --uid UID --gid GID --stage DIR [--idmap 1] [--rw PATH] [PATH ...] -- BWRAP ARGS...
"""

from __future__ import annotations

import ctypes
import os
import sys

TYPE_CHECKING = False  # `typing` and `collections.abc` would take most of this script's start-up
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import NoReturn

CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
MS_BIND, MS_REC, MS_PRIVATE, MS_NOSUID, MS_NODEV = 4096, 16384, 1 << 18, 2, 4
# Linux's new mount API (the same numbers on every architecture).
SYS_OPEN_TREE, SYS_MOVE_MOUNT, SYS_MOUNT_SETATTR = 428, 429, 442
OPEN_TREE_CLONE, OPEN_TREE_CLOEXEC, AT_RECURSIVE, AT_EMPTY_PATH = 1, 0o2000000, 0x8000, 0x1000
MOVE_MOUNT_F_EMPTY_PATH = 0x4
MOUNT_ATTR_IDMAP = 0x100000
AT_FDCWD = -100

_libc = ctypes.CDLL(None, use_errno=True)


class MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def main(argv: Sequence[str]) -> None:
    split = list(argv).index("--")
    options, paths = _options(argv[:split])
    command = list(argv[split + 1 :])
    uid, gid, stage = int(options["--uid"]), int(options["--gid"]), options["--stage"]
    _check(_libc.unshare(CLONE_NEWNS), "unshare")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount("tmpfs", stage, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    owners = _id_map(uid, gid) if "--idmap" in options else -1
    for index, path in enumerate(paths):
        _stage(path, os.path.join(stage, str(index)), owners)
    if "--rw" in options:
        _stage(options["--rw"], os.path.join(stage, "rw"), owners)
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    try:
        os.execv(command[0], command)
    except OSError as exc:
        _fail(f"uid {uid} cannot run {command[0]}: {exc.strerror}")


def _options(argv: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    """The `--NAME VALUE` pairs before the paths, and the paths."""
    options: dict[str, str] = {}
    rest = list(argv)
    while len(rest) > 1 and rest[0].startswith("--"):
        options[rest[0]], rest = rest[1], rest[2:]
    return options, rest


def _stage(path: str, target: str, owners: int) -> None:
    """`path` at `target`: as the user's own where `owners` is given and the file system allows it."""
    if os.path.isdir(path):
        os.mkdir(target)
    else:
        os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o644))
    flags = OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE
    tree = _syscall(SYS_OPEN_TREE, AT_FDCWD, path.encode(), flags)
    if tree < 0:  # Linux before 5.2: a plain bind
        _mount(path, target, None, MS_BIND | MS_REC)
        return
    if owners >= 0:
        _set(tree, MOUNT_ATTR_IDMAP, owners)  # else, or where it fails, a plain bind
    _check(_syscall(SYS_MOVE_MOUNT, tree, b"", AT_FDCWD, target.encode(), MOVE_MOUNT_F_EMPTY_PATH), target)
    os.close(tree)


def _set(tree: int, attributes: int, userns: int) -> int:
    attr = MountAttr(attributes, 0, 0, max(userns, 0))
    flags = AT_EMPTY_PATH | AT_RECURSIVE
    return int(_syscall(SYS_MOUNT_SETATTR, tree, b"", flags, ctypes.byref(attr), ctypes.sizeof(attr)))


def _id_map(uid: int, gid: int) -> int:
    """A user namespace in which root's ids are `uid` and `gid` (an idmapped mount's mapping): its
    descriptor, or -1 where none could be made."""
    made_read, made_write = os.pipe()
    done_read, done_write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(done_write)
        os.write(made_write, b"1" if _libc.unshare(CLONE_NEWUSER) == 0 else b"0")
        os.read(done_read, 1)
        os._exit(0)
    os.close(made_write)
    try:
        if os.read(made_read, 1) != b"1":
            return -1
        for name, line in (("uid_map", f"0 {uid} 1"), ("setgroups", "deny"), ("gid_map", f"0 {gid} 1")):
            with open(f"/proc/{pid}/{name}", "w", encoding="ascii") as sink:
                sink.write(line)
        return os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return -1
    finally:
        for fd in (made_read, done_read, done_write):
            os.close(fd)
        os.waitpid(pid, 0)


def _mount(source: str | None, target: str, kind: str | None, flags: int, data: str | None = None) -> None:
    encoded = [None if text is None else text.encode() for text in (source, target, kind, data)]
    _check(_libc.mount(encoded[0], encoded[1], encoded[2], flags, encoded[3]), f"mount {target}")


def _syscall(number: int, *args: object) -> int:
    wide = [ctypes.c_long(arg) if isinstance(arg, int) else arg for arg in args]
    return int(_libc.syscall(ctypes.c_long(number), *wide))


def _check(result: int, what: str) -> int:
    if result < 0:
        _fail(f"{what}: {os.strerror(ctypes.get_errno())}")
    return result


def _fail(why: str) -> NoReturn:
    print(f"tether sandbox: as the agent's user: {why}", file=sys.stderr, flush=True)
    os._exit(1)


if __name__ == "__main__":
    main(sys.argv[1:])
