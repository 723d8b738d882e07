#!/usr/bin/env bash
# The test suite starts throwaway PostgreSQL clusters: install Debian's server package when it is missing.
set -euo pipefail

if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure_postgres: PostgreSQL server binaries (initdb, pg_ctl) are missing and apt-get is not" \
        "available: install PostgreSQL 15 or newer by hand" >&2
    exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi
echo "ensure_postgres: installing Debian's postgresql package" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends postgresql >/dev/null
ls /usr/lib/postgresql/*/bin/initdb >/dev/null
