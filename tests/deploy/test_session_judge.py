"""`tether serve --judge-sessions RUBRIC.md`: a judge scores the closed sessions nobody rated, in the
background, with a real server (tiny-random) and a judge endpoint on loopback that answers by what it
is shown."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import openai

from tests.cli.test_serve import tether, tether_serve
from tests.rewards.test_judge import judge_server
from tether.contracts import JUDGE_SPAN
from tether.store.sqlite import SQLiteStore


def verdict(request: dict[str, Any]) -> str:
    shown = str(request["messages"][1]["content"])
    return "I cannot tell." if "unjudgeable" in shown else "It answered.\nSCORE: 0.75"


def test_unrated_closed_sessions_are_judged_once_rated_and_open_ones_never(tmp_path: Path) -> None:
    rubric = tmp_path / "rubric.md"
    rubric.write_text("Score 1 for a helpful answer.")
    with judge_server(verdict) as (judge_url, asked):
        flags = ("--model", "tiny-random", "--no-session", "--judge-sessions", str(rubric))
        flags += ("--judge-url", judge_url, "--judge-after", "0", "--judge-interval", "0.1")
        with tether_serve(tmp_path, *flags) as served:
            keys = {
                n: {"Authorization": f"Bearer {(tmp_path / '.tether' / n).read_text().strip()}"}
                for n in ("deploy_key", "reward_key")
            }
            ids = {}
            for name in ("rated", "unrated", "unjudgeable", "still-open"):
                opened = httpx.post(
                    f"{served.url}/sessions/open",
                    json={"session": name, "input": {"q": name}},
                    headers=keys["deploy_key"],
                ).json()
                llm = openai.OpenAI(base_url=opened["base_url"], api_key=opened["api_key"], max_retries=0)
                llm.chat.completions.create(
                    model="policy", messages=[{"role": "user", "content": name}], max_tokens=4
                )
                ids[name] = opened["rollout_id"]
            httpx.post(
                f"{served.url}/sessions/rated/rewards", json={"thumbs": "down"}, headers=keys["reward_key"]
            )
            for name in ("rated", "unrated", "unjudgeable"):
                httpx.post(f"{served.url}/sessions/{name}/end", headers=keys["deploy_key"]).raise_for_status()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and len(asked) < 4:  # unrated once, unjudgeable 1 + 2 retries
                time.sleep(0.1)
            time.sleep(1.0)  # ten more looks: nothing is asked again
    assert len(asked) == 4
    store = SQLiteStore(tmp_path / ".tether" / "store.db")
    try:
        rewards = {
            name: [(r.name, r.value, r.source) for r in store.query_rewards(i)] for name, i in ids.items()
        }
        judged = {
            name: [s.status for s in store.query_spans(rollout_id=i) if s.name == JUDGE_SPAN]
            for name, i in ids.items()
        }
    finally:
        store.close()
    assert rewards == {
        "rated": [("feedback", 0.0, "later:reward-key")],
        "unrated": [("judge", 0.75, "later:judge")],
        "unjudgeable": [],
        "still-open": [],
    }
    assert judged == {"rated": [], "unrated": ["ok"], "unjudgeable": ["error"] * 3, "still-open": []}


def test_judging_sessions_without_an_endpoint_or_a_rubric_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "rubric.md").write_text("Score it.")
    for argv, says in (
        (["--judge-sessions", "rubric.md"], "--judge-sessions needs --judge-url"),
        (["--judge-sessions", "none.md", "--judge-url", "http://127.0.0.1:9/v1"], "no rubric file"),
    ):
        done = tether("serve", "--model", "tiny-random", "--project-dir", str(tmp_path), *argv, cwd=tmp_path)
        assert done.returncode != 0 and says in done.stderr, (argv, done.stderr)
        assert "Traceback" not in done.stderr
