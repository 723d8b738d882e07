#!/usr/bin/env bash
# The RAG agent learns: scripted-teacher rollouts on the train questions (the search call, then the
# answer) -> SFT warm start on those demonstrations -> GRPO, with the reward (0.2 format + 0.8 F1)
# (greedy) on the held-out questions before, after SFT and after RL. Sizes come from the
# environment (RAG_SFT_STEPS, RAG_RL_STEPS, ...); extra arguments go to `tether train`.
set -euo pipefail
cd "$(dirname "$0")/../.."
source examples/pipeline_lib.sh
project=${RAG_PROJECT:-rag-project}
sft_steps=${RAG_SFT_STEPS:-20}
mkdir -p "$project"
summary_file="$project/pipeline-times.txt"
: >"$summary_file"
agent="python examples/rag_agent/agent.py"
reward=examples/rag_agent/reward.py:score
started=$SECONDS

python examples/rag_agent/tasks.py --out-dir "$project/data" --val "${RAG_VAL:-12}" --seed 0
train_tasks=$project/data/train.jsonl
if [ -n "${RAG_TRAIN:-}" ]; then
  head -n "$RAG_TRAIN" "$project/data/train.jsonl" >"$project/data/train-head.jsonl"
  train_tasks=$project/data/train-head.jsonl
fi

phase=$SECONDS
start_teacher examples/rag_agent/teacher.py "$train_tasks"
tether rollout --project-dir "$project" --agent "$agent" --tasks "$train_tasks" \
  --reward "$reward" --upstream "$TEACHER_URL" --upstream-model teacher \
  --n-workers "${RAG_TEACHER_WORKERS:-6}" --run rag-teacher
stop_teacher
phase_time "teacher rollouts" "$phase"

phase=$SECONDS
tether train --project-dir "$project" --agent "$agent" \
  --tasks "$train_tasks" --val-tasks "$project/data/val.jsonl" --reward "$reward" \
  --model "${RAG_MODEL:-smollm2-135m}" --from-run rag-teacher --sft-steps "$sft_steps" \
  --sft-batch "${RAG_SFT_BATCH:-8}" --lr "${RAG_LR:-3e-4}" \
  --algorithm grpo --steps "${RAG_RL_STEPS:-6}" --group-size "${RAG_GROUP:-4}" \
  --tasks-per-step "${RAG_TASKS_PER_STEP:-2}" --n-workers "${RAG_WORKERS:-8}" --val-every 0 \
  --timeout 600 --run rag-pipeline --fresh "$@"
phase_time "train (model load, 3 validations, SFT, RL)" "$phase"
phase_time "pipeline total" "$started"

python examples/pipeline_summary.py "$project/.tether/runs/rag-pipeline" --sft-steps "$sft_steps" \
  --out "$project/pipeline-summary.json" | tee -a "$summary_file"
