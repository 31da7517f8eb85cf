// A rank process for session_reform_test: joins through its node's daemon
// with the real client library, opens a data-plane session (Gloo, or with
// --backend=nccl an NCCL session on CUDA device --device; tests run that on
// the CPU stand-in, see tests/backend_session.h) and sums
// (rank + 1) x epoch over the world, checking the sum. With --die, it then
// ends itself with SIGKILL (a lost rank: no Leave); otherwise it leaves.
// A replacement process is this same program, started while the job
// recovers: it joins the lost slot and its session opens at the new epoch.
// With --tensor_parallel=T > 1 (tests/domain_session_test, recovery by
// domain) it sums over its tensor group instead (its session holds no
// world), checks that the world is refused, and waits for its group's
// members through the key-value store before closing.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "dataplane/control_plane.h"
#include "dataplane/descriptor_proto.h"
#include "tests/backend_session.h"

ABSL_FLAG(std::string, target, "", "daemon target");
ABSL_FLAG(std::string, job_id, "itest", "job id");
ABSL_FLAG(uint32_t, rank, 0, "rank");
ABSL_FLAG(uint32_t, local_rank, 0, "local rank");
ABSL_FLAG(uint32_t, world_size, 0, "world size");
ABSL_FLAG(bool, die, false, "SIGKILL itself after the sum");
ABSL_FLAG(uint32_t, tensor_parallel, 1,
          "sum over the tensor group of this many ranks, not the world");
ABSL_FLAG(std::string, backend, "gloo", "gloo | nccl");
ABSL_FLAG(int, device, -1, "nccl: the CUDA device (-1: the default rule)");

namespace {

using rankd::dataplane::CollectiveScope;
using rankd::testing::Backend;
using rankd::testing::BackendSession;

int Fail(const std::string& what, const absl::Status& status) {
  std::fprintf(stderr, "REFORM_RANK FAILED %s: %s\n", what.c_str(),
               status.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  auto backend = rankd::testing::ParseBackend(absl::GetFlag(FLAGS_backend));
  if (!backend.ok()) return Fail("--backend", backend.status());
  rankd::ClientOptions options;
  options.target = absl::GetFlag(FLAGS_target);
  auto client = rankd::Client::Connect(options);
  if (!client.ok()) return Fail("connect", client.status());
  rankd::JoinOptions join;
  join.job_id = absl::GetFlag(FLAGS_job_id);
  join.rank = absl::GetFlag(FLAGS_rank);
  join.local_rank = absl::GetFlag(FLAGS_local_rank);
  join.world_size = absl::GetFlag(FLAGS_world_size);
  if (*backend == Backend::kNccl) {
    join.device.set_kind("cuda");
    join.device.set_index(std::max(absl::GetFlag(FLAGS_device), 0));
  } else {
    join.device.set_kind("cpu");
  }
  auto joined = (*client)->Join(join);
  if (!joined.ok()) return Fail("join", joined.status());
  auto descriptor = rankd::dataplane::DescriptorFromProto(*joined);
  if (!descriptor.ok()) return Fail("descriptor", descriptor.status());
  auto control_plane = rankd::dataplane::MakeClientControlPlane(client->get());
  auto session = BackendSession::Open(
      *backend, *descriptor, control_plane.get(), absl::GetFlag(FLAGS_device));
  if (!session.ok()) return Fail("open", session.status());
  const uint64_t epoch = descriptor->epoch();
  const std::vector<float> x = {
      static_cast<float>((join.rank.value() + 1) * epoch)};
  // The world, or the tensor group: ranks [first, first + tp).
  const uint32_t tp = absl::GetFlag(FLAGS_tensor_parallel);
  const uint32_t first = *join.rank / tp * tp;
  CollectiveScope scope = CollectiveScope::World();
  std::vector<uint32_t> members;
  for (uint32_t m = 0; m < join.world_size; ++m) members.push_back(m);
  if (tp > 1) {
    members.clear();
    for (uint32_t m = first; m < first + tp; ++m) members.push_back(m);
    const rankd::dataplane::CollectiveGroupDescriptor* tensor = nullptr;
    for (const auto& g : descriptor->groups()) {
      if (g.members() == members) tensor = &g;
    }
    if (tensor == nullptr) {
      return Fail("tensor group", absl::NotFoundError("not in the descriptor"));
    }
    scope = CollectiveScope::Group(tensor->id());
    auto world = (*session)->Sum(CollectiveScope::World(), x);
    if (world.ok() ||
        world.status().code() != absl::StatusCode::kFailedPrecondition ||
        world.status().message().find(
            "refused: the job recovers by data-parallel domain") ==
            std::string::npos) {
      return Fail("world refusal",
                  world.ok() ? absl::InternalError("the world was accepted")
                             : world.status());
    }
    std::printf("REFORM_RANK %u WORLD REFUSED: %s\n", *join.rank,
                std::string(world.status().message()).c_str());
  }
  auto sum = (*session)->Sum(scope, x);
  if (!sum.ok()) return Fail("all_reduce_sum", sum.status());
  uint32_t n = 0;
  for (uint32_t m : members) n += m + 1;
  const float want = static_cast<float>(n * epoch);
  const float got = (*sum)[0];
  if (got != want) {
    return Fail("sum", absl::InternalError(absl::StrCat(got, " != ", want)));
  }
  std::printf("REFORM_RANK %u SUMMED %g AT EPOCH %llu\n", *join.rank, got,
              static_cast<unsigned long long>(epoch));
  std::fflush(stdout);
  if (absl::GetFlag(FLAGS_die)) ::kill(::getpid(), SIGKILL);
  // Every rank has summed before anyone's session closes: a world round,
  // or with a tensor group its members' keys (a world round's numbering
  // is not this process's to choose when replicas recover apart).
  if (tp > 1) {
    const std::string done = absl::StrCat("reform-rank-done/", epoch, "/");
    if (auto s = (*client)->KvSet(absl::StrCat(done, *join.rank), "1");
        !s.ok()) {
      return Fail("done key", s);
    }
    for (uint32_t m : members) {
      auto seen = (*client)->KvGet(absl::StrCat(done, m), absl::Seconds(60));
      if (!seen.ok()) return Fail("peer's done key", seen.status());
    }
  } else {
    auto done = (*client)->AllGatherWords(std::vector<uint32_t>{*join.rank},
                                          absl::Seconds(60));
    if (!done.ok()) return Fail("final round", done.status());
  }
  session->reset();
  if (auto s = (*client)->Leave(); !s.ok()) return Fail("leave", s);
  return 0;
}
