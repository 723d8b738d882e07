"""Before anything runs: the template renders to a Job for the first task, and the cluster passes the
preflight (namespace, permissions, images). Errors are one line naming the fix."""

from __future__ import annotations

import time
from collections.abc import Sequence

import urllib3
from kubernetes.client.rest import ApiException

from tether.runner.agents import Agent
from tether.runner.k8s.api import Kube, KubeError, api_error, connect, invalid_job
from tether.runner.k8s.job_agent import render_context
from tether.runner.k8s.manifest import AttemptRef, JobSettings, TemplateError, build_job, images_of
from tether.runner.k8s.options import K8sOptions
from tether.runner.k8s.pool import load_template
from tether.runner.k8s.preflight import check_images, preflight
from tether.store.records import Rollout, Task

PREVIEW_TOKEN = "preview-token"


def preview_job(options: K8sOptions, task: Task, agent: Agent | None, timeout_s: float) -> dict[str, object]:
    """The Job the template gives for this task (the first attempt of a made-up rollout)."""
    rollout = Rollout(id="preview", task_id=task.id, input=task.input, created_at=time.time())
    ref = AttemptRef(rollout.id, 1, None)
    rendered = load_template(options).render(render_context(rollout, 1, agent, ref.job_name))
    env = {"OPENAI_API_KEY": PREVIEW_TOKEN}
    return build_job(
        rendered, ref, env, PREVIEW_TOKEN, JobSettings(options.namespace, timeout_s, options.ttl_s)
    )


def prepare(options: K8sOptions, tasks: Sequence[Task], agent: Agent | None, timeout_s: float) -> None:
    """Raises KubeError or TemplateError (one line each) unless a batch of these tasks can run."""
    jobs = [preview_job(options, task, agent, timeout_s) for task in tasks]  # every task renders
    for task, job in zip(tasks, jobs, strict=True):
        problem = invalid_job(job)
        if problem is not None:
            raise TemplateError(
                f"--job-template {options.job_template}: for task {task.id}, the Job is invalid at {problem}"
            )
    kube = Kube(connect(options.kubeconfig), options.namespace)
    try:
        if jobs:
            preflight(kube, jobs[0], options.preflight_timeout_s)
        seen = set(images_of(jobs[0])) if jobs else set()
        for job in jobs[1:]:
            if not set(images_of(job)) <= seen:
                check_images(kube, job, options.preflight_timeout_s)
                seen |= set(images_of(job))
    except ApiException as exc:
        raise KubeError(f"Kubernetes API at {kube.api.configuration.host}: {api_error(exc)}") from None
    except urllib3.exceptions.HTTPError as exc:
        raise KubeError(
            f"cannot reach the Kubernetes API at {kube.api.configuration.host}: {exc}; check --kubeconfig"
        ) from None
    finally:
        kube.close()
