#!/usr/bin/env bash
# The Node agents of the integration suite (tests/integration/node) need Node.js, npm and their packages:
# install Debian's nodejs and npm when missing, then the packages package-lock.json pins (once, and again
# when the lock changes). Idempotent.
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
