#!/usr/bin/env bash
# The agent frameworks of the survey of defaults (tests/integration/test_framework_defaults.py), each
# set of them in a virtual environment of its own under .venv-frameworks/: they are the agents' packages,
# not Tether's, and LlamaIndex and CrewAI pin `openai` below the version the others need. One environment
# per tests/integration/frameworks/requirements-NAME.txt, made once and again when its file changes.
# Idempotent.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-python3}"
for requirements in "$root"/tests/integration/frameworks/requirements-*.txt; do
    name="$(basename "$requirements" .txt)"
    name="${name#requirements-}"
    venv="$root/.venv-frameworks/$name"
    stamp="$venv/.installed-requirements"
    if [ -f "$stamp" ] && cmp -s "$requirements" "$stamp"; then
        continue
    fi
    echo "ensure_frameworks: making $venv ($(grep -cv '^#' "$requirements") packages)" >&2
    rm -rf "$venv"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    "$venv/bin/python" -m pip install --quiet -r "$requirements"
    cp "$requirements" "$stamp"
done
