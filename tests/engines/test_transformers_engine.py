from __future__ import annotations

import asyncio
import contextlib
import math
import time
from pathlib import Path

import pytest
import torch

from tether.engines import GeneratedToken, Generation, GenerationDone, SamplingParams
from tether.engines.sampling import processed_logprobs
from tether.engines.transformers_engine import TransformersEngine, _Request, _Row
from tether.sampling import RAW, Sampler

GREEDY = SamplingParams(max_tokens=24, temperature=0.0)


def reference_logprobs(model, prompt: list[int], generated: list[int], sampler: Sampler = RAW) -> list[float]:
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([prompt + generated])).logits[0].float()
    logprobs = processed_logprobs(logits, sampler)
    start = len(prompt) - 1
    return [logprobs[start + i, token].item() for i, token in enumerate(generated)]


def assert_close(actual: list[float], expected: list[float], tol: float = 1e-4) -> None:
    assert len(actual) == len(expected)
    worst = max((abs(a - b) for a, b in zip(actual, expected, strict=True)), default=0.0)
    assert worst <= tol, worst


def prompt_of(engine: TransformersEngine, text: str) -> list[int]:
    return engine.chat_prompt_ids([{"role": "user", "content": text}])


async def collect(engine: TransformersEngine, prompt: list[int], params: SamplingParams):
    items = [item async for item in engine.stream(prompt, params)]
    assert isinstance(items[-1], GenerationDone)
    assert all(isinstance(item, GeneratedToken) for item in items[:-1])
    return items[:-1], items[-1]


def test_chat_prompt_ids(engine: TransformersEngine) -> None:
    plain = engine.chat_prompt_ids([{"role": "user", "content": "hello there"}])
    parts = engine.chat_prompt_ids([{"role": "user", "content": [{"type": "text", "text": "hello there"}]}])
    assert plain == parts
    assert isinstance(plain, list) and all(type(t) is int for t in plain)
    assert engine.decode(plain).endswith("<|im_start|>assistant\n")
    empty = engine.chat_prompt_ids([{"role": "assistant", "content": None}, {"role": "user", "content": "x"}])
    assert all(type(t) is int for t in empty)
    tools = [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {}}}]
    assert engine.chat_prompt_ids([{"role": "user", "content": "hi"}], tools=tools)
    assert engine.encode("hello") and engine.decode(engine.encode("hello there")) == "hello there"
    assert engine.eos_token_ids == frozenset({2}) and engine.max_context == 2048
    assert engine.name == "tiny-random"


async def test_greedy_matches_forward_and_decodes(engine: TransformersEngine, reference_model) -> None:
    prompt = prompt_of(engine, "What is 2+3?")
    generation, version = await engine.generate(prompt, SamplingParams(max_tokens=40, temperature=0))
    assert version == engine.policy_version
    assert engine.decode(generation.token_ids) == generation.text
    assert_close(generation.logprobs, reference_logprobs(reference_model, prompt, generation.token_ids))
    again, _ = await engine.generate(prompt, SamplingParams(max_tokens=40, temperature=0))
    # The second prefill starts from the first's cached keys and values: the same up to float noise.
    assert (again.token_ids, again.text, again.finish_reason) == (
        generation.token_ids,
        generation.text,
        generation.finish_reason,
    )
    assert_close(again.logprobs, generation.logprobs)


async def test_sampled_logprobs_are_policy_logprobs(engine: TransformersEngine, reference_model) -> None:
    """Sampled tokens carry their logprob under the distribution they were drawn from (temperature and
    top-p applied), not the raw softmax's."""
    prompt = prompt_of(engine, "Tell me a story.")
    params = SamplingParams(max_tokens=40, temperature=1.3, top_p=0.9, seed=7)
    generation, _ = await engine.generate(prompt, params)
    # This seed draws no EOS in 40 tokens: the text is the tokens' decoding, cut by the length limit.
    assert generation.finish_reason == "length" and len(generation.token_ids) == 40
    assert engine.decode(generation.token_ids) == generation.text
    processed = reference_logprobs(reference_model, prompt, generation.token_ids, params.sampler)
    assert_close(generation.logprobs, processed)
    raw = reference_logprobs(reference_model, prompt, generation.token_ids)
    assert max(abs(a - b) for a, b in zip(generation.logprobs, raw, strict=True)) > 1e-2
    again, _ = await engine.generate(prompt, params)
    assert again.token_ids == generation.token_ids
    other, _ = await engine.generate(
        prompt, SamplingParams(max_tokens=40, temperature=1.3, top_p=0.9, seed=8)
    )
    assert other.token_ids != generation.token_ids


