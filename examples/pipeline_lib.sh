# Shared by the examples' pipeline.sh scripts: start a scripted teacher, stop it, summarise the run.
# Sourced, not run. Each pipeline: teacher rollouts on train -> SFT warm start -> GRPO, held-out
# accuracy (greedy, val split) before, after SFT and after RL.

teacher_pid=""

# start_teacher TEACHER_PY TRAIN_TASKS [ARGS...]: serve the teacher on a free loopback port; sets TEACHER_URL.
start_teacher() {
  local script=$1 tasks=$2 url_file
  shift 2
  url_file=$(mktemp)
  rm -f "$url_file"
  python "$script" --tasks "$tasks" --url-file "$url_file" "$@" >/dev/null &
  teacher_pid=$!
  trap stop_teacher EXIT
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

# phase_time LABEL START: print the seconds since START (a $SECONDS value) under LABEL.
phase_time() {
  echo "$1: $(( SECONDS - $2 )) s" | tee -a "$summary_file"
}
