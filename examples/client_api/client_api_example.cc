// client_api_example: the smallest complete serving process on rankd, as
// shown in docs/client-api.md (a test keeps the two identical and runs it
// against real daemons). It joins the job through its node's daemon, agrees
// on scheduling metadata with all_gather_words, exchanges a bootstrap blob
// through the key-value broker, opens the Gloo data plane over the client's
// control plane, runs one all_reduce_sum and leaves.
//
//   client_api_example --target=unix:///run/rankd/rankd.sock
//                      --job_id=llama --local_rank=0
#include <cstdint>
#include <cstdio>
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
#include "dataplane/gloo/gloo_session.h"
#include "dataplane/host_tensor.h"

ABSL_FLAG(std::string, target, "", "the node's daemon (default $RANKD_TARGET)");
ABSL_FLAG(std::string, job_id, "llama", "the job to join");
ABSL_FLAG(uint32_t, local_rank, 0, "this process's index on its node");

namespace {

using rankd::dataplane::CollectiveScope;
using rankd::dataplane::HostTensor;

absl::Status Serve() {
  // 1. Connect to the node's daemon and join. Join returns when every rank
  //    of the job joined, with this rank's identity and groups.
  rankd::ClientOptions options;
  options.target = absl::GetFlag(FLAGS_target);
  auto client = rankd::Client::Connect(options);
  if (!client.ok()) return client.status();
  rankd::JoinOptions join;
  join.job_id = absl::GetFlag(FLAGS_job_id);
  join.local_rank = absl::GetFlag(FLAGS_local_rank);
  join.device.set_kind("cpu");
  join.wait_for_world = absl::Seconds(60);
  auto descriptor = (*client)->Join(join);
  if (!descriptor.ok()) return descriptor.status();
  const uint32_t rank = descriptor->rank();
  const uint32_t world = descriptor->world_size();

  // 2. Agree on scheduling metadata: one equal-length frame per rank,
  //    rank-major result. Here: how many tokens each rank has this step.
  const uint32_t my_tokens = 10 + rank;
  auto frames = (*client)->AllGatherWords({rank, my_tokens}, absl::Seconds(10));
  if (!frames.ok()) return frames.status();  // names missing or lost ranks
  uint32_t total_tokens = 0;
  for (uint32_t r = 0; r < world; ++r) total_tokens += (*frames)[2 * r + 1];

  // 3. Bootstrap blobs (an NCCL unique id, say) through the key-value broker.
  if (rank == 0) {
    if (absl::Status s = (*client)->KvSet("example/blob", "hello"); !s.ok()) {
      return s;
    }
  }
  auto blob = (*client)->KvGet("example/blob", absl::Seconds(10));
  if (!blob.ok()) return blob.status();

  // 4. The data plane over the client's control plane. A peer's death
  //    reaches it through the client's watch stream and aborts pending work.
  auto control_plane = rankd::dataplane::MakeClientControlPlane(client->get());
  auto converted = rankd::dataplane::DescriptorFromProto(*descriptor);
  if (!converted.ok()) return converted.status();
  auto session = rankd::dataplane::gloo::GlooSession::Open(*converted,
                                                           control_plane.get());
  if (!session.ok()) return session.status();
  auto x = HostTensor::FromVector<float>({2}, {1.0f, static_cast<float>(rank)});
  if (!x.ok()) return x.status();
  auto sum = (*session)->AllReduceSum(CollectiveScope::World(), *x);
  if (!sum.ok()) return sum.status();  // refused before any native work
  if (absl::Status s = sum->completion->Wait(); !s.ok()) return s;
  auto values = sum->output.Values<float>();  // authoritative after Wait
  if (!values.ok()) return values.status();
  if ((*values)[0] != static_cast<float>(world)) {
    return absl::InternalError(absl::StrCat("sum of ones is ", (*values)[0]));
  }
  std::printf("rank %u of %u: %u tokens in the step, blob '%s', sum %g\n", rank,
              world, total_tokens, blob->c_str(), (*values)[1]);

  // 5. Done: every rank finishes with the data plane (a last round is a
  //    barrier) before anyone closes its session; then leave cleanly.
  auto barrier = (*client)->AllGatherWords({rank}, absl::Seconds(10));
  if (!barrier.ok()) return barrier.status();
  session->reset();
  return (*client)->Leave();
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (absl::Status s = Serve(); !s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
