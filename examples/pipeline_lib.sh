# Shared by the examples' pipeline.sh scripts: start a scripted teacher, stop it, summarise the runs.
# Sourced, not run. Each pipeline: teacher rollouts on train -> SFT warm start -> GRPO, held-out
# accuracy (greedy, val split) before, after SFT and after RL, with 95% bootstrap intervals, for each
# seed of $<PREFIX>_SEEDS (default "0 1").

teacher_pid=""

# start_teacher TEACHER_PY TRAIN_TASKS [ARGS...]: serve the teacher on a free loopback port; sets TEACHER_URL.
start_teacher() {
  local script=$1 tasks=$2 url_file
  shift 2
  url_file=$(mktemp)
  rm -f "$url_file"
  python "$script" --tasks "$tasks" --url-file "$url_file" "$@" >/dev/null &
  teacher_pid=$!
  trap "stop_teacher; stop_served" EXIT
  for _ in $(seq 1 300); do
    if [ -s "$url_file" ]; then
      TEACHER_URL=$(cat "$url_file")
      rm -f "$url_file"
      echo "teacher listening on $TEACHER_URL"
      return 0
    fi
    kill -0 "$teacher_pid" 2>/dev/null || { echo "the teacher did not start" >&2; return 1; }
    sleep 0.2
  done
  echo "the teacher did not start within 60 s" >&2
  return 1
}

stop_teacher() {
  if [ -n "$teacher_pid" ]; then
    kill "$teacher_pid" 2>/dev/null || true
    wait "$teacher_pid" 2>/dev/null || true
    teacher_pid=""
  fi
}

# serve_policy DIR ADAPTER: `tether serve` SmolLM2 with that adapter (a policies/vN folder) on a free loopback
# port, its store in DIR; sets SERVED_URL and SERVED_KEY, and stops it when the script exits.
serve_pid=""
serve_policy() {
  local dir=$1 adapter=$2
  mkdir -p "$dir"
  tether serve --model smollm2-135m --adapter "$adapter" --port 0 --project-dir "$dir" \
    >"$dir/serve.out" 2>"$dir/serve.err" &
  serve_pid=$!
  trap "stop_teacher; stop_served" EXIT
  for _ in $(seq 1 900); do
    grep -q '^ready' "$dir/serve.out" && break
    kill -0 "$serve_pid" 2>/dev/null || { cat "$dir/serve.err" >&2; return 1; }
    sleep 0.2
  done
  grep -q '^ready' "$dir/serve.out" || { echo "tether serve did not start in 180 s" >&2; return 1; }
  SERVED_URL=$(sed -n 's/^export OPENAI_BASE_URL=//p' "$dir/serve.out")
  SERVED_KEY=$(sed -n 's/^export OPENAI_API_KEY=//p' "$dir/serve.out")
}

stop_served() {
  if [ -n "$serve_pid" ]; then
    kill "$serve_pid" 2>/dev/null || true
    wait "$serve_pid" 2>/dev/null || true
    serve_pid=""
  fi
}

# phase_time LABEL START: print the seconds since START (a $SECONDS value) under LABEL.
phase_time() {
  echo "$1: $(( SECONDS - $2 )) s" | tee -a "$summary_file"
}

# size_of KEY: the size $<PREFIX>_KEY from the environment (SQL_SFT_STEPS, ...), else the example's default.
size_of() {
  local var="${prefix}_$1"
  echo "${!var:-${size[$1]:-}}"
}

# first_train_tasks: with $<PREFIX>_TRAIN=N, train on the first N tasks of $train_tasks only.
first_train_tasks() {
  local var="${prefix}_TRAIN"
  if [ -n "${!var:-}" ]; then
    head -n "${!var}" "$train_tasks" >"$project/data/train-head.jsonl"
    train_tasks=$project/data/train-head.jsonl
  fi
}

# first_val_tasks: with $<PREFIX>_VAL=N, validate on the first N tasks of $val_tasks only (for examples
# whose tasks.py does not size the val split itself).
first_val_tasks() {
  local var="${prefix}_VAL"
  if [ -n "${!var:-}" ]; then
    head -n "${!var}" "$val_tasks" >"$project/data/val-head.jsonl"
    val_tasks=$project/data/val-head.jsonl
  fi
}

# demonstrated_tasks: the file of train tasks the teacher demonstrates: the first $<PREFIX>_DEMOS (default
# size[DEMOS]) of $train_tasks, or all of them when that is empty. RL samples from all of $train_tasks, so
# the others are questions the policy first meets in RL, where its rewards still vary.
demonstrated_tasks() {
  local count
  count=$(size_of DEMOS)
  if [ -z "$count" ]; then
    echo "$train_tasks"
    return 0
  fi
  head -n "$count" "$train_tasks" >"$project/data/demonstrated.jsonl"
  echo "$project/data/demonstrated.jsonl"
}

