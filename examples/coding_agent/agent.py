"""A coding agent in the manner of mini-SWE-agent. It is an ordinary OpenAI-client script: nothing here
knows Tether.

The model answers with one shell command per turn, in a ```bash block; this script runs it with bash in
the task's working copy and shows the model its exit status and output (truncated), until the model
replies with the command `submit` or the turns run out. The working copy is the buggy library of the task
(its `repo` archive: the library without its tests and without `.git`), unpacked into the current
directory. The last line printed is the result: {"patch": a unified diff of the working copy against the
library as it was given, "submitted": bool, "turns": N}, which the evaluator (reward.py) applies to the
original working copy before it runs the hidden tests.

    OPENAI_BASE_URL=... OPENAI_API_KEY=... python agent.py --task task.json   # or the task in TETHER_TASK

Each command runs in a new shell (`cd` does not last), in its own process group, which is killed when
the command ends or after --command-timeout seconds; git, pip, curl and wget are refused (there is no
repository, and nothing to install). The commands get a plain environment: no endpoint or key.
"""

from __future__ import annotations

import argparse
import base64
import difflib
import io
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openai import OpenAI

SYSTEM = """You are a software engineer fixing a bug in a Python library, in a Linux shell.
Every reply has a short THOUGHT and then exactly one shell command in a ```bash block, like this:

THOUGHT: I will look at the function that the failing test exercises.

```bash
grep -rn "def function_name(" .
```

You will see the command's output. Each command runs in a new shell in the library's folder (cd does not
last). Edit files with sed or python3. When the bug is fixed, reply with the command `submit`."""

INSTANCE = """<issue>
{issue}
</issue>

The library is in the current folder ({name}); its tests are not. Find the bug in the library's source
and fix it with as small a change as you can, then submit."""

FORMAT_ERROR = """Your reply must contain exactly one ```bash block with one command (found {count}).
Reply with a THOUGHT and one command, or with `submit` when you are done."""

BLOCK = re.compile(r"```(?:bash|sh|shell)?[ \t]*\n(.*?)```", re.DOTALL)
REFUSED = re.compile(r"(?:^|[\s;&|(`])(git|pip|pip3|curl|wget)(?=\s|$)")
OUTPUT_LIMIT = 2000  # characters of a command's output shown to the model: the head and the tail
READ_CHUNK = 65536
REFUSAL = "git, pip, curl and wget are not available here"


@dataclass
class Output:
    """A command's output as the model sees it: the first and last OUTPUT_LIMIT/2 characters."""

    head: bytearray = field(default_factory=bytearray)
    tail: bytearray = field(default_factory=bytearray)
    total: int = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = OUTPUT_LIMIT // 2 - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        self.tail = (self.tail + chunk)[-(OUTPUT_LIMIT // 2) :]

    def text(self) -> str:
        shown = len(self.head) + len(self.tail)
        middle = f"\n[... {self.total - shown} characters elided ...]\n" if self.total > shown else ""
        return self.head.decode(errors="replace") + middle + self.tail.decode(errors="replace")


def command_env(workdir: Path) -> dict[str, str]:
    """What a command sees: a PATH that starts with this Python's folder, and no endpoint, key or task."""
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", os.defpath)])
    home = os.environ.get("HOME", str(workdir))
    return {
        "PATH": path,
        "HOME": home,
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "PAGER": "cat",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def run_command(command: str, workdir: Path, timeout_s: float) -> str:
    """Run `command` with bash in `workdir`; its exit status and output, as the model is shown them."""
    if REFUSED.search(command):
        return f"<returncode>127</returncode>\n<output>\n{REFUSAL}\n</output>"
    process = subprocess.Popen(
        ["bash", "-c", command],
        cwd=workdir,
        env=command_env(workdir),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    output = Output()
    reader = threading.Thread(target=_read, args=(process.stdout, output), daemon=True)
    reader.start()
    try:
        code: int | str = process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        code = f"killed after {timeout_s:g} s"
    finally:
        _kill_group(process.pid)
        process.wait()
        reader.join(1.0)
    return f"<returncode>{code}</returncode>\n<output>\n{output.text()}\n</output>"


def _read(stream: Any, output: Output) -> None:
    while chunk := stream.read1(READ_CHUNK):
        output.add(chunk)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# -- the working copy -----------------------------------------------------------------------------------


def unpack(archive: str, root: Path) -> dict[str, bytes]:
    """The task's files (base64 of a .tar.gz) written under `root`; returns them by path."""
    files: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(archive)), mode="r:gz") as tar:
        for member in tar.getmembers():
            path = Path(member.name)
            if not member.isfile() or path.is_absolute() or ".." in path.parts:
                continue
            handle = tar.extractfile(member)
            assert handle is not None
            files[path.as_posix()] = handle.read()
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return files


