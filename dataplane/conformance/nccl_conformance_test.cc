// The conformance suite (conformance_cases.h) on the NCCL backend: every
// case as one test, one thread and one device per rank. In CI the devices
// and NCCL are the CUDA/NCCL stand-in (dataplane/nccl/testing/), which
// runs the same session, engine and agreement code over host memory; on a
// GPU host the same binary runs on real devices through the GPU kit.
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dataplane/conformance/conformance_cases.h"
#include "dataplane/conformance/run_case.h"
#include "dataplane/nccl/cuda_device.h"
#include "dataplane/nccl/device_tensor.h"
#include "dataplane/nccl/nccl_session.h"
#include "dataplane/testing/in_process_control_plane.h"
#include "gtest/gtest.h"

namespace rankd::dataplane::conformance {
namespace {

using ::rankd::dataplane::testing::InProcessJob;

struct NcclUnderTest {
  using Value = nccl::DeviceTensor;
  using Session = DistributedSession<nccl::DeviceTensor>;
  static constexpr char kName[] = "nccl";

  static void Run(uint32_t world, const SessionSetup& setup,
                  const std::function<void(uint32_t, Session&)>& body) {
    const nccl::DeviceProbe probe = nccl::ProbeDevices();
    if (probe.device_count < static_cast<int>(world)) {
      // Where devices are promised (the stand-in in CI, the GPU kit:
      // RANKD_REQUIRE_GPU=1), none at all is a failure, never a silent skip;
      // fewer than the case needs is a skip, as in the NCCL device tests.
      const char* required = std::getenv("RANKD_REQUIRE_GPU");
      if (probe.device_count == 0 && required != nullptr &&
          std::string(required) == "1") {
        GTEST_FAIL() << "RANKD_REQUIRE_GPU=1 but no CUDA device: "
                     << probe.reason;
      }
      GTEST_SKIP() << "needs " << world << " CUDA devices; this machine has "
                   << probe.device_count << ": " << probe.reason;
    }
    ParallelTopology topology;
    topology.data = world;
    if (setup.domain_size > 0) {
      topology.tensor = setup.domain_size;
      topology.data = world / setup.domain_size;
    }
    std::shared_ptr<InProcessJob> job = InProcessJob::Create(world);
    std::vector<std::unique_ptr<ControlPlane>> control_planes(world);
    std::vector<std::unique_ptr<nccl::NcclSession>> sessions(world);
    std::vector<absl::Status> opened(world);
    // Every session opens before any body runs, and closes after all ran.
    EachRank(world, [&](uint32_t r) {
      control_planes[r] = job->ForRank(r);
      auto descriptor =
          DistributedSessionDescriptor::FromTopology(topology, world, r);
      if (!descriptor.ok()) {
        opened[r] = descriptor.status();
        return;
      }
      if (setup.domain_size > 0) {
        const uint32_t d = r / setup.domain_size;
        opened[r] = descriptor->SetRecoveryDomain(
            {d, d * setup.domain_size, setup.domain_size});
        if (!opened[r].ok()) return;
      }
      nccl::NcclSessionOptions options;
      options.device = static_cast<int>(r);
      options.init_timeout = absl::Seconds(60);
      options.op_timeout = setup.op_timeout;
      options.verify_agreement = setup.verify_agreement;
      options.restrict_capabilities = setup.restrict_capabilities;
      auto session = nccl::NcclSession::Open(*descriptor,
                                             control_planes[r].get(), options);
      if (!session.ok()) {
        opened[r] = session.status();
        return;
      }
      sessions[r] = *std::move(session);
    });
    for (const absl::Status& s : opened) ASSERT_TRUE(s.ok()) << s;
    EachRank(world, [&](uint32_t r) { body(r, *sessions[r]); });
  }

  static absl::StatusOr<Value> Make(Session& session,
                                    const ValueDescriptor& descriptor,
                                    const std::vector<uint8_t>& bytes) {
    return nccl::DeviceTensor::FromHost(
        descriptor, bytes.data(), bytes.size(),
        static_cast<nccl::NcclSession&>(session).stream());
  }

  static absl::StatusOr<std::vector<uint8_t>> Read(const Value& value) {
    return value.ToHost();
  }

  static void Poison(Session& session, const absl::Status& cause) {
    static_cast<nccl::NcclSession&>(session).Poison(cause);
  }

  static void Abort(Session& session, const absl::Status& cause) {
    static_cast<nccl::NcclSession&>(session).Abort(cause);
  }

  static absl::Status PoisonCause(Session& session) {
    return static_cast<nccl::NcclSession&>(session).poison();
  }

 private:
  static void EachRank(uint32_t world,
                       const std::function<void(uint32_t)>& fn) {
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < world; ++r) threads.emplace_back(fn, r);
    for (auto& t : threads) t.join();
  }
};

class NcclConformanceTest : public ::testing::TestWithParam<ConformanceCase> {};

TEST_P(NcclConformanceTest, Case) {
  CaseRunner<NcclUnderTest>::Run(GetParam());
}

INSTANTIATE_TEST_SUITE_P(
    Table, NcclConformanceTest, ::testing::ValuesIn(Cases()),
    [](const ::testing::TestParamInfo<ConformanceCase>& info) {
      return info.param.name;
    });

}  // namespace
}  // namespace rankd::dataplane::conformance
