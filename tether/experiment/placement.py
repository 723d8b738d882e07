"""The Ray settings of the commands that run agents (`rollout`, `train`, `optimize-prompt`): the placement
they ask for, connected before anything is enqueued."""

from __future__ import annotations

import orjson
from rich.console import Console

from tether.config.commands import RunsAgents
from tether.config.placement import TrainRaySettings
from tether.experiment.errors import SettingsError
from tether.placement.base import LocalPlacement, Placement
from tether.ray.cluster import LOOPBACK, RaySettings, RayUnavailable, connect

LOCAL = "local"  # `--ray` with no address


def cluster_settings(settings: RunsAgents, command: str) -> RaySettings | None:
    """The cluster `--ray` and its options ask for, or None without `--ray` (a one-line error if bad)."""
    ray = settings.ray
    address = ray.ray
    if address is None:
        return None
    ranks = ray if isinstance(ray, TrainRaySettings) else TrainRaySettings()
    try:
        resources = orjson.loads(ray.agent_resources) if ray.agent_resources else {}
        if not isinstance(resources, dict):
            raise ValueError("--agent-resources must be a JSON object, e.g. '{\"sandbox\": 1}'")
        return RaySettings(
            address=None if address == LOCAL else address,
            agent_cpus=ray.agent_cpus,
            agent_resources={str(k): v for k, v in resources.items()},
            replicas=ray.replicas,
            gpus_per_replica=ray.gpus_per_replica,
            learner_ranks=ranks.learner_ranks,
            learner_sharding=ranks.learner_sharding,
            weights_transfer=ray.weights_transfer,
            advertise_host=ray.advertise_host,
        )
    except (orjson.JSONDecodeError, ValueError) as exc:
        raise SettingsError(f"tether {command}: {exc}") from None


def open_placement(settings: RunsAgents, command: str, console: Console) -> Placement:
    """The placement the settings ask for: Ray with `--ray` (joined now, before anything is enqueued),
    else this machine."""
    cluster_wanted = cluster_settings(settings, command)
    if cluster_wanted is None:
        return LocalPlacement()
    upstream = getattr(settings, "upstream", None)  # the commands that may call an upstream
    if upstream is not None and upstream.upstream and cluster_wanted.replicas:
        raise SettingsError(f"tether {command}: --replicas and --upstream exclude each other")
    if settings.server.policy_server and cluster_wanted.replicas:
        raise SettingsError(
            f"tether {command}: --replicas starts the servers; --policy-server names running ones: give one"
        )
    from tether.placement.ray import RayPlacement

    try:
        cluster = connect(cluster_wanted, local_cpus=actors_asked(settings))
    except RayUnavailable as exc:
        raise SettingsError(f"tether {command}: {exc}") from None
    if cluster.advertise_host in LOOPBACK and cluster.has_remote_nodes():
        console.print(
            f"[yellow]--advertise-host {cluster.advertise_host}: workers on other nodes cannot reach it[/]"
        )
    return RayPlacement(cluster, console)


def actors_asked(settings: RunsAgents) -> float:
    """CPUs the command's actors ask for: a local cluster is started with at least that many."""
    ray = settings.ray
    workers = (settings.agent.n_workers or 1) * ray.agent_cpus
    learner_ranks = ray.learner_ranks if isinstance(ray, TrainRaySettings) else 1
    return workers + ray.replicas + learner_ranks
