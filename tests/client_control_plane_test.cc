// The data plane's control plane over a real client (MakeClientControlPlane,
// dataplane/control_plane.h): a real daemon, this test's thread as rank 0
// and a rank_worker process as rank 1, killed with SIGKILL so that the job
// fails. The fan-out's contract on destruction is checked end to end: a
// failure registration still running on the client's watch thread when the
// control plane is destroyed has returned before the destructor does; and
// the control plane hears of the failure beside the client's other failure
// callbacks.
#include <signal.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "dataplane/control_plane.h"
#include "gtest/gtest.h"
#include "tests/harness/cluster.h"
#include "tests/harness/process.h"

namespace rankd::testing {
namespace {

constexpr char kJob[] = "itest";
constexpr absl::Duration kPatience = absl::Seconds(60);

TEST(ClientControlPlaneTest, DestructionWaitsForAFailureCallbackRunning) {
  ClusterOptions options;
  options.nnodes = 1;
  options.nproc_per_node = 2;
  LocalCluster cluster(options);
  ASSERT_TRUE(cluster.Start().ok());

  auto peer = cluster.StartWorker(0, 1, {"--hold_ms=60000"});
  ASSERT_TRUE(peer.ok()) << peer.status();

  ClientOptions client_options;
  client_options.target = cluster.socket_target(0);
  client_options.bearer_token = cluster.rank_token(0);
  auto client = Client::Connect(client_options);
  ASSERT_TRUE(client.ok()) << client.status();
  JoinOptions join;
  join.job_id = kJob;
  join.rank = 0;
  join.local_rank = 0;
  join.world_size = 2;
  join.device.set_kind("cpu");
  join.wait_for_world = kPatience;
  ASSERT_TRUE((*client)->Join(join).ok()) << peer->ReadLog();

  auto control_plane = dataplane::MakeClientControlPlane(client->get());
  std::atomic<bool> started{false};
  std::atomic<bool> returned{false};
  control_plane->OnJobFailure([&](const absl::Status&) {
    started = true;
    absl::SleepFor(absl::Milliseconds(500));
    returned = true;
  });

  // Another user of the same client sets its own failure callback (a c10d
  // store made without one of its own): the control plane still hears of
  // the failure, and so does it.
  std::atomic<int> other{0};
  (*client)->SetFailureCallback([&](const absl::Status&) { ++other; });

  peer->Signal(SIGKILL);
  const absl::Time give_up = absl::Now() + kPatience;
  while (!started && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_TRUE(started) << "the job's failure never reached the callback";
  control_plane.reset();
  EXPECT_TRUE(returned) << "the control plane was destroyed while its "
                           "failure callback still ran";
  EXPECT_FALSE((*client)->JobHealth().ok());
  EXPECT_EQ(other.load(), 1);
}

}  // namespace
}  // namespace rankd::testing
