#!/usr/bin/env bash
# demo.sh — owns the one-command demo: set up the machine, then run python -m cdynamo.demo.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
cd /tmp  # import the installed package, not the source tree
exec "$PY" -m cdynamo.demo "$@"
