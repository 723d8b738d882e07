#!/usr/bin/env bash
# Codex CLI as a Tether agent, pointed at the gateway by its documented provider settings: a model
# provider with the rollout's base URL, its key read from OPENAI_API_KEY, the Responses wire API. Web
# search (a hosted tool no gateway model can run) and sub-agents are off, and so is Codex's own sandbox:
# the boundary is Tether's (`--sandbox bwrap`). The task's `prompt` is the one turn of `codex exec`;
# Codex prints its last message on stdout, which is the rollout's output.
set -euo pipefail
node_dir="$(cd "$(dirname "$0")/../harnesses" && pwd)"
CODEX_HOME="$(mktemp -d)"
export CODEX_HOME
trap 'rm -rf "$CODEX_HOME"' EXIT
cat > "$CODEX_HOME/config.toml" <<EOF
model = "policy"
model_provider = "tether"
web_search = "disabled"

[agents]
enabled = false

[model_providers.tether]
name = "Tether"
base_url = "$OPENAI_BASE_URL"
env_key = "OPENAI_API_KEY"
wire_api = "responses"
EOF
prompt="$(node -e 'console.log(JSON.parse(process.env.TETHER_TASK).prompt)')"
"$node_dir/node_modules/.bin/codex" exec --skip-git-repo-check --color never --sandbox danger-full-access "$prompt" </dev/null
