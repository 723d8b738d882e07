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

teacher_dir=$project/opd-teacher
mkdir -p "$teacher_dir"
echo "teacher: smollm2-135m with $adapter"
tether serve --model smollm2-135m --adapter "$adapter" --port 0 --project-dir "$teacher_dir" \
  >"$teacher_dir/serve.out" 2>"$teacher_dir/serve.err" &
serve_pid=$!
trap 'kill "$serve_pid" 2>/dev/null || true; wait "$serve_pid" 2>/dev/null || true' EXIT
for _ in $(seq 1 900); do
  grep -q '^ready' "$teacher_dir/serve.out" && break
  kill -0 "$serve_pid" 2>/dev/null || { cat "$teacher_dir/serve.err" >&2; exit 1; }
  sleep 0.2
done
grep -q '^ready' "$teacher_dir/serve.out" || { echo "the teacher did not start in 180 s" >&2; exit 1; }
teacher_url=$(sed -n 's/^export OPENAI_BASE_URL=//p' "$teacher_dir/serve.out")
TETHER_TEACHER_KEY=$(sed -n 's/^export OPENAI_API_KEY=//p' "$teacher_dir/serve.out")
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
