"""`tether serve --canary SHARE --watch DIR` end to end, with real processes (the built-in engine on
tiny-random): a version `tether train --from-sessions` writes is found, served to a share of new
sessions, promoted on the rewards posted later, kept across a kill -9 of the server; the next version is
trained on from the incumbent, rolled back, and the one after that is not built on it.

The simulated users here score by arm (they like v1 and dislike v2): what is under test is the canary's
mechanics. examples/deployment measures whether trained versions are better."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import httpx
import openai

from tests.cli.test_serve import Served, tether, tether_serve
from tests.experiment.test_from_sessions import run_records
from tether.cli.main import main
from tether.store.sqlite import SQLiteStore

RUN = "shop"


def flags(project: Path) -> tuple[str, ...]:
    policies = project / ".tether" / "runs" / f"from-{RUN}" / "policies"
    return (
        *("--model", "tiny-random", "--no-session", "--sessions-run", RUN, "--canary", "50%"),
        *("--watch", str(policies), "--canary-min-sessions", "3", "--canary-max-sessions", "40"),
        *("--canary-interval", "0.1"),
    )


def key(project: Path, name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {(project / '.tether' / name).read_text().strip()}"}


def open_and_call(served: Served, project: Path, name: str) -> dict[str, Any]:
    """Session NAME opened and one call made in it: the open answer, with the call's policy version."""
    opened = httpx.post(
        f"{served.url}/sessions/open", json={"session": name}, headers=key(project, "deploy_key")
    ).json()
    llm = openai.OpenAI(base_url=opened["base_url"], api_key=opened["api_key"], max_retries=0)
    llm.chat.completions.create(model="policy", messages=[{"role": "user", "content": name}], max_tokens=4)
    return {**opened, "versions": call_versions(project, opened["rollout_id"])}


def call_versions(project: Path, rollout_id: str) -> list[tuple[str, int]]:
    store = SQLiteStore(project / ".tether" / "store.db")
    try:
        spans = store.query_spans(rollout_id=rollout_id)
    finally:
        store.close()
    return [
        (s.attributes["upstream"], s.attributes["policy_version"])
        for s in spans
        if "upstream" in s.attributes
    ]


def reward(served: Served, project: Path, name: str, thumbs: str) -> None:
    httpx.post(f"{served.url}/sessions/{name}/end", headers=key(project, "deploy_key")).raise_for_status()
    httpx.post(
        f"{served.url}/sessions/{name}/rewards", json={"thumbs": thumbs}, headers=key(project, "reward_key")
    ).raise_for_status()


def decisions(served: Served, project: Path) -> list[dict[str, Any]]:
    found = httpx.get(f"{served.url}/ui/api/canaries", headers=key(project, "admin_token")).json()
    return found[0]["decisions"][::-1] if found else []  # oldest first


def wait_for(served: Served, project: Path, event: str, count: int = 1) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        seen = decisions(served, project)
        if sum(d["event"] == event for d in seen) >= count:
            return seen
        time.sleep(0.1)
    raise AssertionError(f"no {event!r} decision: {decisions(served, project)}")


def train(project: Path) -> None:
    argv = ["train", "--from-sessions", RUN, "--model", "tiny-random", "--project-dir", str(project)]
    assert main([*argv, "--steps", "1"]) == 0


def split(served: Served, project: Path, prefix: str, each: int) -> dict[str, dict[str, Any]]:
    """Sessions opened under new names until each arm has `each`: name -> open answer."""
    opened: dict[str, dict[str, Any]] = {}
    for i in range(200):
        answer = open_and_call(served, project, f"{prefix}-{i}")
        opened[f"{prefix}-{i}"] = answer
        arms = [a["arm"] for a in opened.values()]
        if min(arms.count("canary"), arms.count("incumbent")) >= each:
            return opened
    raise AssertionError("the canary got no share of 200 sessions")


