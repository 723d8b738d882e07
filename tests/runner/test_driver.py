"""The driver learns outcomes from the store: a rollout claimed and finished by a worker in another
process (sharing the SQLite file, or over HTTP) counts, with the reward the one reward rule gives."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.helpers import serve_app
from tether.runner import CallableAgent, Runner, RunnerConfig
from tether.runner.pool import AgentEndpoints
from tether.store import RolloutRequest, RolloutStatus, SQLiteStore, Task
from tether.store.auth import TokenAuthority
from tether.store.server import create_store_app

# Another process's worker: claims the run's rollout, records a span and two rewards (an agent's,
# then an evaluator's, which is the final one), and closes the rollout.
FOREIGN_WORKER = textwrap.dedent(
    """
    import sys, time
    from tether.store import Reward, RolloutStatus, Span, open_store
    from tether.store.backends import StoreOptions

    store = open_store(sys.argv[1], StoreOptions(token=sys.argv[3] if len(sys.argv) > 3 else None))
    claim = None
    while claim is None:
        claim = store.claim("elsewhere/1/worker-0", run=sys.argv[2])
        time.sleep(0.05)
    rid, attempt = claim.rollout.id, claim.attempt.number
    store.add_spans([Span(rollout_id=rid, attempt=attempt, name="llm.chat", start_time=time.time(),
                          attributes={"usage": {"completion_tokens": 7}})])
    store.add_rewards([Reward(rollout_id=rid, attempt=attempt, value=0.25, source="agent", time=4e9),
                       Reward(rollout_id=rid, attempt=attempt, value=1.0, source="evaluator")])
    store.update_status(rid, RolloutStatus.succeeded, output="done elsewhere", attempt=attempt)
    """
)


def never_called(task: dict, llm: object) -> str:
    raise AssertionError("the local pool has no workers; nothing may run here")


def drive(store: SQLiteStore | object, run: str) -> list:
    runner = Runner(
        store,  # type: ignore[arg-type]
        CallableAgent(never_called),
        AgentEndpoints("http://127.0.0.1:9", TokenAuthority.generate()),
        config=RunnerConfig(n_workers=0),
        run=run,
    )
    request = RolloutRequest(task=Task(id="t1", input={"q": 1}), key="t1#0")
    return asyncio.run(runner.run([request]))


def test_a_rollout_finished_by_another_process_sharing_the_file_counts(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    store = SQLiteStore(path)
    worker = subprocess.Popen([sys.executable, "-c", FOREIGN_WORKER, str(path), "shared"])
    try:
        (outcome,) = drive(store, "shared")
    finally:
        worker.wait(30)
    assert worker.returncode == 0
    assert outcome.status == RolloutStatus.succeeded
    assert (outcome.reward, outcome.calls, outcome.completion_tokens) == (1.0, 1, 7)
    assert store.get_rollout(outcome.rollout_id).output == "done elsewhere"


def test_a_rollout_finished_by_a_worker_over_http_counts(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "store.db")
    auth = TokenAuthority.generate()
    with serve_app(create_store_app(store, auth)) as url:
        worker = subprocess.Popen([sys.executable, "-c", FOREIGN_WORKER, url, "remote", auth.admin_token])
        try:
            (outcome,) = drive(store, "remote")
        finally:
            worker.wait(30)
    assert worker.returncode == 0
    assert (outcome.status, outcome.reward) == (RolloutStatus.succeeded, 1.0)
