"""Run inside bench/.venv-agl with the unpacked 1.x package first on PYTHONPATH: its gateway app.

    python agl1_gateway.py PORT UPSTREAM_BASE_URL FOLDER

The 1.x server normally starts through Hydra; here its `create_app` gets the same settings as a dict
(the packaged defaults, model name `policy`), served by uvicorn on loopback. One model server (the
fake upstream) and one rollout are registered through its own API before the bench starts.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import httpx
import uvicorn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from agentlightning.server import store as agl_store  # noqa: E402
from agentlightning.server.app import create_app  # noqa: E402
from agl_common import announce, serve_counts  # noqa: E402

CONFIG = {
    "host": "127.0.0.1",
    "key": "",
    "default_proxy": {
        "model_name": "policy",
        "include_log_probs": True,
        "include_routed_experts": False,
        "train": {"temperature": 1},
        "val": {"temperature": 0.7},
    },
}


def register(port: int, upstream: str, folder: Path) -> None:
    base = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            httpx.get(f"{base}/healthz", timeout=1).raise_for_status()
            break
        except httpx.HTTPError:
            time.sleep(0.05)
    httpx.post(f"{base}/api/models", json=[{"model": "policy", "endpoint": upstream}]).raise_for_status()
    rollout = httpx.post(f"{base}/api/rollouts", json=[{"input": {}}]).json()[0]["rollout_id"]
    attempt = "attempt-1"
    serve_counts(folder, lambda: sum(len(v) for v in agl_store._events.get(rollout, {}).values()))
    announce(folder, f"/proxy/rollout/{rollout}/attempt/{attempt}/mode/train/openai/v1", "none")


def main() -> None:
    port, upstream, folder = int(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    threading.Thread(target=register, args=(port, upstream, folder), daemon=True).start()
    uvicorn.run(create_app(CONFIG), host="127.0.0.1", port=port, log_level="error", access_log=False)


if __name__ == "__main__":
    main()
