#include "dataplane/nccl/testing/nccl_test_util.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <thread>

#include "absl/time/time.h"
#include "dataplane/session_descriptor.h"

namespace rankd::dataplane::nccl::testing {

using ::rankd::dataplane::testing::InProcessJob;

void RunInFreshProcess(const std::function<void()>& body) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        body();
        std::fflush(nullptr);
        std::_Exit(::testing::Test::HasFailure() ? 1 : 0);
      },
      ::testing::ExitedWithCode(0), "");
}

int DeviceCount() { return ProbeDevices().device_count; }

bool RequireGpu() {
  const char* v = std::getenv("RANKD_REQUIRE_GPU");
  return v != nullptr && std::string(v) == "1";
}

ParallelTopology DataParallel(uint32_t world) {
  ParallelTopology topology;
  topology.data = world;
  return topology;
}

ValueDescriptor Desc(std::vector<size_t> shape, TensorDtype dtype) {
  return *ValueDescriptor::Create(std::move(shape), dtype);
}

std::vector<float> Floats(size_t n, float start) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

std::unique_ptr<NcclSession> NcclGpuTest::OpenWorld1(
    NcclSessionOptions options) {
  job_ = InProcessJob::Create(1);
  cp_ = job_->ForRank(0);
  ParallelTopology topology;  // all degrees 1: groups 1..5, all [0]
  auto descriptor = DistributedSessionDescriptor::FromTopology(topology, 1, 0);
  EXPECT_TRUE(descriptor.ok());
  options.device = 0;
  auto session = NcclSession::Open(*descriptor, cp_.get(), options);
  EXPECT_TRUE(session.ok()) << session.status();
  return session.ok() ? *std::move(session) : nullptr;
}

void RunRanks(
    uint32_t world, const ParallelTopology& topology,
    const std::function<void(uint32_t, NcclSession&, InProcessJob&)>& body,
    std::shared_ptr<InProcessJob> job, NcclSessionOptions options) {
  if (job == nullptr) job = InProcessJob::Create(world);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto cp = job->ForRank(r);
      auto descriptor =
          DistributedSessionDescriptor::FromTopology(topology, world, r);
      ASSERT_TRUE(descriptor.ok()) << descriptor.status();
      NcclSessionOptions mine = options;
      mine.device = static_cast<int>(r);
      mine.init_timeout = absl::Seconds(60);
      auto session = NcclSession::Open(*descriptor, cp.get(), mine);
      ASSERT_TRUE(session.ok()) << "rank " << r << ": " << session.status();
      body(r, **session, *job);
    });
  }
  for (auto& t : threads) t.join();
}

uint32_t MultiWorld() {
  return static_cast<uint32_t>(std::min(DeviceCount(), 4));
}

}  // namespace rankd::dataplane::nccl::testing
