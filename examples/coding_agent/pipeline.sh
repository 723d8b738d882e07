#!/usr/bin/env bash
# The coding agent learns: scripted-teacher rollouts on SWE-smith-style bug-fix tasks from toolz (find the
# function, read it, fix it, submit) -> SFT warm start on those demonstrations -> GRPO, with the held-out fix
# rate (greedy; tasks from another module of the library) before, after SFT and after RL. Sizes come from
# the environment (CODING_TRAIN, CODING_VAL, CODING_DEMOS, CODING_SFT_STEPS, CODING_RL_STEPS, CODING_SEEDS
# ("0"), CODING_MAX_TURNS, ...); extra arguments go to `tether train`. In training every agent runs under
# bubblewrap (--sandbox bwrap); the evaluator runs the hidden tests under bubblewrap in every phase.
set -euo pipefail
cd "$(dirname "$0")/../.."
source examples/pipeline_lib.sh
prefix=CODING
name=coding
project=${CODING_PROJECT:-coding-project}
agent="python examples/coding_agent/agent.py --max-turns ${CODING_MAX_TURNS:-4} --max-tokens ${CODING_MAX_TOKENS:-192}"
reward=examples/coding_agent/reward.py:fixed
teacher=examples/coding_agent/teacher.py
mkdir -p "$project"
# The sdist is kept in $project/sdist (hidden from sandboxed agents with the rest of the project).
python examples/coding_agent/tasks.py --out-dir "$project/data" --train "${CODING_TRAIN:-200}" \
  --val "${CODING_VAL:-16}" --seed 0
train_tasks=$project/data/train.jsonl
val_tasks=$project/data/val.jsonl
declare -A size=([MODEL]=smollm2-135m [DEMOS]=60 [TEACHER_WORKERS]=4 [SFT_STEPS]=20 [SFT_BATCH]=4 [LR]=3e-4
  [RL_STEPS]=3 [GROUP]=4 [TASKS_PER_STEP]=2 [SIGNAL_GROUPS]=0 [MAX_GROUPS]=4 [WORKERS]=8 [SEEDS]=0)
extra_train=(--sandbox bwrap --timeout 900)
run_pipeline "$@"