def test_a_version_is_tried_promoted_kept_across_kill_9_then_the_next_rolled_back(tmp_path: Path) -> None:
    project = tmp_path
    with tether_serve(project, *flags(project)) as served:  # nothing to try yet: every session the base's
        for i in range(6):
            answer = open_and_call(served, project, f"first-{i}")
            assert answer["arm"] == "incumbent" and "canary" not in answer
            assert answer["versions"] == [("policy", 0)]
            reward(served, project, f"first-{i}", "up" if i % 2 else "down")
        assert decisions(served, project) == []
    train(project)  # v1

    with tether_serve(project, *flags(project)) as served:
        started = wait_for(served, project, "started")
        assert started[-1]["canary"] == 1 and started[-1]["incumbent"] == 0
        opened = split(served, project, "try1", each=3)
        for answer in opened.values():  # the canary's sessions call v1 through its own route
            assert answer["canary"] == 1
            assert answer["versions"] == ([("canary", 1)] if answer["arm"] == "canary" else [("policy", 0)])
        served.process.send_signal(signal.SIGKILL)  # mid-canary, rewards not yet posted
        served.process.wait(timeout=30)

    with tether_serve(project, *flags(project)) as served:  # restarted: still trying v1, same arms
        for name, answer in opened.items():
            again = open_and_call(served, project, name)
            assert (again["arm"], again["api_key"]) == (answer["arm"], answer["api_key"])
            reward(served, project, name, "up" if answer["arm"] == "canary" else "down")
        seen = wait_for(served, project, "promoted")
        promoted = seen[-1]
        assert (promoted["incumbent"], promoted["canary"]) == (1, None)
        assert promoted["comparison"]["canary_mean"] == 1.0 and promoted["comparison"]["low"] > 0
        after = open_and_call(served, project, "after-promotion")
        assert after["arm"] == "incumbent" and after["versions"] == [("policy", 1)]
        served.process.send_signal(signal.SIGKILL)
        served.process.wait(timeout=30)

    with tether_serve(project, *flags(project)) as served:  # v1 is what serves after the restart
        assert open_and_call(served, project, "after-restart")["versions"] == [("policy", 1)]
        for name in ("after-promotion", "after-restart"):
            reward(served, project, name, "up")
    train(project)  # v2, trained on from v1
    assert run_records(project, f"from-{RUN}")[-1]["base_version"] == 1

    with tether_serve(project, *flags(project)) as served:
        wait_for(served, project, "started", count=2)
        opened = split(served, project, "try2", each=4)
        still_open = next(n for n, a in opened.items() if a["arm"] == "canary")
        for name, answer in opened.items():
            if name != still_open:
                reward(served, project, name, "down" if answer["arm"] == "canary" else "up")
        rolled = wait_for(served, project, "rolled back")[-1]
        assert (rolled["incumbent"], rolled["canary"]) == (1, None) and rolled["comparison"]["high"] < 0
        # a session the rolled-back canary served goes on with the incumbent
        llm = openai.OpenAI(base_url=opened[still_open]["base_url"], api_key=opened[still_open]["api_key"])
        llm.chat.completions.create(
            model="policy", messages=[{"role": "user", "content": "hi"}], max_tokens=4
        )
        assert call_versions(project, opened[still_open]["rollout_id"]) == [("canary", 2), ("policy", 1)]
    train(project)  # v3: from v1, the incumbent, not from the rolled-back v2
    last = run_records(project, f"from-{RUN}")[-1]
    assert (last["version"], last["base_version"]) == (3, 1)


def test_a_canary_without_its_folder_a_bad_share_or_another_engine_is_one_line(tmp_path: Path) -> None:
    for argv, says in (
        (["--canary", "10%"], "--canary needs --watch DIR"),
        (["--watch", "policies"], "--watch is the --canary's folder"),
        (["--canary", "150%"], "a share is between 0 and 1"),
        (["--canary", "some"], "a share is a percentage or a fraction"),
        (["--canary", "0.1", "--watch", "p", "--upstream", "http://127.0.0.1:9/v1"], "built-in engine"),
        (["--canary", "0.1", "--watch", "p", "--canary-min-sessions", "1"], "at least 2 rewarded sessions"),
    ):
        done = tether("serve", "--model", "tiny-random", "--project-dir", str(tmp_path), *argv, cwd=tmp_path)
        assert done.returncode != 0 and says in done.stderr, (argv, done.stderr)
        assert "Traceback" not in done.stderr


def test_an_incumbent_whose_folder_is_gone_is_one_line_naming_it(tmp_path: Path) -> None:
    gone = tmp_path / "policies" / "v3"
    store = SQLiteStore(tmp_path / ".tether" / "store.db")
    state = {"incumbent": {"version": 3, "path": str(gone), "started": None}, "canary": None, "seen": 3}
    store.put_resource("canary:sessions", "canary", {"event": "promoted", "state": state})
    store.close()
    argv = ["--canary", "10%", "--watch", str(gone.parent)]
    done = tether("serve", "--model", "tiny-random", "--project-dir", str(tmp_path), *argv, cwd=tmp_path)
    assert (
        done.returncode != 0 and "the deployment's incumbent v3" in done.stderr and str(gone) in done.stderr
    )
    assert "Traceback" not in done.stderr
