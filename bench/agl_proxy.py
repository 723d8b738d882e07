"""Run inside bench/.venv-agl: Agent Lightning 0.3.0's LLMProxy (LiteLLM) over an in-memory store.

    python agl_proxy.py PORT UPSTREAM_BASE_URL FOLDER

Set up the way its trainer does: a `hosted_vllm/` model entry pointing at the upstream, a thread-safe
InMemoryLightningStore, one started rollout, calls through /rollout/{id}/attempt/{id}/v1, the server
in a thread of this process (launch_mode="thread") on 127.0.0.1. Spans reach the store through LiteLLM's
OpenTelemetry callback, which needs OpenTelemetry 1.44.0 (see bench/refenv.py).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from agentlightning.llm_proxy import LLMProxy  # noqa: E402
from agentlightning.store.memory import InMemoryLightningStore  # noqa: E402
from agl_common import announce, serve_counts  # noqa: E402


async def serve(port: int, upstream: str, folder: Path) -> None:
    store = InMemoryLightningStore(thread_safe=True)
    attempted = await store.start_rollout(input={})
    rollout_id, attempt_id = attempted.rollout_id, attempted.attempt.attempt_id
    model = {"model_name": "policy", "litellm_params": {"model": "hosted_vllm/policy", "api_base": upstream}}
    proxy = LLMProxy(port=port, model_list=[model], store=store, host="127.0.0.1", launch_mode="thread")
    await proxy.start()
    if not proxy.is_running():
        raise SystemExit("LLMProxy did not start")

    def count() -> int:
        # LiteLLM exports several spans per call, all under the call's sequence id: count the calls
        return len({span.sequence_id for span in asyncio.run(store.query_spans(rollout_id))})

    serve_counts(folder, count)
    announce(folder, f"/rollout/{rollout_id}/attempt/{attempt_id}/v1", "none")
    while True:
        await asyncio.sleep(3600)


def main() -> None:
    port, upstream, folder = int(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    asyncio.run(serve(port, upstream, folder))


if __name__ == "__main__":
    main()
