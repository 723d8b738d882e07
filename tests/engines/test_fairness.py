"""Fair admission across owners: one rollout's long requests do not starve another's short one."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.rigs import GatewayRig, make_engine_rig
from tether.engines import GenerationDone, SamplingParams
from tether.engines.transformers_engine import TransformersEngine

LONG = SamplingParams(max_tokens=300, temperature=0)
SHORT = SamplingParams(max_tokens=1, temperature=0)
# Fair admission measures 2 to 3; first come, first served 300 to 700 (see docs/benchmarks.md).
MAX_LATENCY_RATIO = 20
ROUNDS = 3
LIGHT_OWNERS = 4


def prompt_of(engine: TransformersEngine, text: str) -> list[int]:
    return engine.chat_prompt_ids([{"role": "user", "content": text}])


async def wait_idle(engine: TransformersEngine) -> None:
    while engine._model_lock.locked():
        await asyncio.sleep(0.01)


class Load:
    """Heavy owners that keep `per_owner` long generations each in the engine until stopped."""

    def __init__(self, engine: TransformersEngine, owners: list[str], per_owner: int) -> None:
        self.engine = engine
        self.prompt = prompt_of(engine, "write a long story")
        self.full = asyncio.Event()
        self.finished = 0
        self._first_tokens = 0
        self._rows_to_fill = engine.max_batch_size
        self._tasks = [asyncio.create_task(self._keep_busy(o)) for o in owners for _ in range(per_owner)]

    async def _keep_busy(self, owner: str) -> None:
        while True:
            first = True
            async for item in self.engine.stream(self.prompt, LONG, owner=owner):
                if first:
                    first = False
                    self._first_tokens += 1
                    if self._first_tokens >= self._rows_to_fill:
                        self.full.set()
                if isinstance(item, GenerationDone):
                    self.finished += 1

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await wait_idle(self.engine)


async def short_latencies(engine: TransformersEngine, prompt: list[int]) -> list[float]:
    """One round: each light owner sends one short request at once; their latencies in seconds."""

    async def one(owner: str) -> float:
        start = time.perf_counter()
        await engine.generate(prompt, SHORT, owner=owner)
        return time.perf_counter() - start

    return list(await asyncio.gather(*(one(f"light-{i}") for i in range(LIGHT_OWNERS))))


async def test_short_request_is_not_starved_by_long_ones(engine: TransformersEngine) -> None:
    await wait_idle(engine)
    prompt = prompt_of(engine, "short")
    await short_latencies(engine, prompt)  # warm-up
    unloaded = [t for _ in range(ROUNDS) for t in await short_latencies(engine, prompt)]

    # Two owners keep 8 long generations each in flight: the batch is full and 8 more wait.
    load = Load(engine, ["heavy-a", "heavy-b"], per_owner=engine.max_batch_size)
    try:
        await load.full.wait()
        loaded = []
        for _ in range(ROUNDS):
            loaded += await short_latencies(engine, prompt)
        finished_meanwhile = load.finished
    finally:
        await load.stop()

    ratio = statistics.median(loaded) / statistics.median(unloaded)
    print(f"short-request latency under load / unloaded: {ratio:.1f}")
    assert ratio <= MAX_LATENCY_RATIO, (ratio, loaded, unloaded)
    assert finished_meanwhile == 0  # the short requests went through while the long ones ran


async def test_newcomer_starts_before_a_busy_owners_waiting_requests(engine: TransformersEngine) -> None:
    """Owner b's requests start at the next step (b0 in a row beyond the slots), before the requests
    owner a has waiting; each owner's requests start in the order they were sent."""
    engine = engine
    await wait_idle(engine)
    slots = engine.max_batch_size
    prompt = prompt_of(engine, "write a long story")
    started: list[str] = []
    batch_full = asyncio.Event()

    async def generate(label: str, owner: str, params: SamplingParams) -> None:
        async for _ in engine.stream(prompt, params, owner=owner):
            if label not in started:
                started.append(label)
            if len(started) == slots:
                batch_full.set()

    long = SamplingParams(max_tokens=100, temperature=0)
    busy = [asyncio.create_task(generate(f"a{i}", "a", long)) for i in range(slots + 4)]
    await batch_full.wait()
    newcomer = [asyncio.create_task(generate(f"b{i}", "b", SHORT)) for i in range(2)]
    await asyncio.gather(*busy, *newcomer)

    assert started == [f"a{i}" for i in range(slots)] + ["b0", "b1"] + [
        f"a{i}" for i in range(slots, slots + 4)
    ]


@pytest.fixture
def gateway_rig(tmp_path: Path, engine: TransformersEngine) -> Iterator[GatewayRig]:
    """The gateway in front of this folder's engine, which no test gives an adapter: greedy outputs stay
    those of the base model, which runs the long prompt to its length."""
    yield from make_engine_rig(tmp_path, engine)


async def test_gateway_passes_the_rollout_as_owner(
    gateway_rig: GatewayRig, engine: TransformersEngine
) -> None:
    """A rollout's one-token call is answered while another rollout's 16 long calls all still run."""
    await wait_idle(engine)
    _, heavy_url, heavy_key = gateway_rig.session()
    _, light_url, light_key = gateway_rig.session()
    heavy = openai.AsyncOpenAI(base_url=heavy_url, api_key=heavy_key, max_retries=0)
    light = openai.AsyncOpenAI(base_url=light_url, api_key=light_key, max_retries=0)
    messages = [{"role": "user", "content": "write a long story"}]
    generating = 0
    batch_full = asyncio.Event()
    finished: list[str] = []

    async def long_call() -> None:
        nonlocal generating
        stream = await heavy.chat.completions.create(
            model="policy", messages=messages, max_tokens=LONG.max_tokens, temperature=0, stream=True
        )
        chunks = 0
        async for _ in stream:
            chunks += 1
            if chunks == 2:  # the first chunk (the role) comes before any token
                generating += 1
                if generating >= engine.max_batch_size:
                    batch_full.set()
        finished.append("heavy")

    heavy_calls = [asyncio.create_task(long_call()) for _ in range(2 * engine.max_batch_size)]
    try:
        await batch_full.wait()
        reply = await light.chat.completions.create(
            model="policy", messages=[{"role": "user", "content": "hi"}], max_tokens=1, temperature=0
        )
        finished.append("light")
        assert reply.choices[0].finish_reason in ("length", "stop")
        assert finished == ["light"]
    finally:
        for task in heavy_calls:
            task.cancel()
        await asyncio.gather(*heavy_calls, return_exceptions=True)
        await heavy.close()
        await light.close()
        await wait_idle(engine)
