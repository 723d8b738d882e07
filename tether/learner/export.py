"""A run's policy version as a folder other tools load: a PEFT adapter (base model named, tokenizer beside
it) for vLLM's `--lora-modules` or `PeftModel.from_pretrained`, or the base model with the adapter merged
into its weights, for `vllm serve DIR` or `AutoModelForCausalLM.from_pretrained(DIR)`.

The source is what the learner saved (`policies/vN`, or the checkpoint's `policy`): a PEFT adapter folder,
or with full fine-tuning a whole model folder, which is exported as it is.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

ADAPTER_CONFIG = "adapter_config.json"


class ExportError(ValueError):
    """A source that is no saved policy, or an output that would overwrite something."""


def export_policy(source: Path, out: Path, base_model: Path, merged: bool) -> Path:
    """Write `source` (an adapter over `base_model`, a local HF folder, or a whole model) to `out`, a new
    folder: the adapter with the base model and tokenizer named, or (`merged`) the merged model."""
    if not source.is_dir() or not any(source.glob("*.safetensors")):
        raise ExportError(f"{source} holds no saved policy (no *.safetensors): name a policies/vN folder")
    if out.exists() and any(out.iterdir()):
        raise ExportError(f"{out} exists and is not empty: give a new folder")
    if not (source / ADAPTER_CONFIG).exists():
        shutil.copytree(source, out, dirs_exist_ok=True)  # a whole model: already loadable as it is
        return out
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base_model)
    if merged:
        _merged(source, base_model).save_pretrained(out)
    else:
        shutil.copytree(source, out, dirs_exist_ok=True)
        config = json.loads((out / ADAPTER_CONFIG).read_text())
        config["base_model_name_or_path"] = str(base_model)
        (out / ADAPTER_CONFIG).write_text(json.dumps(config, indent=2) + "\n")
    tokenizer.save_pretrained(out)
    return out


def _merged(adapter: Path, base_model: Path) -> Any:
    """The base model with the adapter's low-rank updates added into its weights."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(base_model)
    return PeftModel.from_pretrained(base, adapter).merge_and_unload()
