"""`tether export`: a run's policy version as a PEFT adapter or a merged model that transformers loads,
scoring the engine's own greedy tokens with the engine's logprobs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.engines.test_transformers_engine import assert_close, make_adapter, prompt_of, reference_logprobs
from tether.cli.main import main
from tether.engines import SamplingParams
from tether.engines.transformers_engine import TransformersEngine


def a_run(project: Path, tiny_path: Path) -> Path:
    """A run folder as training leaves it: two kept versions of the policy."""
    policies = project / ".tether" / "runs" / "r1" / "policies"
    make_adapter(tiny_path, policies / "v1", seed=1)
    make_adapter(tiny_path, policies / "v2", seed=2)
    return policies


async def engine_generation(tiny_path: Path, adapter: Path) -> tuple[list[int], list[int], list[float]]:
    engine = TransformersEngine(str(tiny_path), max_batch_size=2)
    try:
        await engine.aload_adapter(str(adapter))
        prompt = prompt_of(engine, "Export me.")
        generation, _ = await engine.generate(prompt, SamplingParams(max_tokens=16, temperature=0))
        return prompt, generation.token_ids, generation.logprobs
    finally:
        engine.close()


def export(project: Path, out: Path, tiny_path: Path, *more: str) -> int:
    words = [
        "export",
        "--run",
        "r1",
        "--out",
        str(out),
        "--model",
        str(tiny_path),
        "--project-dir",
        str(project),
    ]
    return main([*words, *more])


async def test_a_merged_export_and_an_adapter_export_reproduce_the_engines_logprobs(
    tmp_path: Path, tiny_path: Path
) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    policies = a_run(tmp_path, tiny_path)
    prompt, tokens, logprobs = await engine_generation(tiny_path, policies / "v2")

    assert export(tmp_path, tmp_path / "merged", tiny_path, "--merged") == 0  # the newest version, v2
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged").eval()
    assert not any("lora" in name for name, _ in merged.named_parameters())
    assert_close(logprobs, reference_logprobs(merged, prompt, tokens))
    AutoTokenizer.from_pretrained(tmp_path / "merged")

    assert export(tmp_path, tmp_path / "adapter", tiny_path, "--version", "2") == 0
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(tiny_path)
    base = AutoModelForCausalLM.from_pretrained(config["base_model_name_or_path"])
    adapted = PeftModel.from_pretrained(base, tmp_path / "adapter").eval()
    assert_close(logprobs, reference_logprobs(adapted, prompt, tokens))

    assert export(tmp_path, tmp_path / "first", tiny_path, "--version", "1", "--merged") == 0
    first = AutoModelForCausalLM.from_pretrained(tmp_path / "first").eval()
    assert (
        max(abs(a - b) for a, b in zip(logprobs, reference_logprobs(first, prompt, tokens), strict=True))
        > 1e-3
    )


def test_what_cannot_be_exported_is_one_line_naming_the_fix(tmp_path: Path, tiny_path: Path) -> None:
    a_run(tmp_path, tiny_path)
    with pytest.raises(SystemExit, match=r"^tether export: no run 'r2' in .* \(runs: r1\)$"):
        main(["export", "--run", "r2", "--out", str(tmp_path / "x"), "--project-dir", str(tmp_path)])
    with pytest.raises(SystemExit, match=r"^tether export: r1 keeps no v7 \(kept: v1, v2\)$"):
        export(tmp_path, tmp_path / "x", tiny_path, "--version", "7")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    with pytest.raises(SystemExit, match=r"full exists and is not empty: give a new folder$"):
        export(tmp_path, tmp_path / "full", tiny_path)
    assert (tmp_path / "full" / "keep.txt").read_text() == "mine"


def test_a_run_that_has_made_no_update_is_one_line(tmp_path: Path, tiny_path: Path) -> None:
    """A run whose steps found no group with signal has a folder but no policy: said, not a traceback."""
    (tmp_path / ".tether" / "runs" / "r1").mkdir(parents=True)
    with pytest.raises(SystemExit, match=r"^tether export: run r1 has saved no policy yet \(one is saved at"):
        export(tmp_path, tmp_path / "x", tiny_path)
