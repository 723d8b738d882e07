"""A prompt computed once: identical prompts admitted together prefill once, and later prompts that
extend a cached one (a group's late samples, the next turn, a shared system prompt) prefill only what is
new, with the same tokens and logprobs as a full prefill."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tests.engines.test_transformers_engine import (
    assert_close,
    make_adapter,
    peft_reference,
    reference_logprobs,
    start_in_background,
)
from tether.engines import Generation, SamplingParams
from tether.engines.base import DEFAULT_POLICY
from tether.engines.prefix_cache import MISS, PrefixCache
from tether.engines.transformers_engine import DEFAULT_PREFIX_CACHE_MB, TransformersEngine

GREEDY = SamplingParams(max_tokens=12, temperature=0)
SYSTEM = "You are a careful assistant who answers in one short sentence, citing nothing."


def chat(engine: TransformersEngine, question: str) -> list[int]:
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    return engine.chat_prompt_ids(messages)


def common_prefix(first: list[int], second: list[int]) -> int:
    shared = 0
    while shared < min(len(first), len(second)) and first[shared] == second[shared]:
        shared += 1
    return shared


@pytest.fixture
def cached(tiny_path: Path) -> Iterator[TransformersEngine]:
    engine = TransformersEngine(str(tiny_path), max_batch_size=8, prefix_cache_mb=64)
    yield engine
    engine.close()


@pytest.fixture
def uncached(tiny_path: Path) -> Iterator[TransformersEngine]:
    engine = TransformersEngine(str(tiny_path), max_batch_size=8, prefix_cache_mb=0)
    yield engine
    engine.close()


async def settled_stats(engine: TransformersEngine) -> dict[str, int]:
    """The stats once the worker is idle: it keeps a finished row's prefix after sending its result."""
    while engine._model_lock.locked():
        await asyncio.sleep(0.01)
    return engine.prefill_stats()


def delta(engine: TransformersEngine, before: dict[str, int]) -> dict[str, int]:
    return {key: value - before[key] for key, value in engine.prefill_stats().items()}


def assert_same(got: Generation, expected: Generation) -> None:
    assert got.token_ids == expected.token_ids
    assert_close(got.logprobs, expected.logprobs)


async def test_a_group_sent_together_prefills_its_prompt_once(
    cached: TransformersEngine, uncached: TransformersEngine, reference_model
) -> None:
    prompt = chat(cached, "name a colour")
    sampled = [SamplingParams(max_tokens=12, temperature=1.0, seed=seed) for seed in range(3)]
    group = [GREEDY] * 3 + sampled
    together = await asyncio.gather(*(cached.generate(prompt, params) for params in group))
    stats = cached.prefill_stats()
    assert stats["prompt_tokens"] == len(group) * len(prompt)
    assert stats["prefilled_tokens"] == len(prompt)
    assert stats["shared_tokens"] == (len(group) - 1) * len(prompt)
    alone = await uncached.generate(prompt, GREEDY)
    for generation, params in zip((g for g, _ in together), group, strict=True):
        expected = reference_logprobs(reference_model, prompt, generation.token_ids, params.sampler)
        assert_close(generation.logprobs, expected)
        if params.temperature == 0:
            assert_same(generation, alone[0])
    for seed, (generation, _) in zip(range(3), together[3:], strict=True):
        again, _ = await uncached.generate(prompt, SamplingParams(max_tokens=12, temperature=1.0, seed=seed))
        assert generation.token_ids == again.token_ids  # each row keeps its own generator


async def test_a_prompt_sent_again_prefills_only_its_last_token(
    cached: TransformersEngine, uncached: TransformersEngine
) -> None:
    prompt = chat(cached, "name a colour")
    first, _ = await cached.generate(prompt, GREEDY)
    before = cached.prefill_stats()
    second, _ = await cached.generate(prompt, GREEDY)
    assert delta(cached, before)["cached_tokens"] == len(prompt) - 1
    assert delta(cached, before)["prefilled_tokens"] == 1
    expected, _ = await uncached.generate(prompt, GREEDY)
    assert_same(first, expected)
    assert_same(second, expected)


