#!/usr/bin/env bash
# fuzz.sh — owns running the differential fuzzer from the repository root: bash scripts/fuzz.sh N [START] [extra run.py args].
# Runs seeds START..START+N-1 (default START=0) with backends eager and aot_eager (aot_eager on every 4th seed).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
N="${1:-500}"
START="${2:-0}"
shift $(( $# > 2 ? 2 : $# )) || true
PY="${PYTHON:-python3.11}"
exec "$PY" -m tests.fuzz.run --start "$START" --count "$N" --backends eager,aot_eager --aot-every 4 -v "$@"
