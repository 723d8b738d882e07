"""`KubernetesPool`: the k8s runner behind the runner seam. A worker pool whose agent is one Job per
attempt, a reconciler that creates the Jobs and learns how they ended, and the relay pods reach the
gateway through. It has the local pool's surface: start, stop, wake, failure, running."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Callable

from tether.runner.agents import Agent
from tether.runner.k8s.api import Kube, connect
from tether.runner.k8s.job_agent import JobAgent
from tether.runner.k8s.manifest import JobSettings, JobTemplate
from tether.runner.k8s.options import K8sOptions, parse_listen
from tether.runner.k8s.reconciler import Reconciler
from tether.runner.k8s.relay import Relay
from tether.runner.pool import AgentEndpoints, RunnerConfig, WorkerPool
from tether.runner.rewards import Evaluator
from tether.runner.runner import PoolFactory
from tether.store.base import Store


def load_template(options: K8sOptions) -> JobTemplate:
    return JobTemplate(options.job_template.read_text(), f"--job-template {options.job_template}")


def kubernetes_pools(options: K8sOptions) -> PoolFactory:
    """The factory `Runner(..., pools=...)` calls, for pools with these options."""
    if not isinstance(options, K8sOptions):
        raise ValueError("the k8s runner needs K8sOptions")
    return functools.partial(KubernetesPool, options)


class KubernetesPool:
    def __init__(
        self,
        options: K8sOptions,
        store: Store,
        agent: Agent,
        endpoints: AgentEndpoints,
        evaluator: Evaluator | None,
        config: RunnerConfig,
        run: str | None,
        on_change: Callable[[], None] | None,
    ) -> None:
        self.options = options
        self.on_change = on_change
        self.running = 0
        self.kube = Kube(connect(options.kubeconfig), options.namespace)
        self.reconciler = Reconciler(self.kube, run, options.max_jobs_per_minute, options.resync_s)
        listen = options.listen or parse_listen(None, options.agent_url)
        self.relay = Relay(listen.host, listen.port, endpoints.server_url)
        job_agent = JobAgent(
            store,
            self.kube,
            self.reconciler,
            load_template(options),
            AgentEndpoints(options.agent_url, endpoints.auth, endpoints.model),
            JobSettings(options.namespace, config.timeout_s, options.ttl_s),
            options.end_grace_s,
            command_agent=agent,
        )
        pool_config = dataclasses.replace(config, worker_prefix="k8s")
        self.pool = WorkerPool(store, job_agent, endpoints, evaluator, pool_config, run, self._changed)
        self._relay_task: asyncio.Task[None] | None = None

    def _changed(self) -> None:
        self.running = self.pool.running
        if self.on_change is not None:
            self.on_change()

    def start(self) -> None:
        if self._relay_task is not None:
            return
        self._relay_task = asyncio.create_task(self.relay.start(), name="tether-k8s-relay")
        self.reconciler.start()
        self.pool.start()

    async def stop(self, requeue: bool = False) -> None:
        """Cancelling the workers deletes their running Jobs; the reconciler then deletes what is left."""
        await self.pool.stop(requeue)
        await self.reconciler.stop()
        await self.relay.stop()
        self._relay_task = None
        await asyncio.to_thread(self.kube.close)

    def wake(self) -> None:
        self.pool.wake()

    def failure(self) -> str | None:
        task = self._relay_task
        if task is not None and task.done() and not task.cancelled() and task.exception() is not None:
            return str(task.exception())
        return self.pool.failure() or self.reconciler.failure()
