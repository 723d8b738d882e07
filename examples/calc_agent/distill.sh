#!/usr/bin/env bash
# On-policy distillation on calc: the student (base SmolLM2) samples through the unmodified AutoGen
# agent, and a teacher (SmolLM2 with the adapter a calc pipeline run trained, served by `tether serve
# --adapter`) scores every token it sampled; held-out accuracy before and after, with 95% intervals.
# Needs a finished `make calc-pipeline` (its data and its seed-0 run). Sizes from the environment:
# CALC_TEACHER_ADAPTER (default: the newest policies/vN of calc-pipeline-seed0), CALC_OPD_STEPS (8),
# CALC_OPD_TASKS (rollouts per step, 8), CALC_OPD_LR (3e-4), CALC_OPD_SEED (0); extra arguments go to
# `tether train`.
set -euo pipefail
cd "$(dirname "$0")/../.."
source examples/pipeline_lib.sh
project=${CALC_PROJECT:-calc-project}
seed=${CALC_OPD_SEED:-0}
pipeline_run=$project/.tether/runs/calc-pipeline-seed0
adapter=${CALC_TEACHER_ADAPTER:-$(find "$pipeline_run/policies" -maxdepth 1 -name 'v*' 2>/dev/null | sort -V | tail -n 1)}
if [ -z "$adapter" ] || [ ! -f "$adapter/adapter_config.json" ]; then
  echo "no teacher adapter (looked in $pipeline_run/policies): run make calc-pipeline first, or set" \
    "CALC_TEACHER_ADAPTER to a policies/vN folder" >&2
  exit 1
fi
[ -f "$project/data/val.jsonl" ] || { echo "no $project/data: run make calc-pipeline first" >&2; exit 1; }

echo "teacher: smollm2-135m with $adapter"
serve_policy "$project/opd-teacher" "$adapter"
teacher_url=$SERVED_URL
TETHER_TEACHER_KEY=$SERVED_KEY
export TETHER_TEACHER_KEY

started=$SECONDS
tether train --project-dir "$project" --agent "python examples/calc_agent/agent.py --max-tokens 128" \
  --tasks "$project/data/train.jsonl" --val-tasks "$project/data/val.jsonl" \
  --reward examples/calc_agent/reward.py:correct --model smollm2-135m \
  --algorithm opd --teacher "$teacher_url" --train-temperature 1.0 \
  --steps "${CALC_OPD_STEPS:-8}" --group-size 1 --tasks-per-step "${CALC_OPD_TASKS:-8}" \
  --lr "${CALC_OPD_LR:-3e-4}" --n-workers 8 --val-every 0 --seed "$seed" \
  --run "calc-opd-seed$seed" --fresh "$@"
echo "opd, seed $seed (model load, 2 validations, distillation): $((SECONDS - started)) s"
