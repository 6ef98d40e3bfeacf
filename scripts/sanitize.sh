#!/usr/bin/env bash
# sanitize.sh — owns the ASan+UBSan run: builds cdynamo with -DCDYNAMO_SANITIZE into build-sanitize/, installs
# it into .venv-sanitize/ (never into the main interpreter), then runs ctest and pytest (tests/py, one process
# per test file) under the sanitizers. Logs: build-sanitize/logs/. See docs/sanitizers.md.
#
# Environment knobs:
#   CDYNAMO_SANITIZE   sanitizers for -fsanitize= (default address,undefined)
#   PYTHON             the Python (3.11, 3.12 or 3.13) the venv is made from (default python3.11); each version
#                      gets its own venv (.venv-sanitize for 3.11, .venv-sanitize-3.12, -3.13)
#   JOBS               build parallelism (default 2)
#   SANITIZE_BUILD=0   skip the build/install step (reuse .venv-sanitize as it is)
#   SANITIZE_CTEST=0   skip the GoogleTest suites
#   SANITIZE_FILES     the tests/py files to run (default: every test_*.py except SANITIZE_SKIP)
#   SANITIZE_SKIP      test files left out (default: test_leaks.py, see docs/sanitizers.md)
#   SANITIZE_PYTEST_ARGS  extra pytest arguments (e.g. "-x" or "--deselect tests/py/x.py::t")
#   SANITIZE_FILE_TIMEOUT seconds per test file (default 3600); CDYNAMO_TEST_TIMEOUT per test (default 1200)
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore PIP_NO_INPUT=1

SAN="${CDYNAMO_SANITIZE:-address,undefined}"
PY="${PYTHON:-python3.11}"
PYV="$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" || die "$PY does not run"
case "$PYV" in 3.11) VENV="$ROOT/.venv-sanitize" ;; 3.12|3.13) VENV="$ROOT/.venv-sanitize-$PYV" ;;
  *) die "$PY is Python $PYV; cdynamo supports 3.11, 3.12 and 3.13" ;; esac
VPY="$VENV/bin/python"
BUILD_ROOT="$ROOT/build-sanitize"
LOGS="$BUILD_ROOT/logs"
mkdir -p "$LOGS"

say() { echo "[sanitize] $*"; }
die() { echo "[sanitize] ERROR: $*" >&2; exit 1; }
t0=$(date +%s)

# 1. A venv that sees the main interpreter's torch, pytest, numpy, scikit-build-core, pybind11 (but gets its own
#    cdynamo: the venv's site-packages comes first, and pip leaves the one outside the venv alone).
if [ ! -x "$VPY" ]; then
  say "creating $VENV (--system-site-packages) from $PY"
  "$PY" -m venv --system-site-packages "$VENV" || die "venv creation failed"
fi
"$VPY" -c "import sys; sys.exit('%d.%d' % sys.version_info[:2] != '$PYV')" || die "$VPY is not Python $PYV"

# 2. Build (RelWithDebInfo: -O2 -g, and pybind11 neither strips _C nor LTOs it, so reports have file:line).
if [ "${SANITIZE_BUILD:-1}" != 0 ]; then
  say "building with -fsanitize=$SAN into build-sanitize/{wheel_tag} (log: $LOGS/pip-install.log)"
  b0=$(date +%s)
  if ! CMAKE_BUILD_PARALLEL_LEVEL="${JOBS:-2}" "$VPY" -m pip install --no-build-isolation . \
      -C "build-dir=build-sanitize/{wheel_tag}" -C cmake.build-type=RelWithDebInfo \
      -C "cmake.define.CDYNAMO_SANITIZE=$SAN" -C cmake.define.CDYNAMO_BUILD_TESTS=ON >"$LOGS/pip-install.log" 2>&1; then
    tail -n 60 "$LOGS/pip-install.log" >&2
    die "build failed"
  fi
  say "built in $(( $(date +%s) - b0 ))s"
fi

