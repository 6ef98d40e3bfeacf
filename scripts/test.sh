#!/usr/bin/env bash
# test.sh — owns the one-command test run: setup, the GoogleTest suites (ctest), then pytest on tests/py, and the
# time each part took.
#
# CDYNAMO_TEST_TIER=full (default) runs every test; =slice a representative part (tests/py/tiers.py: CI's other
# interpreters). CDYNAMO_TEST_JOBS (default 2) is the number of pytest worker processes (pytest-xdist, whole files
# per worker); 1 runs pytest in this process. No limit here depends on the machine's speed: the per-test hang guard
# is tests/py/conftest.py's, and CDYNAMO_PYTEST_TIMEOUT (default 5400 s) only ends a pytest that hangs outside a test.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
export CDYNAMO_TEST_TIER="${CDYNAMO_TEST_TIER:-full}"
jobs="${CDYNAMO_TEST_JOBS:-2}"

t_begin=$(date +%s)
times=()
timed() {  # timed NAME START: records NAME's seconds since START
  times+=("$1 $(( $(date +%s) - $2 ))s")
}

t=$(date +%s)
bash scripts/setup.sh
timed setup "$t"

status=0

# The GoogleTest binaries live in the scikit-build build dir (build/<wheel_tag>) of this Python (cp311-...,
# cp312-..., cp313-...); use the newest one.
t=$(date +%s)
tag="$("$PY" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')"
testfile="$(ls -t build/"$tag"-*/CTestTestfile.cmake 2>/dev/null | head -n 1 || true)"
if [ -z "$testfile" ]; then
  echo "[test] ERROR: no build/$tag-*/CTestTestfile.cmake (was the build configured with CDYNAMO_BUILD_TESTS=ON?)" >&2
  status=1
else
  echo "[test] ctest in $(dirname "$testfile")"
  ctest --test-dir "$(dirname "$testfile")" --output-on-failure --no-tests=error --timeout 600 || status=1
fi
timed ctest "$t"

# pytest against the installed package; tests/py/conftest.py refuses a cdynamo imported from python/.
xdist=()
if [ "$jobs" -gt 1 ] && "$PY" -c 'import xdist' >/dev/null 2>&1; then
  # loadfile: a file's tests run in order in one worker (files share module-level models and caches).
  xdist=(-n "$jobs" --dist loadfile)
fi
echo "[test] pytest tests/py (tier $CDYNAMO_TEST_TIER, ${jobs} job(s))"
t=$(date +%s)
set +e
timeout --signal=TERM --kill-after=30 "${CDYNAMO_PYTEST_TIMEOUT:-5400}" \
  "$PY" -m pytest -q -p no:cacheprovider --durations=30 "${xdist[@]}" "$ROOT/tests/py"
rc=$?
set -e
timed pytest "$t"
if [ $rc -ne 0 ]; then
  [ $rc -eq 5 ] && echo "[test] ERROR: pytest collected no tests" >&2
  [ $rc -eq 124 ] && echo "[test] ERROR: pytest hung (no output past CDYNAMO_PYTEST_TIMEOUT)" >&2
  status=1
fi

timed total "$t_begin"
pyver="$("$PY" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')"
echo "[test] times (Python $pyver, tier $CDYNAMO_TEST_TIER, $(nproc 2>/dev/null || echo '?') cores," \
     "load average $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')): ${times[*]}"
if [ $status -eq 0 ]; then echo "[test] ALL PASSED"; else echo "[test] FAILED" >&2; fi
exit $status
