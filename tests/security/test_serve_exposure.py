"""`tether serve` as a user runs it: it listens on loopback only, and neither its output nor any file
besides the store and the secret files holds a token or a prompt (at the default log level)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.gateway.fake_upstream import Behaviour, create_fake_upstream
from tests.helpers import serve_app
from tests.serve_process import serve_process

SECRET_PROMPT = "the-launch-code-is-7781"
STATE_FILES = {"store.db", "store.db-wal", "store.db-shm", "secret", "admin_token"}


@pytest.fixture
def flaky_upstream() -> Iterator[str]:
    with serve_app(create_fake_upstream(Behaviour(fail_next=1, fail_status=500))) as url:
        yield url + "/v1"


def listening_addresses(port: int) -> list[str]:
    """Local addresses of the sockets listening on `port`, from the kernel's tables."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.rsplit(":", 1)
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                found.append(address)
    return found


def test_default_bind_is_loopback_and_logs_hold_no_secrets(tmp_path: Path, flaky_upstream: str) -> None:
    project = tmp_path / "project"
    with serve_process(project, "--upstream", flaky_upstream, logs=tmp_path) as served:
        port = int(served.url.rsplit(":", 1)[1])
        assert served.url.startswith("http://127.0.0.1:")
        assert listening_addresses(port) == ["0100007F"]  # 127.0.0.1, little-endian hex

        llm = openai.OpenAI(base_url=served.base_url, api_key=served.api_key, max_retries=0)
        llm.chat.completions.create(model="policy", messages=[{"role": "user", "content": SECRET_PROMPT}])
        wrong = "tro-ro-nope.0123456789abcdef0123456789abcdef01234567"
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=served.base_url, api_key=wrong, max_retries=0).chat.completions.create(
                model="policy", messages=[{"role": "user", "content": SECRET_PROMPT}]
            )
        broken = httpx.post(
            f"{served.base_url}/chat/completions",
            content=f'{{"messages": "{SECRET_PROMPT}"'.encode(),
            headers={"Authorization": f"Bearer {served.api_key}", "Content-Type": "application/json"},
        )
        assert broken.status_code == 400
        admin = {"Authorization": f"Bearer {served.admin_token}"}
        other = httpx.post(f"{served.url}/admin/sessions", json={}, headers=admin).json()["api_key"]
        assert httpx.get(f"{served.url}/store/rollouts", headers=admin).status_code == 200
        assert httpx.get(f"{served.url}/store/nowhere", headers=admin).status_code == 404
        reward = httpx.post(
            served.base_url.removesuffix("/v1"),
            json={"value": 1},
            headers={"Authorization": f"Bearer {served.api_key}"},
        )
        assert reward.status_code == 200
        admin_token = served.admin_token
        session_key = served.api_key
    output = served.output()
    assert "Tether gateway on" in output
    for secret in (admin_token, other, wrong, SECRET_PROMPT):
        assert secret not in output
    # The session key is printed once, on purpose, in the export line the user pastes.
    assert [line for line in output.splitlines() if session_key in line] == [
        f"export OPENAI_API_KEY={session_key}"
    ]
    for path in project.rglob("*"):
        if path.is_file() and path.name not in STATE_FILES:
            text = path.read_bytes()
            for secret in (admin_token, other, session_key, SECRET_PROMPT):
                assert secret.encode() not in text, f"{secret[:8]}... in {path}"
