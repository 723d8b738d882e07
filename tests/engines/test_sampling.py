"""The built-in engine records each token's logprob under the distribution it was drawn from.

An empirical check on a tiny model with set weights (its final norm scaled, so that the first token's
distribution is peaked: about 26% on the top token at temperature 1, five tokens in the nucleus at
temperature 0.5 and top-p 0.9): tokens drawn many times occur with the frequencies their recorded
logprobs say, and not with those of the raw softmax, which the engine recorded before.
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tether.engines import SamplingParams
from tether.engines.sampling import kept_tokens, processed_logprobs
from tether.engines.transformers_engine import TransformersEngine
from tether.sampling import Sampler

DRAWS = 480
NORM_SCALE = 3.0  # tiny-random's logits times 3: peaked, but with several likely tokens


@pytest.fixture(scope="module")
def peaked_path(tiny_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path_factory.mktemp("peaked")
    model = AutoModelForCausalLM.from_pretrained(tiny_path)
    with torch.no_grad():
        model.model.norm.weight.mul_(NORM_SCALE)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_path).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def peaked(peaked_path: Path) -> Iterator[TransformersEngine]:
    engine = TransformersEngine(str(peaked_path), name="peaked", max_batch_size=32)
    yield engine
    engine.close()


def first_token_draws(
    engine: TransformersEngine, params: SamplingParams, count: int = DRAWS
) -> list[tuple[int, float]]:
    prompt = engine.chat_prompt_ids([{"role": "user", "content": "Pick a word."}])

    async def draw_all() -> list[tuple[int, float]]:
        draws: list[tuple[int, float]] = []
        for start in range(0, count, 64):
            seeds = range(start, min(start + 64, count))
            calls = [
                engine.generate(
                    prompt, SamplingParams(1, params.temperature, params.top_p, seed=s, top_k=params.top_k)
                )
                for s in seeds
            ]
            for generation, _ in await asyncio.gather(*calls):
                draws.append((generation.token_ids[0], generation.logprobs[0]))
        return draws

    return asyncio.run(draw_all())


def chi_square_p(counts: Counter[int], probabilities: dict[int, float], total: int) -> float:
    """The p-value of Pearson's chi-square test of `counts` against `probabilities` (tokens expected
    fewer than 5 times are pooled with every token never drawn), by the Wilson-Hilferty approximation."""
    cells: list[tuple[float, float]] = []
    pooled_observed, pooled_expected = 0.0, 0.0
    for token, p in probabilities.items():
        if p * total >= 5:
            cells.append((counts.get(token, 0), p * total))
        else:
            pooled_observed += counts.get(token, 0)
            pooled_expected += p * total
    pooled_observed += sum(n for t, n in counts.items() if t not in probabilities)
    pooled_expected += max(total - sum(e for _, e in cells) - pooled_expected, 0.0)
    if pooled_expected > 0 or pooled_observed > 0:
        cells.append((pooled_observed, max(pooled_expected, 1e-12)))
    statistic = sum((o - e) ** 2 / e for o, e in cells)
    k = len(cells) - 1
    z = ((statistic / k) ** (1 / 3) - (1 - 2 / (9 * k))) / math.sqrt(2 / (9 * k))
    return 0.5 * math.erfc(z / math.sqrt(2))


def raw_first_token_probabilities(path: Path, engine: TransformersEngine) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path).eval()
    prompt = engine.chat_prompt_ids([{"role": "user", "content": "Pick a word."}])
    with torch.inference_mode():
        return torch.softmax(model(input_ids=torch.tensor([prompt])).logits[0, -1].float(), dim=-1)


def test_drawn_frequencies_match_the_recorded_logprobs(peaked: TransformersEngine, peaked_path: Path) -> None:
    draws = first_token_draws(peaked, SamplingParams(1, temperature=0.5, top_p=0.9))
    counts = Counter(token for token, _ in draws)
    recorded: dict[int, float] = {}
    for token, logprob in draws:
        assert abs(recorded.setdefault(token, logprob) - logprob) < 1e-4  # one value per token
    probabilities = {token: math.exp(lp) for token, lp in recorded.items()}
    # Every token of the nucleus was drawn, so the recorded probabilities make up the whole distribution.
    assert sum(probabilities.values()) == pytest.approx(1.0, abs=1e-3)
    assert len(probabilities) >= 3
    assert chi_square_p(counts, probabilities, DRAWS) > 1e-3

    # The same draws against the raw softmax (what was recorded before): rejected outright.
    raw = raw_first_token_probabilities(peaked_path, peaked)
    raw_probabilities = {token: float(raw[token]) for token in range(raw.numel()) if raw[token] * DRAWS >= 5}
    assert chi_square_p(counts, raw_probabilities, DRAWS) < 1e-9


def test_top_k_keeps_k_tokens(peaked: TransformersEngine) -> None:
    draws = first_token_draws(peaked, SamplingParams(1, temperature=1.0, top_k=3), count=128)
    recorded = dict(draws)
    assert len(recorded) == 3
    assert sum(math.exp(lp) for lp in recorded.values()) == pytest.approx(1.0, abs=1e-4)


def test_nucleus_keeps_ties_together_and_at_least_one_token() -> None:
    logits = torch.tensor([2.0, 1.0, 1.0, 0.0])
    keep = kept_tokens(logits, top_p=0.5, top_k=0)
    assert keep is not None and keep.tolist() == [True, False, False, False]
    keep = kept_tokens(logits, top_p=0.6, top_k=0)
    assert keep is not None and keep.tolist() == [True, True, True, False]  # the tied pair together
    keep = kept_tokens(torch.tensor([10.0, 0.0, 0.0]), top_p=0.01, top_k=0)
    assert keep is not None and keep.tolist() == [True, False, False]
    assert kept_tokens(logits, top_p=1.0, top_k=0) is None


def test_processed_logprobs_keep_the_sampled_token() -> None:
    logits = torch.tensor([[3.0, 0.0, -1.0]])
    sampler = Sampler(temperature=0.5, top_p=0.5)
    cut = processed_logprobs(logits, sampler)
    assert cut[0, 1] == float("-inf") and cut[0, 0] == 0.0
    kept = processed_logprobs(logits, sampler, always_keep=torch.tensor([1]))
    assert math.isfinite(float(kept[0, 1]))
    assert float(kept.exp().sum()) == pytest.approx(1.0)
