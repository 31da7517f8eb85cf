#!/usr/bin/env bash
# Runs rankd's whole test suite: installs what is missing, builds with Bazel,
# runs every test, and ends with "N passed, M failed" counted from the
# individual test cases. Extra arguments are passed to `bazel test`.
#
# The suite runs under AddressSanitizer + UndefinedBehaviorSanitizer
# (--config=asan in .bazelrc): any memory error or undefined behaviour fails
# its test, and every fuzz target (fuzz/) fuzzes for RANKD_FUZZ_SECONDS
# (default 20). Then the unit tests of the daemon, client, data plane and
# common code run again under ThreadSanitizer (--config=tsan; see
# docs/operations.md, "Sanitizers"); their cases join the count.
# RANKD_TEST_CONFIG=plain runs the uninstrumented build instead, without
# the TSan pass (faster, fewer checks; the fuzz tests then replay their
# seeds); RANKD_TEST_TSAN=0 skips only the TSan pass.
set -uo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh

# Tests tagged gpu_kit run only against real CUDA libraries, through the
# GPU kit (tests/gpu/run.sh on a GPU host); here each would only skip. Their
# CPU twins (e.g. //dataplane/nccl:nccl_operations_standin_test) run instead.
targets=$(bazel query 'tests(//...) except attr(tags, "gpu_kit", tests(//...))' \
  2>/dev/null | sort)
if [[ -z "$targets" ]]; then
  echo "bazel query found no tests" >&2
  echo "0 passed, 1 failed"
  exit 1
fi
config=(--config=asan)
tsan=${RANKD_TEST_TSAN:-1}
if [[ "${RANKD_TEST_CONFIG:-asan}" == plain ]]; then config=(); tsan=0; fi
bazel test --keep_going "${config[@]}" "$@" $targets
results=("$(bazel info "${config[@]}" bazel-testlogs 2>/dev/null)" $targets)

if [[ $tsan != 0 ]]; then
  tsan_targets=$(bazel query 'tests(//daemon/... + //client/... + //dataplane/... + //common/... + //tools/tsan/...) except attr(tags, "gpu_kit", tests(//...))' \
    2>/dev/null | sort)
  if [[ -z "$tsan_targets" ]]; then
    echo "bazel query found no tests for the TSan pass" >&2
    echo "0 passed, 1 failed"
    exit 1
  fi
  tsan_config=(--config=tsan)
  bazel test --keep_going "${tsan_config[@]}" "$@" $tsan_targets
  results+=(-- "$(bazel info "${tsan_config[@]}" bazel-testlogs 2>/dev/null)" $tsan_targets)
fi
python3 tools/count_results.py "${results[@]}"
