"""How an unmodified agent is launched: as a command (any language) or as a Python callable."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import pwd
import re
import shlex
import shutil
import signal
import string
import tempfile
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from tether.contracts import PROVIDER_ENV, SECRET_ENV, TASK_REFERENCE
from tether.runner.sandbox import BwrapSandbox, Command, Confined, NoSandbox, Sandbox, SandboxError
from tether.runner.warm import ChildPipes, Started, WarmStarts, ZygoteDied

OUTPUT_LIMIT_BYTES = 64 * 1024
KILL_GRACE_S = 2.0

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LLM:
    """What a Python agent needs to call the policy: an OpenAI-compatible endpoint and key."""

    base_url: str
    api_key: str
    model: str = "policy"


@dataclass
class AgentResult:
    output: str | None
    exit_code: int | None = 0
    timed_out: bool = False
    error: str | None = None
    stdout: str = ""
    stderr: str = ""
    # The runner failed under the agent (its warm interpreter died while it ran; its group was killed):
    # the attempt is the runner's loss, and the pool gives the rollout a new attempt (`Store.abandon`).
    runner_lost: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None and not self.timed_out


class Agent(Protocol):
    async def run(
        self, task: dict[str, Any], env: Mapping[str, str], llm: LLM, timeout_s: float
    ) -> AgentResult: ...


class _TailBuffer:
    """Keeps the last `limit` bytes of a stream, and says how much it dropped."""

    def __init__(self, limit: int = OUTPUT_LIMIT_BYTES) -> None:
        self.limit = limit
        self.data = bytearray()
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        self.data += chunk
        excess = len(self.data) - self.limit
        if excess > 0:
            del self.data[:excess]
            self.dropped += excess

    def text(self) -> str:
        prefix = f"[... {self.dropped} bytes dropped ...]\n" if self.dropped else ""
        return prefix + self.data.decode(errors="replace")


async def _pump(stream: asyncio.StreamReader | None, sink: _TailBuffer) -> None:
    if stream is None:
        return
    while chunk := await stream.read(65536):
        sink.add(chunk)


def last_line(text: str) -> str | None:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else None


# Lines a runtime prints after the error itself: Node's version banner, stack frames, a dump's braces.
_AFTER_THE_ERROR = re.compile(r"^(Node\.js v[\d.]+|at .*|[{}\[\](),]*|\w+: .*,)$")
_AN_ERROR = re.compile(r"\b\w*(Error|Exception)\b")


def error_line(stderr: str) -> str | None:
    """The line of an agent's stderr that says what went wrong: the exception ending its last Python
    traceback (libraries often log more after it: a tracer's retries, a shutdown notice); else its last
    line, unless that is what a runtime prints after the error (Node ends with its version, after the
    stack), then the last line naming an error or exception."""
    exception = _python_exception(stderr.splitlines())
    if exception is not None:
        return exception
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    if not lines or not _AFTER_THE_ERROR.match(lines[-1]):
        return lines[-1] if lines else None
    named = [line for line in lines if _AN_ERROR.search(line) and not _AFTER_THE_ERROR.match(line)]
    return named[-1] if named else lines[-1]


def _python_exception(lines: list[str]) -> str | None:
    """The `Type: message` line after the frames of the last traceback in `lines` (frames are indented)."""
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last):")]
    if not starts:
        return None
    after = (line.strip() for line in lines[starts[-1] + 1 :] if line.strip() and not line[0].isspace())
    return next(after, None)


class CommandAgent:
    """Runs a command per rollout. Task fields fill `{placeholders}` in the template, one argument each;
    a placeholder naming the task's `reference` (the evaluator's only) is refused here.

    The command is executed directly, never through a shell, so a task field is always one argument and
    cannot inject commands. A template that itself runs a shell (`sh -c '... {q}'`) hands task text to
    that shell: don't, unless the tasks are trusted.

    Each attempt starts in a fresh scratch directory of its own (removed afterwards) unless `cwd` names
    one; arguments of the template that name existing files relative to where Tether was started are made
    absolute, so `python agents/my_agent.py` works from any directory. The agent's environment keeps the
    caller's, minus Tether's own settings that name the project or carry its admin token or another
    secret. With `user`, the agent runs as that OS user, its primary group and no other group (Tether
    must run as root): the isolation boundary against an agent that reads files it was not given (see
    docs/security.md). Every agent runs as that same user: only a sandbox keeps agents from each other.
    With `sandbox` (`tether/runner/sandbox.py`, e.g. `BwrapSandbox` for `--sandbox bwrap`), each process
    is launched through it: the sandbox decides what it inherits, sees and reaches. With `warm`
    (`tether/runner/warm.py`, the CLI's default), a Python agent is forked from a warm interpreter that has
    its imports loaded, run as its cold start would be; in `BwrapSandbox` the zygote has a sandbox of its
    own and each child confines itself as bwrap confines a cold agent (`confine`), its scratch directory
    made in the warm folder, the only place the zygote sees it.
    """

    def __init__(
        self,
        template: str,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        user: str | None = None,
        sandbox: Sandbox | None = None,
        warm: WarmStarts | None = None,
    ) -> None:
        try:
            parts = shlex.split(template)
        except ValueError as exc:
            raise ValueError(f"cannot parse the agent command {template!r}: {exc}") from None
        if not parts:
            raise ValueError("the agent command is empty")
        self.argv_template = [_absolute_if_path(part) for part in parts]
        _refuse_reference_placeholders(self.argv_template)
        self.template = template
        self.cwd = cwd
        self.env = dict(env or {})
        self.user = user
        self.sandbox: Sandbox = sandbox or NoSandbox()
        # The user, group and extra_groups of create_subprocess_exec: uid, primary gid, no other group.
        self.identity: dict[str, Any] = agent_identity(user) if user else default_identity(self.sandbox)
        self.sandbox.check(self.identity)  # bad setup fails here, before any rollout
        self.warm = _warm_for(warm, self.sandbox, cwd)

    def close(self) -> None:
        """Stop the warm interpreters (they also end with Tether's process, whose pipe they read)."""
        if self.warm is not None:
            self.warm.close()

    def argv(self, task: dict[str, Any]) -> list[str]:
        fields = {key: value if isinstance(value, str) else str(value) for key, value in task.items()}
        try:
            return [part.format(**fields) for part in self.argv_template]
        except KeyError as exc:
            raise ValueError(
                f"the agent command uses {{{exc.args[0]}}}, which the task does not have "
                f"(task fields: {', '.join(sorted(task)) or 'none'})"
            ) from None
        except (IndexError, ValueError) as exc:
            raise ValueError(f"cannot fill the agent command {self.template!r}: {exc}") from None

    async def run(
        self, task: dict[str, Any], env: Mapping[str, str], llm: LLM, timeout_s: float
    ) -> AgentResult:
        try:
            argv = self.argv(task)
        except ValueError as exc:
            return AgentResult(None, None, error=str(exc))
        with self._workdir() as cwd:
            return await self._run(argv, cwd, env, timeout_s)

    @contextlib.contextmanager
    def _workdir(self) -> Iterator[str]:
        if self.cwd is not None:
            yield self.cwd
            return
        scratch = tempfile.mkdtemp(prefix="tether-agent-", dir=self._scratch_parent())
        try:
            if self.identity:
                shutil.chown(scratch, user=self.identity["user"], group=self.identity["group"])
            yield scratch
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _scratch_parent(self) -> str | None:
        """Where scratch directories are made: a sandboxed warm agent's in the warm folder."""
        if self.warm is None or not isinstance(self.sandbox, BwrapSandbox):
            return None
        return self.warm.sandbox_folder(self.identity)

    async def _run(self, argv: list[str], cwd: str, env: Mapping[str, str], timeout_s: float) -> AgentResult:
        inherited = agent_environment(os.environ)
        command = Command(argv, cwd, {**self.env, **env}, inherited, self.identity, scratch=self.cwd is None)
        try:
            if self.warm is not None:
                result = await self._run_warm(command, timeout_s)
                if result is not None:
                    return result
            async with self.sandbox.launch(command) as launch:
                return await self._spawn(launch, argv[0], timeout_s)
        except (SandboxError, OSError) as exc:
            return AgentResult(None, None, error=f"the sandbox could not start: {exc}")

    async def _run_warm(self, command: Command, timeout_s: float) -> AgentResult | None:
        """The agent forked from its warm interpreter; None when it must start cold instead."""
        if isinstance(self.sandbox, BwrapSandbox):
            folder = self._scratch_parent()
            assert folder is not None
            async with self.sandbox.confine(command, folder, self.env) as (launch, confined):
                return await self._spawn_warm(launch, confined.env, timeout_s, confined)
        async with self.sandbox.launch(command) as launch:
            return await self._spawn_warm(launch, {**command.inherited, **self.env}, timeout_s)

    async def _spawn_warm(
        self,
        command: Command,
        zygote_env: Mapping[str, str],
        timeout_s: float,
        confined: Confined | None = None,
    ) -> AgentResult | None:
        assert self.warm is not None
        pipes = ChildPipes()
        try:
            started = await self.warm.fork(command, zygote_env, pipes.child_fds, confined)
        except BaseException:
            pipes.close()
            raise
        finally:
            pipes.close_child_ends()
        if started is None:
            pipes.close()
            return None
        out, err = _TailBuffer(), _TailBuffer()
        try:
            stdout, stderr = await pipes.readers()
        except BaseException:  # cancelled before it was watched: it must not run on unwatched
            _signal_group(started.pid, signal.SIGKILL)
            started.close()
            raise
        pumps = asyncio.gather(_pump(stdout, out), _pump(stderr, err))
        timed_out, code, error, lost = False, None, None, False
        try:
            code = await asyncio.wait_for(started.wait(), timeout_s)
        except TimeoutError:
            timed_out = True
            code = await _kill_started(started)
        except ZygoteDied as exc:
            _signal_group(started.pid, signal.SIGKILL)
            error, lost = str(exc), True
        except asyncio.CancelledError:
            await _kill_started(started)
            raise
        finally:
            started.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(pumps, KILL_GRACE_S * 2)
        if code is not None:
            await self.warm.finished(started)
        result = _outcome(out, err, code, timed_out, timeout_s, error)
        result.runner_lost = lost
        return result

    async def _spawn(self, command: Command, program: str, timeout_s: float) -> AgentResult:
        try:
            process = await asyncio.create_subprocess_exec(
                *command.argv,
                cwd=command.cwd,
                env=command.env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,  # its own process group, so a timeout kills its children too
                pass_fds=command.pass_fds,
                **command.identity,
            )
        except OSError as exc:
            return AgentResult(None, None, error=f"cannot start {program!r}: {exc.strerror or exc}")
        except ValueError as exc:  # e.g. a NUL byte from a task field in an argument
            return AgentResult(None, None, error=f"cannot start the agent: {exc}")
        out, err = _TailBuffer(), _TailBuffer()
        pumps = asyncio.gather(_pump(process.stdout, out), _pump(process.stderr, err))
        timed_out = False
        try:
            await asyncio.wait_for(process.wait(), timeout_s)
        except TimeoutError:
            timed_out = True
            await _kill_group(process)
        except asyncio.CancelledError:
            await _kill_group(process)
            raise
        finally:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(pumps, KILL_GRACE_S * 2)
        return _outcome(out, err, process.returncode, timed_out, timeout_s)


def _outcome(
    out: _TailBuffer,
    err: _TailBuffer,
    code: int | None,
    timed_out: bool,
    timeout_s: float,
    error: str | None = None,
) -> AgentResult:
    stdout, stderr = out.text(), err.text()
    if timed_out:
        error = f"timed out after {timeout_s:g}s; process group killed"
    elif error is None and code != 0:
        tail = error_line(stderr) or "no stderr"
        error = f"agent {_exit_reason(code)}: {tail}"
    return AgentResult(last_line(stdout), code, timed_out, error, stdout, stderr)


# Tether's own settings, which name the project (and so its secret) or carry the admin token; every
# variable that carries one of the operator's secrets (the upstream's key, the store's password); and
# model providers' keys and endpoints, which would take the agent's calls past the gateway.
PRIVATE_VARIABLES = frozenset(
    {"TETHER_TOKEN", "TETHER_STORE", "TETHER_PROJECT_DIR", "TETHER_ADMIN_TOKEN", *SECRET_ENV, *PROVIDER_ENV}
)


def agent_environment(environ: Mapping[str, str]) -> dict[str, str]:
    return {key: value for key, value in environ.items() if key not in PRIVATE_VARIABLES}


def _placeholders(part: str) -> set[str]:
    """The task fields an argument of the template names (`{a}`, `{a[b]}` and `{a.b}` all name `a`)."""
    try:
        names = [name for _, name, _, _ in string.Formatter().parse(part) if name]
    except ValueError:  # a malformed template: `argv` says so, with the template
        return set()
    return {name.split(".")[0].split("[")[0] for name in names}


def _refuse_reference_placeholders(argv_template: list[str]) -> None:
    if any(TASK_REFERENCE in _placeholders(part) for part in argv_template):
        raise ValueError(
            f"the agent command uses {{{TASK_REFERENCE}}}: a task's {TASK_REFERENCE!r} is for the evaluator "
            "only and never reaches the agent (docs/security.md); pass the agent its other fields"
        )


SCRIPT_SUFFIXES = (".py", ".js", ".mjs", ".cjs", ".ts", ".sh")


def refuse_missing_script(agent: CommandAgent) -> None:
    """A script the command runs here (its first argument that is not an option) must exist: else every
    attempt would fail the same way, with a path in the agent's scratch directory that says nothing.
    (Agents run elsewhere, in a Job's image, name paths of that image: not checked.)"""
    argv, cwd = agent.argv_template, agent.cwd
    script = next((part for part in argv[1:] if not part.startswith("-")), None)
    if script is None or "{" in script or not script.endswith(SCRIPT_SUFFIXES):
        return
    where = cwd or os.getcwd()
    if not os.path.exists(os.path.join(where, script)):
        raise ValueError(
            f"the agent command runs {script}, which is not a file in {where}: give its path from "
            "there, or an absolute one" + ("" if cwd is None else " (--agent-cwd is where it runs)")
        )


def _absolute_if_path(part: str) -> str:
    if "{" in part or part.startswith("-") or os.path.isabs(part) or not os.path.exists(part):
        return part
    return os.path.abspath(part)


def agent_identity(user: str) -> dict[str, Any]:
    """Who an agent runs as: `user`'s uid and primary gid, and no supplementary group at all (root's gid 0
    among them, which `user=` alone would keep). A user whose primary group is 0 is refused; root itself
    is Tether's own user (`--agent-user root`: in the sandbox, agents that keep uid 0, as they would
    without one)."""
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise ValueError(f"--agent-user {user!r}: no such user on this machine") from None
    if os.geteuid() != 0:
        raise ValueError("--agent-user needs Tether to run as root (it starts agents as that user)")
    if entry.pw_uid == 0:
        return {}
    if entry.pw_gid == 0:
        raise ValueError(
            f"--agent-user {user!r}: its primary group is 0 (root's), which can read the project's "
            "secret: choose a user of its own group, e.g. nobody"
        )
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


def default_identity(sandbox: Sandbox) -> dict[str, Any]:
    """Whom an agent runs as when --agent-user names none: in bwrap as root, `nobody`; else Tether's user."""
    return sandbox.default_identity() if isinstance(sandbox, BwrapSandbox) else {}


def _warm_for(warm: WarmStarts | None, sandbox: Sandbox, cwd: str | None) -> WarmStarts | None:
    """The warm starts an agent may use: none in a sandbox that has no warm form, nor in bwrap with a
    working directory of the user's (a warm child sees only the scratch directories Tether makes)."""
    if warm is None or isinstance(sandbox, NoSandbox):
        return warm
    if not isinstance(sandbox, BwrapSandbox):
        log.warning("warm start: agents in this sandbox start cold (it has no warm form)")
        return None
    if cwd is not None:
        log.warning("warm start: sandboxed agents with --agent-cwd start cold (a warm one sees no other)")
        return None
    return warm


def _exit_reason(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


async def _kill_group(process: asyncio.subprocess.Process) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not _signal_group(process.pid, sig):
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), KILL_GRACE_S)
            return


def _signal_group(pid: int, sig: signal.Signals) -> bool:
    """Signal the process group `pid` leads; False when it is gone."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        return False
    return True


async def _kill_started(started: Started) -> int | None:
    """TERM, then KILL, a warm-started agent's group; its exit code once the zygote reports it."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not _signal_group(started.pid, sig):
            break
        try:
            return await asyncio.wait_for(started.wait(), KILL_GRACE_S)
        except TimeoutError:
            continue
        except ZygoteDied:
            _signal_group(started.pid, signal.SIGKILL)
            return None
    with contextlib.suppress(TimeoutError, ZygoteDied):
        return await asyncio.wait_for(started.wait(), KILL_GRACE_S)
    return None


AgentFunction = Callable[[dict[str, Any], LLM], Any] | Callable[[dict[str, Any], LLM], Awaitable[Any]]


class CallableAgent:
    """A Python function `(task, llm) -> output`, sync or async. Sync functions run in a thread."""

    def __init__(self, function: AgentFunction) -> None:
        self.function = function

    async def run(
        self, task: dict[str, Any], env: Mapping[str, str], llm: LLM, timeout_s: float
    ) -> AgentResult:
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for returns the result of a call that ends as
        # the worker is cancelled, and the cancel is lost (the worker then outlives the runner's stop()).
        try:
            async with asyncio.timeout(timeout_s):
                if inspect.iscoroutinefunction(self.function):
                    result = await self.function(task, llm)
                else:
                    # A sync function cannot be killed: on timeout it is abandoned, running in its thread.
                    result = await asyncio.to_thread(self.function, task, llm)
        except TimeoutError:
            return AgentResult(None, None, timed_out=True, error=f"timed out after {timeout_s:g}s")
        except Exception as exc:  # the agent's own failure, recorded on the rollout
            return AgentResult(None, None, error=f"agent raised {type(exc).__name__}: {exc}")
        return AgentResult(None if result is None else str(result))
