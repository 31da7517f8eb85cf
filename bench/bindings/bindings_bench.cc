// bindings_bench.cc: the C++ baseline of the bindings benchmark
// (bench/run_bindings.sh): one rank that runs `ops` small all_reduce_sum
// operations (f32[4], Gloo, world scope) back to back, each submitted and
// waited for, and prints the per-operation latency on rank 0:
//   BINDING cpp world <W> ops <N> p50_ns <x> p99_ns <y> mean_ns <z>
// The C, Python and Rust twins (bindings_bench.c, bindings_bench.py,
// rust/examples/bindings_bench.rs) do the same through their binding;
// the difference of their p50s is the binding's overhead.
// Usage (under rankrun, which sets RANKD_TARGET, RANKD_JOB_ID,
// RANKD_LOCAL_RANK): bindings_bench [ops] [warmup]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "dataplane/control_plane.h"
#include "dataplane/descriptor_proto.h"
#include "dataplane/gloo/gloo_session.h"
#include "dataplane/host_tensor.h"

namespace {

using rankd::dataplane::CollectiveScope;
using rankd::dataplane::HostTensor;

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

absl::Status Run(int ops, int warmup) {
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
  auto control_plane = rankd::dataplane::MakeClientControlPlane(client->get());
  auto converted = rankd::dataplane::DescriptorFromProto(*descriptor);
  if (!converted.ok()) return converted.status();
  auto session = rankd::dataplane::gloo::GlooSession::Open(*converted,
                                                           control_plane.get());
  if (!session.ok()) return session.status();
  auto x = HostTensor::FromVector<float>({4}, {1, 2, 3, 4});
  if (!x.ok()) return x.status();
  std::vector<int64_t> ns;
  ns.reserve(ops);
  for (int i = 0; i < warmup + ops; ++i) {
    const auto start = std::chrono::steady_clock::now();
    auto sum = (*session)->AllReduceSum(CollectiveScope::World(), *x);
    if (!sum.ok()) return sum.status();
    if (absl::Status s = sum->completion->Wait(); !s.ok()) return s;
    const auto end = std::chrono::steady_clock::now();
    if (i >= warmup) {
      ns.push_back(
          std::chrono::duration_cast<std::chrono::nanoseconds>(end - start)
              .count());
    }
    if (i == 0) {  // Check once that the sum is right: 1 * world.
      auto v = sum->output.Values<float>();
      if (!v.ok()) return v.status();
      if ((*v)[0] != static_cast<float>(descriptor->world_size())) {
        return absl::InternalError("wrong sum");
      }
    }
  }
  std::sort(ns.begin(), ns.end());
  double mean = 0;
  for (int64_t v : ns) mean += static_cast<double>(v) / ns.size();
  if (descriptor->rank() == 0) {
    std::printf(
        "BINDING cpp world %u ops %d p50_ns %lld p99_ns %lld mean_ns %.0f\n",
        descriptor->world_size(), ops,
        static_cast<long long>(ns[ns.size() / 2]),
        static_cast<long long>(ns[ns.size() * 99 / 100]), mean);
  }
  // A last round is a barrier before the session closes.
  auto barrier =
      (*client)->AllGatherWords({descriptor->rank()}, absl::Seconds(60));
  if (!barrier.ok()) return barrier.status();
  session->reset();
  return (*client)->Leave();
}

}  // namespace

int main(int argc, char** argv) {
  const int ops = argc > 1 ? std::atoi(argv[1]) : 20000;
  const int warmup = argc > 2 ? std::atoi(argv[2]) : 2000;
  if (ops < 1 || warmup < 1) {
    std::fprintf(stderr, "usage: bindings_bench [ops >= 1] [warmup >= 1]\n");
    return 2;
  }
  if (absl::Status s = Run(ops, warmup); !s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
