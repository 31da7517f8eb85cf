// A data-plane session re-formed in place after a lost rank (issue 38,
// part 2), end to end: real daemons with --recovery=on, the real client
// library, Gloo moving real bytes. Ranks 0 and 1 are this test's threads,
// each its own Client and GlooSession; rank 2 is a process
// (tests/reform_rank) that sums once and then dies with SIGKILL. The
// survivors' sessions fail naming the loss; each calls GlooSession::Reform
// while a replacement process takes rank 2's slot; the re-formed sessions
// sum at epoch 2 with the replacement, and the survivors' own tensors
// (their "weights") are untouched throughout.
#include <sys/wait.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "dataplane/control_plane.h"
#include "dataplane/descriptor_proto.h"
#include "dataplane/gloo/gloo_session.h"
#include "dataplane/host_tensor.h"
#include "dataplane/value_descriptor.h"
#include "gtest/gtest.h"
#include "tests/harness/cluster.h"
#include "tests/harness/process.h"

namespace rankd::testing {
namespace {

using dataplane::CollectiveScope;
using dataplane::HostTensor;
using dataplane::TensorDtype;
using dataplane::ValueDescriptor;
using dataplane::gloo::GlooSession;

constexpr char kJob[] = "itest";
constexpr uint32_t kWorld = 3;
constexpr absl::Duration kPatience = absl::Seconds(60);

HostTensor Filled(size_t n, float value) {
  auto shape = ValueDescriptor::Create({n}, TensorDtype::kF32);
  HostTensor t = HostTensor::Zeros(*shape);
  float* p = reinterpret_cast<float*>(t.data());
  for (size_t i = 0; i < n; ++i) p[i] = value + static_cast<float>(i);
  return t;
}

// Sums (rank + 1) x epoch over the world on `session`; the sum or an error.
absl::StatusOr<float> Sum(GlooSession& session, uint32_t rank, uint64_t epoch) {
  HostTensor x = Filled(1, static_cast<float>((rank + 1) * epoch));
  auto sum = session.AllReduceSum(CollectiveScope::World(), x);
  if (!sum.ok()) return sum.status();
  if (absl::Status s = sum->completion->Wait(); !s.ok()) return s;
  return *reinterpret_cast<const float*>(sum->output.data());
}

// One survivor: joins, sums at epoch 1, sees the loss, re-forms, sums at
// epoch 2 with the replacement. Records what went wrong in `error`.
void Survivor(LocalCluster* cluster, uint32_t rank, std::string* error) {
  auto fail = [&](const std::string& what, const absl::Status& s) {
    *error = absl::StrCat("rank ", rank, " ", what, ": ", s.ToString());
  };
  ClientOptions options;
  options.target = cluster->socket_target(0);
  options.bearer_token = cluster->rank_token(rank);
  auto client = Client::Connect(options);
  if (!client.ok()) return fail("connect", client.status());
  JoinOptions join;
  join.job_id = kJob;
  join.rank = rank;
  join.local_rank = rank;
  join.world_size = kWorld;
  join.device.set_kind("cpu");
  join.wait_for_world = kPatience;
  auto joined = (*client)->Join(join);
  if (!joined.ok()) return fail("join", joined.status());
  auto descriptor = dataplane::DescriptorFromProto(*joined);
  if (!descriptor.ok()) return fail("descriptor", descriptor.status());
  auto control_plane = dataplane::MakeClientControlPlane(client->get());
  auto opened = GlooSession::Open(*descriptor, control_plane.get());
  if (!opened.ok()) return fail("open", opened.status());
  std::unique_ptr<GlooSession> session = *std::move(opened);
  // The process's own state, which a re-form must leave alone.
  const HostTensor weights = Filled(4096, 1000.0f * (rank + 1));

  auto first = Sum(*session, rank, 1);
  if (!first.ok()) return fail("sum at epoch 1", first.status());
  if (*first != 6.0f)
    return fail("sum at epoch 1", absl::InternalError(absl::StrCat(*first)));

  // Rank 2 dies: this rank's job health names it.
  const absl::Time give_up = absl::Now() + kPatience;
  while ((*client)->JobHealth().ok() && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  absl::Status health = (*client)->JobHealth();
  if (health.ok() || health.message().find("rank 2") == std::string::npos) {
    return fail("health after the loss", health);
  }

  auto reformed = GlooSession::Reform(std::move(session), kPatience);
  if (!reformed.ok()) return fail("reform", reformed.status());
  session = *std::move(reformed);
  if ((*client)->epoch() != 2) {
    return fail("epoch", absl::InternalError(
                             absl::StrCat("at epoch ", (*client)->epoch())));
  }
  auto second = Sum(*session, rank, 2);
  if (!second.ok()) return fail("sum at epoch 2", second.status());
  if (*second != 12.0f) {
    return fail("sum at epoch 2", absl::InternalError(absl::StrCat(*second)));
  }
  const HostTensor expected = Filled(4096, 1000.0f * (rank + 1));
  if (std::memcmp(weights.data(), expected.data(), 4096 * sizeof(float)) != 0) {
    return fail("weights", absl::DataLossError("changed by the re-form"));
  }
  // Every rank has summed before anyone's session closes.
  auto done =
      (*client)->AllGatherWords(std::vector<uint32_t>{rank}, absl::Seconds(60));
  if (!done.ok()) return fail("final round", done.status());
  session.reset();
  if (absl::Status s = (*client)->Leave(); !s.ok()) return fail("leave", s);
}

absl::StatusOr<ChildProcess> StartRank2(LocalCluster& cluster, bool die,
                                        const std::string& log) {
  std::vector<std::string> argv = {
      Runfile("tests/reform_rank"),
      absl::StrCat("--target=", cluster.socket_target(0)),
      absl::StrCat("--job_id=", kJob),
      "--rank=2",
      "--local_rank=2",
      absl::StrCat("--world_size=", kWorld),
  };
  if (die) argv.push_back("--die");
  return ChildProcess::Spawn(argv, cluster.RankEnv(0, 2),
                             absl::StrCat(cluster.dir(), "/", log));
}

TEST(SessionReformTest, SurvivorsReformWithAReplacementAndKeepTheirTensors) {
  ClusterOptions options;
  options.nnodes = 1;
  options.nproc_per_node = kWorld;
  options.extra_flags = {"--recovery=on", "--recovery_deadline_ms=120000"};
  LocalCluster cluster(options);
  ASSERT_TRUE(cluster.Start().ok());

  auto lost = StartRank2(cluster, /*die=*/true, "rank2.log");
  ASSERT_TRUE(lost.ok()) << lost.status();
  std::vector<std::string> errors(2);
  std::vector<std::thread> survivors;
  for (uint32_t r = 0; r < 2; ++r) {
    survivors.emplace_back(Survivor, &cluster, r, &errors[r]);
  }
  std::optional<int> died = lost->Wait(kPatience);
  ASSERT_TRUE(died.has_value()) << lost->ReadLog();
  EXPECT_TRUE(WIFSIGNALED(*died)) << lost->ReadLog();
  auto recovering = cluster.AwaitJob(0, [](const v1::JobStatus& j) {
    return j.state() == v1::JOB_STATE_RECOVERING;
  });
  EXPECT_TRUE(recovering.ok()) << recovering.status();

  auto replacement = StartRank2(cluster, /*die=*/false, "rank2.2.log");
  ASSERT_TRUE(replacement.ok()) << replacement.status();
  for (auto& t : survivors) t.join();
  for (const std::string& e : errors) EXPECT_EQ(e, "");
  std::optional<int> ended = replacement->Wait(kPatience);
  ASSERT_TRUE(ended.has_value()) << replacement->ReadLog();
  EXPECT_TRUE(WIFEXITED(*ended) && WEXITSTATUS(*ended) == 0)
      << replacement->ReadLog();
  EXPECT_NE(replacement->ReadLog().find("SUMMED 12 AT EPOCH 2"),
            std::string::npos)
      << replacement->ReadLog();
}

}  // namespace
}  // namespace rankd::testing
