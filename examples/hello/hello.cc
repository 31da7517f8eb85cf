// hello.cc: the two-rank program of docs/client-api.md in C++, over the
// client library and the Gloo data plane (librankd_cpp.so when installed).
// Start it with the launcher:
//   rankrun --nproc_per_node=2 ./hello_cpp
// Every rank prints the same line as the C, Python and Rust versions.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "dataplane/control_plane.h"
#include "dataplane/descriptor_proto.h"
#include "dataplane/gloo/gloo_session.h"
#include "dataplane/host_tensor.h"

namespace {

using rankd::dataplane::CollectiveScope;
using rankd::dataplane::HostTensor;

// The launcher's environment (RANKD_TARGET, RANKD_JOB_ID, RANKD_LOCAL_RANK).
std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

absl::Status Hello() {
  rankd::ClientOptions options;
  options.target = Env("RANKD_TARGET");
  auto client = rankd::Client::Connect(options);
  if (!client.ok()) return client.status();
  rankd::JoinOptions join;
  join.job_id = Env("RANKD_JOB_ID");
  join.local_rank = std::atoi(Env("RANKD_LOCAL_RANK").c_str());
  join.device.set_kind("cpu");
  auto descriptor = (*client)->Join(join);
  if (!descriptor.ok()) return descriptor.status();
  const uint32_t r = descriptor->rank(), world = descriptor->world_size();

  // Scheduling metadata: one frame {rank, 7} per rank, rank-major.
  auto words = (*client)->AllGatherWords({r, 7}, absl::Seconds(30));
  if (!words.ok()) return words.status();

  // Tensors over Gloo: rank r holds {2r+1, 2r+2}; two ranks sum to {4, 6}.
  auto control_plane = rankd::dataplane::MakeClientControlPlane(client->get());
  auto converted = rankd::dataplane::DescriptorFromProto(*descriptor);
  if (!converted.ok()) return converted.status();
  auto session = rankd::dataplane::gloo::GlooSession::Open(*converted,
                                                           control_plane.get());
  if (!session.ok()) return session.status();
  auto x = HostTensor::FromVector<float>({2}, {2.0f * r + 1, 2.0f * r + 2});
  if (!x.ok()) return x.status();
  auto sum = (*session)->AllReduceSum(CollectiveScope::World(), *x);
  if (!sum.ok()) return sum.status();
  if (absl::Status s = sum->completion->Wait(); !s.ok()) return s;
  auto mine = HostTensor::FromVector<int32_t>({1}, {static_cast<int32_t>(r)});
  if (!mine.ok()) return mine.status();
  auto gather = (*session)->AllGather(CollectiveScope::World(), *mine);
  if (!gather.ok()) return gather.status();
  if (absl::Status s = gather->completion->Wait(); !s.ok()) return s;
  auto total = sum->output.Values<float>();
  auto gathered = gather->output.Values<int32_t>();
  if (!total.ok()) return total.status();
  if (!gathered.ok()) return gathered.status();
  std::printf("rank %u of %u: words [%s] sum [%g %g] gathered [%s]\n", r, world,
              absl::StrJoin(*words, " ").c_str(), (*total)[0], (*total)[1],
              absl::StrJoin(*gathered, " ").c_str());

  // A last round is a barrier: nobody closes its session while a peer still
  // uses it. Then leave cleanly.
  auto barrier = (*client)->AllGatherWords({r, 7}, absl::Seconds(30));
  if (!barrier.ok()) return barrier.status();
  session->reset();
  return (*client)->Leave();
}

}  // namespace

int main() {
  if (absl::Status s = Hello(); !s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
