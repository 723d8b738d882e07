#!/usr/bin/env bash
# The SQL agent learns: scripted-teacher rollouts on the Chinook train split (the gold query, and the
# checker's verdict) -> SFT warm start on those demonstrations -> GRPO, with execution-match accuracy
# (greedy) on the held-out easy/medium questions before, after SFT and after RL. Sizes come from the
# environment (SQL_SFT_STEPS, SQL_RL_STEPS, ...; SQL_SPIDER=DIR for Spider); extra arguments go to
# `tether train`.
set -euo pipefail
cd "$(dirname "$0")/../.."
source examples/pipeline_lib.sh
project=${SQL_PROJECT:-sql-project}
sft_steps=${SQL_SFT_STEPS:-20}
mkdir -p "$project"
summary_file="$project/pipeline-times.txt"
: >"$summary_file"
agent="python examples/sql_agent/agent.py --max-turns ${SQL_MAX_TURNS:-1}"
reward=examples/sql_agent/reward.py:execution_match
started=$SECONDS

if [ -n "${SQL_SPIDER:-}" ]; then  # the official Spider release at this path: train_spider.json -> train, dev.json -> val
  python examples/sql_agent/tasks.py --spider "$SQL_SPIDER" --out-dir "$project/data" \
    --limit "${SQL_SPIDER_LIMIT:-500}"
else
  python examples/sql_agent/tasks.py --out-dir "$project/data" --val-fraction 0.3 --val-levels easy,medium \
    --seed 0
fi
train_tasks=$project/data/train.jsonl
if [ -n "${SQL_TRAIN:-}" ]; then
  head -n "$SQL_TRAIN" "$project/data/train.jsonl" >"$project/data/train-head.jsonl"
  train_tasks=$project/data/train-head.jsonl
fi

phase=$SECONDS
start_teacher examples/sql_agent/teacher.py "$train_tasks"
tether rollout --project-dir "$project" --agent "$agent" --tasks "$train_tasks" \
  --reward "$reward" --upstream "$TEACHER_URL" --upstream-model teacher \
  --n-workers "${SQL_TEACHER_WORKERS:-6}" --run sql-teacher
stop_teacher
phase_time "teacher rollouts" "$phase"

phase=$SECONDS
tether train --project-dir "$project" --agent "$agent" \
  --tasks "$train_tasks" --val-tasks "$project/data/val.jsonl" --reward "$reward" \
  --model "${SQL_MODEL:-smollm2-135m}" --from-run sql-teacher --sft-steps "$sft_steps" \
  --sft-batch "${SQL_SFT_BATCH:-8}" --lr "${SQL_LR:-3e-4}" \
  --algorithm grpo --steps "${SQL_RL_STEPS:-6}" --group-size "${SQL_GROUP:-4}" \
  --tasks-per-step "${SQL_TASKS_PER_STEP:-2}" --n-workers "${SQL_WORKERS:-8}" --val-every 0 \
  --timeout 600 --run sql-pipeline --fresh "$@"
phase_time "train (model load, 3 validations, SFT, RL)" "$phase"
phase_time "pipeline total" "$started"

python examples/pipeline_summary.py "$project/.tether/runs/sql-pipeline" --sft-steps "$sft_steps" \
  --out "$project/pipeline-summary.json" | tee -a "$summary_file"
