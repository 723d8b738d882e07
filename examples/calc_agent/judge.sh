#!/usr/bin/env bash
# An LLM judge in place of calc's evaluator, and how far the two agree on held-out rollouts.
#  1. Judge tasks from the calc rollouts in the store (judge_tasks.py): train-question rollouts to learn
#     from, held-out-question rollouts to measure on, each labelled with the evaluator's verdict.
#  2. A judge made of SmolLM2 (which alone never answers in the judge's format): a scripted judge grades
#     CALC_JUDGE_DEMOS train rollouts through judge_agent.py, with the very prompt --reward judge: sends,
#     and SFT imitates it; its agreement with the evaluator on the held-out rollouts is the validation
#     score, before and after.
#  3. GRPO on calc with that judge as the reward (--reward judge:judge.md; the evaluator recorded beside
#     it and used for held-out accuracy only: --val-reward correct), then `tether store agreement` over
#     the held-out rollouts the run scored with both.
# Needs a finished `make calc-pipeline` (its data and rollouts). Sizes from the environment:
# CALC_JUDGE_DEMOS (240), CALC_JUDGE_SFT_STEPS (30), CALC_JUDGE_RL_STEPS (8), CALC_JUDGE_SEED (0); extra
# arguments go to the GRPO `tether train`.
set -euo pipefail
cd "$(dirname "$0")/../.."
source examples/pipeline_lib.sh
project=${CALC_PROJECT:-calc-project}
seed=${CALC_JUDGE_SEED:-0}
judge_dir=$project/judge
[ -f "$project/data/val.jsonl" ] || { echo "no $project/data: run make calc-pipeline first" >&2; exit 1; }
started=$SECONDS

python examples/calc_agent/judge_tasks.py --store "$project/.tether/store.db" --out-dir "$judge_dir"
head -n "${CALC_JUDGE_DEMOS:-240}" "$judge_dir/train.jsonl" >"$judge_dir/demonstrated.jsonl"
judge_agent="python examples/calc_agent/judge_agent.py"
agrees=examples/calc_agent/judge_reward.py:agrees

start_teacher examples/calc_agent/judge_teacher.py "$judge_dir/demonstrated.jsonl"
tether rollout --project-dir "$project" --agent "$judge_agent" --tasks "$judge_dir/demonstrated.jsonl" \
  --reward "$agrees" --upstream "$TEACHER_URL" --upstream-model teacher --n-workers 6 --run calc-judge-teacher
stop_teacher

tether train --project-dir "$project" --agent "$judge_agent" --tasks "$judge_dir/train.jsonl" \
  --val-tasks "$judge_dir/val.jsonl" --reward "$agrees" --model smollm2-135m --algorithm sft \
  --from-run calc-judge-teacher --steps "${CALC_JUDGE_SFT_STEPS:-30}" --sft-batch 8 --lr 3e-4 \
  --n-workers 8 --val-every 0 --seed "$seed" --run "calc-judge-sft-seed$seed" --fresh
echo "judge made (demonstrations, SFT, 2 validations): $((SECONDS - started)) s"

adapter=$(find "$project/.tether/runs/calc-judge-sft-seed$seed/policies" -maxdepth 1 -name 'v*' | sort -V | tail -n 1)
serve_policy "$project/judge-server" "$adapter"
TETHER_JUDGE_KEY=$SERVED_KEY
export TETHER_JUDGE_KEY
phase=$SECONDS
run=calc-judge-grpo-seed$seed
tether train --project-dir "$project" --agent "python examples/calc_agent/agent.py --max-tokens 128" \
  --tasks "$project/data/train.jsonl" --val-tasks "$project/data/val.jsonl" \
  --reward judge:examples/calc_agent/judge.md --judge-url "$SERVED_URL" \
  --reward examples/calc_agent/reward.py:correct --reward-weights judge=1 --val-reward correct \
  --model smollm2-135m --algorithm grpo --train-temperature 1.0 --steps "${CALC_JUDGE_RL_STEPS:-8}" \
  --group-size 4 --tasks-per-step 2 --lr 3e-4 --n-workers 8 --val-every 0 --seed "$seed" \
  --run "$run" --fresh "$@"
echo "grpo on the judge's reward (model load, 2 validations, RL): $((SECONDS - phase)) s"
echo "held-out rollouts of $run, the judge against the evaluator:"
tether store --project-dir "$project" agreement --run "$run" --rewards judge,correct --mode val
echo "training rollouts of $run:"
tether store --project-dir "$project" agreement --run "$run" --rewards judge,correct --mode train
echo "judge example total: $((SECONDS - started)) s"
