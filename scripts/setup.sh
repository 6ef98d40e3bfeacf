#!/usr/bin/env bash
# setup.sh — owns preparing a machine (fresh or not) and building/installing cdynamo; safe to rerun.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore PIP_NO_INPUT=1

say() { echo "[setup] $*"; }
die() { echo "[setup] ERROR: $*" >&2; exit 1; }

# 1. Python 3.11, 3.12 or 3.13 (cdynamo's C++ core is written against CPython internals, per version in
#    csrc/compat). PYTHON=python3.12 (or python3.13) picks the interpreter; without it the first 3.11, then 3.12,
#    then 3.13 found is used.
supported='import sys; sys.exit(sys.version_info[:2] not in ((3, 11), (3, 12), (3, 13)))'
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  for cand in python3.11 python3.12 python3.13 python3 python; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c "$supported" 2>/dev/null; then
      PY="$cand"; break
    fi
  done
fi
[ -n "$PY" ] || die "Python 3.11, 3.12 or 3.13 not found (set PYTHON=/path/to/python3.11, python3.12 or python3.13)"
"$PY" -c "$supported" || die "$PY is not Python 3.11, 3.12 or 3.13"
say "python: $(command -v "$PY") ($("$PY" -c 'import sys; print(sys.version.split()[0])'))"
pip_install() { "$PY" -m pip install -q "$@"; }

# 2. torch: only the pinned version, and only when missing (a bare `torch` would pull a CUDA build).
if "$PY" -c 'import torch' >/dev/null 2>&1; then
  tv="$("$PY" -c 'import torch; print(torch.__version__)')"
  say "torch: $tv (present)"
  case "$tv" in 2.13.0*) ;; *) say "WARNING: cdynamo is developed against torch 2.13.0, found $tv" ;; esac
else
  say "installing torch==2.13.0"
  pip_install torch==2.13.0
fi

# 3. Python test and build requirements (no build isolation: the build uses the installed torch).
need=()
"$PY" -c 'import pytest' >/dev/null 2>&1 || need+=(pytest)
# pytest-xdist: scripts/test.sh runs the test files on two worker processes.
"$PY" -c 'import xdist' >/dev/null 2>&1 || need+=("pytest-xdist==3.8.0")
# tlparse (a binary beside the interpreter): tests/py/test_structured_trace.py renders a cdynamo trace with it.
"$PY" -c 'import os, sys; sys.exit(not os.path.exists(os.path.join(os.path.dirname(sys.executable), "tlparse")))' \
  >/dev/null 2>&1 || need+=("tlparse==0.4.3")
"$PY" -c 'import numpy' >/dev/null 2>&1 || need+=(numpy)
"$PY" -c 'import scipy' >/dev/null 2>&1 || need+=(scipy)
# transformers: the model zoo's library models (tests/py/test_hf_zoo.py); it does not depend on torch.
"$PY" -c 'import transformers, sys; sys.exit(transformers.__version__ != "5.24.0")' >/dev/null 2>&1 \
  || need+=("transformers==5.24.0")
# timm's model zoo (tests/py/test_timm_zoo.py): timm's runtime deps (transformers brings most of them) and pillow
# (torchvision.datasets imports PIL); timm and torchvision themselves go in below, with --no-deps.
"$PY" -c 'import huggingface_hub' >/dev/null 2>&1 || need+=(huggingface_hub)
"$PY" -c 'import safetensors' >/dev/null 2>&1 || need+=(safetensors)
"$PY" -c 'import yaml' >/dev/null 2>&1 || need+=(pyyaml)
"$PY" -c 'import PIL' >/dev/null 2>&1 || need+=(pillow)
"$PY" -c 'import scikit_build_core' >/dev/null 2>&1 || need+=("scikit-build-core>=0.10")
"$PY" -c 'import pybind11' >/dev/null 2>&1 || need+=("pybind11>=2.12")
command -v cmake >/dev/null 2>&1 || need+=("cmake>=3.20")
command -v ninja >/dev/null 2>&1 || need+=(ninja)
if [ ${#need[@]} -gt 0 ]; then
  say "pip installing: ${need[*]}"
  pip_install "${need[@]}"
else
  say "pytest, pytest-xdist, tlparse, numpy, scipy, transformers, pillow, scikit-build-core, pybind11, cmake, ninja: present"
fi
# timm and torchvision both depend on torch: --no-deps, so pip never replaces the pinned torch (torchvision's
# only wheel for torch 2.13, 0.28.0, is a CUDA build whose C++ extension does not load with the CPU torch;
# tests/py/vision_shim.py makes its Python part import). Checked by version: `import timm` needs the shim.
pinned_version() { "$PY" -c 'import importlib.metadata as m, sys
try: v = m.version(sys.argv[1])
except m.PackageNotFoundError: v = None
sys.exit(v != sys.argv[2])' "$1" "$2" >/dev/null 2>&1; }
nodeps=()
pinned_version timm 1.0.22 || nodeps+=("timm==1.0.22")
pinned_version torchvision 0.28.0 || nodeps+=("torchvision==0.28.0")
if [ ${#nodeps[@]} -gt 0 ]; then
  say "pip installing (--no-deps): ${nodeps[*]}"
  pip_install --no-deps "${nodeps[@]}"
else
  say "timm, torchvision: present"
fi

# 4. System packages: a C++ compiler and GoogleTest headers.
apt_install() {
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || die "need root or sudo to apt-get install $*"
    sudo="sudo"
  fi
  say "apt-get installing: $*"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}
apt_need=()
command -v c++ >/dev/null 2>&1 || command -v g++ >/dev/null 2>&1 || apt_need+=(g++)
[ -f /usr/include/gtest/gtest.h ] || apt_need+=(libgtest-dev)
if [ ${#apt_need[@]} -gt 0 ]; then apt_install "${apt_need[@]}"; else say "c++ compiler, GoogleTest: present"; fi

# 5. Build and install (CMake via scikit-build-core; build/<wheel_tag> persists, so rebuilds are incremental).
mkdir -p build
log=build/setup-pip-install.log
say "building and installing cdynamo (log: $log)"
start=$(date +%s)
if ! "$PY" -m pip install --no-build-isolation . -C cmake.define.CDYNAMO_BUILD_TESTS=ON >"$log" 2>&1; then
  echo "[setup] build failed; last lines of $log:" >&2
  tail -n 60 "$log" >&2
  exit 1
fi
say "built in $(( $(date +%s) - start ))s"

# 6. The installed package (not the source tree) must import with its C++ extension.
(cd /tmp && "$PY" -c 'import cdynamo, cdynamo._C; print("[setup] cdynamo", cdynamo.__version__, "installed at", cdynamo.__file__.rsplit("/", 1)[0])')
