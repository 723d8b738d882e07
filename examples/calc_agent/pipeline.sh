#!/usr/bin/env bash
# The calc agent learns: scripted-teacher rollouts on GSM8K train (1-2 step problems) -> SFT warm start on
# those demonstrations -> GRPO, with held-out accuracy (greedy, GSM8K test subset) before, after SFT and
# after RL. Sizes come from the environment (CALC_TRAIN, CALC_VAL, CALC_SFT_STEPS, CALC_RL_STEPS,
# CALC_SEEDS ("0 1"), ...); extra arguments go to `tether train` (e.g. --model PATH).
set -euo pipefail
cd "$(dirname "$0")/../.."
source examples/pipeline_lib.sh
prefix=CALC
name=calc
project=${CALC_PROJECT:-calc-project}
agent="python examples/calc_agent/agent.py --max-tokens ${CALC_MAX_TOKENS:-128}"
reward=examples/calc_agent/reward.py:correct
teacher=examples/calc_agent/teacher.py
mkdir -p "$project"
python examples/calc_agent/tasks.py --out-dir "$project/data" --train "${CALC_TRAIN:-300}" \
  --val "${CALC_VAL:-100}" --max-steps 2 --seed 0
train_tasks=$project/data/train.jsonl
val_tasks=$project/data/val.jsonl
declare -A size=([MODEL]=smollm2-135m [DEMOS]=200 [TEACHER_WORKERS]=6 [SFT_STEPS]=30 [SFT_BATCH]=8 [LR]=3e-4
  [RL_STEPS]=8 [GROUP]=6 [TASKS_PER_STEP]=2 [SIGNAL_GROUPS]=2 [MAX_GROUPS]=4 [WORKERS]=16)
extra_train=()
run_pipeline "$@"