async def test_score_gives_each_tokens_logprob_under_the_raw_distribution(
    engine: TransformersEngine, reference_model
) -> None:
    """What a distillation teacher answers: for a text the engine itself sampled at temperature 1, the
    scores of the sampled tokens are the logprobs it recorded while drawing them."""
    prompt = prompt_of(engine, "Score me.")
    generation, _ = await engine.generate(prompt, SamplingParams(max_tokens=16, temperature=1.0, seed=3))
    ids = prompt + generation.token_ids
    scores = await engine.score(ids)
    assert len(scores) == len(ids) - 1
    assert_close(scores[len(prompt) - 1 :], generation.logprobs)
    assert_close(scores, reference_logprobs(reference_model, ids[:1], ids[1:]))


async def test_score_waits_for_a_running_batch_and_leaves_it_intact(engine: TransformersEngine) -> None:
    prompt = prompt_of(engine, "run while scored")
    params = SamplingParams(max_tokens=60, temperature=0)
    alone, _ = await engine.generate(prompt, params)
    running = asyncio.ensure_future(engine.generate(prompt, params))
    await asyncio.sleep(0.05)
    scores = await engine.score(prompt + alone.token_ids)
    together, _ = await running
    assert together.token_ids == alone.token_ids
    assert_close(scores[len(prompt) - 1 :], alone.logprobs)


async def test_max_tokens_gives_length(engine: TransformersEngine) -> None:
    prompt = prompt_of(engine, "count")
    for n in (1, 5, 17):  # greedy, this prompt meets no EOS within 17 tokens
        generation, _ = await engine.generate(prompt, SamplingParams(max_tokens=n, temperature=0))
        assert generation.finish_reason == "length"
        assert len(generation.token_ids) == len(generation.logprobs) == n
        assert not engine.eos_token_ids & set(generation.token_ids)


async def test_stop_string_cuts_text(engine: TransformersEngine) -> None:
    prompt = prompt_of(engine, "Say something long.")
    full, _ = await engine.generate(prompt, SamplingParams(max_tokens=40, temperature=0))
    start = next(i for i in range(8, len(full.text) - 3) if full.text[i : i + 3].isalpha())
    stop = full.text[start : start + 3]
    cut_at = full.text.find(stop)
    tokens, done = await collect(
        engine, prompt, SamplingParams(max_tokens=40, temperature=0, stop=["@@@", stop])
    )
    generation = done.generation
    assert generation.finish_reason == "stop"
    assert generation.text == full.text[:cut_at]
    assert generation.token_ids == full.token_ids[: len(generation.token_ids)]
    assert stop in engine.decode(generation.token_ids)
    assert stop not in engine.decode(generation.token_ids[:-1])
    assert "".join(t.text for t in tokens) == generation.text


async def test_stream_text_concatenates_to_final(engine: TransformersEngine) -> None:
    prompt = prompt_of(engine, "stream please")
    tokens, done = await collect(engine, prompt, SamplingParams(max_tokens=60, temperature=1.0, seed=3))
    assert "".join(t.text for t in tokens) == done.generation.text
    assert [t.token_id for t in tokens] == done.generation.token_ids
    assert [t.logprob for t in tokens] == done.generation.logprobs
    assert all(math.isfinite(lp) and lp <= 0 for lp in done.generation.logprobs)


