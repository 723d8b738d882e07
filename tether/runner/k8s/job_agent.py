"""One attempt as one Job: an `Agent` whose run creates the attempt's Job and Secret, waits for the Job to
end, and reports it as the local agents do (the last line of the pod's log is the output; a failure
keeps the tail of the log). The worker pool around it claims, heartbeats, scores and closes attempts
exactly as for local agents, so retries, rewards and cancellation behave the same."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes.client.rest import ApiException

from tether.contracts import agent_task
from tether.runner.agents import LLM, Agent, AgentResult, CommandAgent, last_line
from tether.runner.k8s.api import Kube, api_error, invalid_job
from tether.runner.k8s.manifest import (
    AttemptRef,
    JobSettings,
    JobTemplate,
    TemplateError,
    attempt_selector,
    build_job,
    build_secret,
)
from tether.runner.k8s.reconciler import Ending, JobEnd, JobRefused, Reconciler
from tether.runner.pool import AgentEndpoints
from tether.store.base import Store
from tether.store.records import Rollout

ERROR_LOG_LINES = 40
ERROR_LOG_CHARS = 4000


def render_context(rollout: Rollout, attempt: int, agent: Agent | None, job_name: str) -> dict[str, Any]:
    """What the Job template sees: the task without its reference (the pod is the agent's)."""
    task = agent_task(rollout.input)
    command = agent.argv(task) if isinstance(agent, CommandAgent) else None
    details = {
        "id": rollout.id,
        "attempt": attempt,
        "run": rollout.run,
        "mode": rollout.mode,
        "task_id": rollout.task_id,
        "sample": rollout.sample,
    }
    return {"task": task, "rollout": details, "command": command, "job_name": job_name}


@dataclass
class JobAgent:
    store: Store
    kube: Kube
    reconciler: Reconciler
    template: JobTemplate
    endpoints: AgentEndpoints  # as pods reach the gateway (--agent-url)
    settings: JobSettings
    end_grace_s: float
    command_agent: Agent | None = None

    async def run(
        self, task: dict[str, Any], env: Mapping[str, str], llm: LLM, timeout_s: float
    ) -> AgentResult:
        rollout = await asyncio.to_thread(self.store.get_rollout, env["TETHER_ROLLOUT_ID"])
        ref = AttemptRef(rollout.id, int(env["TETHER_ATTEMPT"]), rollout.run)
        pod_env = self.endpoints.env(rollout, ref.attempt)
        token = self.endpoints.auth.rollout_token(rollout.id, ref.attempt)
        try:
            rendered = self.template.render(
                render_context(rollout, ref.attempt, self.command_agent, ref.job_name)
            )
            job = build_job(rendered, ref, pod_env, token, self.settings)
        except (TemplateError, ValueError) as exc:
            return AgentResult(None, None, error=f"cannot build the Job: {exc}")
        problem = invalid_job(job)
        if problem is not None:
            return AgentResult(None, None, error=f"{self.template.origin}: the Job is invalid at {problem}")
        deadline = time.monotonic() + timeout_s + self.end_grace_s
        ended: JobEnd | None = None
        try:
            created = await self.reconciler.create(job, deadline)
            secret = build_secret(ref, pod_env, token, self.settings.namespace, created.metadata.uid)
            await self.reconciler.retrying(
                lambda: asyncio.to_thread(self.kube.create_secret, secret), deadline, "create its Secret"
            )
            ended = await self.reconciler.wait(ref.job_name, max(0.0, deadline - time.monotonic()))
            return await self._result(ref, ended, timeout_s)
        except JobRefused as exc:
            return AgentResult(None, None, error=str(exc))
        finally:
            # A Job that did not end (cancelled, or silent past its deadline) must not run on.
            await asyncio.shield(self._clean_up(ref, delete_job=ended is None))

    async def _clean_up(self, ref: AttemptRef, delete_job: bool) -> None:
        await self.reconciler.forget(ref.job_name, delete_job)
        with contextlib.suppress(Exception):  # owned by the Job: it goes when the Job's TTL deletes the Job
            await asyncio.to_thread(self.kube.delete_secret, ref.secret_name)

    async def _result(self, ref: AttemptRef, ended: JobEnd | None, timeout_s: float) -> AgentResult:
        name = ref.job_name
        if ended is None:
            return AgentResult(
                None, None, timed_out=True, error=f"Job {name} reported no ending {timeout_s:g}s after start"
            )
        if ended.ending is Ending.vanished:
            return AgentResult(None, None, error=f"Job {name} vanished before it finished ({ended.reason})")
        log, exit_code = await asyncio.to_thread(self._pod_log, ref)
        if ended.ending is Ending.complete:
            return AgentResult(last_line(log), exit_code if exit_code is not None else 0, stdout=log)
        tail = _tail(log)
        if ended.ending is Ending.timed_out:
            error = f"timed out after {timeout_s:g}s (Job {name}: {ended.reason})"
            return AgentResult(None, exit_code, timed_out=True, error=f"{error}{tail}", stdout=log)
        code = f"; exit code {exit_code}" if exit_code is not None else ""
        return AgentResult(
            None, exit_code, error=f"Job {name} failed ({ended.reason}{code}){tail}", stdout=log
        )

    def _pod_log(self, ref: AttemptRef) -> tuple[str, int | None]:
        """The first container's log and exit code, of the attempt's (newest) pod."""
        try:
            pods = self.kube.pods(attempt_selector(ref))
        except ApiException as exc:
            return f"[no pod log: {api_error(exc)}]", None
        if not pods:
            return "[no pod log: the Job has no pod]", None
        pod = max(pods, key=lambda p: p.metadata.creation_timestamp or 0)
        container = pod.spec.containers[0].name
        exit_code = _exit_code(pod, container)
        try:
            return self.kube.pod_log(pod.metadata.name, container), exit_code
        except ApiException as exc:
            return f"[no pod log: {api_error(exc)}]", exit_code


def _exit_code(pod: Any, container: str) -> int | None:
    for status in (pod.status.container_statuses if pod.status else None) or []:
        if status.name == container and status.state and status.state.terminated:
            return int(status.state.terminated.exit_code)
    return None


def _tail(log: str) -> str:
    lines = log.rstrip().splitlines()[-ERROR_LOG_LINES:]
    text = "\n".join(lines)[-ERROR_LOG_CHARS:]
    return f"; pod log (last lines):\n{text}" if text else "; the pod logged nothing"