def current_files(root: Path) -> dict[str, bytes]:
    """The working copy's regular files now (no caches, no links)."""
    found = {}
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(
            d for d in dirs if d != "__pycache__" and not os.path.islink(os.path.join(folder, d))
        )
        for name in names:
            path = os.path.join(folder, name)
            if not name.endswith(".pyc") and os.path.isfile(path) and not os.path.islink(path):
                found[Path(path).relative_to(root).as_posix()] = Path(path).read_bytes()
    return found


def diff(before: dict[str, bytes], after: dict[str, bytes]) -> str:
    """A unified diff (`--- a/PATH`, `+++ b/PATH`, /dev/null for a created or deleted file)."""
    pieces = []
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        lines = difflib.unified_diff(
            _lines(old),
            _lines(new),
            "/dev/null" if old is None else f"a/{path}",
            "/dev/null" if new is None else f"b/{path}",
        )
        pieces.append(
            "".join(
                line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines
            )
        )
    return "".join(pieces)


def _lines(data: bytes | None) -> list[str]:
    """Lines with their "\\n", split on "\\n" only (as the evaluator reads the diff back)."""
    if data is None:
        return []
    lines = data.decode(errors="replace").split("\n")
    return [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])


# -- the loop -------------------------------------------------------------------------------------------


@dataclass
class Settings:
    model: str
    max_turns: int
    max_tokens: int
    temperature: float
    command_timeout_s: float


def solve(task: dict[str, Any], settings: Settings) -> dict[str, Any]:
    repo = task["repo"]
    workdir = Path.cwd() / repo["name"]
    before = unpack(repo["archive"], workdir)
    client = OpenAI(max_retries=2)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": INSTANCE.format(issue=task["issue"], name=repo["name"])},
    ]
    submitted, turns = False, 0
    while turns < settings.max_turns and not submitted:
        turns += 1
        reply = client.chat.completions.create(
            model=settings.model,
            messages=messages,  # type: ignore[arg-type]
            max_tokens=settings.max_tokens,
            temperature=settings.temperature,
        )
        text = reply.choices[0].message.content or ""
        messages.append({"role": "assistant", "content": text})
        commands = BLOCK.findall(text)
        if len(commands) != 1:
            messages.append({"role": "user", "content": FORMAT_ERROR.format(count=len(commands))})
            continue
        command = commands[0].strip()
        if command == "submit":
            submitted = True
            continue
        print(f"$ {command}", file=sys.stderr, flush=True)
        messages.append(
            {"role": "user", "content": run_command(command, workdir, settings.command_timeout_s)}
        )
    return {"patch": diff(before, current_files(workdir)), "submitted": submitted, "turns": turns}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--task", type=Path, help="a task as JSON (default: TETHER_TASK)")
    parser.add_argument("--model", default=os.environ.get("OPENAI_MODEL", "policy"))
    parser.add_argument("--max-turns", type=int, default=8, help="model calls at most")
    parser.add_argument("--max-tokens", type=int, default=256, help="tokens per reply")
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--command-timeout", type=float, default=30.0, help="seconds per command")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    task = json.loads(args.task.read_text() if args.task else os.environ.get("TETHER_TASK") or "{}")
    if "repo" not in task or "issue" not in task:
        raise SystemExit("give a task with 'issue' and 'repo' (--task FILE, or TETHER_TASK)")
    settings = Settings(args.model, args.max_turns, args.max_tokens, args.temperature, args.command_timeout)
    print(json.dumps(solve(task, settings)))


if __name__ == "__main__":
    main()
