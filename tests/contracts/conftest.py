"""The backends the contract kits run on: one list per seam, one entry per backend.

As in the store's conformance suite (tests/store), every test of a kit runs on every entry of its list,
so a new backend is checked by the same tests as the existing ones by adding one entry: a function that
opens it (pulling in any session fixture it needs through `request`) and the marks of the real
dependencies it brings in. tests/conftest.py marks a test from the fixtures it names; these are pulled in
at run time, so each entry carries its marks itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.learner_rig import transition as rig_transition
from tests.learner_rig import transitions as rig_transitions
from tether.adapters.transitions import Transition
from tether.algorithms.advantages import AdvantageBatch, assign_advantages
from tether.gateway.upstreams import Upstream
from tether.learner.base import Learner, open_learner
from tether.learner.config import TrainConfig
from tether.models.catalog import SMOLLM2, TINY_RANDOM
from tether.policy_server import (
    OpenAIOptions,
    PolicyServer,
    PolicyServerOptions,
    PolicyWeights,
    VLLMOptions,
    open_policy_server,
)
from tether.runner.pools import pool_factory
from tether.runner.runner import PoolFactory
from tether.store import SQLiteStore
from tether.store.auth import TokenAuthority

# -- policy servers ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerKind:
    open: Callable[[pytest.FixtureRequest], PolicyServer]
    model: str  # the base model it serves: the learner trains the LoRA versions it loads on it
    trains: bool = True  # loads trained weights (the `openai` kind serves a model Tether does not manage)
    several: bool = False  # serves several policies side by side (`ServesSeveralPolicies`)
    tolerance: float = 1e-4  # how far its logprobs may be from the learner's, per token


def _builtin(request: pytest.FixtureRequest) -> PolicyServer:
    return open_policy_server("builtin", PolicyServerOptions(model=TINY_RANDOM))


def _openai(request: pytest.FixtureRequest) -> PolicyServer:
    url = request.getfixturevalue("upstream_url")  # the scriptable OpenAI-compatible fake (tests/gateway)
    return open_policy_server("openai", PolicyServerOptions(model=TINY_RANDOM, openai=OpenAIOptions(url)))


def _ray_replicas(request: pytest.FixtureRequest) -> PolicyServer:
    """`--ray --replicas 1` (not a registry kind: the placement wraps one): the built-in kind in a replica
    actor on the session's Ray cluster."""
    from tether.policy_server.ray_replicas import ReplicaSet
    from tether.ray.cluster import RaySettings, connect

    address = request.getfixturevalue("ray_cluster").address
    cluster = connect(RaySettings(address=address, replicas=1))
    return ReplicaSet(cluster, "builtin", PolicyServerOptions(model=TINY_RANDOM), 1, 0.0)


def _vllm(request: pytest.FixtureRequest) -> PolicyServer:
    """A server object of its own over the session's vLLM (started once, slowly: `vllm_server`), connected
    as `--policy-server URL` is: it starts at version 0 and unloads only its own adapters when closed."""
    url = request.getfixturevalue("vllm_server").replicas[0].base_url
    options = PolicyServerOptions(model=SMOLLM2, policies=2, vllm=VLLMOptions(urls=(url,)))
    return open_policy_server("vllm", options)


POLICY_SERVERS = [
    pytest.param(ServerKind(_builtin, TINY_RANDOM, several=True), id="builtin"),
    pytest.param(ServerKind(_openai, TINY_RANDOM, trains=False), id="openai"),
    pytest.param(ServerKind(_ray_replicas, TINY_RANDOM), id="ray-replicas", marks=pytest.mark.ray),
    # Another engine's kernels: its logprobs are the learner's to a few hundredths (as tests/policy_server
    # allows a vLLM teacher's).
    pytest.param(
        ServerKind(_vllm, SMOLLM2, several=True, tolerance=0.05),
        id="vllm",
        marks=(pytest.mark.vllm, pytest.mark.smollm2),
    ),
]


async def _open_server(request: pytest.FixtureRequest) -> AsyncIterator[tuple[ServerKind, PolicyServer]]:
    """Opened and closed as a command does: the gateway closes the upstream's connections when it stops
    (on the test's event loop here), then the command closes the server."""
    kind: ServerKind = request.param
    server = kind.open(request)
    yield kind, server
    await server.upstream().aclose()
    server.close()


@pytest.fixture(params=POLICY_SERVERS)
async def served(request: pytest.FixtureRequest) -> AsyncIterator[tuple[ServerKind, PolicyServer]]:
    """A fresh policy server of each kind."""
    async for opened in _open_server(request):
        yield opened


@pytest.fixture(params=[p for p in POLICY_SERVERS if p.values[0].trains])
async def trained(request: pytest.FixtureRequest) -> AsyncIterator[tuple[ServerKind, PolicyServer]]:
    """A fresh policy server of each kind that loads trained weights."""
    async for opened in _open_server(request):
        yield opened


@pytest.fixture(params=[p for p in POLICY_SERVERS if not p.values[0].trains])
async def fixed(request: pytest.FixtureRequest) -> AsyncIterator[tuple[ServerKind, PolicyServer]]:
    """A fresh policy server of each kind that serves a model Tether does not train."""
    async for opened in _open_server(request):
        yield opened


@pytest.fixture(params=[p for p in POLICY_SERVERS if p.values[0].several])
async def several(request: pytest.FixtureRequest) -> AsyncIterator[tuple[ServerKind, PolicyServer]]:
    """A fresh policy server of each kind that serves several policies."""
    async for opened in _open_server(request):
        yield opened


# -- what the learner saves for a server to load ---------------------------------------------------------


