"""One real Ray cluster for every test here: a head and one worker node, each with one `agent_slot`
(so two agent slots land one per node) and 4 logical CPUs. Starting Ray is slow on small machines, so
the cluster is started once and tests join it as drivers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import ray
from ray.cluster_utils import Cluster

NODE_CPUS = 4


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Cluster]:
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": NODE_CPUS,
            "resources": {"agent_slot": 1, "kill_slot": 1},
            "include_dashboard": False,
        },
    )
    cluster.add_node(num_cpus=NODE_CPUS, resources={"agent_slot": 1})
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    yield cluster
    ray.shutdown()
    cluster.shutdown()