async def test_the_next_turn_reuses_the_previous_prompt_and_response(
    cached: TransformersEngine, uncached: TransformersEngine, reference_model
) -> None:
    prompt = chat(cached, "tell me a story")
    first, _ = await cached.generate(prompt, GREEDY)
    turn = prompt + first.token_ids + cached.encode("<|im_start|>user\nand then?<|im_end|>\n")
    before = cached.prefill_stats()
    second, _ = await cached.generate(turn, GREEDY)
    # Every token fed to the model so far: the last one sampled was never fed back.
    assert delta(cached, before)["cached_tokens"] == len(prompt) + len(first.token_ids) - 1
    expected, _ = await uncached.generate(turn, GREEDY)
    assert_same(second, expected)
    assert_close(second.logprobs, reference_logprobs(reference_model, turn, second.token_ids))


async def test_prompts_sharing_a_system_prompt_reuse_it(
    cached: TransformersEngine, uncached: TransformersEngine
) -> None:
    questions = ["name a colour", "name a country", "what is two plus two"]
    prompts = [chat(cached, question) for question in questions]
    fed: list[list[int]] = []
    for prompt in prompts:
        before = cached.prefill_stats()
        generation, _ = await cached.generate(prompt, GREEDY)
        shared = max((common_prefix(prompt, tokens) for tokens in fed), default=0)
        assert delta(cached, before)["cached_tokens"] == min(shared, len(prompt) - 1)
        fed.append(prompt + generation.token_ids[:-1])
        assert_same(generation, (await uncached.generate(prompt, GREEDY))[0])
    assert common_prefix(prompts[0], prompts[1]) > 20
    # Mixed lengths of cached prefix in one batch: holes in the middle of the attention mask.
    later = [chat(cached, question) for question in ["name a fruit", "name a colour", "hi"]]
    together = await asyncio.gather(*(cached.generate(prompt, GREEDY) for prompt in later + prompts))
    for prompt, (generation, _) in zip(later + prompts, together, strict=True):
        assert_same(generation, (await uncached.generate(prompt, GREEDY))[0])
    assert (await settled_stats(uncached))["cached_tokens"] == 0
    assert uncached.prefill_stats()["prefix_entries"] == 0


async def test_a_budget_too_small_for_any_entry_keeps_nothing(
    tiny_path: Path, uncached: TransformersEngine
) -> None:
    engine = TransformersEngine(str(tiny_path), prefix_cache_mb=0.001)
    try:
        prompt = chat(engine, "name a colour")
        for _ in range(2):
            generation, _ = await engine.generate(prompt, GREEDY)
            assert_same(generation, (await uncached.generate(prompt, GREEDY))[0])
        stats = await settled_stats(engine)
        assert stats["cached_tokens"] == 0 and stats["prefix_entries"] == 0 and stats["prefix_bytes"] == 0
        assert stats["prefilled_tokens"] == 2 * len(prompt)
    finally:
        engine.close()


async def test_a_small_budget_evicts_the_least_recently_used(tiny_path: Path) -> None:
    engine = TransformersEngine(
        str(tiny_path), prefix_cache_mb=0.08
    )  # 160 tokens of the tiny model: two entries
    try:
        prompts = [chat(engine, f"question number {i} " * 4) for i in range(6)]
        for prompt in prompts:
            await engine.generate(prompt, GREEDY)
            assert (await settled_stats(engine))["prefix_bytes"] <= 0.08 * 2**20
        assert 0 < engine.prefill_stats()["prefix_entries"] < len(prompts)
        before = engine.prefill_stats()
        await engine.generate(prompts[-1], GREEDY)  # the newest is still held
        assert delta(engine, before)["cached_tokens"] == len(prompts[-1]) - 1
    finally:
        engine.close()


