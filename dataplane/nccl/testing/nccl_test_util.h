// What the NCCL backend's device tests (dataplane/nccl/nccl_*_gpu_test.cc)
// share: the fixtures NcclGpuTest (one device) and NcclMultiGpuTest (2+
// devices), which skip (GTEST_SKIP with the reason, which says "no GPU")
// without enough CUDA devices; RunRanks (one thread and one device per
// rank); value helpers (Desc, Upload, Download, Floats); DataParallel;
// RunInFreshProcess; and ASSERT_OK / SKIP_WITHOUT_DEVICES. Keeping the
// fixtures here, not in each file, is what lets one binary (the GPU kit's
// nccl_gpu_test) link every file: gtest requires one fixture class per test
// suite. Test-only. Depends on the NCCL backend, the in-process control
// plane, gtest and absl.
#ifndef RANKD_DATAPLANE_NCCL_TESTING_NCCL_TEST_UTIL_H_
#define RANKD_DATAPLANE_NCCL_TESTING_NCCL_TEST_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/topology.h"
#include "dataplane/control_plane.h"
#include "dataplane/dtype.h"
#include "dataplane/nccl/cuda_device.h"
#include "dataplane/nccl/cuda_stream.h"
#include "dataplane/nccl/device_tensor.h"
#include "dataplane/nccl/nccl_session.h"
#include "dataplane/testing/in_process_control_plane.h"
#include "dataplane/value_descriptor.h"
#include "gtest/gtest.h"

// Fails the test (returning from it) when `expr`, an absl::Status, is not
// OK, printing the expression and the status.
#define ASSERT_OK(expr)                          \
  do {                                           \
    const absl::Status _s = (expr);              \
    ASSERT_TRUE(_s.ok()) << #expr << ": " << _s; \
  } while (0)

// Skips the test (GTEST_SKIP with the device probe's reason) unless the
// machine has `n` CUDA devices; fails it instead when there is none at all
// and RANKD_REQUIRE_GPU=1 (RequireGpu()).
#define SKIP_WITHOUT_DEVICES(n)                                               \
  do {                                                                        \
    ::rankd::dataplane::nccl::DeviceProbe _probe =                            \
        ::rankd::dataplane::nccl::ProbeDevices();                             \
    if (_probe.device_count == 0 &&                                           \
        ::rankd::dataplane::nccl::testing::RequireGpu()) {                    \
      GTEST_FAIL() << "RANKD_REQUIRE_GPU=1 but no CUDA device: "              \
                   << _probe.reason;                                          \
    }                                                                         \
    if (_probe.device_count < (n)) {                                          \
      GTEST_SKIP() << "needs " << (n) << " CUDA device(s); this machine "     \
                   << "has " << _probe.device_count << ": " << _probe.reason; \
    }                                                                         \
  } while (0)

namespace rankd::dataplane::nccl::testing {

// Runs `body` in a fresh copy of this test binary (a threadsafe death
// test), for checks of process-wide CUDA state: the child passes when none
// of its expectations failed. Fails the calling test when the child does.
void RunInFreshProcess(const std::function<void()>& body);

// ProbeDevices().device_count (0 without a runtime or a device).
int DeviceCount();

// Whether RANKD_REQUIRE_GPU=1 (tests/gpu/run.sh and the stand-in targets
// set it): there, no device at all is a failure (a broken driver setup or
// stand-in), not a reason to skip.
bool RequireGpu();

// `world` ranks, all in one data-parallel group (the only layout of that
// size without a tensor, pipeline or expert degree).
ParallelTopology DataParallel(uint32_t world);

// The descriptor of `shape` elements of `dtype`; the shape must be valid
// (the test crashes otherwise).
ValueDescriptor Desc(std::vector<size_t> shape,
                     TensorDtype dtype = TensorDtype::kF32);

// `values` uploaded as a DeviceTensor of `desc` on `stream`'s device. A
// failure fails the calling test (EXPECT) and then crashes on the empty
// result, so callers need no check.
template <typename T>
DeviceTensor Upload(const ValueDescriptor& desc, const std::vector<T>& values,
                    const std::shared_ptr<CudaStream>& stream) {
  auto t = DeviceTensor::FromHostVector(desc, values, stream);
  EXPECT_TRUE(t.ok()) << t.status();
  return *std::move(t);
}

// The elements of `t`; empty (and the calling test failed) on error.
template <typename T>
std::vector<T> Download(const DeviceTensor& t) {
  auto v = t.ToHostVector<T>();
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : std::vector<T>{};
}

// start, start + 1, ... (n floats).
std::vector<float> Floats(size_t n, float start = 0);

// One-device cases: skipped without a CUDA device.
class NcclGpuTest : public ::testing::Test {
 protected:
  void SetUp() override { SKIP_WITHOUT_DEVICES(1); }

  // A world of one rank on device 0 (all topology degrees 1: groups 1..5,
  // all [0]). nullptr (and the test failed) when the session does not open.
  std::unique_ptr<NcclSession> OpenWorld1(NcclSessionOptions options = {});

  std::shared_ptr<::rankd::dataplane::testing::InProcessJob> job_;
  std::unique_ptr<ControlPlane> cp_;
};

// Several-device cases (one thread per rank, one device per rank): skipped
// without 2 CUDA devices.
class NcclMultiGpuTest : public ::testing::Test {
 protected:
  void SetUp() override { SKIP_WITHOUT_DEVICES(2); }
};

// Runs `body(rank, session, job)` on `world` ranks (threads, rank r on
// device r) after opening a session on each with `options` (a 60 s init
// timeout); returns once all bodies returned. A session that does not open
// fails the test and skips that rank's body. `job` defaults to a fresh
// InProcessJob of `world` ranks.
void RunRanks(
    uint32_t world, const ParallelTopology& topology,
    const std::function<void(uint32_t, NcclSession&,
                             ::rankd::dataplane::testing::InProcessJob&)>& body,
    std::shared_ptr<::rankd::dataplane::testing::InProcessJob> job = nullptr,
    NcclSessionOptions options = {});

// The world multi-device cases use: min(devices, 4).
uint32_t MultiWorld();

}  // namespace rankd::dataplane::nccl::testing

#endif  // RANKD_DATAPLANE_NCCL_TESTING_NCCL_TEST_UTIL_H_
