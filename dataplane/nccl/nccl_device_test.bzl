"""nccl_device_test: one NCCL device-test source, built twice.

The same cases run on real GPUs (the GPU kit, tests/gpu/) and, in CI, against
the CPU stand-in for the CUDA runtime and NCCL (libcuda_nccl_standin.so with
4 stand-in GPUs). For one source `nccl_<theme>_gpu_test.cc` this defines
`nccl_<theme>_gpu_test` (tagged gpu and gpu_kit, so tools/test.sh leaves it
out; it skips without a device) and `nccl_<theme>_standin_test` (every CI
run). Both link the shared fixtures and helpers of
testing/nccl_test_util.h.
"""

# What every NCCL device test links.
NCCL_DEVICE_TEST_DEPS = [
    ":comm_name",
    ":cuda_copy",
    ":cuda_device",
    ":cuda_event",
    ":cuda_stream",
    ":device_buffer",
    ":device_tensor",
    ":native_runtime",
    ":nccl",
    ":nccl_session_peer",
    ":nccl_test_util",
    ":nccl_unique_id",
    ":nccl_version",
    ":result_codes",
    ":standin_control",
    ":stream_capture",
    ":stream_stall",
    "//common:exit_codes",
    "//common:topology",
    "//dataplane:contract",
    "//dataplane:in_process_control_plane",
    "//third_party:absl",
    "//third_party:gtest_main",
]

def nccl_device_test(theme, size = "medium"):
    """The gpu_kit and stand-in variants of nccl_<theme>_gpu_test.cc.

    Args:
      theme: the section's name, e.g. "operations".
      size: the Bazel test size of both variants.
    """
    src = "nccl_%s_gpu_test.cc" % theme
    native.cc_test(
        name = "nccl_%s_gpu_test" % theme,
        size = size,
        srcs = [src],
        tags = [
            "gpu",
            "gpu_kit",
        ],
        deps = NCCL_DEVICE_TEST_DEPS,
    )
    native.cc_test(
        name = "nccl_%s_standin_test" % theme,
        size = size,
        srcs = [src],
        data = [":libcuda_nccl_standin.so"],
        env = {
            "RANKD_CUDART_LIBRARY": "$(rootpath :libcuda_nccl_standin.so)",
            "RANKD_NCCL_LIBRARY": "$(rootpath :libcuda_nccl_standin.so)",
            # The stand-in always has devices: a failure to load it fails.
            "RANKD_REQUIRE_GPU": "1",
        },
        deps = NCCL_DEVICE_TEST_DEPS,
    )
