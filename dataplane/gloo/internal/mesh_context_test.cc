// MeshContext (mesh_context.h): members connecting their pairs at once,
// through the rendezvous store on an in-process broker, get a context
// Gloo's collectives run on; a member that never comes, or one that
// publishes malformed addresses, fails the connect with Gloo's exception
// naming what went wrong. Ranks are threads; Gloo moves real bytes over
// loopback TCP.
#include "dataplane/gloo/internal/mesh_context.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "dataplane/gloo/internal/rankd_store.h"
#include "dataplane/testing/in_process_control_plane.h"
#include "gloo/allreduce.h"
#include "gloo/common/error.h"
#include "gloo/math.h"
#include "gloo/transport/tcp/device.h"
#include "gtest/gtest.h"

namespace rankd::dataplane::gloo::internal {
namespace {

using testing::InProcessJob;

std::shared_ptr<::gloo::transport::Device> LoopbackDevice() {
  ::gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  return ::gloo::transport::tcp::CreateDevice(attr);
}

std::string Prefix() { return RankdStore::Prefix("job@1", 0, "7"); }

std::vector<uint32_t> Members(int size) {
  std::vector<uint32_t> members(size);
  for (int i = 0; i < size; ++i) members[i] = static_cast<uint32_t>(i);
  return members;
}

// More members than kMaxConcurrentPairConnects + 1, so that workers take
// several pairs each; then an all_reduce on the meshes.
TEST(MeshContextTest, MembersConnectAndReduce) {
  constexpr int kSize = 10;
  std::shared_ptr<InProcessJob> job = InProcessJob::Create(kSize);
  std::vector<std::string> errors(kSize);
  std::vector<float> sums(kSize);
  std::vector<std::thread> ranks;
  for (int r = 0; r < kSize; ++r) {
    ranks.emplace_back([&, r] {
      std::unique_ptr<ControlPlane> control_plane = job->ForRank(r);
      RankdStore store(control_plane.get(), Prefix(), absl::Seconds(20),
                       Members(kSize));
      auto context = std::make_shared<MeshContext>(r, kSize);
      context->setTimeout(std::chrono::seconds(20));
      try {
        context->ConnectFullMesh(store, LoopbackDevice());
        float value = static_cast<float>(r + 1);
        ::gloo::AllreduceOptions options(context);
        options.setOutput(&value, 1);
        options.setReduceFunction(
            static_cast<void (*)(void*, const void*, const void*, size_t)>(
                &::gloo::sum<float>));
        ::gloo::allreduce(options);
        sums[r] = value;
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < kSize; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    EXPECT_EQ(sums[r], kSize * (kSize + 1) / 2) << "rank " << r;
  }
}

TEST(MeshContextTest, AMemberThatNeverComesFailsTheConnectNamingItsKey) {
  std::shared_ptr<InProcessJob> job = InProcessJob::Create(2);
  std::unique_ptr<ControlPlane> control_plane = job->ForRank(0);
  RankdStore store(control_plane.get(), Prefix(), absl::Milliseconds(300),
                   Members(2));
  auto context = std::make_shared<MeshContext>(0, 2);
  context->setTimeout(std::chrono::milliseconds(300));
  try {
    context->ConnectFullMesh(store, LoopbackDevice());
    FAIL() << "connected without member 1";
  } catch (const ::gloo::Exception& e) {
    EXPECT_TRUE(absl::StrContains(e.what(), "r1/gloo/job@1/7/1")) << e.what();
  }
}

TEST(MeshContextTest, MalformedAddressesFailTheConnect) {
  std::shared_ptr<InProcessJob> job = InProcessJob::Create(2);
  std::unique_ptr<ControlPlane> rank0 = job->ForRank(0);
  std::unique_ptr<ControlPlane> rank1 = job->ForRank(1);
  RankdStore store0(rank0.get(), Prefix(), absl::Seconds(5), Members(2));
  RankdStore store1(rank1.get(), Prefix(), absl::Seconds(5), Members(2));
  store1.set("1", {'x', 'y', 'z'});
  auto context = std::make_shared<MeshContext>(0, 2);
  context->setTimeout(std::chrono::seconds(5));
  try {
    context->ConnectFullMesh(store0, LoopbackDevice());
    FAIL() << "connected to malformed addresses";
  } catch (const ::gloo::Exception& e) {
    EXPECT_TRUE(absl::StrContains(e.what(), "member 1 published 3 bytes"))
        << e.what();
  }
}

}  // namespace
}  // namespace rankd::dataplane::gloo::internal