def transition(
    rollout: str, response: list[int], reward: float, *, extra: int = 0, call: int = 0
) -> Transition:
    return rig_transition(rollout, response, reward, call=call, extra=extra, logprob=0.0)


def transitions() -> list[Transition]:
    return rig_transitions(logprob=0.0)


def on_policy_batch(learner: Learner, items: list[Transition] | None = None) -> AdvantageBatch:
    """The batch as the engine would have recorded it: the learner's own logprobs as the behaviour's."""
    items = transitions() if items is None else items
    for item, logprobs in zip(items, learner.logprobs(items), strict=True):
        item.response_logprobs = logprobs
    return assign_advantages(items)


async def served_logprobs(upstream: Upstream, sample: Transition) -> tuple[list[float], int | None]:
    """What `upstream` serves: its logprobs of `sample`'s response tokens after its prompt (vLLM's
    `prompt_logprobs`, which the built-in engine answers too), and the version the call was recorded with."""
    ids = sample.prompt_ids + sample.response_ids
    body = {"prompt": ids, "max_tokens": 1, "temperature": 1.0, "prompt_logprobs": 0}
    record = await upstream.call("completions", body, owner="contract")
    entries = record.response["choices"][0]["prompt_logprobs"][len(sample.prompt_ids) :]
    pairs = zip(sample.response_ids, entries, strict=True)
    return [entry[str(token)]["logprob"] for token, entry in pairs], record.policy_version


def gap(a: list[float], b: list[float]) -> float:
    """The largest difference between two lists of logprobs of the same tokens."""
    assert len(a) == len(b)
    return max((abs(x - y) for x, y in zip(a, b, strict=True)), default=0.0)


@dataclass(frozen=True)
class Versions:
    """Two LoRA versions a learner saved, and its logprobs of `probe` at versions 0, 1 and 2."""

    weights: list[PolicyWeights]
    probe: Transition
    logprobs: list[list[float]]


@pytest.fixture(scope="session")
def learner_versions(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Versions]:
    """Per base model, once a session: the local learner's versions 1 and 2 (two steps apart)."""
    made: dict[str, Versions] = {}

    def versions_of(model: str) -> Versions:
        if model not in made:
            folder = tmp_path_factory.mktemp(f"versions-{model}")
            learner = open_learner("local", TrainConfig(model=model, lr=2e-2, bf16=False, seed=5))
            probe = transition("probe", [2131, 4387, 3658, 28, 9981], 0.0)
            logprobs = learner.logprobs([probe])
            weights = []
            for version in (1, 2):
                learner.step(on_policy_batch(learner))
                weights.append(learner.save_weights(folder / f"v{version}", version))
                logprobs += learner.logprobs([probe])
            made[model] = Versions(weights, probe, logprobs)
        return made[model]

    return versions_of


# -- learners ------------------------------------------------------------------------------------------


def _local_learner(request: pytest.FixtureRequest, config: TrainConfig) -> Learner:
    return open_learner("local", config)


def _ray_learner(request: pytest.FixtureRequest, config: TrainConfig) -> Learner:
    """`--learner-ranks 2`: two rank actors forming one gloo group on the session's Ray cluster."""
    from tether.learner.ray_learner import RayLearner
    from tether.ray.cluster import RaySettings, connect

    address = request.getfixturevalue("ray_cluster").address
    cluster = connect(RaySettings(address=address, learner_ranks=2))
    return RayLearner(config, 2, cluster)


LEARNERS = [
    pytest.param(_local_learner, id="local"),
    pytest.param(_ray_learner, id="ray-2-ranks", marks=pytest.mark.ray),
]


@pytest.fixture(params=LEARNERS)
def make_learner(request: pytest.FixtureRequest) -> Iterator[Callable[[TrainConfig], Learner]]:
    """Opens learners of one kind (a test may need two: one to checkpoint, one to resume)."""
    opened: list[Any] = []

    def make(config: TrainConfig) -> Learner:
        learner = request.param(request, config)
        opened.append(learner)
        return learner

    yield make
    for learner in opened:
        close = getattr(learner, "close", None)  # the protocol has none; the Ray learner's stops its actors
        if close is not None:
            close()


# -- worker pools --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PoolBackend:
    factory: PoolFactory  # what `Runner(..., pools=...)` takes
    host: str  # where the gateway must listen for the pool's agents to reach it


def _local_pool(request: pytest.FixtureRequest, authority: TokenAuthority) -> PoolBackend:
    return PoolBackend(pool_factory("local"), "127.0.0.1")


def _ray_pool(request: pytest.FixtureRequest, authority: TokenAuthority) -> PoolBackend:
    """Two rollout-worker actors, one agent slot on each node of the session's Ray cluster."""
    from tether.ray.cluster import RaySettings, connect
    from tether.runner.ray_pool import RayPool

    address = request.getfixturevalue("ray_cluster").address
    cluster = connect(RaySettings(address=address, agent_resources={"agent_slot": 1}))
    return PoolBackend(RayPool.factory(cluster, authority), cluster.bind_host)


POOLS = [
    pytest.param(_local_pool, id="local"),
    pytest.param(_ray_pool, id="ray", marks=pytest.mark.ray),
    # The Kubernetes pool (`--runner k8s`) needs a Kubernetes API server, which no test machine has.
]


@dataclass(frozen=True)
class PoolRig:
    backend: PoolBackend
    authority: TokenAuthority
    store: SQLiteStore
    folder: Path


@pytest.fixture(params=POOLS)
def pool_rig(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[PoolRig]:
    authority = TokenAuthority.generate()
    store = SQLiteStore(tmp_path / "store.db")
    yield PoolRig(request.param(request, authority), authority, store, tmp_path)
    store.close()
