#!/usr/bin/env bash
# `--sandbox bwrap` runs agents under Debian's bubblewrap, and its tests (tests/runner/test_sandbox.py) need
# it: install it when it is missing. Idempotent: does nothing when bwrap is already on PATH.
set -euo pipefail
source "$(dirname "$0")/apt_install.sh"

if command -v bwrap >/dev/null 2>&1; then
    exit 0
fi
apt_install ensure_bwrap bubblewrap "--sandbox bwrap and its tests need it"
command -v bwrap >/dev/null