# signal_options: dynamic sampling for RL, from SIGNAL_GROUPS (groups whose rewards vary that each step waits
# for; 0 or unset: off) and MAX_GROUPS (the most groups one step may launch). After SFT most groups are
# all right or all wrong, so without it a step may update on one group or none.
signal_options() {
  local groups
  groups=$(size_of SIGNAL_GROUPS)
  if [ -n "$groups" ] && [ "$groups" != 0 ]; then
    echo "--min-signal-groups $groups --max-groups-per-step $(size_of MAX_GROUPS)"
  fi
}

# val_samples: k of the held-out pass@k that every validation also measures, from VAL_K (default 8; 0: greedy
# pass@1 only). pass@k after SFT against pass@1 is what RL can sharpen.
val_samples() {
  local k
  k=$(size_of VAL_K)
  echo "${k:-8}"
}

# run_pipeline [TETHER_TRAIN_ARGS...]: the three phases, from what the example's pipeline.sh set:
#   name (calc, sql, rag), prefix (CALC, SQL, RAG), project, agent, reward, teacher (its script),
#   train_tasks, val_tasks, the default sizes in the associative array `size`, extra_train (more
#   `tether train` options) and agent_options (options of every command that runs the agent, such as
#   `--sandbox-show DIR` for what the sandboxed agent reads outside its folder). SFT and RL run once per seed of $<PREFIX>_SEEDS (default "0 1"), each seed its
#   own run `NAME-pipeline-seedS`; the seed orders the demonstrations and the RL tasks and initialises
#   the adapter. The teacher's rollouts are made once and imitated by every seed: the teacher is
#   scripted from the reference solutions, so another seed would record the same demonstrations.
agent_options=()

run_pipeline() {
  local started=$SECONDS phase sft_steps demo_tasks seed run
  local -a seeds runs=() signal=() base_coverage=()
  sft_steps=$(size_of SFT_STEPS)
  read -r -a seeds <<<"$(size_of SEEDS)"
  [ "${#seeds[@]}" -gt 0 ] || seeds=(0 1)
  demo_tasks=$(demonstrated_tasks)
  read -r -a signal <<<"$(signal_options)"
  summary_file="$project/pipeline-times.txt"
  : >"$summary_file"

  phase=$SECONDS
  echo "the teacher demonstrates $(wc -l <"$demo_tasks") of the $(wc -l <"$train_tasks") train tasks;" \
    "$(wc -l <"$val_tasks") held-out tasks; seeds ${seeds[*]}"
  start_teacher "$teacher" "$demo_tasks"
  tether rollout --project-dir "$project" --agent "$agent" "${agent_options[@]}" --tasks "$demo_tasks" \
    --reward "$reward" --upstream "$TEACHER_URL" --upstream-model teacher \
    --n-workers "$(size_of TEACHER_WORKERS)" --run "$name-teacher"
  stop_teacher
  phase_time "teacher rollouts" "$phase"

  for seed in "${seeds[@]}"; do
    phase=$SECONDS
    run="$name-pipeline-seed$seed"
    tether train --project-dir "$project" --agent "$agent" "${agent_options[@]}" \
      --tasks "$train_tasks" --val-tasks "$val_tasks" --reward "$reward" --model "$(size_of MODEL)" \
      --from-run "$name-teacher" --sft-steps "$sft_steps" --sft-batch "$(size_of SFT_BATCH)" \
      --lr "$(size_of LR)" --algorithm grpo --steps "$(size_of RL_STEPS)" --group-size "$(size_of GROUP)" \
      --tasks-per-step "$(size_of TASKS_PER_STEP)" --n-workers "$(size_of WORKERS)" --val-every 0 \
      --seed "$seed" --val-k "$(val_samples)" "${base_coverage[@]}" "${signal[@]}" "${extra_train[@]}" \
      --run "$run" --fresh "$@"
    base_coverage=(--no-base-coverage)  # the base model's pass@K is every seed's: the first run measures it
    phase_time "train, seed $seed (model load, 3 validations, SFT, RL)" "$phase"
    runs+=(--run "$seed" "$project/.tether/runs/$run")
  done
  phase_time "pipeline total" "$started"

  python examples/pipeline_summary.py "${runs[@]}" --sft-steps "$sft_steps" \
    --out "$project/pipeline-summary.json" | tee -a "$summary_file"
}