async def test_concurrent_requests_equal_solo(engine: TransformersEngine, reference_model) -> None:
    cases = [
        (prompt_of(engine, "a"), SamplingParams(max_tokens=5, temperature=0)),
        (prompt_of(engine, "a much longer question with many more words in it"), GREEDY),
        (prompt_of(engine, "b") + engine.encode(" extra"), SamplingParams(max_tokens=40, temperature=0)),
        (prompt_of(engine, "c"), SamplingParams(max_tokens=12, temperature=0, stop=["zz"])),
        (prompt_of(engine, "d"), SamplingParams(max_tokens=30, temperature=0.8, seed=11)),
        (prompt_of(engine, "e e e"), SamplingParams(max_tokens=18, temperature=1.1, top_p=0.8, seed=5)),
    ]
    solo = [await engine.generate(p, s) for p, s in cases]
    together = await asyncio.gather(*(engine.generate(p, s) for p, s in cases))
    for (prompt, params), (alone, _), (batched, _) in zip(cases, solo, together, strict=True):
        # Batched and solo logits differ by float noise (~1e-6), and on the tiny random model's near-
        # uniform distribution that can move a sampling boundary (a top-p cut, a draw within 1e-5 of an
        # edge) in a sampled generation, at a point that depends on the CPU's kernels. So greedy runs must
        # match exactly, and every token a sampled batched run drew must carry its logprob under the
        # distribution a lone forward pass of the same tokens gives: a batching bug (masks, positions,
        # caches) shifts those logprobs wherever it strikes.
        shared = _common_prefix(alone.token_ids, batched.token_ids)
        assert_close(batched.logprobs[:shared], alone.logprobs[:shared])
        if params.temperature == 0:
            assert batched.token_ids == alone.token_ids and batched.text == alone.text
        else:
            assert shared >= 1
            expected = reference_logprobs(reference_model, prompt, batched.token_ids, params.sampler)
            assert_close(batched.logprobs, expected)


def _common_prefix(first: list[int], second: list[int]) -> int:
    shared = 0
    while shared < min(len(first), len(second)) and first[shared] == second[shared]:
        shared += 1
    return shared


async def test_requests_join_a_running_batch(engine: TransformersEngine) -> None:
    long_prompt = prompt_of(engine, "long one")
    short_prompt = prompt_of(engine, "a short one that has a longer prompt than the first")
    long_params = SamplingParams(max_tokens=300, temperature=0)
    short_params = SamplingParams(max_tokens=10, temperature=0)
    long_solo, _ = await engine.generate(long_prompt, long_params)
    short_solo, _ = await engine.generate(short_prompt, short_params)

    finished: list[str] = []
    long_task, started = start_in_background(
        engine, long_prompt, long_params, lambda: finished.append("long")
    )
    await started.wait()
    short, _ = await engine.generate(short_prompt, short_params)
    finished.append("short")
    long, _ = await long_task
    assert finished == ["short", "long"]
    assert short.token_ids == short_solo.token_ids
    assert long.token_ids == long_solo.token_ids
    assert_close(long.logprobs, long_solo.logprobs)


def start_in_background(
    engine: TransformersEngine, prompt: list[int], params: SamplingParams, on_done=lambda: None
) -> tuple[asyncio.Task, asyncio.Event]:
    """Run a generation in a task; the event is set once its first token has arrived."""
    started = asyncio.Event()

    async def run() -> tuple[Generation, int]:
        async for item in engine.stream(prompt, params):
            started.set()
            if isinstance(item, GenerationDone):
                on_done()
                return item.generation, item.policy_version
        raise AssertionError("no result")

    return asyncio.create_task(run()), started


def engine_is_busy(engine: TransformersEngine) -> bool:
    return engine._model_lock.locked()


async def test_event_loop_not_blocked(engine: TransformersEngine) -> None:
    ticks = 0
    stop = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not stop.is_set():
            await asyncio.sleep(0.01)
            ticks += 1

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    generation, _ = await engine.generate(
        prompt_of(engine, "tick"), SamplingParams(max_tokens=300, temperature=0)
    )
    ticks_during = ticks
    stop.set()
    await task
    assert len(generation.token_ids) > 0
    assert ticks_during >= 5


async def test_too_long_prompt(engine: TransformersEngine) -> None:
    with pytest.raises(ValueError, match="context"):
        await engine.generate([5] * 2000, SamplingParams(max_tokens=100))
    with pytest.raises(ValueError):
        await engine.generate([], SamplingParams(max_tokens=5))
    generation, _ = await engine.generate([5] * 2000, SamplingParams(max_tokens=3, temperature=0))
    assert len(generation.token_ids) == 3


