// nccl_comm_bench: what a session's communicators cost (issue 34, defect
// 8): the time NcclSession::Open takes to make them, how many it makes and
// of which kind, the device memory they take, the time of the lazy split
// of executor lanes on a scope's first use on lane 1, and the time to close
// (bench/run_nccl_comm.sh runs it; bench/RESULTS.md, "NCCL communicators:
// init time and memory", reads it).
//
// --ranks threads (at most one per device), rank r on device r, over an
// in-process control plane, opening sessions of the topology --tp/--pp/--ep
// (data degree: the rest). The libraries are the ones rankd's loader opens:
// the CPU stand-in in CI, the real CUDA runtime and NCCL on a GPU host.
// Where NCCL has ncclCommSplit, a session makes one root (ncclCommInitRank)
// and splits every scope from it with shared resources; otherwise one
// ncclCommInitRank per distinct member list (docs/nccl.md, "Communicators
// and order"). The stand-in answers as an NCCL without ncclCommSplit when
// $RANKD_STANDIN_NCCL_VERSION is below 21800, so one machine compares both.
//
// Memory: free device memory (cudaMemGetInfo, from the runtime rankd
// loaded) on each rank's device before Open and after it, the largest
// drop over ranks; "n/a" where the runtime has no cudaMemGetInfo (the
// stand-in keeps no communicator memory: real figures need a GPU).
//
// Output: one Markdown table on stdout (the runtime line first); "ERROR
// ..." and exit 1 on any failure.
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/topology.h"
#include "dataplane/collective_scope.h"
#include "dataplane/dtype.h"
#include "dataplane/nccl/cuda_device.h"
#include "dataplane/nccl/device_tensor.h"
#include "dataplane/nccl/native_runtime.h"
#include "dataplane/nccl/nccl_backend.h"
#include "dataplane/nccl/nccl_comm.h"
#include "dataplane/nccl/nccl_session.h"
#include "dataplane/session_descriptor.h"
#include "dataplane/testing/in_process_control_plane.h"
#include "dataplane/value_descriptor.h"

ABSL_FLAG(int, ranks, 4,
          "ranks (threads), one device each; fewer where fewer devices");
ABSL_FLAG(int, tp, 2, "tensor degree");
ABSL_FLAG(int, pp, 2, "pipeline degree");
ABSL_FLAG(int, ep, 1, "expert degree");
ABSL_FLAG(int, executors, 2,
          "executor lanes (1 where NCCL has no ncclCommSplit)");
ABSL_FLAG(int, repeats, 5, "sessions opened and closed, one after another");

namespace rankd::bench {
namespace {

using dataplane::CollectiveScope;
using dataplane::DistributedSessionDescriptor;
using dataplane::TensorDtype;
using dataplane::ValueDescriptor;
using dataplane::nccl::DeviceTensor;
using dataplane::nccl::NcclBackend;
using dataplane::nccl::NcclExecutor;
using dataplane::nccl::NcclSession;
using dataplane::nccl::NcclSessionOptions;
using dataplane::testing::InProcessJob;
using Clock = std::chrono::steady_clock;

[[noreturn]] void Die(const std::string& what) {
  std::printf("ERROR %s\n", what.c_str());
  std::fflush(stdout);
  std::_Exit(1);
}

double MsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start)
      .count();
}

// cudaMemGetInfo of the runtime rankd loaded, or null.
using MemGetInfo = int (*)(size_t*, size_t*);
using SetDevice = int (*)(int);
struct Memory {
  MemGetInfo get = nullptr;
  SetDevice set = nullptr;
  // Free bytes on `device`, or -1.
  int64_t Free(int device) const {
    if (get == nullptr || set == nullptr || set(device) != 0) return -1;
    size_t free = 0, total = 0;
    return get(&free, &total) == 0 ? static_cast<int64_t>(free) : -1;
  }
};

