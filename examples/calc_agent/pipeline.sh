#!/usr/bin/env bash
# The calc agent learns: scripted-teacher rollouts on GSM8K train (1-2 step problems) -> SFT warm start on
# those demonstrations -> GRPO, with held-out accuracy (greedy, GSM8K test subset) before, after SFT and
# after RL. Sizes come from the environment (CALC_TRAIN, CALC_VAL, CALC_SFT_STEPS, CALC_RL_STEPS, ...);
# extra arguments go to `tether train` (e.g. --model PATH).
set -euo pipefail
cd "$(dirname "$0")/../.."
source examples/pipeline_lib.sh
project=${CALC_PROJECT:-calc-project}
sft_steps=${CALC_SFT_STEPS:-30}
mkdir -p "$project"
summary_file="$project/pipeline-times.txt"
: >"$summary_file"
agent="python examples/calc_agent/agent.py"
reward=examples/calc_agent/reward.py:correct
started=$SECONDS

python examples/calc_agent/tasks.py --out-dir "$project/data" --train "${CALC_TRAIN:-200}" \
  --val "${CALC_VAL:-40}" --max-steps 2 --seed 0

phase=$SECONDS
start_teacher examples/calc_agent/teacher.py "$project/data/train.jsonl"
tether rollout --project-dir "$project" --agent "$agent" --tasks "$project/data/train.jsonl" \
  --reward "$reward" --upstream "$TEACHER_URL" --upstream-model teacher \
  --n-workers "${CALC_TEACHER_WORKERS:-6}" --run calc-teacher
stop_teacher
phase_time "teacher rollouts" "$phase"

phase=$SECONDS
tether train --project-dir "$project" --agent "$agent" \
  --tasks "$project/data/train.jsonl" --val-tasks "$project/data/val.jsonl" --reward "$reward" \
  --model "${CALC_MODEL:-smollm2-135m}" --from-run calc-teacher --sft-steps "$sft_steps" \
  --sft-batch "${CALC_SFT_BATCH:-8}" --lr "${CALC_LR:-3e-4}" \
  --algorithm grpo --steps "${CALC_RL_STEPS:-8}" --group-size "${CALC_GROUP:-6}" \
  --tasks-per-step "${CALC_TASKS_PER_STEP:-2}" --n-workers "${CALC_WORKERS:-16}" --val-every 0 \
  --run calc-pipeline --fresh "$@"
phase_time "train (model load, 3 validations, SFT, RL)" "$phase"
phase_time "pipeline total" "$started"

python examples/pipeline_summary.py "$project/.tether/runs/calc-pipeline" --sft-steps "$sft_steps" \
  --out "$project/pipeline-summary.json" | tee -a "$summary_file"