# 3. Runtime environment. python3.11 itself is not instrumented, so the ASan runtime must be preloaded (it has
#    to be the first DSO); the UBSan runtime is a normal dependency of _C. PYTHONMALLOC=malloc routes every
#    Python object through malloc/free, so ASan sees use-after-free of PyObjects (refcount bugs) that pymalloc's
#    arenas would hide.
ASAN_LIB="$(g++ -print-file-name=libasan.so)"
[ -f "$ASAN_LIB" ] || die "libasan.so not found (g++ -print-file-name=libasan.so gave $ASAN_LIB)"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0:halt_on_error=1:abort_on_error=0:allocator_may_return_null=1:detect_odr_violation=0:print_summary=1}"
UBSAN_SUPP="$ROOT/scripts/ubsan.supp"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:suppressions=$UBSAN_SUPP}"
export CDYNAMO_TEST_TIMEOUT="${CDYNAMO_TEST_TIMEOUT:-1200}"
# libstdc++ is preloaded too: python3.11 does not link it, and ASan resolves the real __cxa_throw for its
# interceptor when it starts; without libstdc++ loaded by then, the first C++ throw in _C dies with
# "CHECK failed: asan_interceptors.cpp:320 ((__interception::real___cxa_throw)) != (0)".
STDCXX_LIB="$(g++ -print-file-name=libstdc++.so)"
san_env=(env LD_PRELOAD="$ASAN_LIB $STDCXX_LIB" PYTHONMALLOC=malloc)

# The installed package must be the venv's sanitized one.
(cd /tmp && "${san_env[@]}" "$VPY" -c '
import cdynamo, cdynamo._C, sys
assert cdynamo.__file__.startswith(sys.prefix), cdynamo.__file__
print("[sanitize] cdynamo from", cdynamo._C.__file__)') || die "the sanitized cdynamo does not import from $VENV"

status=0
summary=()

# 4. GoogleTest suites (linked with -fsanitize themselves: no preload needed).
if [ "${SANITIZE_CTEST:-1}" != 0 ]; then
  testfile="$(ls -t "$BUILD_ROOT"/*/CTestTestfile.cmake 2>/dev/null | head -n 1 || true)"
  [ -n "$testfile" ] || die "no build-sanitize/*/CTestTestfile.cmake"
  say "ctest in $(dirname "$testfile") (log: $LOGS/ctest.log)"
  c0=$(date +%s)
  if PYTHONMALLOC=malloc ctest --test-dir "$(dirname "$testfile")" --output-on-failure --no-tests=error \
      --timeout 1800 >"$LOGS/ctest.log" 2>&1; then r=ok; else r=FAILED; status=1; fi
  summary+=("ctest: $r ($(( $(date +%s) - c0 ))s)")
  say "${summary[-1]}"
fi

# 5. pytest, one process per file (an ASan/UBSan report aborts its process; the other files still run).
SKIP="${SANITIZE_SKIP:-test_leaks.py}"
if [ -n "${SANITIZE_FILES:-}" ]; then
  files=($SANITIZE_FILES)
else
  files=()
  for f in tests/py/test_*.py; do
    b="$(basename "$f")"
    case " $SKIP " in *" $b "*) say "skipping $b"; continue ;; esac
    files+=("$b")
  done
fi
for b in "${files[@]}"; do
  log="$LOGS/pytest-${b%.py}.log"
  p0=$(date +%s)
  # Run from build-sanitize/ so neither the source root nor python/ is on sys.path.
  # pytest captures fd 2 while a test runs, and a report that aborts the process would be lost with the capture:
  # the sanitizers write their reports to $LOGS/san-<file>.<pid> instead.
  rm -f "$LOGS/san-${b%.py}".*
  (cd "$BUILD_ROOT" && timeout --signal=TERM --kill-after=30 "${SANITIZE_FILE_TIMEOUT:-3600}" \
     "${san_env[@]}" ASAN_OPTIONS="$ASAN_OPTIONS:log_path=$LOGS/san-${b%.py}" \
     UBSAN_OPTIONS="$UBSAN_OPTIONS:log_path=$LOGS/san-${b%.py}" "$VPY" -m pytest -q -p no:cacheprovider --rootdir="$ROOT" -c "$ROOT/pyproject.toml" \
     ${SANITIZE_PYTEST_ARGS:-} "$ROOT/tests/py/$b") >"$log" 2>&1
  rc=$?
  if cat "$log" "$LOGS/san-${b%.py}".* 2>/dev/null | grep -qE "ERROR: AddressSanitizer|runtime error:"; then
    r="SANITIZER REPORT (rc=$rc)"; status=1
  elif [ $rc -eq 0 ]; then r="passed"
  elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then r="TIMED OUT"; status=1
  else r="FAILED (rc=$rc)"; status=1
  fi
  summary+=("$b: $r ($(( $(date +%s) - p0 ))s) $(grep -E '^[0-9]+ (passed|failed)|^=+ .*(passed|failed)' "$log" | tail -n 1)")
  say "${summary[-1]}"
done

say "summary (total $(( $(date +%s) - t0 ))s; logs in $LOGS):"
for s in "${summary[@]}"; do echo "  $s"; done
grep -lE "ERROR: AddressSanitizer|runtime error:" "$LOGS"/*.log "$LOGS"/san-* 2>/dev/null | sed 's/^/  sanitizer report in /'
exit $status
