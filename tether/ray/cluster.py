"""Connecting to a Ray cluster, the address other nodes reach this one at, and the placement report.

    settings = RaySettings(address="auto", agent_cpus=1, replicas=2)
    cluster = connect(settings)          # a one-line RayUnavailable when Ray is missing or unreachable
    cluster.advertise_host               # what agents and workers on other nodes are given, never 127.0.0.1

`address=None` starts a local cluster in this process; `"auto"` joins the one `RAY_ADDRESS` (or a
running `ray start --head` on this machine) names; anything else is a cluster address (`HOST:PORT`,
`ray://HOST:PORT`).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.contracts import LEARNER_SHARDINGS

LOOPBACK = ("127.0.0.1", "localhost", "::1")


class RayUnavailable(RuntimeError):
    """Ray is not installed, or the cluster cannot be reached; the message names the fix."""


WEIGHT_TRANSFERS = ("auto", "path", "stream")  # `--weights-transfer` (tether.ray.transfer)


@dataclass(frozen=True)
class RaySettings:
    """What `--ray` and its companion options ask for."""

    address: str | None = None  # None: start a local cluster; "auto": the one RAY_ADDRESS names
    agent_cpus: float = 1.0  # CPUs each agent slot reserves: a worker actor holds one slot
    agent_resources: dict[str, float] = field(default_factory=dict)  # custom resources per agent slot
    replicas: int = 0  # policy-server replica actors (0: serve from this process, as without Ray)
    gpus_per_replica: float | None = None  # None: 1 where the cluster has GPUs, else 0
    learner_ranks: int = 1  # ranks of the learner (1 and no --ray learner: the local learner)
    learner_sharding: str = "replicate"  # or "fsdp": FSDP2, for models that do not fit on one device
    weights_transfer: str = "auto"  # how weights and checkpoints reach actors: auto (probe), path, stream
    advertise_host: str | None = None  # default: this node's IP as Ray sees it

    def __post_init__(self) -> None:
        if self.agent_cpus < 0 or self.replicas < 0 or self.learner_ranks < 1:
            raise ValueError("--agent-cpus and --replicas must be >= 0, --learner-ranks >= 1")
        if self.weights_transfer not in WEIGHT_TRANSFERS:
            raise ValueError(
                f"--weights-transfer must be one of {WEIGHT_TRANSFERS}, not {self.weights_transfer!r}"
            )
        if self.learner_sharding not in LEARNER_SHARDINGS:
            raise ValueError(
                f"--learner-sharding must be one of {LEARNER_SHARDINGS}, not {self.learner_sharding!r}"
            )
        if self.learner_sharding == "fsdp" and self.learner_ranks < 2:
            raise ValueError("--learner-sharding fsdp shards over ranks: give --learner-ranks 2 or more")
        if self.gpus_per_replica is not None and self.gpus_per_replica < 0:
            raise ValueError("--gpus-per-replica must be >= 0")
        bad = [k for k, v in self.agent_resources.items() if not isinstance(v, int | float) or v < 0]
        if bad:
            raise ValueError(f"--agent-resources: {bad[0]!r} needs a non-negative number")


@dataclass(frozen=True)
class RayCluster:
    """A connected cluster: where this (the head's) process runs and what the cluster holds."""

    settings: RaySettings
    node_id: str
    node_ip: str
    advertise_host: str
    started_here: bool  # a local cluster this process started (and shuts down)

    @property
    def bind_host(self) -> str:
        """Where the gateway listens: the advertised host, so that other nodes reach it."""
        return self.advertise_host

    def total(self, resource: str) -> float:
        import ray

        return float(ray.cluster_resources().get(resource, 0.0))

    def has_remote_nodes(self) -> bool:
        import ray

        return any(node["Alive"] and node["NodeID"] != self.node_id for node in ray.nodes())

    def gpus_per_replica(self) -> float:
        if self.settings.gpus_per_replica is not None:
            return self.settings.gpus_per_replica
        return 1.0 if self.total("GPU") >= 1 else 0.0

    def shutdown(self) -> None:
        import ray

        if ray.is_initialized():
            ray.shutdown()


def connect(settings: RaySettings, *, local_cpus: float | None = None) -> RayCluster:
    """Join (or start) the cluster `settings.address` names. Raises RayUnavailable in one line."""
    try:
        import ray
    except ImportError:
        raise RayUnavailable(
            "--ray needs Ray: install it with pip install -e '.[ray]' (or make setup)"
        ) from None
    started_here = settings.address is None
    address = settings.address
    if address == "auto":
        address = os.environ.get("RAY_ADDRESS") or "auto"
    if not ray.is_initialized():
        _probe(address)
        try:
            ray.init(**_init_args(address, local_cpus))
        except (ConnectionError, RuntimeError, ValueError, TimeoutError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise RayUnavailable(
                f"cannot reach the Ray cluster at {address or 'a new local cluster'}: {first} "
                "(start one with `ray start --head`, or drop the address to start a local one)"
            ) from None
    context = ray.get_runtime_context()
    node_ip = ray.util.get_node_ip_address()
    advertise = settings.advertise_host or node_ip
    return RayCluster(settings, context.get_node_id(), node_ip, advertise, started_here)


def _probe(address: str | None, timeout_s: float = 5.0) -> None:
    """Fail fast on an address nothing listens at (Ray itself would retry for minutes)."""
    if address is None or address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise RayUnavailable(f"--ray {address}: expected HOST:PORT (or auto, or no address)")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise RayUnavailable(
            f"cannot reach the Ray cluster at {address}: {exc.strerror or exc} (is `ray start --head` "
            "running there? drop the address to start a local cluster)"
        ) from None


def _init_args(address: str | None, local_cpus: float | None) -> dict[str, Any]:
    args: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "logging_level": "warning"}
    if address is None:
        cpus = max(float(os.cpu_count() or 1), local_cpus or 0.0)
        args["num_cpus"] = int(cpus)  # logical CPUs: enough for every actor asked for
        # "local" starts a cluster of its own: without it Ray joins $RAY_ADDRESS or the cluster that
        # `ray start` last recorded on this machine, which then refuses num_cpus.
        args["address"] = "local"
    else:
        args["address"] = address
    return args


# -- placement ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ActorPlacement:
    """Where one actor runs."""

    role: str  # "rollout worker 3", "replica 0", "learner rank 1"
    node_id: str
    node_ip: str
    cpus: float
    gpus: float


def where_am_i(cpus: float, gpus: float) -> dict[str, Any]:
    """Called inside an actor: its node and the resources it holds."""
    import ray

    return {
        "node_id": ray.get_runtime_context().get_node_id(),
        "node_ip": ray.util.get_node_ip_address(),
        "cpus": cpus,
        "gpus": gpus,
    }


def placement_of(role: str, where: dict[str, Any]) -> ActorPlacement:
    return ActorPlacement(role, where["node_id"], where["node_ip"], where["cpus"], where["gpus"])


def placement_table(placements: Sequence[ActorPlacement]) -> list[str]:
    """Lines for the start-up report: one per actor, grouped by node."""
    lines = []
    for p in sorted(placements, key=lambda p: (p.node_ip, p.node_id, p.role)):
        gpus = f", {p.gpus:g} GPU" if p.gpus else ""
        lines.append(f"{p.role:<18} node {p.node_ip} ({p.node_id[:8]}): {p.cpus:g} CPU{gpus}")
    return lines


def node_label(node_id: str, node_ip: str) -> str:
    """How a node is named in worker ids and metrics: `ray:IP:ID8` (no '/' nor '-' in it)."""
    return f"ray:{node_ip}:{node_id[:8]}"
