"""`tether serve` as a user runs it: a real process, the openai client as the agent, `kill -9`."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest

from tests.gateway.fake_upstream import TOKEN_IDS, Behaviour, create_fake_upstream
from tests.helpers import serve_app
from tether.store import SQLiteStore

STARTUP_LINES = 50


@dataclass
class Served:
    process: subprocess.Popen[str]
    url: str
    base_url: str
    api_key: str
    output: list[str]


def tether(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether.cli.main", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


@contextmanager
def tether_serve(project: Path, *args: str) -> Iterator[Served]:
    command = [
        sys.executable,
        "-m",
        "tether.cli.main",
        "serve",
        "--port",
        "0",
        "--project-dir",
        str(project),
        *args,
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output: list[str] = []
    exports: dict[str, str] = {}
    url = ""
    assert process.stdout is not None
    for line in process.stdout:
        output.append(line)
        if line.startswith("export "):
            key, _, value = line.removeprefix("export ").strip().partition("=")
            exports[key] = value
        if line.startswith("Tether gateway on "):
            url = line.split()[3]
        if line.strip() == "ready" or len(output) > STARTUP_LINES:
            break
    if process.poll() is not None or output[-1].strip() != "ready":
        process.kill()
        raise AssertionError("tether serve did not start:\n" + "".join(output) + process.stdout.read())
    try:
        yield Served(
            process, url, exports.get("OPENAI_BASE_URL", ""), exports.get("OPENAI_API_KEY", ""), output
        )
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=30)


@pytest.fixture
def upstream() -> Iterator[str]:
    with serve_app(create_fake_upstream(Behaviour())) as url:
        yield url + "/v1"


def test_kill_9_loses_no_answered_call(tmp_path: Path, upstream: str) -> None:
    with tether_serve(tmp_path, "--upstream", upstream, "--upstream-token-ids") as served:
        llm = openai.OpenAI(base_url=served.base_url, api_key=served.api_key, max_retries=0)
        answered = 0
        for i in range(25):
            llm.chat.completions.create(model="policy", messages=[{"role": "user", "content": f"call {i}"}])
            answered += 1
        served.process.send_signal(signal.SIGKILL)
        served.process.wait(timeout=30)

    db = tmp_path / ".tether" / "store.db"
    assert sqlite3.connect(db).execute("PRAGMA integrity_check").fetchone() == ("ok",)
    store = SQLiteStore(db)
    spans = store.query_spans()
    assert len(spans) == answered
    assert [s.attributes["request"]["messages"][0]["content"] for s in spans] == [
        f"call {i}" for i in range(25)
    ]
    assert all(s.attributes["choices"][0]["token_ids"] == TOKEN_IDS for s in spans)
    store.close()

    # After a restart the same session key still works, and the store kept everything.
    with tether_serve(tmp_path, "--upstream", upstream, "--no-session") as served:
        rollout_base = served.url + "/rollouts/" + spans[0].rollout_id + "/v1"
        llm = openai.OpenAI(base_url=rollout_base, api_key=llm.api_key, max_retries=0)
        llm.chat.completions.create(model="policy", messages=[{"role": "user", "content": "after restart"}])
    store = SQLiteStore(db)
    assert len(store.query_spans(rollout_id=spans[0].rollout_id)) == answered + 1
    store.close()


def test_store_command_shows_recorded_call(tmp_path: Path, upstream: str) -> None:
    with tether_serve(tmp_path, "--upstream", upstream, "--upstream-token-ids") as served:
        llm = openai.OpenAI(base_url=served.base_url, api_key=served.api_key, max_retries=0)
        llm.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hello"}])
        remote = tether(
            "store", "--url", served.url, "--project-dir", str(tmp_path), "rollouts", "--json", cwd=tmp_path
        )
        assert remote.returncode == 0, remote.stderr
        assert served.base_url.split("/rollouts/")[1].split("/")[0] in remote.stdout
    shown = tether("store", "show", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert str(TOKEN_IDS[0]) in shown.stdout and "policy version" in shown.stdout
    dumped = tether("store", "spans", cwd=tmp_path)
    assert '"token_ids":[504,3365,314,1777,30]' in dumped.stdout


def test_serve_reports_bad_arguments(tmp_path: Path) -> None:
    result = tether("serve", "--route", "nonsense", "--project-dir", str(tmp_path), cwd=tmp_path)
    assert result.returncode != 0 and "ALIAS=UPSTREAM" in result.stderr
    missing = tether("store", "rollouts", cwd=tmp_path)
    assert missing.returncode != 0 and "no store" in missing.stderr


def test_an_adapter_that_is_not_there_or_not_for_the_built_in_engine_is_refused(tmp_path: Path) -> None:
    missing = tether(
        "serve",
        "--model",
        "tiny-random",
        "--adapter",
        str(tmp_path / "nope"),
        "--project-dir",
        str(tmp_path),
        cwd=tmp_path,
    )
    assert missing.returncode != 0 and "no LoRA adapter there (no adapter_config.json)" in missing.stderr
    upstream = tether(
        "serve",
        "--upstream",
        "http://127.0.0.1:9/v1",
        "--adapter",
        str(tmp_path),
        "--project-dir",
        str(tmp_path),
        cwd=tmp_path,
    )
    assert upstream.returncode != 0 and "--adapter is loaded by the built-in engine" in upstream.stderr


def test_non_loopback_bind_warns(tmp_path: Path, upstream: str) -> None:
    with tether_serve(tmp_path, "--upstream", upstream, "--host", "0.0.0.0") as served:
        assert any("warning" in line for line in served.output)
    assert os.path.exists(tmp_path / ".tether" / "admin_token")


@pytest.mark.smollm2
def test_serve_smollm2_answers_and_records(tmp_path: Path) -> None:
    with tether_serve(tmp_path, "--model", "smollm2-135m") as served:
        llm = openai.OpenAI(base_url=served.base_url, api_key=served.api_key, max_retries=0, timeout=300)
        reply = llm.chat.completions.create(
            model="policy",
            messages=[{"role": "user", "content": "What is 2 + 3? Answer with a number."}],
            max_tokens=16,
            temperature=0,
        )
        text = reply.choices[0].message.content
        assert text and text.strip()
    store = SQLiteStore(tmp_path / ".tether" / "store.db")
    (span,) = store.query_spans()
    choice = span.attributes["choices"][0]
    assert choice["text"] == text
    assert len(choice["token_ids"]) == len(choice["logprobs"]) == reply.usage.completion_tokens
    assert all(lp <= 0 for lp in choice["logprobs"])
    assert span.attributes["policy_version"] == 0
    store.close()
    shown = tether("store", "show", cwd=tmp_path)
    assert "policy version" in shown.stdout and str(choice["token_ids"][0]) in shown.stdout


def test_kill_9_loses_no_session_and_no_later_reward(tmp_path: Path, upstream: str) -> None:
    def post(url: str, key_file: str, body: dict[str, object] | None = None) -> httpx.Response:
        key = (tmp_path / ".tether" / key_file).read_text().strip()
        return httpx.post(url, json=body or {}, headers={"Authorization": f"Bearer {key}"}, timeout=30)

    with tether_serve(tmp_path, "--upstream", upstream, "--no-session") as served:
        assert any("/sessions/open" in line for line in served.output)
        creds = post(f"{served.url}/sessions/open", "deploy_key", {"session": "chat-1"}).json()
        llm = openai.OpenAI(base_url=creds["base_url"], api_key=creds["api_key"], max_retries=0)
        llm.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hello"}])
        assert (
            post(f"{served.url}/sessions/chat-1/rewards", "reward_key", {"thumbs": "up"}).status_code == 200
        )
        served.process.send_signal(signal.SIGKILL)
        served.process.wait(timeout=30)

    with tether_serve(tmp_path, "--upstream", upstream, "--no-session") as served:
        again = post(f"{served.url}/sessions/open", "deploy_key", {"session": "chat-1"}).json()
        assert (again["rollout_id"], again["api_key"]) == (creds["rollout_id"], creds["api_key"])
        llm = openai.OpenAI(
            base_url=served.url + f"/rollouts/{creds['rollout_id']}/v1", api_key=creds["api_key"]
        )
        llm.chat.completions.create(model="policy", messages=[{"role": "user", "content": "after restart"}])
        later = post(
            f"{served.url}/sessions/chat-1/rewards", "reward_key", {"value": 0.5, "by": "nightly-judge"}
        )
        assert later.status_code == 200, later.text
        assert post(f"{served.url}/sessions/chat-1/end", "deploy_key").json()["status"] == "succeeded"
    store = SQLiteStore(tmp_path / ".tether" / "store.db")
    calls = store.query_spans(rollout_id=creds["rollout_id"])
    rewards = store.query_rewards(creds["rollout_id"])
    store.close()
    assert [s.attributes["request"]["messages"][0]["content"] for s in calls] == ["hello", "after restart"]
    assert [(r.value, r.source) for r in rewards] == [(1.0, "later:reward-key"), (0.5, "later:nightly-judge")]
