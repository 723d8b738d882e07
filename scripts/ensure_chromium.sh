#!/usr/bin/env bash
# The dashboard's browser tests drive Debian's chromium through Playwright (no browser download).
# Idempotent: does nothing when chromium is already on PATH.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "ensure_chromium: install chromium with your package manager (the dashboard tests need it)" >&2
  exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
command -v chromium >/dev/null