async def test_bf16_entries_keep_the_caches_dtype(tiny_path: Path) -> None:
    """In bf16 the cached keys and values stay bf16, and a cached prefix moves logprobs by bf16 noise only
    (a batched prefill against a lone one moves them as much)."""
    engines = [TransformersEngine(str(tiny_path), dtype="bfloat16", prefix_cache_mb=mb) for mb in (64, 0)]
    try:
        prompt = chat(engines[0], "name a colour")
        first, _ = await engines[0].generate(prompt, GREEDY)
        turn = prompt + first.token_ids + engines[0].encode("and another?")
        (with_cache, _), (without, _) = [await engine.generate(turn, GREEDY) for engine in engines]
        assert engines[0].prefill_stats()["cached_tokens"] > len(prompt)
        assert {entry.keys[0].dtype for entry in engines[0]._prefixes._entries.values()} == {torch.bfloat16}
        shared = common_prefix(with_cache.token_ids, without.token_ids)
        assert shared >= 1
        assert_close(with_cache.logprobs[:shared], without.logprobs[:shared], tol=0.1)
    finally:
        for engine in engines:
            engine.close()


async def test_an_adapter_swap_never_serves_the_old_versions_prefix(
    cached: TransformersEngine, tiny_path: Path, tmp_path: Path
) -> None:
    first = make_adapter(tiny_path, tmp_path / "a1", seed=1)
    second = make_adapter(tiny_path, tmp_path / "a2", seed=2)
    prompt = chat(cached, "adapt")
    await cached.generate(prompt, GREEDY)
    in_flight, started = start_in_background(cached, prompt, SamplingParams(max_tokens=100, temperature=0))
    await started.wait()
    assert await cached.aload_adapter(str(first)) == 1  # waits for the base model's row to finish
    assert (await in_flight)[1] == 0
    assert cached.prefill_stats()["prefix_entries"] == 0
    before = cached.prefill_stats()
    adapted, version = await cached.generate(prompt, GREEDY)
    assert version == 1 and delta(cached, before)["cached_tokens"] == 0
    assert_close(
        adapted.logprobs, reference_logprobs(peft_reference(tiny_path, first), prompt, adapted.token_ids)
    )

    assert cached.load_adapter(str(second), policy_version=1) == 1  # same number, other weights
    before = cached.prefill_stats()
    swapped, _ = await cached.generate(prompt, GREEDY)
    assert delta(cached, before)["cached_tokens"] == 0
    expected = reference_logprobs(peft_reference(tiny_path, second), prompt, swapped.token_ids)
    assert_close(swapped.logprobs, expected)


async def test_policies_in_one_batch_use_only_their_own_prefixes(
    cached: TransformersEngine, tiny_path: Path, tmp_path: Path, reference_model
) -> None:
    writer = make_adapter(tiny_path, tmp_path / "writer", seed=1)
    assert cached.load_adapter(str(writer), policy="writer") == 1
    writer_model = peft_reference(tiny_path, writer)
    prompt = chat(cached, "write something")
    await cached.generate(prompt, GREEDY)  # the default policy's prompt only
    policies = ["writer", DEFAULT_POLICY, "writer", DEFAULT_POLICY, "other"]
    # First round: only the default policy's rows start from a cached prefix; the second round, all.
    for cached_prompts in (1, 3):
        before = cached.prefill_stats()
        together = await asyncio.gather(*(cached.generate(prompt, GREEDY, policy=p) for p in policies))
        for policy, (generation, _) in zip(policies, together, strict=True):
            model = writer_model if policy == "writer" else reference_model
            assert_close(generation.logprobs, reference_logprobs(model, prompt, generation.token_ids))
        counts = delta(cached, before)
        assert counts["cached_tokens"] == cached_prompts * (len(prompt) - 1)
        assert counts["prefilled_tokens"] + counts["cached_tokens"] == 3 * len(prompt)
        assert counts["shared_tokens"] == 2 * len(prompt)


