#!/usr/bin/env bash
# The test suite starts throwaway PostgreSQL clusters: install Debian's server package when it is missing.
set -euo pipefail
source "$(dirname "$0")/apt_install.sh"

if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1; then
    exit 0
fi
apt_install ensure_postgres postgresql "the store suite needs PostgreSQL 15 or newer: initdb, pg_ctl"
ls /usr/lib/postgresql/*/bin/initdb >/dev/null
