#!/usr/bin/env bash
# The SQL agent learns: scripted-teacher rollouts on the Chinook train split (the gold query, and the
# checker's verdict) -> SFT warm start on those demonstrations -> GRPO, with execution-match accuracy
# (greedy) on the held-out easy/medium questions before, after SFT and after RL. Sizes come from the
# environment (SQL_SFT_STEPS, SQL_RL_STEPS, SQL_VAL (the first N held-out questions only), SQL_SEEDS
# ("0 1"), ...; SQL_SPIDER=DIR for Spider); extra arguments go to `tether train`.
set -euo pipefail
cd "$(dirname "$0")/../.."
source examples/pipeline_lib.sh
prefix=SQL
name=sql
project=${SQL_PROJECT:-sql-project}
agent="python examples/sql_agent/agent.py --max-turns ${SQL_MAX_TURNS:-1}"
reward=examples/sql_agent/reward.py:execution_match
teacher=examples/sql_agent/teacher.py
mkdir -p "$project"
# the databases the agent reads, shown to it in its sandbox
if [ -n "${SQL_SPIDER:-}" ]; then  # the official Spider release at this path: train_spider.json -> train, dev.json -> val
  python examples/sql_agent/tasks.py --spider "$SQL_SPIDER" --out-dir "$project/data" \
    --limit "${SQL_SPIDER_LIMIT:-500}"
  agent_options=(--sandbox-show "$SQL_SPIDER/database")
else
  python examples/sql_agent/tasks.py --out-dir "$project/data" --val-fraction 0.4 --val-levels easy,medium \
    --seed 0
  agent_options=(--sandbox-show "$(python examples/sql_agent/chinook.py)")
fi
train_tasks=$project/data/train.jsonl
first_train_tasks
val_tasks=$project/data/val.jsonl
first_val_tasks
declare -A size=([MODEL]=smollm2-135m [DEMOS]=40 [TEACHER_WORKERS]=6 [SFT_STEPS]=20 [SFT_BATCH]=8
  [LR]=3e-4 [RL_STEPS]=10 [GROUP]=4 [TASKS_PER_STEP]=4 [SIGNAL_GROUPS]=3 [MAX_GROUPS]=8
  [WORKERS]=8)
# The checker judges greedily (temperature 0), a point mass RL cannot score: RL's rollouts sample every
# role at temperature 1.0 (the policy itself), as the writer's 0.7 would be too; validation stays greedy.
extra_train=(--timeout 600 --train-temperature 1.0)
run_pipeline "$@"
