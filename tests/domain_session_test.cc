// Data-plane sessions by data-parallel domain (issue 38, part 5;
// docs/contract.md, "Data-parallel domains"), end to end: real daemons with
// --recovery=domain, dp 2 x tp 2 on two nodes, the real client library and
// a real backend moving real bytes. Replica 0 is ranks 0 and 1 (this test's
// threads), replica 1 is rank 2 (a thread) and rank 3 (tests/reform_rank, a
// process that sums once and dies with SIGKILL). Every session holds only
// its replica's groups: the world and the data-parallel groups are refused
// on both replicas. While replica 1 recovers, replica 0 keeps summing on its
// tensor group, never poisoned and never re-formed; rank 2 re-forms its
// session alone, a replacement for rank 3 opens its own at the new epoch,
// and replica 1 sums again exactly.
//
// One body, two backends (tests/backend_session.h), each its own target:
//   - Gloo (//tests:domain_session_test);
//   - NCCL on the CPU stand-in for CUDA and NCCL
//     (//tests:domain_session_nccl_standin_test, with
//     //dataplane/nccl:libcuda_nccl_standin.so in $RANKD_CUDART_LIBRARY and
//     $RANKD_NCCL_LIBRARY, 4 stand-in GPUs, rank r on GPU r, the processes'
//     communicators meeting in $RANKD_STANDIN_CLIQUE_DIR). The stand-in is
//     test-only: it runs rankd's own NCCL sequencing (the communicators of
//     the held groups only, unique ids brokered per held group and per
//     epoch through the daemons, Reform of one domain while the other's
//     communicators run) and is never the proof that the GPU path works:
//     the GPU kit's NcclClusterTest.OneReplicaReformsAloneWhileTheOtherSums
//     (tests/gpu/nccl_cluster_test.cc) is, once it runs on a GPU.
// The backends must behave alike here; the only difference is the backend's
// name in the refusals' words ("gloo backend: ..." / "nccl backend: ...").
// Without a CUDA device (or with fewer than 4) the NCCL case skips, saying
// why, unless RANKD_REQUIRE_GPU=1 (its target sets it): then it fails.
#include <sys/wait.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "dataplane/control_plane.h"
#include "dataplane/descriptor_proto.h"
#include "dataplane/nccl/cuda_device.h"
#include "gtest/gtest.h"
#include "tests/backend_session.h"
#include "tests/harness/cluster.h"
#include "tests/harness/process.h"

