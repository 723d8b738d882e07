"""No password reaches Tether's command line inside a store URL, in any form libpq reads one: `tether
rollout --store` with the password as the URL's `password`, `sslpassword` or `passfile` parameter
(percent-encoded or not), or a libpq `password=` string, is refused before anything runs, in one line
naming the option and the fix, without repeating it. Nothing ran: no agent, no table in the database.
The agent is `tests/cli/agents/cmdline_probe_agent.py`, which reads its parent's (Tether's) command line
and every other under /proc; given as the fix says (PGPASSWORD), the run works against a real PostgreSQL
server and the agent finds the password nowhere."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gateway.fake_upstream import Behaviour, create_fake_upstream
from tests.helpers import serve_app
from tests.pg import Cluster, cluster
from tether.store import RolloutStatus
from tether.store.postgres import PostgresStore

PROBE = Path(__file__).parents[1] / "cli" / "agents" / "cmdline_probe_agent.py"
PASSWORD = f"pw-{secrets.token_hex(12)}"


@pytest.fixture(scope="module")
def pg() -> Iterator[Cluster]:
    with cluster() as running:
        yield running


@pytest.fixture
def upstream() -> Iterator[str]:
    with serve_app(create_fake_upstream(Behaviour())) as url:
        yield url + "/v1"


def tether_rollout(
    tmp_path: Path, upstream: str, store: str, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """`tether rollout --store STORE` of the probe on one task, as a user runs it."""
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "t0", "out": str(tmp_path / "found.json")}) + "\n")
    args = ["rollout", "--agent", f"{sys.executable} {PROBE}", "--tasks", str(tasks), "--agent-cold"]
    args += ["--sandbox", "none"]  # an ordinary child process: /proc in full view
    args += ["--upstream", upstream, "--project-dir", str(tmp_path / "project"), "--store", store]
    return subprocess.run(
        [sys.executable, "-m", "tether.cli.main", *args], env=env, capture_output=True, text=True, timeout=300
    )


def clean_env() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if not key.startswith(("PG", "TETHER_"))}


def tables_in(pg: Cluster, database: str) -> str:
    return pg.psql("SELECT string_agg(tablename, ',') FROM pg_tables WHERE schemaname = 'public'", database)


# Each way libpq takes a password in what `--store` names, with what the refusal says it found.
SMUGGLED = {
    "?password=": ("{url}?password={pw}", "a secret in its URL (its 'password' parameter)"),
    "?pass%77ord=": (
        "{url}?sslmode=disable&pass%77ord={pw}",
        "a secret in its URL (its 'password' parameter)",
    ),
    "?sslpassword=": (
        "{url}?sslmode=disable&sslpassword={pw}",
        "a secret in its URL (its 'sslpassword' parameter)",
    ),
    "?passfile=": ("{url}?passfile=/nonexistent/{pw}", "a secret in its URL (its 'passfile' parameter)"),
    "user:password@": ("{userinfo}", "a password in its URL"),
    "keyword=value": (
        "host=127.0.0.1 port={port} dbname={db} password={pw}",
        "its connection string (password=)",
    ),
}


@pytest.mark.parametrize("form", SMUGGLED)
def test_a_password_in_a_store_url_is_refused_before_anything_runs(
    form: str, pg: Cluster, tmp_path: Path, upstream: str
) -> None:
    url = pg.create_database()
    database = url.rsplit("/", 1)[1]
    template, found = SMUGGLED[form]
    userinfo = url.replace("tether@", f"tether:{PASSWORD}@")
    store = template.format(url=url, pw=PASSWORD, userinfo=userinfo, port=pg.port, db=database)

    done = tether_rollout(tmp_path, upstream, store, clean_env())

    probed = tmp_path / "found.json"  # what the agent found, had it run
    assert not probed.exists(), (
        f"the agent ran; the password in what it read: {PASSWORD in probed.read_text()}"
    )
    assert done.returncode != 0
    said = done.stderr.strip()
    assert said == said.splitlines()[-1], said  # one line
    assert said.startswith("tether rollout: --store has ") and f"{found}, where every process" in said
    assert "TETHER_STORE=URL" in said and "PGPASSWORD" in said
    assert PASSWORD not in done.stdout + done.stderr
    assert not (tmp_path / "project").exists()  # nothing was written anywhere
    assert tables_in(pg, database).strip() == ""


def test_a_password_given_as_the_fix_says_reaches_no_command_line(
    pg: Cluster, tmp_path: Path, upstream: str
) -> None:
    url = pg.create_database()
    done = tether_rollout(tmp_path, upstream, url, {**clean_env(), "PGPASSWORD": PASSWORD})
    assert done.returncode == 0, done.stderr

    store = PostgresStore(url)
    try:
        (rollout,) = store.list_rollouts(limit=10)
    finally:
        store.close()
    assert rollout.status == RolloutStatus.succeeded
    found = json.loads((tmp_path / "found.json").read_text())
    assert "rollout" in found["parent"] and url in found["parent"]  # it did read Tether's command line
    for seen in (found["parent"], found["cmdlines"], found["environ"]):
        assert PASSWORD not in json.dumps(seen)
