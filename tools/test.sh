#!/usr/bin/env bash
# Runs rankd's whole test suite: installs what is missing, builds with Bazel,
# runs every test, and ends with "N passed, M failed" counted from the
# individual test cases. Extra arguments are passed to `bazel test`.
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
bazel test --keep_going "$@" $targets
python3 tools/count_results.py "$(bazel info bazel-testlogs 2>/dev/null)" $targets
