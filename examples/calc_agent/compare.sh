#!/usr/bin/env bash
# SFT, GRPO and on-policy distillation on calc at equal wall-clock, each from the base model:
#   1. the scripted teacher demonstrates 200 train problems (run calc-teacher);
#   2. a long SFT on those demonstrations makes the distillation teacher (run calc-long-sft);
#   3. from the base SmolLM2, each arm trains for the same --time-budget: SFT on the same
#      demonstrations, GRPO on the reward, OPD from the long-SFT teacher served by `tether serve`;
#   4. held-out accuracy of each (greedy, 100 problems) with paired 95% intervals against the base.
# Phases 1 and 2 are skipped when their runs already exist. Sizes from the environment:
# CALC_PROJECT (calc-project), CALC_TEACHER_SFT_STEPS (100), CALC_COMPARE_BUDGET (seconds per arm, 600),
# CALC_COMPARE_SEEDS ("0"), CALC_COMPARE_ARMS ("sft grpo opd"); extra arguments go to every arm's
# `tether train`.
set -euo pipefail
cd "$(dirname "$0")/../.."
source examples/pipeline_lib.sh
project=${CALC_PROJECT:-calc-project}
agent="python examples/calc_agent/agent.py --max-tokens 128"
reward=examples/calc_agent/reward.py:correct
budget=${CALC_COMPARE_BUDGET:-600}
runs=$project/.tether/runs
mkdir -p "$project"
summary_file=$project/compare-times.txt
: >"$summary_file"

python examples/calc_agent/tasks.py --out-dir "$project/data" --train 300 --val 100 --max-steps 2 --seed 0
head -n 200 "$project/data/train.jsonl" >"$project/data/demonstrated.jsonl"
common=(--project-dir "$project" --agent "$agent" --tasks "$project/data/train.jsonl"
  --val-tasks "$project/data/val.jsonl" --reward "$reward" --model smollm2-135m --val-every 0 --lr 3e-4)

if [ ! -f "$project/teacher-done" ]; then
  phase=$SECONDS
  start_teacher examples/calc_agent/teacher.py "$project/data/demonstrated.jsonl"
  tether rollout --project-dir "$project" --agent "$agent" --tasks "$project/data/demonstrated.jsonl" \
    --reward "$reward" --upstream "$TEACHER_URL" --upstream-model teacher --n-workers 6 --run calc-teacher
  stop_teacher
  touch "$project/teacher-done"
  phase_time "scripted teacher rollouts" "$phase"
fi

if ! ls "$runs/calc-long-sft/policies" 2>/dev/null | grep -q '^v'; then
  phase=$SECONDS
  tether train "${common[@]}" --algorithm sft --from-run calc-teacher \
    --steps "${CALC_TEACHER_SFT_STEPS:-100}" --sft-batch 8 --seed 0 --run calc-long-sft --fresh
  phase_time "long SFT teacher (2 validations)" "$phase"
fi
adapter=$(find "$runs/calc-long-sft/policies" -maxdepth 1 -name 'v*' | sort -V | tail -n 1)

compared=()
for seed in ${CALC_COMPARE_SEEDS:-0}; do
  for arm in ${CALC_COMPARE_ARMS:-sft grpo opd}; do
    phase=$SECONDS
    run=calc-compare-$arm-seed$seed
    case $arm in
      sft) options=(--algorithm sft --from-run calc-teacher --steps 10000 --sft-batch 8) ;;
      grpo) options=(--algorithm grpo --steps 10000 --group-size 6 --tasks-per-step 2 --n-workers 16
        --min-signal-groups 2 --max-groups-per-step 4) ;;
      opd)
        [ -n "$serve_pid" ] || serve_policy "$project/compare-teacher" "$adapter"
        TETHER_TEACHER_KEY=$SERVED_KEY
        export TETHER_TEACHER_KEY
        options=(--algorithm opd --teacher "$SERVED_URL" --steps 10000 --group-size 1 --tasks-per-step 8
          --n-workers 8 --train-temperature 1.0) ;;
      *) echo "unknown arm $arm: choose among sft grpo opd" >&2; exit 2 ;;
    esac
    tether train "${common[@]}" "${options[@]}" --time-budget "$budget" --seed "$seed" --run "$run" \
      --fresh "$@"
    phase_time "$arm, seed $seed (model load, 2 validations, $budget s of training)" "$phase"
    compared+=(--arm "$arm" "$seed" "$runs/$run")
  done
done
stop_served

python examples/calc_agent/compare_summary.py --teacher "$runs/calc-long-sft" "${compared[@]}" \
  --out "$project/compare-summary.json" | tee -a "$summary_file"
