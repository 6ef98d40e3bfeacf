#!/usr/bin/env bash
# scripts/gpu_ddp.sh — owns the GPU-machine run of scripts/gpu_ddp.py: build cdynamo there (scripts/gpu_run.sh's build), then DDP and FSDP2 on every GPU, logs under $OUT.
set -uo pipefail
OUT="${OUT:-/tmp/gpu_out}"
mkdir -p "$OUT"
bash scripts/gpu_run.sh none > "$OUT/build_check.log" 2>&1 || { tail -40 "$OUT/build_check.log"; exit 1; }
export PYTHONPATH=/tmp/cdyn_site PYTHONUNBUFFERED=1
export TORCHINDUCTOR_COMPILE_THREADS="${TORCHINDUCTOR_COMPILE_THREADS:-8}"
for kind in ${KINDS:-ddp fsdp2}; do
  timeout "${KIND_TIMEOUT_S:-280}" python3 scripts/gpu_ddp.py --kinds "$kind" "$@" 2>&1 | tee "$OUT/gpu_ddp_$kind.log" |
    grep -v -i "warn" | grep -A12 "^== "
done
