#!/usr/bin/env bash
# Runs rankd's whole test suite: installs what is missing, builds with Bazel,
# runs every test, and ends with "N passed, M failed" counted from the
# individual test cases. Extra arguments are passed to `bazel test`.
#
# The suite runs under AddressSanitizer + UndefinedBehaviorSanitizer
# (--config=asan in .bazelrc): any memory error or undefined behaviour fails
# its test, and every fuzz target (fuzz/) fuzzes for RANKD_FUZZ_SECONDS
# (default 20). RANKD_TEST_CONFIG=plain runs the uninstrumented build
# instead (faster, fewer checks; the fuzz tests then replay their seeds).
set -uo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh

# Tests tagged gpu_kit run only against real CUDA libraries, through the
# GPU kit (tests/gpu/run.sh on a GPU host); here each would only skip. Their
# CPU twins (e.g. //dataplane/nccl:nccl_standin_test) run instead.
targets=$(bazel query 'tests(//...) except attr(tags, "gpu_kit", tests(//...))' \
  2>/dev/null | sort)
if [[ -z "$targets" ]]; then
  echo "bazel query found no tests" >&2
  echo "0 passed, 1 failed"
  exit 1
fi
config=(--config=asan)
if [[ "${RANKD_TEST_CONFIG:-asan}" == plain ]]; then config=(); fi
bazel test --keep_going "${config[@]}" "$@" $targets
python3 tools/count_results.py \
  "$(bazel info "${config[@]}" bazel-testlogs 2>/dev/null)" $targets