async def test_cancelled_stream_does_not_break_engine(engine: TransformersEngine) -> None:
    prompt = prompt_of(engine, "cancel me")
    expected, _ = await engine.generate(prompt, GREEDY)
    async with contextlib.aclosing(
        engine.stream(prompt, SamplingParams(max_tokens=500, temperature=0))
    ) as items:
        seen = 0
        async for _ in items:
            seen += 1
            if seen == 3:
                break
    task = asyncio.create_task(engine.generate(prompt, SamplingParams(max_tokens=500, temperature=0)))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    generation, _ = await engine.generate(prompt, GREEDY)
    assert generation.token_ids == expected.token_ids
    deadline = time.monotonic() + 5
    while engine_is_busy(engine) and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert not engine_is_busy(engine)


async def test_worker_error_reaches_caller(
    engine: TransformersEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(rows):
        raise RuntimeError("prefill exploded")

    monkeypatch.setattr(engine, "_prefill", broken)
    with pytest.raises(RuntimeError, match="prefill exploded"):
        await engine.generate(prompt_of(engine, "x"), GREEDY)
    monkeypatch.undo()
    generation, _ = await engine.generate(prompt_of(engine, "x"), GREEDY)
    assert generation.token_ids


def make_adapter(tiny_path: Path, out: Path, seed: int) -> Path:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    base = AutoModelForCausalLM.from_pretrained(tiny_path)
    config = LoraConfig(
        r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "o_proj"], init_lora_weights=False
    )
    peft_model = get_peft_model(base, config)
    peft_model.save_pretrained(out)
    return out


def peft_reference(tiny_path: Path, adapter: Path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    return PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_path), adapter).eval()


async def test_load_adapter(tiny_path: Path, tmp_path: Path, reference_model) -> None:
    first = make_adapter(tiny_path, tmp_path / "a1", seed=1)
    second = make_adapter(tiny_path, tmp_path / "a2", seed=2)
    engine = TransformersEngine(str(tiny_path), max_batch_size=4)
    try:
        prompt = prompt_of(engine, "adapt")
        params = SamplingParams(max_tokens=20, temperature=0)
        base, base_version = await engine.generate(prompt, params)
        assert base_version == 0

        in_flight, started = start_in_background(
            engine, prompt, SamplingParams(max_tokens=200, temperature=0)
        )
        await started.wait()
        assert await engine.aload_adapter(str(first)) == 1
        old_policy, old_version = await in_flight
        assert old_version == 0
        assert_close(old_policy.logprobs, reference_logprobs(reference_model, prompt, old_policy.token_ids))

        adapted, version = await engine.generate(prompt, params)
        assert version == engine.policy_version == 1
        assert adapted.token_ids != base.token_ids
        assert_close(
            adapted.logprobs, reference_logprobs(peft_reference(tiny_path, first), prompt, adapted.token_ids)
        )

        assert engine.load_adapter(str(second), policy_version=7) == 7
        swapped, version = await engine.generate(prompt, params)
        assert version == 7
        assert_close(
            swapped.logprobs, reference_logprobs(peft_reference(tiny_path, second), prompt, swapped.token_ids)
        )
    finally:
        engine.close()
    with pytest.raises(RuntimeError):
        await engine.generate(prompt, params)


@pytest.mark.smollm2
async def test_smollm2_answers() -> None:
    engine = TransformersEngine("smollm2-135m")
    try:
        prompt = engine.chat_prompt_ids([{"role": "user", "content": "What is 2+3? Answer with a number."}])
        generation, version = await engine.generate(prompt, SamplingParams(max_tokens=24, temperature=0))
        assert version == 0
        assert generation.text.strip()
        assert engine.decode(generation.token_ids) == generation.text
        assert all(math.isfinite(lp) and lp <= 0 for lp in generation.logprobs)
    finally:
        engine.close()


