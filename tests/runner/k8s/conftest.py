"""Fixtures of the Kubernetes runner tests: the local test API server (`apiserver.py`) on loopback, a
kubeconfig pointing at it, and a way to run rollouts through the real gateway and the tiny engine."""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import serve_app
from tests.runner.k8s.apiserver import Cluster, write_kubeconfig
from tether.contracts import POLICY_UPSTREAM
from tether.policy_server.builtin import EngineUpstream
from tether.runner import CommandAgent, RolloutOutcome, Runner, RunnerConfig
from tether.runner.k8s.options import K8sOptions
from tether.runner.k8s.pool import kubernetes_pools
from tether.stack import local_stack
from tether.store import RolloutRequest, SQLiteStore, Task
from tether.store.auth import TokenAuthority

HERE = Path(__file__).parent
AGENT = f"{sys.executable} {HERE / 'agents' / 'job_agent.py'}"
TEMPLATE = HERE / "job.yaml.j2"
IMAGE = "tether-test-agent:1"


class SharedEngineUpstream(EngineUpstream):
    """The session's tiny engine outlives each test's gateway."""

    async def aclose(self) -> None:
        return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class KubeCluster:
    state: Cluster
    url: str
    kubeconfig: Path

    def options(self, template: Path = TEMPLATE, **changes: Any) -> K8sOptions:
        settings: dict[str, Any] = {
            "job_template": template,
            "agent_url": f"http://127.0.0.1:{free_port()}",
            "kubeconfig": str(self.kubeconfig),
            "max_jobs_per_minute": 6000.0,
            "resync_s": 0.5,
            "preflight_timeout_s": 5.0,
            "end_grace_s": 10.0,
        }
        return K8sOptions(**{**settings, **changes})


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[KubeCluster]:
    workdir = tmp_path / "node"
    workdir.mkdir()
    state = Cluster(workdir, images={IMAGE, "tether-arith-agent:dev"})
    with serve_app(state.app()) as url:
        try:
            yield KubeCluster(state, url, write_kubeconfig(tmp_path / "kubeconfig", url))
        finally:
            state.stop()


def run_rollouts(
    tmp_path: Path,
    tiny_engine: Any,
    options: K8sOptions,
    tasks: Sequence[Task],
    max_attempts: int = 1,
    timeout_s: float = 60.0,
    n_workers: int = 4,
    during: Any = None,
) -> tuple[list[RolloutOutcome], SQLiteStore]:
    """Runs each task once as a Job, through the real gateway in front of the tiny engine."""
    store = SQLiteStore(tmp_path / "store.db")
    authority = TokenAuthority.generate()
    upstream = SharedEngineUpstream(tiny_engine, name=POLICY_UPSTREAM)
    with local_stack(store, authority, [upstream]) as stack:
        runner = Runner(
            store,
            CommandAgent(AGENT),
            stack.endpoints,
            None,
            RunnerConfig(n_workers=n_workers, timeout_s=timeout_s, heartbeat_s=0.5),
            run="k8s-test",
            pools=kubernetes_pools(options),
        )
        requests = [RolloutRequest(task=task, max_attempts=max_attempts, key=task.id) for task in tasks]

        async def go() -> list[RolloutOutcome]:
            try:
                runner.start()
                rollouts = await runner.enqueue(requests)
                waiting = asyncio.ensure_future(runner.wait([r.id for r in rollouts]))
                if during is not None:
                    await during(runner)
                return await waiting
            finally:
                await runner.stop()

        outcomes = asyncio.run(go())
    return outcomes, store
