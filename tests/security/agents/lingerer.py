"""An agent that leaves a detached child behind (double fork, setsid, its own session: no process group
kill of the agent reaches it) holding the agent's OPENAI_API_KEY, which goes on calling after the agent's
attempt is over. What it does is chosen by its task's `plan`; everything it and its child get back is
written under the task's `dir`, which the test reads (and where the child's pid is, for the teardown).

- plan `retry`: attempt 1 makes one model call of its own, leaves the child and fails (exit 1), so the
  rollout is retried. The child waits until attempt 2 has started, then, with attempt 1's token, tries
  every way in: model calls on each base URL shape (its own, the rollout's without an attempt, attempt
  2's, the bare `/v1`), a reward event, rewards and spans through the store API (the bodies naming
  attempt 2), OTLP spans, a heartbeat. Attempt 2 waits until the child is done, then makes one call of
  its own and reports a reward of 0.25.
- plan `crash`: the same, but attempt 1 stays until the `tether rollout` running it is killed (it says
  when it is ready for that); attempt 2 is the one a resumed run (the same command again) opens.
- plan `finish`: the agent makes one call, leaves the child and succeeds. The child waits until an agent
  of a later run (plan `later`, whose task names the first rollout as `after`) says where its gateway is
  and which rollout it runs, then tries its finished rollout and that later rollout, the same ways.
"""

import json
import os
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

WAIT_S = 120.0  # how long one side waits for the other before giving up (the test then fails)
CHILD_SAYS = "sent by the leftover child"
FORGED_REWARD = 1000.0

task = json.loads(os.environ["TETHER_TASK"])
out = Path(task["dir"])
rollout_id, attempt = os.environ["TETHER_ROLLOUT_ID"], int(os.environ["TETHER_ATTEMPT"])
token = os.environ["OPENAI_API_KEY"]


def send(url: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    """POST (GET without a body) with this agent's token; the status and the body that came back."""
    data = None if body is None else json.dumps(body).encode()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    request = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return {"status": response.status, "body": response.read().decode(errors="replace")}
    except urllib.error.HTTPError as exc:
        return {"status": exc.code, "body": exc.read().decode(errors="replace")}
    except OSError as exc:
        return {"status": None, "body": f"{type(exc).__name__}: {exc}"}


def chat(base_url: str, content: str) -> dict[str, Any]:
    body = {"model": "policy", "messages": [{"role": "user", "content": content}], "max_tokens": 4}
    return send(base_url.rstrip("/") + "/chat/completions", body)


def wait_for(path: Path) -> str:
    deadline = time.monotonic() + WAIT_S
    while not path.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"gave up waiting for {path.name}")
        time.sleep(0.05)
    return path.read_text()  # whole: `put` renames it into place