def feed(engine: TransformersEngine, ids: list[int], params: SamplingParams) -> tuple[list[str], _Row]:
    loop = asyncio.new_event_loop()
    try:
        request = _Request([1], params, loop, asyncio.Queue())
        row = _Row(request, None, 0, [s for s in params.stop if s])
        deltas = []
        for token in ids:
            deltas.append(engine._advance(row, token))
            if row.finish_reason:
                break
        return deltas, row
    finally:
        loop.close()


def test_incomplete_utf8_is_held_back(engine: TransformersEngine) -> None:
    ids = engine.encode("a🙂b")
    deltas, row = feed(engine, ids + [2], SamplingParams(max_tokens=50))
    assert "\ufffd" not in "".join(deltas)
    assert "".join(deltas) == row.text == "a🙂b"
    assert row.finish_reason == "stop" and row.token_ids == ids + [2]


def test_stop_prefix_is_held_back(engine: TransformersEngine) -> None:
    ids = engine.encode("one two\n\nthree")
    deltas, row = feed(engine, ids, SamplingParams(max_tokens=50, stop=["\n\nth"]))
    assert row.finish_reason == "stop"
    assert row.text == "one two"
    assert "".join(deltas) == "one two"
    assert all("\n" not in d for d in deltas)


def test_length_flushes_held_text(engine: TransformersEngine) -> None:
    ids = engine.encode("x🙂")
    deltas, row = feed(engine, ids[:-1], SamplingParams(max_tokens=len(ids) - 1))
    assert row.finish_reason == "length"
    assert "".join(deltas) == row.text == engine.decode(ids[:-1])


async def test_policies_share_one_batch_each_with_its_own_adapter_and_version(
    tiny_path: Path, tmp_path: Path, reference_model
) -> None:
    """Two policies' adapters and the base model decode side by side in one batch: each row's tokens and
    logprobs are those of its own adapter (checked against PEFT alone), each policy has its version, and
    loading one policy's next version leaves the other's adapter serving."""
    writer = make_adapter(tiny_path, tmp_path / "writer", seed=1)
    rewriter = make_adapter(tiny_path, tmp_path / "rewriter", seed=2)
    engine = TransformersEngine(str(tiny_path), max_batch_size=6)
    try:
        assert engine.load_adapter(str(writer), policy="writer") == 1
        assert engine.load_adapter(str(rewriter), policy_version=4, policy="rewriter") == 4
        assert engine.policy_version == 0 and engine.version_of("writer") == 1
        prompts = [prompt_of(engine, text) for text in ("mixed one", "mixed two", "three")]
        params = SamplingParams(max_tokens=16, temperature=0)
        calls = [
            engine.generate(prompt, params, owner=f"o{i}-{policy}", policy=policy)
            for i, prompt in enumerate(prompts)
            for policy in ("writer", "rewriter", "policy")
        ]
        results = await asyncio.gather(*calls)
        references = {
            "writer": peft_reference(tiny_path, writer),
            "rewriter": peft_reference(tiny_path, rewriter),
            "policy": reference_model,
        }
        expected_versions = {"writer": 1, "rewriter": 4, "policy": 0}
        for index, (generation, version) in enumerate(results):
            prompt, policy = prompts[index // 3], ("writer", "rewriter", "policy")[index % 3]
            assert version == expected_versions[policy]
            assert_close(
                generation.logprobs, reference_logprobs(references[policy], prompt, generation.token_ids)
            )
        by_policy = [results[i][0].token_ids for i in range(3)]
        assert by_policy[0] != by_policy[1] != by_policy[2]

        assert engine.load_adapter(str(rewriter), policy="writer") == 2  # the writer now samples as rewriter
        again, version = await engine.generate(prompts[0], params, policy="writer")
        assert version == 2 and again.token_ids == results[1][0].token_ids
        kept, version = await engine.generate(prompts[0], params, policy="rewriter")
        assert version == 4 and kept.token_ids == results[1][0].token_ids
        scored = await engine.score(prompts[0] + by_policy[0], policy="policy")  # the base model's view
        base_view = reference_logprobs(reference_model, prompts[0], by_policy[0])
        assert_close(scored[len(prompts[0]) - 1 :], base_view)
        assert base_view != results[0][0].logprobs
    finally:
        engine.close()
