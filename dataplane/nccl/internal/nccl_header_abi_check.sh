#!/usr/bin/env bash
# Compares the NCCL side of native_abi.h / native_library.h with nccl.h as
# NCCL releases ship it, on a machine with no CUDA or NCCL install: makes
# nccl.h from a NCCL source checkout's src/nccl.h.in at each git REF (its
# version from makefiles/version.mk), gives it a stand-in for the few CUDA
# types it names, and compiles native_abi_check.cc with
# RANKD_ABI_CHECK_NCCL_ONLY (every NCCL function signature, value, handle
# and ncclConfig_t offset rankd relies on must match). The CUDA side needs
# the real headers: native_abi_conformance_test.sh.
#
# Usage: dataplane/nccl/internal/nccl_header_abi_check.sh NCCL_CHECKOUT REF...
#   e.g. ... ~/src/nccl v2.27.7-1 v2.28.9-1 master
# Exit status: 0 when every REF matches, 1 when one does not (its compiler
# errors are printed), 2 for bad arguments.
set -uo pipefail
if (($# < 2)); then
  sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
repo=$1
shift
root=$(cd "$(dirname "$0")/../../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/include"
# Only what nccl.h itself names; rankd's own view of these types is what
# native_abi.h declares, checked against CUDA's headers elsewhere.
cat > "$work/include/cuda_runtime.h" <<'STANDIN'
#pragma once
#include <stddef.h>
typedef struct CUstream_st* cudaStream_t;
typedef enum cudaError_enum_standin { cudaSuccess = 0 } cudaError_t;
#define CUDART_VERSION 13000
STANDIN
# The real ones say that their types exist; older nccl.h declare
# ncclBfloat16 and the fp8 types only then.
echo '#pragma once' > "$work/include/cuda_fp16.h"
printf '#pragma once\n#define __CUDA_BF16_TYPES_EXIST__\n' > "$work/include/cuda_bf16.h"
printf '#pragma once\n#define __CUDA_FP8_TYPES_EXIST__\n' > "$work/include/cuda_fp8.h"
failed=0
for ref in "$@"; do
  if ! template=$(git -C "$repo" show "$ref:src/nccl.h.in" 2>&1); then
    echo "$ref: no src/nccl.h.in: $template"
    failed=1
    continue
  fi
  read -r major minor patch < <(git -C "$repo" show "$ref:makefiles/version.mk" |
    awk '$1=="NCCL_MAJOR"{M=$3} $1=="NCCL_MINOR"{m=$3} $1=="NCCL_PATCH"{p=$3} END{print M, m, p}')
  if ! [[ "$major" =~ ^[0-9]+$ && "$minor" =~ ^[0-9]+$ && "$patch" =~ ^[0-9]+$ ]]; then
    echo "$ref: cannot read the version from makefiles/version.mk"
    failed=1
    continue
  fi
  code=$((major * 10000 + minor * 100 + patch))
  sed -e "s/\${nccl:Major}/$major/; s/\${nccl:Minor}/$minor/" \
      -e "s/\${nccl:Patch}/$patch/; s/\${nccl:Suffix}//" \
      -e "s/\${nccl:Version}/$code/" <<<"$template" > "$work/include/nccl.h"
  if g++ -std=c++20 -Wall -Werror -DRANKD_ABI_CHECK_NCCL_ONLY -I"$root" \
      -I"$work/include" "$root/dataplane/nccl/internal/native_abi_check.cc" \
      -o "$work/check" 2> "$work/errors"; then
    echo "$ref: $("$work/check")"
  else
    echo "$ref: NCCL $major.$minor.$patch: does NOT match:"
    grep -E 'error' "$work/errors" | head -20
    failed=1
  fi
done
exit "$failed"
