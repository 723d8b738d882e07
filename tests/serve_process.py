"""`tether serve` as a real subprocess, its output going to files so that tests can read all of it."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

STARTUP_TIMEOUT_S = 60.0


@dataclass
class ServeProcess:
    process: subprocess.Popen[bytes]
    project: Path
    url: str
    base_url: str  # the session rollout's, when one was opened
    api_key: str
    stdout: Path
    stderr: Path

    @property
    def admin_token(self) -> str:
        return (self.project / ".tether" / "admin_token").read_text().strip()

    def output(self) -> str:
        return self.stdout.read_text(errors="replace") + self.stderr.read_text(errors="replace")

    def kill9(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)


def _parse(stdout: str) -> tuple[str, dict[str, str]]:
    url, exports = "", {}
    for line in stdout.splitlines():
        if line.startswith("Tether gateway on "):
            url = line.split()[3]
        if line.startswith("export "):
            key, _, value = line.removeprefix("export ").strip().partition("=")
            exports[key] = value
    return url, exports


@contextmanager
def serve_process(project: Path, *args: str, logs: Path | None = None) -> Iterator[ServeProcess]:
    """Start `tether serve --port 0` on `project`; yield once it printed "ready"; terminate it after."""
    logs = logs or project
    logs.mkdir(parents=True, exist_ok=True)
    count = len(list(logs.glob("serve-*.out")))
    stdout, stderr = logs / f"serve-{count}.out", logs / f"serve-{count}.err"
    command = [sys.executable, "-m", "tether.cli.main", "serve", "--port", "0", "--project-dir", str(project)]
    with stdout.open("wb") as out, stderr.open("wb") as err:
        process = subprocess.Popen([*command, *args], stdout=out, stderr=err)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while "ready\n" not in stdout.read_text(errors="replace"):
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    "tether serve did not start:\n" + stdout.read_text() + stderr.read_text()
                )
            time.sleep(0.05)
        url, exports = _parse(stdout.read_text())
        yield ServeProcess(
            process,
            project,
            url,
            exports.get("OPENAI_BASE_URL", ""),
            exports.get("OPENAI_API_KEY", ""),
            stdout,
            stderr,
        )
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=30)
