"""How an unmodified agent is launched: as a command (any language) or as a Python callable."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import shlex
import signal
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

OUTPUT_LIMIT_BYTES = 64 * 1024
KILL_GRACE_S = 2.0


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


def _last_line(text: str) -> str | None:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else None


class CommandAgent:
    """Runs a command per rollout. Task fields fill `{placeholders}` in the template, one argument each."""

    def __init__(self, template: str, cwd: str | None = None, env: Mapping[str, str] | None = None) -> None:
        try:
            self.argv_template = shlex.split(template)
        except ValueError as exc:
            raise ValueError(f"cannot parse the agent command {template!r}: {exc}") from None
        if not self.argv_template:
            raise ValueError("the agent command is empty")
        self.template = template
        self.cwd = cwd
        self.env = dict(env or {})

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
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                cwd=self.cwd,
                env={**os.environ, **self.env, **env},
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,  # its own process group, so a timeout kills its children too
            )
        except OSError as exc:
            return AgentResult(None, None, error=f"cannot start {argv[0]!r}: {exc.strerror or exc}")
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
        stdout, stderr = out.text(), err.text()
        code = process.returncode
        error = None
        if timed_out:
            error = f"timed out after {timeout_s:g}s; process group killed"
        elif code != 0:
            tail = _last_line(stderr) or "no stderr"
            error = f"agent {_exit_reason(code)}: {tail}"
        return AgentResult(_last_line(stdout), code, timed_out, error, stdout, stderr)


def _exit_reason(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


async def _kill_group(process: asyncio.subprocess.Process) -> None:
    for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, KILL_GRACE_S)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            await asyncio.wait_for(process.wait(), wait)
            return
        except TimeoutError:
            continue


AgentFunction = Callable[[dict[str, Any], LLM], Any] | Callable[[dict[str, Any], LLM], Awaitable[Any]]


class CallableAgent:
    """A Python function `(task, llm) -> output`, sync or async. Sync functions run in a thread."""

    def __init__(self, function: AgentFunction) -> None:
        self.function = function

    async def run(
        self, task: dict[str, Any], env: Mapping[str, str], llm: LLM, timeout_s: float
    ) -> AgentResult:
        try:
            if inspect.iscoroutinefunction(self.function):
                result = await asyncio.wait_for(self.function(task, llm), timeout_s)
            else:
                # A sync function cannot be killed: on timeout it is abandoned, still running in its thread.
                result = await asyncio.wait_for(asyncio.to_thread(self.function, task, llm), timeout_s)
        except TimeoutError:
            return AgentResult(None, None, timed_out=True, error=f"timed out after {timeout_s:g}s")
        except Exception as exc:  # the agent's own failure, recorded on the rollout
            return AgentResult(None, None, error=f"agent raised {type(exc).__name__}: {exc}")
        return AgentResult(None if result is None else str(result))