namespace rankd::testing {

// gtest names the parameter in failures by this (found by argument-dependent
// lookup, so not in the unnamed namespace).
void PrintTo(Backend backend, std::ostream* os) { *os << BackendName(backend); }

namespace {

using dataplane::CollectiveGroupDescriptor;
using dataplane::CollectiveScope;
using dataplane::DistributedSessionDescriptor;

constexpr char kJob[] = "itest";
constexpr uint32_t kWorld = 4;
constexpr uint32_t kTensor = 2;
constexpr absl::Duration kPatience = absl::Seconds(60);

// What the threads share with the test body.
struct Shared {
  explicit Shared(Backend b) : backend(b) {}
  const Backend backend;
  // Set once domain 1 is RECOVERING, cleared once its survivor re-formed
  // and summed again.
  std::atomic<bool> recovering{false};
  // Replica 0's sums completed while `recovering`, per rank.
  std::atomic<int> sums_while_recovering[2] = {0, 0};
  // Asks replica 0 to end its loop (agreed through the sum itself).
  std::atomic<bool> stop{false};
  std::string errors[3];
};

// The group of `d` whose members are `members`, or null.
const CollectiveGroupDescriptor* GroupWith(
    const DistributedSessionDescriptor& d,
    const std::vector<uint32_t>& members) {
  for (const auto& g : d.groups()) {
    if (g.members() == members) return &g;
  }
  return nullptr;
}

std::vector<uint32_t> TensorMembers(uint32_t rank) {
  const uint32_t first = rank / kTensor * kTensor;
  return {first, first + 1};
}

// OK when the world and the rank's data-parallel group are refused with
// the domain rule's words (domain_groups.h).
absl::Status CheckRefusals(BackendSession& session, uint32_t rank) {
  const uint32_t domain = rank / kTensor;
  auto world = session.Sum(CollectiveScope::World(), {1.0f});
  const std::string held = absl::StrCat(
      BackendName(session.backend()),
      " backend: all_reduce_sum on world refused: the job recovers by "
      "data-parallel domain and this session holds only domain ",
      domain, " (ranks ", domain * kTensor, "-", domain * kTensor + 1,
      ")'s groups (");
  if (world.ok() ||
      world.status().code() != absl::StatusCode::kFailedPrecondition ||
      !absl::StartsWith(world.status().message(), held) ||
      !absl::StrContains(world.status().message(),
                         "; the world spans every domain and is not "
                         "connected, so that a replica re-forms alone; "
                         "exchange world-wide through the control plane's "
                         "all_gather_words (Client::AllGatherWordsWithView")) {
    return absl::InternalError(
        absl::StrCat("the world was not refused as the rule says: ",
                     world.ok() ? "accepted" : world.status().ToString()));
  }
  const CollectiveGroupDescriptor* data =
      GroupWith(session.descriptor(), {rank % kTensor, rank % kTensor + 2});
  if (data == nullptr) return absl::NotFoundError("no data-parallel group");
  auto across = session.Sum(CollectiveScope::Group(data->id()), {1.0f});
  if (across.ok() ||
      across.status().code() != absl::StatusCode::kFailedPrecondition ||
      !absl::StrContains(across.status().message(),
                         absl::StrCat("; group ", data->id(), " (members ",
                                      rank % kTensor, ", ", rank % kTensor + 2,
                                      ") spans domains 0 and 1 and is not "
                                      "connected"))) {
    return absl::InternalError(absl::StrCat(
        "the data-parallel group was not refused as the rule says: ",
        across.ok() ? "accepted" : across.status().ToString()));
  }
  return absl::OkStatus();
}

// Both replicas' ranks have summed before any closes its session: each
// sets its key and waits for its group's.
absl::Status Barrier(Client& client, uint32_t rank, uint64_t epoch) {
  const std::string done = absl::StrCat("reform-rank-done/", epoch, "/");
  if (absl::Status s = client.KvSet(absl::StrCat(done, rank), "1"); !s.ok()) {
    return s;
  }
  for (uint32_t m : TensorMembers(rank)) {
    auto seen = client.KvGet(absl::StrCat(done, m), kPatience);
    if (!seen.ok()) return seen.status();
  }
  return absl::OkStatus();
}

struct Joined {
  std::unique_ptr<Client> client;
  std::unique_ptr<dataplane::ControlPlane> control_plane;
  std::unique_ptr<BackendSession> session;
};

// Joins as `rank` through its node's daemon and opens its session on
// `backend` (NCCL: on stand-in GPU `rank`, so that no two ranks of this
// process share one).
absl::StatusOr<Joined> JoinAndOpen(LocalCluster& cluster, uint32_t rank,
                                   Backend backend) {
  const uint32_t node = rank / kTensor;
  ClientOptions options;
  options.target = cluster.socket_target(node);
  options.bearer_token = cluster.rank_token(rank);
  auto client = Client::Connect(options);
  if (!client.ok()) return client.status();
  JoinOptions join;
  join.job_id = kJob;
  join.rank = rank;
  join.local_rank = rank % kTensor;
  join.world_size = kWorld;
  if (backend == Backend::kNccl) {
    join.device.set_kind("cuda");
    join.device.set_index(rank);
  } else {
    join.device.set_kind("cpu");
  }
  join.wait_for_world = kPatience;
  auto proto = (*client)->Join(join);
  if (!proto.ok()) return proto.status();
  auto descriptor = dataplane::DescriptorFromProto(*proto);
  if (!descriptor.ok()) return descriptor.status();
  if (!descriptor->recovery_domain().has_value() ||
      descriptor->recovery_domain()->index != rank / kTensor) {
    return absl::InternalError("the descriptor is not confined to its domain");
  }
  Joined joined;
  joined.client = *std::move(client);
  joined.control_plane = dataplane::MakeClientControlPlane(joined.client.get());
  auto session = BackendSession::Open(
      backend, *descriptor, joined.control_plane.get(), static_cast<int>(rank));
  if (!session.ok()) return session.status();
  joined.session = *std::move(session);
  return joined;
}

// Replica 0's rank: sums (rank + 1) on its tensor group until told to stop,
// checking each time that its session and job are healthy.
void ServingReplica(LocalCluster* cluster, uint32_t rank, Shared* shared) {
  std::string& error = shared->errors[rank];
  auto fail = [&](const std::string& what, const absl::Status& s) {
    error = absl::StrCat("rank ", rank, " ", what, ": ", s.ToString());
  };
  auto joined = JoinAndOpen(*cluster, rank, shared->backend);
  if (!joined.ok()) return fail("join and open", joined.status());
  BackendSession& session = *joined->session;
  if (absl::Status s = CheckRefusals(session, rank); !s.ok()) {
    return fail("refusals", s);
  }
  const CollectiveGroupDescriptor* tensor =
      GroupWith(session.descriptor(), TensorMembers(rank));
  if (tensor == nullptr) return fail("tensor group", absl::NotFoundError(""));
  const CollectiveScope scope = CollectiveScope::Group(tensor->id());
  // Both members stop after the same sum: the second element says whether
  // either was asked to.
  while (true) {
    const bool recovering = shared->recovering.load();
    auto sum = session.Sum(
        scope, {static_cast<float>(rank + 1), shared->stop ? 1.0f : 0.0f});
    if (!sum.ok()) return fail("sum on its tensor group", sum.status());
    if ((*sum)[0] != 3.0f) {
      return fail("sum", absl::InternalError(absl::StrCat((*sum)[0])));
    }
    if (absl::Status s = session.poison(); !s.ok()) return fail("poison", s);
    if (absl::Status s = joined->client->JobHealth(); !s.ok()) {
      return fail("job health", s);
    }
    if (recovering && shared->recovering.load()) {
      ++shared->sums_while_recovering[rank];
    }
    if ((*sum)[1] > 0.0f) break;
    absl::SleepFor(absl::Milliseconds(2));
  }
  if (session.descriptor().epoch() != 1) {
    return fail("epoch", absl::InternalError("its session left epoch 1"));
  }
  if (absl::Status s = Barrier(*joined->client, rank, 1); !s.ok()) {
    return fail("barrier", s);
  }
  joined->session.reset();
  if (absl::Status s = joined->client->Leave(); !s.ok())
    return fail("leave", s);
}

// Replica 1's surviving rank 2: sums with rank 3, sees its domain's loss,
// re-forms alone and sums with the replacement at epoch 2.
void RecoveringReplica(LocalCluster* cluster, Shared* shared) {
  constexpr uint32_t kRank = 2;
  std::string& error = shared->errors[kRank];
  auto fail = [&](const std::string& what, const absl::Status& s) {
    error = absl::StrCat("rank 2 ", what, ": ", s.ToString());
  };
  auto joined = JoinAndOpen(*cluster, kRank, shared->backend);
  if (!joined.ok()) return fail("join and open", joined.status());
  if (absl::Status s = CheckRefusals(*joined->session, kRank); !s.ok()) {
    return fail("refusals at epoch 1", s);
  }
  auto scope_of = [](const BackendSession& session) {
    return CollectiveScope::Group(
        GroupWith(session.descriptor(), TensorMembers(kRank))->id());
  };
  auto first = joined->session->Sum(scope_of(*joined->session), {3.0f});
  if (!first.ok()) return fail("sum at epoch 1", first.status());
  if ((*first)[0] != 7.0f) {
    return fail("sum at epoch 1",
                absl::InternalError(absl::StrCat((*first)[0])));
  }
  // Rank 3 dies: this rank's job health names it.
  const absl::Time give_up = absl::Now() + kPatience;
  while (joined->client->JobHealth().ok() && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  absl::Status health = joined->client->JobHealth();
  if (!absl::StrContains(health.message(), "rank 3")) {
    return fail("health after the loss", health);
  }
  auto reformed = BackendSession::Reform(std::move(joined->session), kPatience);
  if (!reformed.ok()) return fail("reform", reformed.status());
  std::unique_ptr<BackendSession> session = *std::move(reformed);
  if (session->descriptor().epoch() != 2 ||
      !session->descriptor().recovery_domain().has_value()) {
    return fail("re-formed descriptor",
                absl::InternalError(
                    absl::StrCat("epoch ", session->descriptor().epoch())));
  }
  auto second = session->Sum(scope_of(*session), {6.0f});
  if (!second.ok()) return fail("sum at epoch 2", second.status());
  if ((*second)[0] != 14.0f) {
    return fail("sum at epoch 2",
                absl::InternalError(absl::StrCat((*second)[0])));
  }
  if (absl::Status s = CheckRefusals(*session, kRank); !s.ok()) {
    return fail("refusals at epoch 2", s);
  }
  if (absl::Status s = Barrier(*joined->client, kRank, 2); !s.ok()) {
    return fail("barrier", s);
  }
  session.reset();
  if (absl::Status s = joined->client->Leave(); !s.ok())
    return fail("leave", s);
}

// Rank 3, on `backend` (NCCL: stand-in GPU 3 of its process).
absl::StatusOr<ChildProcess> StartRank3(LocalCluster& cluster, Backend backend,
                                        bool die, const std::string& log) {
  std::vector<std::string> argv = {
      Runfile("tests/reform_rank"),
      absl::StrCat("--target=", cluster.socket_target(1)),
      absl::StrCat("--job_id=", kJob),
      "--rank=3",
      "--local_rank=1",
      absl::StrCat("--world_size=", kWorld),
      absl::StrCat("--tensor_parallel=", kTensor),
      absl::StrCat("--backend=", BackendName(backend)),
      "--device=3",
  };
  if (die) argv.push_back("--die");
  return ChildProcess::Spawn(argv, cluster.RankEnv(1, 3),
                             absl::StrCat(cluster.dir(), "/", log));
}

class DomainSessionTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    if (GetParam() != Backend::kNccl) return;
    // Ranks 0 to 2 are threads of this process, each on its own GPU.
    const auto probe = dataplane::nccl::ProbeDevices();
    if (probe.device_count >= static_cast<int>(kWorld)) return;
    const std::string why =
        absl::StrCat("NCCL needs ", kWorld,
                     " CUDA devices (or the stand-in's: see the "
                     "header); this process sees ",
                     probe.device_count, ": ", probe.reason);
    const char* require = std::getenv("RANKD_REQUIRE_GPU");
    if (require != nullptr && std::string(require) == "1") {
      GTEST_FAIL() << "RANKD_REQUIRE_GPU=1: " << why;
    }
    GTEST_SKIP() << why;
  }
};

TEST_P(DomainSessionTest, OneReplicaReformsAloneWhileTheOtherSums) {
  const Backend backend = GetParam();
  ClusterOptions options;
  options.nnodes = 2;
  options.nproc_per_node = 2;
  options.tensor_parallel = kTensor;
  options.extra_flags = {"--recovery=domain", "--recovery_deadline_ms=60000"};
  LocalCluster cluster(options);
  ASSERT_TRUE(cluster.Start().ok());

  auto lost = StartRank3(cluster, backend, /*die=*/true, "rank3.log");
  ASSERT_TRUE(lost.ok()) << lost.status();
  Shared shared(backend);
  std::vector<std::thread> threads;
  threads.emplace_back(ServingReplica, &cluster, 0, &shared);
  threads.emplace_back(ServingReplica, &cluster, 1, &shared);
  std::thread survivor(RecoveringReplica, &cluster, &shared);
  auto stop_all = [&] {
    shared.stop = true;
    for (auto& t : threads) t.join();
    survivor.join();
  };

  std::optional<int> died = lost->Wait(kPatience);
  if (!died.has_value()) {
    stop_all();
    FAIL() << lost->ReadLog();
  }
  EXPECT_TRUE(WIFSIGNALED(*died)) << lost->ReadLog();
  EXPECT_TRUE(absl::StrContains(lost->ReadLog(), "SUMMED 7 AT EPOCH 1"))
      << lost->ReadLog();
  auto recovering = cluster.AwaitJob(0, [](const v1::JobStatus& j) {
    return j.serving_domains() == 1 && j.domains_size() == 2 &&
           j.domains(1).state() == v1::DOMAIN_STATE_RECOVERING;
  });
  EXPECT_TRUE(recovering.ok()) << recovering.status();
  if (recovering.ok()) EXPECT_EQ(recovering->state(), v1::JOB_STATE_READY);
  shared.recovering = true;
  // Replica 0 sums while replica 1 has no rank 3 at all.
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while ((shared.sums_while_recovering[0] < 3 ||
          shared.sums_while_recovering[1] < 3) &&
         absl::Now() < give_up && shared.errors[0].empty() &&
         shared.errors[1].empty()) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_GE(shared.sums_while_recovering[0], 3);
  EXPECT_GE(shared.sums_while_recovering[1], 3);

  auto replacement = StartRank3(cluster, backend, /*die=*/false, "rank3.2.log");
  ASSERT_TRUE(replacement.ok()) << replacement.status();
  survivor.join();
  shared.recovering = false;
  auto serving = cluster.AwaitJob(
      0, [](const v1::JobStatus& j) { return j.serving_domains() == 2; });
  EXPECT_TRUE(serving.ok()) << serving.status();
  shared.stop = true;
  for (auto& t : threads) t.join();
  for (const std::string& e : shared.errors) EXPECT_EQ(e, "");
  std::optional<int> ended = replacement->Wait(kPatience);
  ASSERT_TRUE(ended.has_value()) << replacement->ReadLog();
  EXPECT_TRUE(WIFEXITED(*ended) && WEXITSTATUS(*ended) == 0)
      << replacement->ReadLog();
  EXPECT_TRUE(absl::StrContains(replacement->ReadLog(),
                                "REFORM_RANK 3 SUMMED 14 AT EPOCH 2"))
      << replacement->ReadLog();
  // On its own backend: the refusal names it.
  EXPECT_TRUE(absl::StrContains(
      replacement->ReadLog(),
      absl::StrCat("REFORM_RANK 3 WORLD REFUSED: ", BackendName(backend),
                   " backend: all_reduce_sum on world refused")))
      << replacement->ReadLog();
}

INSTANTIATE_TEST_SUITE_P(
    Backends, DomainSessionTest,
    ::testing::Values(Backend::kGloo, Backend::kNccl),
    [](const ::testing::TestParamInfo<Backend>& info) -> std::string {
      return info.param == Backend::kGloo ? "Gloo" : "Nccl";
    });

}  // namespace
}  // namespace rankd::testing