def put(path: Path, text: str) -> None:
    """Write `text` so that a reader never sees it half-written."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    partial.replace(path)


def otlp(name: str, attributes: dict[str, Any]) -> dict[str, Any]:
    """One OTLP/JSON span, its attributes given as strings or integers."""

    def value(v: Any) -> dict[str, Any]:
        return {"intValue": str(v)} if isinstance(v, int) else {"stringValue": str(v)}

    span = {
        "traceId": os.urandom(16).hex(),
        "spanId": os.urandom(8).hex(),
        "name": name,
        "kind": 1,
        "startTimeUnixNano": str(time.time_ns()),
        "endTimeUnixNano": str(time.time_ns()),
        "attributes": [{"key": k, "value": value(v)} for k, v in attributes.items()],
    }
    return {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"spans": [span]}]}]}


def attacks(server: str, target: str, as_attempt: int) -> dict[str, dict[str, Any]]:
    """Every way the child tries to record something into rollout `target` (as attempt `as_attempt`)."""
    root = f"{server}/rollouts/{target}"
    says = f"{CHILD_SAYS} (attempt {attempt}'s token)"
    stored = {"rollout_id": target, "attempt": as_attempt}
    span = {**stored, "name": says, "start_time": time.time(), "origin": "gateway"}
    named = {"tether.rollout_id": target, "tether.attempt": as_attempt, "note": says}
    return {
        "the token's attempt's base URL": chat(f"{root}/attempts/{attempt}/v1", says),
        "the rollout's base URL": chat(f"{root}/v1", says),
        "the other attempt's base URL": chat(f"{root}/attempts/{as_attempt}/v1", says),
        "bare /v1": chat(f"{server}/v1", says),
        "reward event": send(root, {"value": FORGED_REWARD}),
        "store rewards": send(f"{server}/store/rewards", {"rewards": [{**stored, "value": FORGED_REWARD}]}),
        "store spans": send(f"{server}/store/spans", {"spans": [span]}),
        "otlp on the rollout": send(f"{root}/v1/traces", otlp(says, named)),
        "otlp bare": send(f"{server}/v1/traces", otlp(says, named)),
        "heartbeat": send(f"{server}/store/rollouts/{target}/heartbeat", {"attempt": as_attempt}),
    }


def leave_child() -> None:
    """Double fork into a new session: the grandchild runs `child()`, owned by no one Tether knows."""
    pid_file = out / f"{rollout_id}.child.pid"
    pid = os.fork()
    if pid:
        os.waitpid(pid, 0)
        wait_for(pid_file)  # it runs, detached from the agent's pipes
        return
    os.setsid()
    if os.fork():
        os._exit(0)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.chdir(out)  # the agent's own working directory is removed when its attempt ends
    put(pid_file, str(os.getpid()))
    try:
        child()
    finally:
        os._exit(0)


def child() -> None:
    """Wait for the moment to strike, try everything, write down what came back."""
    if task["plan"] == "finish":
        later = json.loads(wait_for(out / "later-started"))
        report = {
            f"own rollout, {way}": result
            for way, result in attacks(later["server"], rollout_id, attempt + 1).items()
        }
        report.update(
            {
                f"later rollout, {way}": result
                for way, result in attacks(later["server"], later["rollout_id"], 1).items()
            }
        )
    else:  # `retry`, `crash`: while the next attempt of the same rollout runs
        server = wait_for(out / f"{rollout_id}.attempt-{attempt + 1}-started")
        report = attacks(server, rollout_id, attempt + 1)
    put(out / f"{rollout_id}.report.json", json.dumps(report))
    put(out / f"{rollout_id}.child-done", "")


def own_call(content: str) -> None:
    result = chat(os.environ["OPENAI_BASE_URL"], content)
    if result["status"] != 200:
        raise SystemExit(f"the agent's own call failed: {result}")


def wait_to_be_orphaned() -> None:
    """Until the Tether that runs this agent is gone (killed); then there is no one to answer to."""
    parent = os.getppid()
    put(out / f"{rollout_id}.agent.pid", str(os.getpid()))
    put(out / f"{rollout_id}.ready", "")
    deadline = time.monotonic() + WAIT_S
    while os.getppid() == parent and time.monotonic() < deadline:
        time.sleep(0.05)
    os._exit(0)


if task["plan"] == "later":
    put(out / "later-started", json.dumps({"server": os.environ["TETHER_SERVER"], "rollout_id": rollout_id}))
    wait_for(out / f"{task['after']}.child-done")
    own_call("the later run's own call")
    print("done")
elif attempt >= 2:  # `retry`, `crash`: the rollout's next attempt, while the child of attempt 1 strikes
    put(out / f"{rollout_id}.attempt-{attempt}-started", os.environ["TETHER_SERVER"])
    wait_for(out / f"{rollout_id}.child-done")
    own_call(f"attempt {attempt}'s own call")
    reward = send(os.environ["TETHER_URL"], {"value": 0.25})
    if reward["status"] != 200:
        raise SystemExit(f"the agent's own reward was refused: {reward}")
    print("done")
else:
    own_call(f"attempt {attempt}'s own call")
    leave_child()
    if task["plan"] == "crash":
        wait_to_be_orphaned()
    if task["plan"] == "retry":
        print("attempt 1 fails on purpose", file=sys.stderr)
        sys.exit(1)
    print("done")
