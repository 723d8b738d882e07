"""What the commands (`rollout`, `train`, `optimize-prompt`) do with `--ray`: connect before anything is
enqueued, build the Ray pool and replicas, and print where every actor runs."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console

from tether.auth import TokenAuthority
from tether.contracts import POLICY_UPSTREAM
from tether.policy_server import PolicyServerOptions
from tether.ray.cluster import LOOPBACK, Placement, RayCluster, RaySettings, RayUnavailable, connect
from tether.ray.cluster import placement_table as table
from tether.ray.replicas import ReplicaSet
from tether.ray.workers import RayPool

LOCAL = "local"  # `--ray` with no address
log = logging.getLogger(__name__)


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


def open_cluster(args: argparse.Namespace, command: str, actors: float = 0) -> RayCluster | None:
    """Connect to the cluster `--ray` names, before anything is enqueued; None without `--ray`."""
    settings = settings_of(args, command)
    if settings is None:
        return None
    try:
        cluster = connect(settings, local_cpus=actors)
    except RayUnavailable as exc:
        raise SystemExit(f"tether {command}: {exc}") from None
    if cluster.advertise_host in LOOPBACK and cluster.has_remote_nodes():
        Console(stderr=True).print(
            f"[yellow]--advertise-host {cluster.advertise_host}: workers on other nodes cannot reach it[/]"
        )
    return cluster


def bind_host(cluster: RayCluster | None) -> str:
    """Where the gateway listens: loopback without Ray, the advertised host with it."""
    return "127.0.0.1" if cluster is None else cluster.bind_host


def pools(
    cluster: RayCluster | None, authority: TokenAuthority, console: Console
) -> Callable[..., RayPool] | None:
    """The runner's `pools` for `--ray` (None without it); each pool prints its placement once started."""
    if cluster is None:
        return None
    return RayPool.factory(cluster, authority, lambda placed, n: _announce(console, placed, n))


def _announce(console: Console, placed: Sequence[Placement], expected: int) -> None:
    pending = expected - len(placed)
    extra = [f"{pending} rollout worker(s) pending: no node has the resources they ask for"] * (pending > 0)
    report(console, placed, extra)


def replica_options(args: argparse.Namespace, kind: str, log_dir: Path | None = None) -> PolicyServerOptions:
    """What each replica actor opens its policy server with: one server per actor (vLLM: started on the
    actor's node, with the command's `--vllm-*` options)."""
    if kind != "vllm":
        return PolicyServerOptions(model=args.model, name=POLICY_UPSTREAM, max_batch_size=8)
    from tether.cli.common import policy_server_options

    if getattr(args, "policy_server", None):
        raise SystemExit(
            "tether: --replicas starts the servers; --policy-server names running ones: give one"
        )
    options = policy_server_options(args, POLICY_UPSTREAM, log_dir)
    return replace(options, replicas=1, port=0)


def replica_set(cluster: RayCluster, kind: str, options: PolicyServerOptions) -> ReplicaSet:
    return ReplicaSet(cluster, kind, options, cluster.settings.replicas, cluster.gpus_per_replica())


def policy(
    cluster: RayCluster | None, args: argparse.Namespace, console: Console
) -> AbstractContextManager[Any] | None:
    """The replicas' upstream when `--ray` asks for `--replicas`, else None (serve as without Ray)."""
    if cluster is None or not cluster.settings.replicas:
        return None
    if getattr(args, "upstream", None):
        raise SystemExit("tether: --replicas and --upstream exclude each other")
    kind = getattr(args, "engine", None) or "builtin"
    return replicated_policy(cluster, replica_options(args, kind), console, kind)


def actors_asked(args: argparse.Namespace) -> float:
    """CPUs the command's actors ask for: a local cluster is started with at least that many."""
    workers = (getattr(args, "n_workers", None) or 1) * getattr(args, "agent_cpus", 1.0)
    return workers + getattr(args, "replicas", 0) + getattr(args, "learner_ranks", 1)


def replica_server(
    cluster: RayCluster | None, args: argparse.Namespace, console: Console, kind: str, log_dir: Path
) -> ReplicaSet | None:
    """`tether train --replicas N`: the replicas as the trainer's policy server (None: its own)."""
    if cluster is None or not cluster.settings.replicas:
        return None
    options = replica_options(args, kind, log_dir)
    with console.status(f"starting {cluster.settings.replicas} {kind} replica(s) of {options.model} ..."):
        replicas = replica_set(cluster, kind, options)
        placed = replicas.placements()
    report(console, placed)
    return replicas


@contextmanager
def replicated_policy(
    cluster: RayCluster, options: PolicyServerOptions, console: Console, kind: str
) -> Iterator[Any]:
    """`--replicas N`: the replicas' sticky upstream, for as long as the command runs."""
    with console.status(f"starting {cluster.settings.replicas} {kind} replica(s) of {options.model} ..."):
        replicas = replica_set(cluster, kind, options)
        placed = replicas.placements()
    report(console, placed)
    try:
        yield replicas.upstream()
    finally:
        replicas.close()


def report(console: Console, placements: Sequence[Placement], extra: Sequence[str] = ()) -> None:
    """Print which actor runs where; workers Ray has not placed yet are said to be pending."""
    console.print("[bold]placement[/]")
    for line in table(placements):
        console.print(f"  {line}")
    for line in extra:
        console.print(f"  {line}")
