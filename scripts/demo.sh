#!/usr/bin/env bash
# The main job, for now: serve SmolLM2-135M through the recording gateway, run a plain openai-client
# agent against it, and show what the store recorded (token ids, logprobs, policy version).
set -euo pipefail
cd "$(dirname "$0")/.."
project=demo-project
mkdir -p "$project"
log="$project/serve.log"

tether serve --model "${TETHER_DEMO_MODEL:-smollm2-135m}" --port 0 --project-dir "$project" >"$log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true; wait $server 2>/dev/null || true' EXIT

echo "starting tether serve (the first run converts the model once, ~1 minute) ..."
for _ in $(seq 1 600); do
  grep -q '^ready$' "$log" && break
  kill -0 $server 2>/dev/null || { cat "$log"; echo "tether serve exited" >&2; exit 1; }
  sleep 0.5
done
grep -q '^ready$' "$log" || { cat "$log"; echo "tether serve did not become ready" >&2; exit 1; }
cat "$log"

eval "$(grep '^export ' "$log")"
python examples/hello_agent.py "What is 12 plus 30? Answer with a number."
tether store --project-dir "$project" show latest
