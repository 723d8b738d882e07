"""Where agents, replicas and learner ranks run: this machine, Kubernetes, or Ray."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tether.config.option import option
from tether.contracts import LEARNER_SHARDINGS
from tether.ray.cluster import WEIGHT_TRANSFERS


def local_runner_kinds() -> Sequence[str]:
    """The `--runner` kinds (tether/runner/pools.py registers them; Ray places its own)."""
    from tether.runner.pools import PLACED_KINDS, POOL_KINDS

    return [kind for kind in POOL_KINDS.kinds() if kind not in PLACED_KINDS]


@dataclass
class RunnerSettings:
    """Where the agents run: this machine, or one Kubernetes Job per attempt."""

    runner: str = option(
        "local",
        "local: agents are processes on this machine; k8s: one Kubernetes Job per attempt",
        choices=local_runner_kinds,
    )
    job_template: str | None = option(
        None,
        "Jinja YAML of one batch/v1 Job, rendered per attempt with task, rollout and command (the"
        " --agent command filled with the task); Tether sets its name, labels, deadline, retries,"
        " TTL and env",
        metavar="FILE",
    )
    namespace: str = option(
        "default",
        "namespace of the Jobs",
    )
    kubeconfig: str | None = option(
        None,
        "kubeconfig to use (default: the in-cluster service account, else $KUBECONFIG or ~/.kube/config)",
        metavar="FILE",
    )
    agent_url: str | None = option(
        None,
        "how pods reach the gateway, e.g. http://host.minikube.internal:8123 (the gateway listens"
        " on loopback; Tether relays --agent-listen to it)",
        metavar="URL",
    )
    agent_listen: str | None = option(
        None,
        "where Tether accepts the pods' connections and relays them to the gateway (default: "
        "127.0.0.1 and the port of --agent-url)",
        metavar="HOST:PORT",
    )
    max_jobs_per_minute: float = option(
        60.0,
        "Jobs created per minute at most",
    )
    job_ttl: int = option(
        600,
        "ttlSecondsAfterFinished of each Job (seconds)",
    )


@dataclass
class RaySettings:
    """Ray (docs/scaling.md): rollout workers and policy-server replicas as Ray actors."""

    ray: str | None = option(
        None,
        "run rollout workers (and replicas, learner ranks) as Ray actors: no ADDRESS starts a "
        "local cluster, `auto` joins the one $RAY_ADDRESS names, else HOST:PORT of a cluster",
        action="optional",
        const="local",
        metavar="ADDRESS",
    )
    agent_cpus: float = option(
        1.0,
        "--ray: CPUs each agent reserves (decides placement)",
    )
    agent_resources: str | None = option(
        None,
        "--ray: custom Ray resources each agent needs, e.g. '{\"sandbox\": 1}'",
        metavar="JSON",
    )
    replicas: int = option(
        0,
        "--ray: policy-server replica actors, sticky by rollout (0: serve from this process)",
    )
    gpus_per_replica: float | None = option(
        None,
        "--ray: default 1 where the cluster has GPUs",
    )
    advertise_host: str | None = option(
        None,
        "--ray: the address other nodes reach the gateway and store at, and that the gateway "
        "binds (default: this node's IP; without --ray the gateway binds 127.0.0.1)",
        metavar="HOST",
    )
    weights_transfer: str = option(
        "auto",
        "--ray: how policy weights and checkpoints reach actors: by path on a shared filesystem, "
        "or streamed through Ray's object store; auto (default) probes each actor's node",
        choices=WEIGHT_TRANSFERS,
    )


@dataclass
class TrainRaySettings(RaySettings):
    """Ray (docs/scaling.md): rollout workers, policy-server replicas and learner ranks as Ray actors."""

    learner_ranks: int = option(
        1,
        "--ray: learner ranks, one torch.distributed group (gloo on CPU, NCCL on GPU)",
    )
    learner_sharding: str = option(
        "replicate",
        "--ray: replicate (data parallel: every rank holds the whole model) or fsdp (FSDP2: each "
        "rank holds 1/N of the parameters, gradients and optimizer state, for models that do not "
        "fit on one device); the update is the single-rank one either way",
        choices=LEARNER_SHARDINGS,
    )
