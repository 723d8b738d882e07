"""`--ray` and its options for the commands that run agents (`rollout`, `train`, `optimize-prompt`):
the placement they ask for, connected before anything is enqueued."""

from __future__ import annotations

import argparse

import orjson
from rich.console import Console

from tether.placement.base import LocalPlacement, Placement
from tether.ray.cluster import LOOPBACK, RaySettings, RayUnavailable, connect

LOCAL = "local"  # `--ray` with no address


def settings_of(args: argparse.Namespace, command: str) -> RaySettings | None:
    """The settings `--ray` and its options give, or None without `--ray` (a one-line error if bad)."""
    address = getattr(args, "ray", None)
    if address is None:
        return None
    try:
        resources = orjson.loads(args.agent_resources) if args.agent_resources else {}
        if not isinstance(resources, dict):
            raise ValueError("--agent-resources must be a JSON object, e.g. '{\"sandbox\": 1}'")
        return RaySettings(
            address=None if address == LOCAL else address,
            agent_cpus=args.agent_cpus,
            agent_resources={str(k): v for k, v in resources.items()},
            replicas=args.replicas,
            gpus_per_replica=args.gpus_per_replica,
            learner_ranks=getattr(args, "learner_ranks", 1),
            learner_sharding=getattr(args, "learner_sharding", "replicate"),
            weights_transfer=args.weights_transfer,
            advertise_host=args.advertise_host,
        )
    except (orjson.JSONDecodeError, ValueError) as exc:
        raise SystemExit(f"tether {command}: {exc}") from None


def open_placement(args: argparse.Namespace, command: str, console: Console) -> Placement:
    """The placement the command line asks for: Ray with `--ray` (joined now, before anything is
    enqueued), else this machine."""
    settings = settings_of(args, command)
    if settings is None:
        return LocalPlacement()
    if getattr(args, "upstream", None) and settings.replicas:
        raise SystemExit(f"tether {command}: --replicas and --upstream exclude each other")
    if getattr(args, "policy_server", None) and settings.replicas:
        raise SystemExit(
            f"tether {command}: --replicas starts the servers; --policy-server names running ones: give one"
        )
    from tether.placement.ray import RayPlacement

    try:
        cluster = connect(settings, local_cpus=actors_asked(args))
    except RayUnavailable as exc:
        raise SystemExit(f"tether {command}: {exc}") from None
    if cluster.advertise_host in LOOPBACK and cluster.has_remote_nodes():
        console.print(
            f"[yellow]--advertise-host {cluster.advertise_host}: workers on other nodes cannot reach it[/]"
        )
    return RayPlacement(cluster, console)


def actors_asked(args: argparse.Namespace) -> float:
    """CPUs the command's actors ask for: a local cluster is started with at least that many."""
    workers = (getattr(args, "n_workers", None) or 1) * getattr(args, "agent_cpus", 1.0)
    return workers + getattr(args, "replicas", 0) + getattr(args, "learner_ranks", 1)
