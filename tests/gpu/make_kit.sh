#!/usr/bin/env bash
# Builds the GPU run kit on this (CPU) machine: `bazel -c opt` of the kit's
# binaries (tests/gpu/kit_contents.sh), then tests/gpu/assemble_kit.sh into
# OUTDIR (default build/gpu-kit, ignored by git). The kit needs no Bazel and
# no development package on the GPU host: copy the repository (or just the
# kit) there and run `build/gpu-kit/run.sh`. See docs/nccl.md.
#
# Usage: tests/gpu/make_kit.sh [OUTDIR]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
out="${1:-build/gpu-kit}"
source tests/gpu/kit_contents.sh

tools/setup.sh
echo "== building the kit's binaries (bazel -c opt)"
bazel build -c opt "${KIT_TARGETS[@]}"
bin=$(bazel info -c opt bazel-bin 2>/dev/null)
echo "== assembling $out"
tests/gpu/assemble_kit.sh "$bin" "$out" "$root"
echo "== done: run it on a GPU host with  $out/run.sh  (results in $(dirname "$out")/gpu-out)"
