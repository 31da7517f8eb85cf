#!/usr/bin/env bash
# Test driver of one fuzz target (fuzz/fuzz.bzl): FUZZER CORPUS_FOLDER.
#   RANKD_FUZZ_MODE=libfuzzer (--config=asan): libFuzzer runs for
#     RANKD_FUZZ_SECONDS (default 20) from the seed corpus, every input
#     bounded by 30 s (an input may restart the fuzzer's daemon); a crash,
#     an abort or a hang fails the test and leaves the input under the
#     test's undeclared outputs.
#   otherwise: every seed runs once (a regression test of the corpus).
set -euo pipefail
fuzzer="$1"
corpus="$2"
if [[ "${RANKD_FUZZ_MODE:-replay}" != libfuzzer ]]; then
  exec "$fuzzer" "$corpus"
fi
work="${TEST_TMPDIR:-/tmp}/corpus"
artifacts="${TEST_UNDECLARED_OUTPUTS_DIR:-${TEST_TMPDIR:-/tmp}}/"
mkdir -p "$work"
# New inputs go to $work (first folder); the seeds stay read-only.
exec "$fuzzer" -max_total_time="${RANKD_FUZZ_SECONDS:-20}" -timeout=30 \
  -rss_limit_mb=4096 -detect_leaks=0 -print_final_stats=1 \
  -artifact_prefix="$artifacts" "$work" "$corpus"
