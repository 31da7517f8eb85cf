"""rankd_fuzzer: one libFuzzer target and the test that runs it.

rankd_fuzzer(name = "x_fuzzer", ...) declares
  - x_fuzzer: a binary defining LLVMFuzzerTestOneInput. Under
    --config=asan (//tools:libfuzzer) it links libFuzzer's main and is
    coverage-instrumented, like the libraries it drives
    (tools/fuzzing.bzl); elsewhere it links internal/replay_main.cc, which
    runs files once;
  - x_fuzzer_test: runs x_fuzzer on corpus/x_fuzzer through
    internal/run_fuzzer.sh: a bounded libFuzzer run under --config=asan, a
    replay of the seeds otherwise.
"""

load("//tools:fuzzing.bzl", "fuzz_coverage_copts")

def rankd_fuzzer(name, srcs, deps = [], size = "medium"):
    native.cc_binary(
        name = name,
        srcs = srcs,
        copts = fuzz_coverage_copts(),
        deps = deps + select({
            "//tools:libfuzzer": [],
            "//conditions:default": ["//fuzz:replay_main"],
        }),
        linkopts = select({
            "//tools:libfuzzer": ["-fsanitize=fuzzer"],
            "//conditions:default": [],
        }),
    )
    corpus = "corpus/" + name
    native.sh_test(
        name = name + "_test",
        size = size,
        srcs = ["internal/run_fuzzer.sh"],
        args = [
            "$(rootpath :%s)" % name,
            native.package_name() + "/" + corpus,
        ],
        data = [":" + name] + native.glob([corpus + "/*"]),
        env = select({
            "//tools:libfuzzer": {"RANKD_FUZZ_MODE": "libfuzzer"},
            "//conditions:default": {"RANKD_FUZZ_MODE": "replay"},
        }),
    )