Memory LoadMemory(const std::string& cudart) {
  Memory m;
  void* h = dlopen(cudart.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (h == nullptr) h = dlopen(cudart.c_str(), RTLD_NOW);
  if (h == nullptr) return m;
  m.get = reinterpret_cast<MemGetInfo>(dlsym(h, "cudaMemGetInfo"));
  m.set = reinterpret_cast<SetDevice>(dlsym(h, "cudaSetDevice"));
  return m;
}

struct Sample {
  double open_ms = 0;   // the slowest rank's Open
  double lanes_ms = 0;  // the slowest rank's first world op on lane 1
  double close_ms = 0;  // the slowest rank's session destruction
  size_t communicators = 0;
  int64_t memory_bytes = -1;  // the largest drop of free memory over ranks
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

Sample RunOnce(int ranks, const ParallelTopology& topology, int executors,
               const Memory& memory) {
  auto job = InProcessJob::Create(ranks);
  absl::Mutex mu;
  Sample sample;
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      auto cp = job->ForRank(r);
      auto descriptor =
          DistributedSessionDescriptor::FromTopology(topology, ranks, r);
      if (!descriptor.ok()) Die(descriptor.status().ToString());
      NcclSessionOptions options;
      options.device = r;
      options.executors = static_cast<uint32_t>(executors);
      const int64_t before = memory.Free(r);
      const auto start = Clock::now();
      auto session = NcclSession::Open(*descriptor, cp.get(), options);
      const double open_ms = MsSince(start);
      if (!session.ok())
        Die(absl::StrCat("Open: ", session.status().ToString()));
      const int64_t after = memory.Free(r);
      double lanes_ms = 0;
      if (executors > 1) {
        NcclBackend backend(**session);
        auto world = backend.Group(CollectiveScope::World());
        auto lane1 = NcclExecutor::Create(r, 1);
        if (!world.ok() || !lane1.ok()) Die("world group or lane 1");
        auto desc = ValueDescriptor::Create({4}, TensorDtype::kF32);
        auto x = DeviceTensor::FromHostVector(
            *desc, std::vector<float>(4, 1.0f), (*session)->stream());
        if (!x.ok()) Die(x.status().ToString());
        const auto first = Clock::now();
        auto sum = backend.AllReduceSum(*x, *world, *lane1);
        if (!sum.ok()) Die(absl::StrCat("lane 1: ", sum.status().ToString()));
        lanes_ms = MsSince(first);
        if (absl::Status s = sum->completion->Wait(); !s.ok()) {
          Die(s.ToString());
        }
      }
      const size_t communicators = (*session)->communicator_count();
      const auto closing = Clock::now();
      session->reset();
      const double close_ms = MsSince(closing);
      absl::MutexLock lock(&mu);
      sample.open_ms = std::max(sample.open_ms, open_ms);
      sample.lanes_ms = std::max(sample.lanes_ms, lanes_ms);
      sample.close_ms = std::max(sample.close_ms, close_ms);
      sample.communicators = communicators;
      if (before >= 0 && after >= 0) {
        sample.memory_bytes = std::max(sample.memory_bytes, before - after);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return sample;
}

int Main() {
  auto probe = dataplane::nccl::ProbeDevices();
  if (probe.device_count == 0) Die(probe.reason);
  const auto runtime = dataplane::nccl::DescribeNativeRuntime();
  std::printf("runtime: %s\n\n", runtime.Summary().c_str());
  const int ranks = std::min(absl::GetFlag(FLAGS_ranks), probe.device_count);
  ParallelTopology topology;
  topology.tensor = absl::GetFlag(FLAGS_tp);
  topology.pipeline = absl::GetFlag(FLAGS_pp);
  topology.expert = absl::GetFlag(FLAGS_ep);
  const int per_data = topology.tensor * topology.pipeline * topology.expert;
  if (per_data < 1 || ranks % per_data != 0) {
    Die(absl::StrCat(ranks, " ranks do not fit tp*pp*ep = ", per_data));
  }
  topology.data = ranks / per_data;
  const bool split = dataplane::nccl::SplitSupported();
  const int executors = split ? absl::GetFlag(FLAGS_executors) : 1;
  const Memory memory = LoadMemory(runtime.cudart_path);
  std::vector<double> open, lanes, close;
  Sample last;
  for (int i = 0; i < absl::GetFlag(FLAGS_repeats); ++i) {
    last = RunOnce(ranks, topology, executors, memory);
    open.push_back(last.open_ms);
    lanes.push_back(last.lanes_ms);
    close.push_back(last.close_ms);
  }
  const std::string scheme =
      split ? "1 ncclCommInitRank + ncclCommSplit (splitShare=1) per scope"
            : "ncclCommInitRank per distinct member list";
  std::printf(
      "| ranks | topology | scheme | communicators/rank | Open p50 ms | "
      "lane-1 first use p50 ms | close p50 ms | device memory/rank |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  std::printf(
      "| %d | tp%d pp%d ep%d dp%d | %s | %zu | %.2f | %s | %.2f | %s |\n",
      ranks, topology.tensor, topology.pipeline, topology.expert, topology.data,
      scheme.c_str(), last.communicators, Median(open),
      executors > 1 ? absl::StrFormat("%.2f", Median(lanes)).c_str() : "n/a",
      Median(close),
      last.memory_bytes >= 0
          ? absl::StrFormat("%.1f MiB", last.memory_bytes / 1048576.0).c_str()
          : "n/a (no cudaMemGetInfo)");
  return 0;
}

}  // namespace
}  // namespace rankd::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return rankd::bench::Main();
}
