#!/usr/bin/env bash
# Runs python/tests under Debian's /usr/bin/python3 against the librankd.so,
# rankd and rankctl of this build (Bazel runfiles), writing JUnit XML to
# $XML_OUTPUT_FILE. A sanitizer build's librankd.so needs its runtime loaded
# first: Python itself is not instrumented.
set -euo pipefail
export RANKD_BIN_DIR="$PWD"
export RANKD_LIBRARY="$PWD/capi/librankd.so"
export PYTHONPATH="$PWD/python"
if nm -D --undefined-only "$RANKD_LIBRARY" | grep ' __asan_' >/dev/null; then
  export LD_PRELOAD="$(clang-14 -print-file-name=libclang_rt.asan-x86_64.so)"
  # Python's own allocations are not leaks of ours.
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
fi
exec /usr/bin/python3 -m pytest -q -p no:cacheprovider python/tests \
  --junitxml="${XML_OUTPUT_FILE:-$TEST_TMPDIR/pytest.xml}" "$@"
