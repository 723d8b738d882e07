#!/usr/bin/env bash
# OpenCode as a Tether agent, pointed at the gateway by its documented provider settings: an
# OpenAI-compatible provider whose baseURL and apiKey are read from OPENAI_BASE_URL and OPENAI_API_KEY,
# with the model's output limit under the gateway's max-tokens cap. The task's `prompt` is the one turn of
# `opencode run`, in a scratch folder of its own; the title it would ask the model for is off (one call
# less that is not the task).
set -euo pipefail
node_dir="$(cd "$(dirname "$0")/../harnesses" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cat > "$work/opencode.json" <<'EOF'
{
  "agent": {"title": {"disable": true}},
  "provider": {
    "tether": {
      "npm": "@ai-sdk/openai-compatible",
      "name": "Tether",
      "options": {"baseURL": "{env:OPENAI_BASE_URL}", "apiKey": "{env:OPENAI_API_KEY}"},
      "models": {"policy": {"name": "policy", "limit": {"context": 32768, "output": 1024}}}
    }
  }
}
EOF
prompt="$(node -e 'console.log(JSON.parse(process.env.TETHER_TASK).prompt)')"
cd "$work"
# A home of its own for each run; the provider package it installs on first use is cached for the next.
HOME="$work" XDG_CACHE_HOME="$node_dir/node_modules/.cache" \
  "$node_dir/node_modules/.bin/opencode" run -m tether/policy "$prompt" </dev/null
