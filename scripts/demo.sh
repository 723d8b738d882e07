#!/usr/bin/env bash
# The main job: train an unmodified OpenAI-client agent (examples/arith_agent) on this CPU with RL, and
# print its held-out accuracy before and after. The agent only ever sees OPENAI_BASE_URL/OPENAI_API_KEY.
#
# The run has a stable name (TETHER_DEMO_RUN, default `demo`), so running this again after a crash, a
# kill or Ctrl-C resumes it from its last checkpoint. TETHER_DEMO_FRESH=1 starts it over (passes --fresh:
# the old run is kept as NAME~N). A resume refuses a changed task file, naming the first task that
# differs: start over then.
#
# Each step samples 8 answers to each of 6 problems and takes two optimizer steps on them; training draws
# additions and subtractions one to one (the held-out file keeps its mix): with two additions in three, the
# policy can settle on always adding (docs/efficacy.md, "The demo").
set -euo pipefail
cd "$(dirname "$0")/.."
project=demo-project
steps="${TETHER_DEMO_STEPS:-16}"
run="${TETHER_DEMO_RUN:-demo}"
fresh=()
case "${TETHER_DEMO_FRESH:-}" in
  "" | 0 | no | false) ;;
  *) fresh=(--fresh) ;;
esac
mkdir -p "$project"
python examples/arith_agent/tasks.py --out-dir "$project/data" --train 200 --val 32 --seed 0 --balanced-train
tether train \
  --project-dir "$project" \
  --agent "python examples/arith_agent/agent.py" \
  --tasks "$project/data/train.jsonl" \
  --val-tasks "$project/data/val.jsonl" \
  --reward examples/arith_agent/reward.py:correct \
  --model "${TETHER_DEMO_MODEL:-smollm2-135m}" \
  --algorithm grpo --group-size 8 --tasks-per-step 6 --mini-batches 2 --steps "$steps" --val-every 4 \
  --run-name "$run" ${fresh[@]+"${fresh[@]}"} "$@"
