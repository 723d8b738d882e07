"""How an agent's process is confined (`--sandbox KIND`): the seam between the launcher and the OS.

A `Sandbox` turns the command Tether would run (argv, cwd, the environment Tether gives the agent and
what it would inherit) into the command to exec, inside `launch`, which also sets up and tears down what
the sandbox needs around that one process. `NoSandbox` is the default and changes nothing. `BwrapSandbox`
runs the agent under bubblewrap (Debian's `bubblewrap`) with its own user, PID, IPC, network, UTS and
mount namespaces, no capabilities, an environment from an allow-list, the file system read-only except
its scratch directory, the project's state and the run's task and evaluator files hidden, resource
limits, and one way out: the gateway, through a Unix socket per sandbox (`sandbox_relay.py`); as root,
as `nobody` unless `--agent-user` names another user (`sandbox_stage.py`; `--agent-user root` keeps uid
0). Started warm (the default), the zygote runs in a bwrap sandbox of its own (`zygote_wrap`) and each
child it forks sets up the rest itself (`confine`, `zygote_sandbox.py`). What each guarantee is, and the
test that proves it: docs/security.md. A new kind is a class with `check` and `launch`, and one
`register(...)` line at the end of this file.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from tether.registry import Registry
from tether.runner import sandbox_relay, sandbox_stage
from tether.runner.cgroups import Caps, Cgroups
from tether.runner.sandbox_view import EMPTY, Layout, existing, mounts, shown_paths
from tether.runner.socket_dirs import socket_parent

RELAY_SOURCE = Path(sandbox_relay.__file__)
STAGE_SOURCE = Path(sandbox_stage.__file__)
STAGE_PREFIX = "tether-stage-"
UNPRIVILEGED_USER = "nobody"  # as root, whom sandboxed agents run as when --agent-user names no one
CHECK_TIMEOUT_S = 30.0


class SandboxError(ValueError):
    """A sandbox that cannot work here; the message is one line that names the fix."""


@dataclass(frozen=True)
class Command:
    """One agent process: what to exec, where, with what environment, as whom.

    `env` is what Tether gives this attempt (OPENAI_BASE_URL, the rollout token, TETHER_TASK, ...) plus
    the launcher's own extra variables; `inherited` is what the agent would inherit from Tether's own
    environment (already without Tether's private settings and the operator's secrets); `identity` is
    the `user`/`group`/`extra_groups` of `create_subprocess_exec` (empty: Tether's own user)."""

    argv: list[str]
    cwd: str
    env: dict[str, str]
    inherited: dict[str, str] = field(default_factory=dict)
    identity: dict[str, Any] = field(default_factory=dict)
    scratch: bool = False  # `cwd` is Tether's own empty directory for this attempt (not --agent-cwd)
    pass_fds: tuple[int, ...] = ()  # descriptors the process keeps (the sandbox's cgroup to join)


class Sandbox(Protocol):
    def check(self, identity: Mapping[str, Any]) -> None:
        """Raise SandboxError (one line, naming the fix) when this sandbox cannot run agents here."""

    def launch(self, command: Command) -> contextlib.AbstractAsyncContextManager[Command]:
        """The command to exec in place of `command`, valid until the context ends (after the process)."""


class NoSandbox:
    """Today's launch: the agent inherits Tether's environment (minus its private settings)."""

    def check(self, identity: Mapping[str, Any]) -> None:
        return None

    @contextlib.asynccontextmanager
    async def launch(self, command: Command) -> AsyncIterator[Command]:
        yield replace(command, env={**command.inherited, "PWD": command.cwd, **command.env})


# -- bubblewrap ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SandboxLimits:
    """Per process (setrlimit), 0 for none. RLIMIT_NPROC is the sandbox's whole process (and thread)
    count, for the agent's user (as root `nobody`, unless `--agent-user` names another; the kernel does
    not apply it to uid 0, `--agent-user root`). `scratch_mib` caps what the agent writes in its scratch
    directory, a tmpfs of that size (0: the host's folder, bound)."""

    cpu_s: int = 600
    memory_mib: int = 4096
    processes: int = 256
    scratch_mib: int = 1024


@dataclass(frozen=True)
class SandboxOptions:
    limits: SandboxLimits = SandboxLimits()
    env_names: tuple[str, ...] = ()  # more variables of Tether's environment to pass (--sandbox-env)
    hide: tuple[str, ...] = ()  # paths the agent must not see (the project's state, task files, ...)
    show: tuple[str, ...] = ()  # more paths it sees, read-only (--sandbox-show)
    executable: str = "bwrap"


# What every sandboxed agent gets from Tether's environment, besides Tether's own variables for it.
PASSED_NAMES = frozenset({"PATH", "LANG", "LANGUAGE", "TZ", "TERM"})
PASSED_PREFIXES = ("LC_",)
MIB = 1024 * 1024
INNER_FALLBACK_PORT = 8080  # the gateway's own port unless it is privileged (< 1024) inside the sandbox
# A process without CAP_SETFCAP may not map uid 0 into a user namespace it creates (Linux 5.12 and later),
# so a warm zygote of root's (`--agent-user root`), which has no capability, is this uid in its sandbox.
ZYGOTE_UID_AS_ROOT = 1000
MISSING = (
    "--sandbox bwrap: bubblewrap is not installed (no `{exe}` on PATH): apt-get install bubblewrap "
    "(or bash scripts/ensure_bwrap.sh)"
)
NO_NAMESPACES = (
    "--sandbox bwrap: bwrap cannot create the sandbox here ({why}): enable unprivileged user namespaces "
    "(sysctl -w kernel.unprivileged_userns_clone=1 user.max_user_namespaces=15000; on Ubuntu also "
    "kernel.apparmor_restrict_unprivileged_userns=0){alternative}"
)
ROOT_ALTERNATIVE = {
    True: ", or keep agents root's (uid 0 outside their user namespace) with --agent-user root",
    False: ", or run Tether as root",
}
NO_SETUP = "--sandbox bwrap: bwrap cannot set up the sandbox here ({why})"
NO_PYTHON = (
    "--sandbox bwrap: none of {tried} runs inside the sandbox as {who} (needed for its network relay): "
    "install python3 where that user can run it"
)


@dataclass(frozen=True)
class Confined:
    """A warm agent in the sandbox (a warm start). `wrap` (ending in `--`) runs its zygote in a sandbox
    of its own, shared by the agents whose sandboxes look alike, with the environment `env`; `settings`
    are what the forked child confines itself with before the agent's code runs (`zygote_sandbox.py`)."""

    wrap: tuple[str, ...]
    env: dict[str, str]
    settings: dict[str, Any]
    folder: str
    relay_dir: str  # Tether's end of the relay: the child gets it as a descriptor, never by its path
    cgroup_fds: tuple[int, ...] = ()  # its cgroup's `cgroup.procs`, which the child joins (cgroups.py)


@dataclass(frozen=True)
class Ready:
    bwrap: str
    python: str
    disable_userns: bool


class BwrapSandbox:
    def __init__(self, options: SandboxOptions | None = None) -> None:
        self.options = options or SandboxOptions()
        self._ready: dict[int | None, Ready] = {}
        self.cgroups = Cgroups()
        self.as_root = False  # as root, agents keep uid 0 when --agent-user names no one (auto's fallback)
        self._stage: str | None = None
        self._idmapped: int | None = None  # the default user's uid: what root owns it is shown as its own

    def default_identity(self) -> dict[str, Any]:
        """Whom agents run as when --agent-user names no one: as root, `nobody` with no other group (uid 0
        on the host, even without capabilities, is more than an agent needs); else Tether's own user."""
        if os.geteuid() != 0 or self.as_root:
            return {}
        identity = unprivileged_identity()
        self._idmapped = identity["user"]
        return identity

    # -- the check, at start ---------------------------------------------------------------------------

    def check(self, identity: Mapping[str, Any]) -> None:
        uid = identity.get("user")
        if uid in self._ready:
            return
        bwrap = shutil.which(self.options.executable)
        if bwrap is None:
            raise SandboxError(MISSING.format(exe=self.options.executable))
        disable = "--disable-userns" in _help(bwrap)
        why = self._trial(Ready(bwrap, "", disable), ["true"], identity)
        if why is not None:
            fix = NO_NAMESPACES if re.search("namespace|uid map|unshare", why, re.IGNORECASE) else NO_SETUP
            alternative = ROOT_ALTERNATIVE[os.geteuid() == 0 and uid is not None]
            raise SandboxError(fix.format(why=why, alternative=alternative))
        tried = _python_candidates()
        for python in tried:
            ready = Ready(bwrap, python, disable)
            if self._trial(ready, [python, "-I", "-S", "-c", "pass"], identity, relay=True) is None:
                self._ready[uid] = ready
                return
        who = "Tether's user" if uid is None else f"uid {uid}"
        raise SandboxError(NO_PYTHON.format(tried=", ".join(tried), who=who))

    def _trial(
        self, ready: Ready, argv: list[str], identity: Mapping[str, Any], relay: bool = False
    ) -> str | None:
        """Run `argv` in a sandbox laid out as an agent's; None when it ran, else bwrap's last line."""
        with tempfile.TemporaryDirectory(prefix="tether-sandbox-check-") as folder:
            _own(folder, identity)
            shown = shown_paths([ready.python] if ready.python else [], None, [], [], ())
            stage = self._stage_dir(identity)
            layout = Layout(_mkdir(folder, "scratch"), _mkdir(folder, "relay"), shown=shown, stage=stage)
            _prepare_relay_dir(layout.relay_dir, identity)
            _own(layout.scratch, identity)
            inner = [*self._relay(ready, layout.relay_dir, None), *argv] if relay else argv
            command, user = self._as_agent(layout, bwrap_argv(ready, layout, inner), identity)
            try:
                done = subprocess.run(
                    command,
                    cwd=layout.scratch,
                    env={"PATH": os.environ.get("PATH", os.defpath)},
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    timeout=CHECK_TIMEOUT_S,
                    **user,
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                return str(exc)
        lines = done.stderr.decode(errors="replace").strip().splitlines()
        return None if done.returncode == 0 else (lines[-1] if lines else f"exit code {done.returncode}")

    # -- one agent -------------------------------------------------------------------------------------

    async def _prepare(self, command: Command) -> tuple[Ready, tuple[str, int] | None, int]:
        """Checked for the agent's user (once); the gateway's address, and the relay's port inside."""
        uid = command.identity.get("user")
        if uid not in self._ready:
            await asyncio.to_thread(self.check, command.identity)
        target = gateway_address(command.env)
        return self._ready[uid], target, _inner_port(target)

    @contextlib.asynccontextmanager
    async def launch(self, command: Command) -> AsyncIterator[Command]:
        ready, target, inner_port = await self._prepare(command)
        with tempfile.TemporaryDirectory(prefix="tether-sandbox-") as relay_dir:
            _prepare_relay_dir(relay_dir, command.identity)
            async with (
                _gateway_socket(relay_dir, target, command.identity) as served,
                self._cgroup() as joins,
            ):
                layout = self._layout(command, relay_dir, [ready.python])
                layout = replace(layout, stage_scratch=layout.stage is not None and not command.scratch)
                relay = self._relay(ready, relay_dir, inner_port if served else None, joins)
                inner = bwrap_argv(ready, layout, [*relay, *command.argv])
                argv, user = self._as_agent(layout, inner, command.identity)
                yield replace(
                    command,
                    argv=argv,
                    identity=user,
                    env=self.environment(command, target, inner_port),
                    pass_fds=(*command.pass_fds, *joins),
                )

    @contextlib.asynccontextmanager
    async def _cgroup(self) -> AsyncIterator[tuple[int, ...]]:
        """One agent's cgroup, capping the whole sandbox's memory and processes where Tether may make
        one (`cgroups.py`): the descriptors its first process joins it by; none elsewhere."""
        limits = self.options.limits
        cgroup = self.cgroups.make(Caps(limits.memory_mib * MIB, limits.processes))
        if cgroup is None:
            yield ()
            return
        try:
            yield tuple(cgroup.open_procs())
        finally:
            await asyncio.to_thread(cgroup.close)  # its last processes may take a moment to go

    @contextlib.asynccontextmanager
    async def confine(
        self, command: Command, folder: str, shared_env: Mapping[str, str]
    ) -> AsyncIterator[tuple[Command, Confined]]:
        """A warm agent's sandbox (a warm start): its scratch directory (`command.cwd`) in the warm
        `folder`, the only one the child will see there; its relay directory and gateway socket outside
        it, where the zygote sees neither (the child gets the directory as a descriptor: `relay_dir`);
        the command with the sandbox's environment, and how the zygote and the child confine it. The
        zygote's environment is the allow-listed one with `shared_env` (no attempt's own variables)."""
        _, target, inner_port = await self._prepare(command)
        folder = os.path.realpath(folder)
        if not os.path.exists(os.path.join(folder, RELAY_SOURCE.name)):
            _prepare_relay_dir(folder, command.identity)
        relay_dir = tempfile.mkdtemp(prefix="tether-sandbox-", dir=socket_parent())
        try:
            _own(relay_dir, command.identity)
            async with _gateway_socket(relay_dir, target, command.identity) as served:
                async with self._cgroup() as joins:
                    settings = {
                        "folder": folder,
                        "scratch": os.path.realpath(command.cwd),
                        "scratch_bytes": self.options.limits.scratch_mib * MIB,
                        "relay": self._relay_options(relay_dir, inner_port if served else None),
                        "uid": command.identity.get("user", os.getuid()),
                        "gid": command.identity.get("group", os.getgid()),
                        "cgroups": len(joins),
                    }
                    wrap = tuple(self.zygote_wrap(command, folder))
                    env = self.environment(
                        replace(command, cwd=folder, env=dict(shared_env)), None, inner_port
                    )
                    confined = Confined(wrap, env, settings, folder, relay_dir, joins)
                    yield replace(command, env=self.environment(command, target, inner_port)), confined
        finally:
            shutil.rmtree(relay_dir, ignore_errors=True)

    def zygote_wrap(self, command: Command, folder: str) -> list[str]:
        """The bwrap command (up to `--`) a warm zygote runs in: what a sandbox for `command` holds that
        is not one rollout's own, and the warm folder, read-write."""
        ready = self._ready[command.identity.get("user")]
        as_root = command.identity.get("user") is None and os.geteuid() == 0
        layout = self._layout(replace(command, cwd=folder, scratch=False), folder, [])  # the host's folder
        return self._as_agent(layout, zygote_argv(ready, layout, as_root), command.identity)[0]

    def _stage_dir(self, identity: Mapping[str, Any]) -> str | None:
        """As root, for an agent of another user: the empty folder where each of its sandboxes has the
        paths it shows staged, in a tmpfs of its own mount namespace (`sandbox_stage.py`); else None."""
        if identity.get("user") is None or os.geteuid() != 0:
            return None
        if self._stage is None:
            _sweep_stage_dirs()
            self._stage = tempfile.mkdtemp(prefix=f"{STAGE_PREFIX}{os.getpid()}-")
            atexit.register(shutil.rmtree, self._stage, True)
        return self._stage

    def _as_agent(
        self, layout: Layout, argv: list[str], identity: Mapping[str, Any]
    ) -> tuple[list[str], dict[str, Any]]:
        """The command that runs bwrap's `argv` as the agent's user, and whom Tether starts it as: as
        root, the staging script, which becomes that user once the shown paths are staged."""
        if layout.stage is None:
            return argv, dict(identity)
        user = ["--uid", str(identity["user"]), "--gid", str(identity["group"]), "--stage", layout.stage]
        user += ["--idmap", "1"] if identity["user"] == self._idmapped else []
        user += ["--rw", layout.scratch] if layout.stage_scratch else []  # an --agent-cwd
        staging = [sys.executable, "-I", "-S", str(STAGE_SOURCE), *user, *layout.shown]
        return [*staging, "--", *argv], {}

    def _layout(self, command: Command, relay_dir: str, programs: list[str]) -> Layout:
        hide = tuple(existing(self.options.hide))
        path_env = {**command.inherited, **command.env}.get("PATH")
        shown = shown_paths(command.argv, path_env, programs, self.options.show, hide)
        size = self.options.limits.scratch_mib * MIB if command.scratch else 0
        stage = self._stage_dir(command.identity)
        return Layout(os.path.realpath(command.cwd), relay_dir, hide, shown, size, stage)

    def _relay(self, ready: Ready, relay_dir: str, port: int | None, joins: Sequence[int] = ()) -> list[str]:
        """The relay, which joins the sandbox's cgroup, listens on its loopback, sets the limits and runs
        the agent."""
        source = os.path.join(relay_dir, RELAY_SOURCE.name)
        cgroups = ["--cgroups", ",".join(map(str, joins))] if joins else []
        return [ready.python, "-I", "-S", source, *cgroups, *self._relay_options(relay_dir, port)]

    def _relay_options(self, relay_dir: str, port: int | None) -> list[str]:
        """The relay's options (`sandbox_relay.parse`): the loopback port it listens on, the socket it
        forwards to, the limits it sets in the agent's process."""
        limits = self.options.limits
        options = []
        if port is not None:
            options += ["--port", str(port), "--socket", os.path.join(relay_dir, "gateway.sock")]
        options += ["--cpu", str(limits.cpu_s), "--memory", str(limits.memory_mib * 1024 * 1024)]
        return [*options, "--processes", str(limits.processes), "--"]

    def environment(
        self, command: Command, target: tuple[str, int] | None, inner_port: int
    ) -> dict[str, str]:
        """Only allow-listed names of what the agent would inherit, then Tether's own variables for it,
        with the gateway's address replaced by the relay's. HOME and TMPDIR are the scratch directory."""
        names = set(self.options.env_names)
        env = {
            key: value
            for key, value in command.inherited.items()
            if key in PASSED_NAMES or key.startswith(PASSED_PREFIXES) or key in names
        }
        env.update({"HOME": command.cwd, "TMPDIR": command.cwd, "PWD": command.cwd})
        if "HOME" in names and "HOME" in command.inherited:
            env["HOME"] = command.inherited["HOME"]
        given = command.env if target is None else _retarget(command.env, target, inner_port)
        return {**env, **given}


@contextlib.asynccontextmanager
async def _gateway_socket(
    relay_dir: str, target: tuple[str, int] | None, identity: Mapping[str, Any]
) -> AsyncIterator[bool]:
    """Tether's end of the relay, `gateway.sock` in `relay_dir`, while the context lasts; whether there
    is one (no gateway address, no socket)."""
    if target is None:
        yield False
        return
    socket_path = os.path.join(relay_dir, "gateway.sock")
    server = await sandbox_relay.serve_socket(socket_path, target[0], target[1])
    try:
        _own(socket_path, identity)
        yield True
    finally:
        server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 5)


def bwrap_argv(ready: Ready, layout: Layout, inner: Sequence[str]) -> list[str]:
    """The bwrap command line: namespaces, then mounts in order (a later mount covers an earlier one)."""
    argv = [ready.bwrap, *_namespaces("--unshare-pid")]
    argv += ["--disable-userns"] if ready.disable_userns else []
    argv += mounts(layout, ["--proc", "/proc"])
    return [*argv, "--chdir", layout.scratch, "--", *inner]


def zygote_argv(ready: Ready, layout: Layout, as_root: bool) -> list[str]:
    """A warm zygote's sandbox, `layout.scratch` its warm folder. The host's /proc, whole (bwrap's own
    would cover parts of it, and the kernel lets a fresh /proc be mounted only where a whole one is in
    view): the zygote then makes its own PID namespace and mounts its /proc over it before it imports
    anything (`isolate`), and each child does the same. User namespaces allowed (the zygote and each
    child make their own, and each child then disables them): the rest as a cold sandbox's, each child
    covering the folder but for its own."""
    argv = [ready.bwrap, *_namespaces(), *(["--uid", str(ZYGOTE_UID_AS_ROOT)] if as_root else [])]
    return [*argv, *mounts(layout, ["--bind", "/proc", "/proc"]), "--chdir", "/", "--"]


def _namespaces(*more: str) -> list[str]:
    argv = ["--unshare-user", "--unshare-ipc", *more, "--unshare-net", "--unshare-uts"]
    argv += ["--unshare-cgroup-try", "--hostname", "tether-sandbox"]
    return [*argv, "--cap-drop", "ALL", "--die-with-parent", "--new-session"]


def gateway_address(env: Mapping[str, str]) -> tuple[str, int] | None:
    """The gateway's host and port, from the variables the runner gives every agent."""
    url = env.get("TETHER_SERVER") or env.get("OPENAI_BASE_URL")
    if not url:
        return None
    parts = urlsplit(url)
    if parts.hostname is None:
        return None
    return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)


