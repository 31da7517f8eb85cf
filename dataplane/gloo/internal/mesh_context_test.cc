// MeshContext (mesh_context.h): members connecting their pairs at once,
// through the rendezvous store on an in-process broker, get a context
// Gloo's collectives run on; a member that never comes, or one that
// publishes malformed addresses, fails the connect with Gloo's exception
// naming what went wrong; a failure the caller's health check reports
// stops a connect still waiting for a dead peer's pair at once. Ranks are
// threads; Gloo moves real bytes over loopback TCP.
#include "dataplane/gloo/internal/mesh_context.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstring>
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
#include "gloo/transport/tcp/address.h"
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
  // Kept until every member returned (see AHealthyCheckLetsMembersConnect).
  std::vector<std::shared_ptr<MeshContext>> contexts(kSize);
  std::vector<std::thread> ranks;
  for (int r = 0; r < kSize; ++r) {
    ranks.emplace_back([&, r] {
      std::unique_ptr<ControlPlane> control_plane = job->ForRank(r);
      RankdStore store(control_plane.get(), Prefix(), absl::Seconds(20),
                       Members(kSize));
      auto context = std::make_shared<MeshContext>(r, kSize);
      contexts[r] = context;
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

// Member 1 publishes an address and dies before connecting: member 0, the
// pair's listening side (Gloo's lower address listens; no port is above
// 65535), would wait for it for five times its timeout. The job's failure,
// reported by the health check, ends the connect at once, with its words.
TEST(MeshContextTest, AFailureStopsAConnectWaitingForADeadPeer) {
  std::shared_ptr<InProcessJob> job = InProcessJob::Create(2);
  std::unique_ptr<ControlPlane> rank0 = job->ForRank(0);
  std::unique_ptr<ControlPlane> rank1 = job->ForRank(1);
  RankdStore store0(rank0.get(), Prefix(), absl::Seconds(20), Members(2));
  RankdStore store1(rank1.get(), Prefix(), absl::Seconds(20), Members(2));
  sockaddr_storage storage{};
  auto* in = reinterpret_cast<sockaddr_in*>(&storage);
  in->sin_family = AF_INET;
  in->sin_port = htons(65535);
  in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  store1.set("1", ::gloo::transport::tcp::Address(storage, 1).bytes());

  auto context = std::make_shared<MeshContext>(0, 2);
  context->setTimeout(std::chrono::seconds(20));
  const auto start = std::chrono::steady_clock::now();
  const auto lost_at = start + std::chrono::milliseconds(300);
  std::atomic<int> asked{0};
  try {
    context->ConnectFullMesh(store0, LoopbackDevice(), [&] {
      ++asked;
      return std::chrono::steady_clock::now() < lost_at
                 ? absl::OkStatus()
                 : absl::AbortedError("rank 1 (pid 7 on node 0) lost");
    });
    FAIL() << "connected to a member that never connected";
  } catch (const ::gloo::IoException& e) {
    EXPECT_TRUE(absl::StrContains(e.what(), "rank 1 (pid 7 on node 0) lost"))
        << e.what();
    EXPECT_TRUE(absl::StrContains(e.what(), "1 pair connect(s) abandoned"))
        << e.what();
  }
  const auto took = std::chrono::steady_clock::now() - start;
  // Well under the context's own timeout (20 s; Gloo's connect waits 100).
  EXPECT_LT(took, std::chrono::seconds(5));
  EXPECT_GE(took, std::chrono::milliseconds(300));
  EXPECT_GT(asked.load(), 1);
}

// A check that stays healthy changes nothing.
TEST(MeshContextTest, AHealthyCheckLetsMembersConnect) {
  std::shared_ptr<InProcessJob> job = InProcessJob::Create(3);
  std::vector<std::string> errors(3);
  // Kept until every member returned: a member that closed its context at
  // once could close a pair whose other end was still connecting ("closed
  // by peer" there, under TSan's slower threads).
  std::vector<std::shared_ptr<MeshContext>> contexts(3);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 3; ++r) {
    ranks.emplace_back([&, r] {
      std::unique_ptr<ControlPlane> control_plane = job->ForRank(r);
      RankdStore store(control_plane.get(), Prefix(), absl::Seconds(20),
                       Members(3));
      auto context = std::make_shared<MeshContext>(r, 3);
      contexts[r] = context;
      context->setTimeout(std::chrono::seconds(20));
      try {
        context->ConnectFullMesh(store, LoopbackDevice(),
                                 [] { return absl::OkStatus(); });
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < 3; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

}  // namespace
}  // namespace rankd::dataplane::gloo::internal
