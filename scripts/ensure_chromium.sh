#!/usr/bin/env bash
# The dashboard's browser tests drive Debian's chromium through Playwright (no browser download).
# Idempotent: does nothing when chromium is already on PATH.
set -euo pipefail
source "$(dirname "$0")/apt_install.sh"

if command -v chromium >/dev/null 2>&1; then
    exit 0
fi
apt_install ensure_chromium chromium "the dashboard tests need it" recommends
command -v chromium >/dev/null