def _inner_port(target: tuple[str, int] | None) -> int:
    return target[1] if target is not None and target[1] >= 1024 else INNER_FALLBACK_PORT


def _retarget(env: Mapping[str, str], target: tuple[str, int], inner_port: int) -> dict[str, str]:
    """Every URL of the gateway in `env` rewritten to the relay's address on the sandbox's loopback."""
    host = f"[{target[0]}]" if ":" in target[0] else target[0]
    pattern = re.compile(rf"https?://{re.escape(host)}(:{target[1]})?(?=[/?#]|$)")
    inner = f"http://127.0.0.1:{inner_port}"
    return {key: pattern.sub(inner, value) for key, value in env.items()}


def _help(bwrap: str) -> str:
    try:
        done = subprocess.run([bwrap, "--help"], capture_output=True, timeout=CHECK_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.decode(errors="replace") + done.stderr.decode(errors="replace")


def _python_candidates() -> list[str]:
    found = [sys.executable, shutil.which("python3") or "", "/usr/bin/python3"]
    return [p for p in dict.fromkeys(found) if p and os.path.exists(p)]


def _prepare_relay_dir(folder: str, identity: Mapping[str, Any]) -> None:
    """The relay's code, and the empty file shown in place of hidden files."""
    shutil.copyfile(RELAY_SOURCE, os.path.join(folder, RELAY_SOURCE.name))
    Path(folder, EMPTY).touch(0o444)
    for path in (folder, os.path.join(folder, RELAY_SOURCE.name), os.path.join(folder, EMPTY)):
        _own(path, identity)


def _sweep_stage_dirs() -> None:
    """The stage folders a killed Tether left (always empty on the host: the mounts were in its staging
    processes' own namespaces), named after its pid: removed once no process has that pid."""
    for path in Path(tempfile.gettempdir()).glob(f"{STAGE_PREFIX}*-*"):
        pid = path.name.removeprefix(STAGE_PREFIX).split("-")[0]
        if pid.isdigit() and not Path("/proc", pid).exists():
            with contextlib.suppress(OSError):
                path.rmdir()


def unprivileged_identity() -> dict[str, Any]:
    """`nobody`'s uid and primary gid, and no supplementary group (as `agent_identity` gives)."""
    try:
        entry = pwd.getpwnam(UNPRIVILEGED_USER)
    except KeyError:
        return {"user": 65534, "group": 65534, "extra_groups": []}
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


def _own(path: str, identity: Mapping[str, Any]) -> None:
    """Give `path` to the agent's user, who runs bwrap (and must connect to the socket)."""
    if identity.get("user") is not None:
        os.chown(path, identity["user"], identity.get("group", -1))


def _mkdir(parent: str, name: str) -> str:
    path = os.path.join(parent, name)
    os.mkdir(path, 0o700)
    return path


# -- what to hide, and the kinds ----------------------------------------------------------------------


def project_hide(project_root: Path) -> list[Path]:
    """What of the project no agent sees, even when its code lives in the project: Tether's state
    (`.tether/`: store, secret, admin token, runs) and the history (`.git/`: earlier task files)."""
    return [project_root / ".tether", project_root / ".git"]


SandboxKind = Callable[[SandboxOptions], Sandbox]
SANDBOXES: Registry[SandboxKind] = Registry("sandbox")


def register(kind: str, make: SandboxKind) -> None:
    SANDBOXES.register(kind, make)


def open_sandbox(kind: str, options: SandboxOptions | None = None) -> Sandbox:
    return SANDBOXES.get(kind)(options or SandboxOptions())


register("none", lambda options: NoSandbox())
register("bwrap", BwrapSandbox)
