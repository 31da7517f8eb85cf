#!/usr/bin/env bash
# Checks native_abi.h and native_library.h against the real CUDA runtime and
# NCCL headers, where this machine has them ($CUDA_HOME or /usr/local/cuda
# with include/cuda_runtime_api.h, cuda.h and nccl.h; nccl.h may also be in
# $NCCL_HOME/include or /usr/include): compiles native_abi_check.cc, whose
# static_asserts compare every value, layout and signature. Without the
# headers it says so and passes (rankd itself never needs them).
set -euo pipefail
src="${TEST_SRCDIR:-$(cd "$(dirname "$0")/../../.." && pwd)}"
[[ -n "${TEST_SRCDIR:-}" ]] && src="$src/${TEST_WORKSPACE:-rankd}"
cuda="${CUDA_HOME:-/usr/local/cuda}"
nccl_inc=""
for d in "${NCCL_HOME:+$NCCL_HOME/include}" "$cuda/include" /usr/include; do
  [[ -n "$d" && -f "$d/nccl.h" ]] && { nccl_inc="$d"; break; }
done
if [[ ! -f "$cuda/include/cuda_runtime_api.h" || ! -f "$cuda/include/cuda.h" || -z "$nccl_inc" ]]; then
  echo "SKIPPED: no CUDA runtime and NCCL headers here ($cuda/include, \$NCCL_HOME/include, /usr/include); nothing to compare against"
  exit 0
fi
out="${TEST_TMPDIR:-/tmp}/native_abi_check"
g++ -std=c++20 -Wall -Werror -I"$src" -I"$cuda/include" -I"$nccl_inc" \
  "$src/dataplane/nccl/internal/native_abi_check.cc" -o "$out"
"$out"
