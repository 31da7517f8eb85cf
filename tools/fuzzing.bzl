"""Build settings for fuzzing (docs/fuzzing.md)."""

def fuzz_coverage_copts():
    """libFuzzer's coverage instrumentation, under --config=asan only.

    Applied to the libraries the fuzz targets (fuzz/) drive: the daemon's
    request handling and configuration, the credentials and limits, and
    rankctl's formatting. Instrumenting every target instead would make the
    whole sanitizer build about 40% slower for code no fuzzer reaches.
    """
    return select({
        "//tools:libfuzzer": ["-fsanitize=fuzzer-no-link"],
        "//conditions:default": [],
    })