def test_the_builtin_server_passes_its_budget_to_the_engine(tiny_path: Path) -> None:
    from tether.cli.main import build_parser
    from tether.cli.options import settings_from_args
    from tether.experiment.serving import policy_server_options
    from tether.policy_server.builtin.server import BuiltinPolicyServer

    parser = build_parser()
    for flags, budget in (
        ([], DEFAULT_PREFIX_CACHE_MB),
        (["--prefix-cache-mb", "0"], 0),
        (["--prefix-cache-mb", "1.5"], 1.5),
    ):
        settings = settings_from_args(parser.parse_args(["serve", *flags]))
        options = policy_server_options(settings.server, None, None, "policy", None).builtin
        server = BuiltinPolicyServer(str(tiny_path), options)
        try:
            assert server.engine._prefixes.budget == int(budget * 2**20)
            assert server.prefill_stats()["prefix_entries"] == 0
        finally:
            server.close()


class FakeLayer:
    """One layer of a batch cache of one row, whose keys at column t are all t (values: -t)."""

    def __init__(self, width: int) -> None:
        columns = torch.arange(width, dtype=torch.float32)[None, None, :, None].expand(1, 2, width, 4)
        self.keys, self.values = columns.clone(), -columns.clone()


def keep(cache: PrefixCache, tokens: list[int], policy: str = "p", version: int = 0) -> bool:
    layers = [FakeLayer(len(tokens) + 2)]  # two columns of left padding
    return cache.store(policy, version, tokens, layers, 0, torch.arange(2, len(tokens) + 2))


def test_the_cache_finds_the_longest_prefix_and_keeps_no_redundant_entry() -> None:
    cache = PrefixCache(1)
    assert keep(cache, [1, 2, 3]) and keep(cache, [1, 2, 4, 5]) and keep(cache, [9, 9])
    hit = cache.lookup("p", 0, [1, 2, 4, 6, 7], limit=4)
    assert hit.length == 3 and hit.entry is not None and hit.entry.tokens == [1, 2, 4, 5]
    assert hit.entry.keys[0][0, :, 0].tolist() == [2.0, 3.0, 4.0, 5.0]  # its columns, after the padding
    assert cache.lookup("p", 0, [1, 2, 4, 5, 6], limit=2).length == 2
    assert cache.lookup("p", 1, [1, 2, 3], limit=2) == MISS  # another version
    assert cache.lookup("q", 0, [1, 2, 3], limit=2) == MISS  # another policy
    assert not keep(cache, [1, 2])  # held by [1, 2, 3] already
    assert keep(cache, [1, 2, 3, 8]) and len(cache) == 3  # replaces [1, 2, 3]
    assert cache.lookup("p", 0, [1, 2, 3, 9], limit=4).length == 3
    cache.drop("p")
    assert len(cache) == 0 and cache.nbytes == 0 and cache.lookup("p", 0, [1, 2], limit=2) == MISS


def test_the_cache_evicts_the_least_recently_used_entries_first() -> None:
    per_token = 2 * 2 * 4 * 4  # keys and values, 2 heads of 4 float32
    cache = PrefixCache(10 * per_token / 2**20)
    assert keep(cache, [1, 1, 1, 1]) and keep(cache, [2, 2, 2, 2])
    assert cache.lookup("p", 0, [1, 1, 1, 7], limit=3).length == 3  # [1, ...] is now the most recent
    assert keep(cache, [3, 3, 3, 3])
    assert cache.lookup("p", 0, [2, 2, 2], limit=2) == MISS
    assert cache.lookup("p", 0, [1, 1, 1], limit=2).length == 2
    assert cache.nbytes == 8 * per_token
    assert not keep(cache, list(range(11)))  # larger than the whole budget
