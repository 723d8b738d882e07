#!/usr/bin/env bash
# The RAG agent learns: scripted-teacher rollouts on the train questions (the search call, then the
# answer) -> SFT warm start on those demonstrations -> GRPO, with the reward (0.2 format + 0.8 F1)
# (greedy) on the held-out questions before, after SFT and after RL. Sizes come from the
# environment (RAG_SFT_STEPS, RAG_RL_STEPS, RAG_VAL, RAG_SEEDS ("0 1"), ...); extra arguments go to
# `tether train`.
set -euo pipefail
cd "$(dirname "$0")/../.."
source examples/pipeline_lib.sh
prefix=RAG
name=rag
project=${RAG_PROJECT:-rag-project}
agent="python examples/rag_agent/agent.py --temperature ${RAG_TEMPERATURE:-1.0}"
reward=examples/rag_agent/reward.py:score
teacher=examples/rag_agent/teacher.py
mkdir -p "$project"
python examples/rag_agent/tasks.py --out-dir "$project/data" --val "${RAG_VAL:-52}" --seed 0
# the corpus embedded once, into the cache beside the agent that sandboxed agents read
python -c "import sys; sys.path.insert(0, 'examples/rag_agent'); import retrieval; retrieval.Retriever()"
train_tasks=$project/data/train.jsonl
first_train_tasks
val_tasks=$project/data/val.jsonl
declare -A size=([MODEL]=smollm2-135m [DEMOS]=40 [TEACHER_WORKERS]=6 [SFT_STEPS]=16 [SFT_BATCH]=8
  [LR]=3e-4 [RL_STEPS]=7 [GROUP]=6 [TASKS_PER_STEP]=2 [SIGNAL_GROUPS]=2 [MAX_GROUPS]=4 [WORKERS]=8)
extra_train=(--timeout 600)
run_pipeline "$@"
