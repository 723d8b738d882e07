"""No secret on Tether's own command line: a key, a token or a URL with a password given as an argument
is refused with the fix, before anything runs (and the message never repeats the secret); given in the
environment or a file, it works, and no process Tether starts finds it in any command line under /proc
(nor, as another user, in Tether's environment or key file)."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.responses import JSONResponse

from tests.gateway.fake_upstream import Behaviour, create_fake_upstream
from tests.helpers import serve_app
from tether.cli.main import main
from tether.cli.secrets import conninfo_secret, secret_in
from tether.store import RolloutStatus, SQLiteStore

AGENTS = Path(__file__).parent / "agents"
PASSWORD = "hunter2-do-not-print"
ROLLOUT = ["rollout", "--agent", "true", "--tasks", "tasks.jsonl"]


def P(argv: list[str], fix: str, name: str | None = None) -> Any:
    """A refused command line, named by its command and the option carrying the secret."""
    where = next(i for i, word in enumerate(argv) if PASSWORD in word)
    return pytest.param(argv, fix, id=name or f"{argv[0]} {argv[where - 1]}")


REFUSED = [
    P(
        [*ROLLOUT, "--upstream-key", PASSWORD],
        r"--upstream-key puts .*TETHER_UPSTREAM_KEY.*--upstream-key-file",
    ),
    P([*ROLLOUT, f"--upstream-key={PASSWORD}"], r"TETHER_UPSTREAM_KEY", name="rollout --upstream-key=KEY"),
    P([*ROLLOUT, "--store", f"postgresql://tether:{PASSWORD}@db:5432/tether"], r"TETHER_STORE=.*PGPASSWORD"),
    P(
        [*ROLLOUT, f"--store=postgres://tether:{PASSWORD}@db/tether"],
        r"--store has a password.*pgpass",
        "rollout --store=URL",
    ),
    P([*ROLLOUT, "--upstream", f"https://me:{PASSWORD}@api.example/v1"], r"--upstream has .*UPSTREAM_KEY"),
    P(
        [*ROLLOUT, "--policy-server", f"http://a:1,http://u:{PASSWORD}@b:2"],
        r"--policy-server has a password",
    ),
    P([*ROLLOUT, "--vllm-args", f"--max-model-len 64 --api-key {PASSWORD}"], r"--api-key .*VLLM_API_KEY"),
    P([*ROLLOUT, "--ray", f"ray://u:{PASSWORD}@head:10001"], r"--ray has a password"),
    P(
        ["train", "--agent", "true", "--tasks", "t", "--fixed-agent", f"j=https://u:{PASSWORD}@j/v1"],
        "--fixed-agent",
    ),
    P(["store", "--token", PASSWORD, "rollouts"], r"--token puts .*TETHER_TOKEN.*--admin-token-file"),
    P(
        ["store", "migrate", "--to", f"postgresql://u:{PASSWORD}@db/tether"],
        r"--to has a password.*PGPASSWORD",
    ),
    P(
        ["store", "migrate", "--from", f"postgresql://u:{PASSWORD}@db/x", "--to", "y"],
        r"--from has a password",
    ),
    P(["serve", "--store", f"postgresql://u:{PASSWORD}@db/tether"], r"tether serve: --store has a password"),
    P(["optimize-prompt", *ROLLOUT[1:], "--optimizer-key", PASSWORD], r"TETHER_OPTIMIZER_KEY"),
    P(
        ["optimize-prompt", *ROLLOUT[1:], "--optimizer-endpoint", f"https://u:{PASSWORD}@o/v1"],
        "OPTIMIZER_KEY",
    ),
    # a secret as a URL parameter, as libpq reads it (and any URL's usual names of keys and tokens)
    P(
        [*ROLLOUT, "--store", f"postgresql://tether@db:5432/tether?password={PASSWORD}"],
        r"--store has a secret in its URL \(its 'password' parameter\).*TETHER_STORE=.*PGPASSWORD",
        "rollout --store ?password=",
    ),
    P(
        [*ROLLOUT, f"--store=postgresql:///tether?host=/run/pg&pass%77ord={PASSWORD}"],
        r"--store has a secret in its URL \(its 'password' parameter\)",
        "rollout --store=URL ?pass%77ord= (percent-encoded)",
    ),
    P(
        [*ROLLOUT, "--store", f"postgresql://db/tether?sslmode=require&sslpassword={PASSWORD}"],
        r"'sslpassword' parameter",
        "rollout --store ?sslpassword=",
    ),
    P(
        [*ROLLOUT, "--store", f"postgresql://db/tether?passfile=/home/me/{PASSWORD}"],
        r"'passfile' parameter.*PGPASSFILE",
        "rollout --store ?passfile=",
    ),
    P(
        [*ROLLOUT, "--store", f"host=db dbname=tether password = '{PASSWORD}'"],
        r"--store has a password in its connection string \(password=\).*TETHER_STORE=",
        "rollout --store KEYWORD=VALUE",
    ),
    P(
        [*ROLLOUT, "--sto", f"host=db password={PASSWORD}"],
        r"--sto has a password in its connection string.*TETHER_STORE=",
        "rollout --sto (abbreviated) KEYWORD=VALUE",
    ),
    P(["store", "--url", f"host=db sslpassword={PASSWORD}", "rollouts"], r"\(sslpassword=\).*TETHER_STORE"),
    P(
        ["serve", "--store", f"postgres://db/tether?password={PASSWORD}"],
        r"tether serve: --store has a secret",
    ),
    P(
        ["store", "migrate", "--to", f"postgresql://db/t?password={PASSWORD}"],
        r"--to has a secret.*PGPASSWORD",
    ),
    P([*ROLLOUT, "--upstream", f"https://api.example/v1?api_key={PASSWORD}"], r"'api_key'.*UPSTREAM_KEY"),
    P(
        [*ROLLOUT, "--upstream", f"https://api.example/v1#access_token={PASSWORD}"],
        r"--upstream has a secret in its URL \(its 'access_token' parameter\)",
        "rollout --upstream #access_token=",
    ),
    P(
        [*ROLLOUT, "--judge-url", f"https://j.example/v1?x-api-key={PASSWORD}"],
        r"--judge-url .*TETHER_JUDGE_KEY.*--judge-key-file",
    ),
    P([*ROLLOUT, "--reward", f"https://rm.example/score?token={PASSWORD}"], r"--reward has a secret"),
    P(
        [*ROLLOUT, "--policy-server", f"http://a:1,http://b:2/?client_secret={PASSWORD}"],
        r"'client_secret'",
    ),
    P(
        ["train", "--agent", "true", "--tasks", "t", "--teacher", f"https://t/v1?key={PASSWORD}"],
        "TEACHER_KEY",
    ),
    P(
        [*ROLLOUT[:1], "--agent", f"python a.py --db postgresql://u:{PASSWORD}@db/x", *ROLLOUT[3:]],
        r"--agent has a password in its URL",
    ),
]


@pytest.mark.parametrize(("argv", "fix"), REFUSED)
def test_a_secret_on_the_command_line_is_refused_with_the_fix_and_not_repeated(
    argv: list[str], fix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as refused:
        main(argv)
    message = str(refused.value.code)
    assert "/proc/PID/cmdline" in message and "\n" not in message
    assert PASSWORD not in message
    assert re.search(fix, message), message
    assert not (tmp_path / ".tether").exists()  # refused before anything ran


SECRET_URLS = {
    "postgresql://tether:pw@db/tether": "a password in its URL",
    "postgresql://db,db2/tether?password=pw": "a secret in its URL (its 'password' parameter)",
    "postgresql://db/t?sslmode=require&SSLPASSWORD=pw": "a secret in its URL (its 'SSLPASSWORD' parameter)",
    "postgresql://db/tether?passfile=/p": "a secret in its URL (its 'passfile' parameter)",
    "postgresql://db/tether?pass%77ord=pw": "a secret in its URL (its 'password' parameter)",
    "https://api/v1?api-version=1&apikey=k": "a secret in its URL (its 'apikey' parameter)",
    "https://api/v1?X-Api-Key=k": "a secret in its URL (its 'X-Api-Key' parameter)",
    "https://blob/c?sv=2024&sig=s": "a secret in its URL (its 'sig' parameter)",
    "https://app/cb#access_token=t&state=x": "a secret in its URL (its 'access_token' parameter)",
    "ray://head:10001?auth_token=t": "a secret in its URL (its 'auth_token' parameter)",
    "s3://bucket/k?aws_secret_access_key=s": "a secret in its URL (its 'aws_secret_access_key' parameter)",
    "https://h/x?Secret-Key=s": "a secret in its URL (its 'Secret-Key' parameter)",
}
NO_SECRET = [
    "postgresql://tether@db:5432/tether?sslmode=verify-full&sslkey=/k.pem&sslcert=/c.pem&sslrootcert=/r.pem",
    "postgresql://tether:@db/tether",  # an empty password is none
    "https://api/v1?api-version=2024-02-01&monkey=1&keyword=2&cache_key=3&password=",
    "not a url?password=pw",
    "sqlite:///tmp/store.db",
    "memory:",
    "http://[::1",  # no URL at all
]


@pytest.mark.parametrize(("url", "found"), SECRET_URLS.items())
def test_a_secret_is_found_in_a_url_as_libpq_and_apis_read_it(url: str, found: str) -> None:
    assert secret_in(url) == found


@pytest.mark.parametrize("text", NO_SECRET)
def test_no_secret_is_found_where_there_is_none(text: str) -> None:
    assert secret_in(text) is None and conninfo_secret(text) is None


def test_a_libpq_keyword_value_string_with_a_password_is_found() -> None:
    assert conninfo_secret("host=db password=pw") == "a password in its connection string (password=)"
    assert (
        conninfo_secret("dbname=x  SSLPassword = 'p w'")
        == "a password in its connection string (sslpassword=)"
    )
    assert conninfo_secret("passfile=/p host=db") == "a password in its connection string (passfile=)"
    assert conninfo_secret("host=db user=me dbname=x") is None
    assert conninfo_secret("host=db mypassword=x") is None  # not one of libpq's keywords


def test_a_url_without_a_password_is_taken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tasks.jsonl").write_text('{"id": "t0", "q": "x"}\n')
    with pytest.raises(SystemExit, match="cannot open the store"):  # the check passed; port 9 has no server
        main([*ROLLOUT, "--upstream", "http://127.0.0.1:9/v1", "--store", "postgresql://u@127.0.0.1:9/db"])


def keyed(app: Any, key: str) -> Any:
    """`app`, answering 401 to any request without `Authorization: Bearer key`."""

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        given = dict(scope.get("headers") or []).get(b"authorization")
        if scope["type"] == "http" and given != f"Bearer {key}".encode():
            await JSONResponse({"error": {"message": "wrong key"}}, status_code=401)(scope, receive, send)
            return
        await app(scope, receive, send)

    return guarded


def cmdline_once_started(pid: int) -> str:
    """The command line of process `pid` once it runs Tether (right after the fork it is still pytest's)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode()
        if "tether.cli.main" in cmdline:
            return cmdline
        time.sleep(0.01)
    raise AssertionError(f"process {pid} never ran tether")


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder any user can read and write (the agent may run as nobody)."""
    root = Path(tempfile.mkdtemp(prefix="tether-secrets-", dir="/tmp"))
    root.chmod(0o777)
    shutil.copy(AGENTS / "cmdline_probe_agent.py", root / "agent.py")
    (root / "agent.py").chmod(0o644)
    yield root
    shutil.rmtree(root)


@pytest.mark.parametrize("source", ["environment", "file"])
def test_a_secret_from_the_environment_or_a_file_reaches_no_command_line(
    source: str, shared: Path, tmp_path: Path
) -> None:
    key, password = f"sk-{secrets.token_hex(12)}", f"pw-{secrets.token_hex(12)}"
    (tmp_path / "tasks.jsonl").write_text(json.dumps({"id": "t0", "out": str(shared / "found.json")}) + "\n")
    env = {**os.environ, "PGPASSWORD": password, "TETHER_STORE": str(tmp_path / "store.db")}
    # Cold: the probe reads its parent's command line, which must be Tether's (not a warm zygote's).
    argv = ["--agent", f"/usr/bin/python3 {shared / 'agent.py'}", "--tasks", str(tmp_path / "tasks.jsonl")]
    argv += ["--agent-cold", "--sandbox", "none"]  # as an ordinary child process, /proc in full view
    if source == "environment":
        env["TETHER_UPSTREAM_KEY"] = key
    else:  # a 0600 file of root's, in a folder open to all, and the agent runs as another user
        (shared / "key").write_text(key + "\n")
        (shared / "key").chmod(0o600)
        argv += ["--upstream-key-file", str(shared / "key"), "--agent-user", "nobody"]
    with serve_app(keyed(create_fake_upstream(Behaviour()), key)) as url:
        command = [sys.executable, "-m", "tether.cli.main", "rollout", *argv, "--upstream", f"{url}/v1"]
        tether = subprocess.Popen([*command, "--upstream-token-ids", "--project-dir", str(tmp_path)], env=env)
        seen_by_test = cmdline_once_started(tether.pid)
        assert tether.wait(120) == 0

    store = SQLiteStore(tmp_path / "store.db")
    (rollout,) = store.list_rollouts(limit=10)
    assert rollout.status == RolloutStatus.succeeded  # the upstream took the key: it came through
    found = json.loads((shared / "found.json").read_text())
    assert "rollout" in found["parent"]  # the agent did read Tether's command line
    for text in (seen_by_test, json.dumps(found["parent"]), json.dumps(found["cmdlines"])):
        assert key not in text and password not in text
    assert key not in json.dumps(found["environ"]) and password not in json.dumps(found["environ"])
    if source == "file":  # as nobody: neither Tether's environment nor its key file can be read
        assert found["parent_environ"] == "PermissionError"
        assert found["files"] == {str(shared / "key"): "PermissionError"}
