"""The Kubernetes runner's settings, and the pool factory they make (checked first)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from tether.config.placement import RunnerSettings
from tether.runner.agents import Agent
from tether.runner.k8s.options import K8sOptions, K8sOptionsError, parse_listen
from tether.runner.runner import PoolFactory
from tether.store.records import Task

K8S_ONLY = ("job_template", "kubeconfig", "agent_url", "agent_listen")


def k8s_options(runner: RunnerSettings) -> K8sOptions:
    if not runner.job_template or not runner.agent_url:
        raise K8sOptionsError(
            "--runner k8s needs --job-template FILE (the Job of one attempt) and --agent-url URL (how pods "
            "reach the gateway): see docs/kubernetes.md"
        )
    return K8sOptions(
        job_template=Path(runner.job_template),
        agent_url=runner.agent_url,
        namespace=runner.namespace,
        kubeconfig=runner.kubeconfig,
        max_jobs_per_minute=runner.max_jobs_per_minute,
        listen=parse_listen(runner.agent_listen, runner.agent_url),
        ttl_s=runner.job_ttl,
    )


def check_unused(runner: RunnerSettings) -> None:
    """Kubernetes options without --runner k8s are a mistake, not something to ignore."""
    given = [name for name in K8S_ONLY if getattr(runner, name)]
    if given:
        flag = "--" + given[0].replace("_", "-")
        raise K8sOptionsError(f"{flag} is an option of the Kubernetes runner: add --runner k8s")


def kubernetes_pools_for(
    runner: RunnerSettings, timeout_s: float, tasks: Sequence[Task], agent: Agent, console: Console
) -> PoolFactory:
    """Checks the template against every task and the cluster (preflight), then the pool factory.
    Raises K8sOptionsError, TemplateError or KubeError, each with one line naming the fix."""
    try:
        from tether.runner.k8s.pool import kubernetes_pools
        from tether.runner.k8s.prepare import prepare
    except ImportError as exc:
        raise K8sOptionsError(
            f"--runner k8s needs the Kubernetes client ({exc}): pip install -e '.[k8s]'"
        ) from None

    options = k8s_options(runner)
    with console.status(f"Kubernetes preflight (namespace {options.namespace}) ..."):
        prepare(options, tasks, agent, timeout_s)
    console.print(f"[green]Kubernetes[/] namespace {options.namespace}: preflight passed")
    return kubernetes_pools(options)
