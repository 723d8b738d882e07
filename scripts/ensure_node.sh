#!/usr/bin/env bash
# The Node agents of the integration suite (tests/integration/node) need Node.js, npm and their packages:
# install Debian's nodejs and npm when missing, then the packages package-lock.json pins (once, and again
# when the lock changes), then the command-line coding harnesses (tests/integration/harnesses). Idempotent.
set -euo pipefail
source "$(dirname "$0")/apt_install.sh"

if ! command -v node >/dev/null 2>&1; then
    apt_install ensure_node nodejs "the Node agents of the integration suite run on it"
fi
if ! command -v npm >/dev/null 2>&1; then
    apt_install ensure_node npm "the Node agents' packages install with it"
fi
cd "$(dirname "$0")/../tests/integration/node"
stamp=node_modules/.installed-lock
if [ ! -f "$stamp" ] || ! cmp -s package-lock.json "$stamp"; then
    echo "ensure_node: installing the Node agents' packages (npm ci)" >&2
    npm ci --no-audit --no-fund --silent
    cp package-lock.json "$stamp"
fi

# Codex CLI and OpenCode ship their binaries as one optional package per platform, which a lock file
# written on one platform does not list for the others (and `npm ci` then refuses it): they install by
# their pinned versions, without a lock, again when the versions change.
harnesses="@openai/codex@0.171.0 opencode-ai@1.18.33"
cd ../harnesses
stamp=node_modules/.installed-versions
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$harnesses" ]; then
    echo "ensure_node: installing the coding harnesses ($harnesses)" >&2
    # shellcheck disable=SC2086 # one word per package
    npm install --no-save --no-package-lock --no-audit --no-fund --silent $harnesses
    echo "$harnesses" > "$stamp"
fi
