// nccl_overhead_bench: host time per operation of rankd's NCCL layer
// against direct calls into the same CUDA runtime and NCCL, in one process
// and one run (bench/run_nccl_overhead.sh runs it; bench/RESULTS.md, "NCCL
// layer: host time per operation", reads it).
//
// --ranks threads (at most one per device), rank r on device r, as the
// NCCL device tests run them. The libraries are the ones rankd's loader
// opens ($RANKD_CUDART_LIBRARY / $RANKD_NCCL_LIBRARY, else the host's, see
// docs/nccl.md): the CPU stand-in in CI, the real CUDA runtime and NCCL on
// a GPU host. The direct modes dlopen the very files rankd loaded
// (DescribeNativeRuntime()) and call them as any NCCL program does, with
// nothing of rankd in between. Modes:
//
//   rankd      NcclSession (default NcclSessionOptions: agreement records in
//              the payload's group, all_to_all_v's counts checked first) on
//              an in-process control plane, caller-owned outputs
//              (AllReduceSumInto, AllGatherInto, AllToAllVInto, Send and
//              ReceiveInto), the session's stream;
//   direct_same the library calls rankd's layer makes for the operation,
//              made directly on a non-blocking communicator: an 8-byte
//              host-to-device copy of the agreement record from page-locked
//              memory, the record's all_gather (send_receive: the record
//              sent each way) in the payload's group, the payload, the wait
//              below, the records' copy back to page-locked memory, a
//              completion event record; so rankd - direct_same is the
//              layer's own work and direct_same - direct_nb what the
//              agreement record costs (all_to_all_v: not modelled, rankd
//              sends its records ahead in launches of their own);
//   direct_nb  a non-blocking communicator (config.blocking = 0, as rankd's):
//              the NCCL call(s), then ncclCommGetAsyncError polled with
//              sched_yield until NCCL queued the work: the least any caller
//              of a non-blocking communicator waits;
//   direct_b   a blocking communicator (NCCL's default): the NCCL call(s)
//              alone.
//
// Operations and what a direct mode calls: all_reduce_sum (ncclAllReduce,
// f32 sum), all_gather (ncclAllGather of the bytes), all_to_all_v (an even
// split: one group of ncclSend/ncclRecv per peer, a cudaMemcpyAsync for the
// own slice), send_receive (rank 2k sends to 2k+1: ncclSend / ncclRecv).
// Sizes are one rank's input bytes.
//
// What is timed: the submitting call only (rankd: Submit until it returns
// the completion; direct: the NCCL call(s) until the work is queued), per
// operation, on every rank; after each operation the rank waits for it
// (untimed: completion->Wait() / cudaStreamSynchronize), so every
// submission starts with idle streams and nothing queued. The modes take
// turns operation by operation (rankd, direct_same, direct_nb, direct_b,
// rankd, ...) so that a shared machine's load drifts hit them alike; a
// mode's p50 is the median of its --blocks blocks' p50s (each block pools
// every rank's samples), and "rankd - X" is the same median of the
// differences between each rankd operation and X's operation of the same
// index on that rank, which ran just after it.
//
// The MoE-shaped loop: --moe_steps all_to_all_v in a row whose counts
// change every step (rows of --moe_row_bytes, 1 to 5 rows per pair, five
// patterns in turn), submitted back to back with no wait in between (one
// wait at the end), in rankd and direct_nb, after --moe_warmup untimed runs
// (rankd checks each count pattern before its payload the first time it
// sees it, then lets it go ahead: docs/nccl.md). It reports the host time of
// the steps and, against the stand-in, how many times the submitting thread
// waited for device work meanwhile (testing/standin_control.h: synchronize
// calls and events polled while not ready); "n/a" on real libraries.
//
// Output: Markdown tables on stdout (the runtime line first); "ERROR ..."
// and exit 1 on any failure. Values are checked once per operation, mode
// and size, untimed.
#include <dlfcn.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/barrier.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/topology.h"
#include "dataplane/collective_scope.h"
#include "dataplane/control_plane.h"
#include "dataplane/dtype.h"
#include "dataplane/nccl/cuda_device.h"
#include "dataplane/nccl/cuda_stream.h"
#include "dataplane/nccl/device_tensor.h"
#include "dataplane/nccl/native_runtime.h"
#include "dataplane/nccl/nccl_session.h"
#include "dataplane/nccl/testing/standin_control.h"
#include "dataplane/session_descriptor.h"
#include "dataplane/testing/in_process_control_plane.h"
#include "dataplane/value_descriptor.h"

ABSL_FLAG(int, ranks, 2,
          "ranks (threads), one device each; fewer where fewer devices");
ABSL_FLAG(std::string, sizes, "1024,1048576,67108864",
          "input bytes per rank, comma-separated");
ABSL_FLAG(std::string, iters, "1000,300,8",
          "timed operations per block and mode, one per size");
ABSL_FLAG(int, warmup, 20, "untimed operations per block and mode (64 MiB: 2)");
ABSL_FLAG(int, blocks, 3, "blocks per mode (the modes take turns)");
ABSL_FLAG(std::string, ops,
          "all_reduce_sum,all_gather,all_to_all_v,send_receive",
          "operations to run");
ABSL_FLAG(std::string, modes, "rankd,direct_same,direct_nb,direct_b",
          "modes to run");
ABSL_FLAG(int, moe_steps, 32, "all_to_all_v steps of the MoE-shaped loop");
ABSL_FLAG(int, moe_row_bytes, 4096, "bytes per row in the MoE-shaped loop");
ABSL_FLAG(int, moe_blocks, 5, "times the MoE-shaped loop runs per mode");
ABSL_FLAG(int, moe_warmup, 1,
          "untimed runs of the MoE-shaped loop first, per mode (rankd checks "
          "each new count pattern before its payload, once)");

namespace rankd::bench {
namespace {

using dataplane::CollectiveScope;
using dataplane::DistributedSessionDescriptor;
using dataplane::TensorDtype;
using dataplane::ValueDescriptor;
using dataplane::nccl::CudaStream;
using dataplane::nccl::DeviceTensor;
using dataplane::nccl::NcclSession;
using dataplane::nccl::NcclSessionOptions;
using dataplane::testing::InProcessJob;
using Clock = std::chrono::steady_clock;

[[noreturn]] void Die(const std::string& what) {
  std::printf("ERROR %s\n", what.c_str());
  std::fflush(stdout);
  std::_Exit(1);
}
void Check(const absl::Status& s, const std::string& what) {
  if (!s.ok()) Die(absl::StrCat(what, ": ", s.ToString()));
}

// --- direct calls: the C interfaces as NVIDIA's headers declare them ------

struct NcclUniqueId {
  char internal[128];
};
// ncclConfig_t's first fields (NCCL 2.14 layout; NCCL reads a config by its
// size and version, so later fields take their defaults).
struct NcclConfig {
  size_t size = sizeof(NcclConfig);
  unsigned int magic = 0xcafebeef;
  unsigned int version = 21400;
  int blocking = 1;
};
constexpr int kNcclSuccess = 0, kNcclInProgress = 7;
constexpr int kNcclUint8 = 1, kNcclFloat32 = 7, kNcclSum = 0;
constexpr int kCudaMemcpyHostToDevice = 1, kCudaMemcpyDeviceToHost = 2,
              kCudaMemcpyDeviceToDevice = 3;
constexpr unsigned kCudaStreamNonBlocking = 1, kCudaEventDisableTiming = 2;
using Stream = void*;
using Comm = void*;

struct Native {
  int (*SetDevice)(int);
  int (*StreamCreateWithFlags)(Stream*, unsigned);
  int (*StreamSynchronize)(Stream);
  int (*Malloc)(void**, size_t);
  int (*MallocHost)(void**, size_t);
  int (*MemcpyAsync)(void*, const void*, size_t, int, Stream);
  int (*EventCreateWithFlags)(void**, unsigned);
  int (*EventRecord)(void*, Stream);
  int (*GetUniqueId)(NcclUniqueId*);
  int (*CommInitRankConfig)(Comm*, int, NcclUniqueId, int, NcclConfig*);
  int (*CommGetAsyncError)(Comm, int*);
  int (*AllReduce)(const void*, void*, size_t, int, int, Comm, Stream);
  int (*AllGather)(const void*, void*, size_t, int, Comm, Stream);
  int (*Send)(const void*, size_t, int, int, Comm, Stream);
  int (*Recv)(void*, size_t, int, int, Comm, Stream);
  int (*GroupStart)();
  int (*GroupEnd)();
};

template <typename Fn>
void Resolve(void* handle, const char* name, Fn* fn) {
  *fn = reinterpret_cast<Fn>(::dlsym(handle, name));
  if (*fn == nullptr) Die(absl::StrCat("no ", name, " in the loaded library"));
}

const Native& LoadNative(const dataplane::nccl::NativeRuntimeReport& report) {
  static Native n = [&] {
    Native n{};
    void* cudart = ::dlopen(report.cudart_path.c_str(), RTLD_NOW);
    void* nccl = ::dlopen(report.nccl_path.c_str(), RTLD_NOW);
    if (cudart == nullptr || nccl == nullptr)
      Die("dlopen: " + std::string(dlerror()));
    Resolve(cudart, "cudaSetDevice", &n.SetDevice);
    Resolve(cudart, "cudaStreamCreateWithFlags", &n.StreamCreateWithFlags);
    Resolve(cudart, "cudaStreamSynchronize", &n.StreamSynchronize);
    Resolve(cudart, "cudaMalloc", &n.Malloc);
    Resolve(cudart, "cudaMallocHost", &n.MallocHost);
    Resolve(cudart, "cudaMemcpyAsync", &n.MemcpyAsync);
    Resolve(cudart, "cudaEventCreateWithFlags", &n.EventCreateWithFlags);
    Resolve(cudart, "cudaEventRecord", &n.EventRecord);
    Resolve(nccl, "ncclGetUniqueId", &n.GetUniqueId);
    Resolve(nccl, "ncclCommInitRankConfig", &n.CommInitRankConfig);
    Resolve(nccl, "ncclCommGetAsyncError", &n.CommGetAsyncError);
    Resolve(nccl, "ncclAllReduce", &n.AllReduce);
    Resolve(nccl, "ncclAllGather", &n.AllGather);
    Resolve(nccl, "ncclSend", &n.Send);
    Resolve(nccl, "ncclRecv", &n.Recv);
    Resolve(nccl, "ncclGroupStart", &n.GroupStart);
    Resolve(nccl, "ncclGroupEnd", &n.GroupEnd);
    return n;
  }();
  return n;
}

void CheckCuda(int r, const char* what) {
  if (r != 0) Die(absl::StrCat(what, " failed: CUDA error ", r));
}

// One rank's direct communicator and buffers.
struct DirectRank {
  const Native* n = nullptr;
  bool blocking = true;
  // direct_same: also the library calls rankd's layer adds (below).
  bool same_calls = false;
  int rank = 0, world = 0;
  Comm comm = nullptr;
  Stream stream = nullptr;
  void *in = nullptr, *out = nullptr;
  void* record = nullptr;    // direct_same: an agreement record's words
  void* event = nullptr;     // direct_same: the completion event
  uint64_t* host = nullptr;  // direct_same: the record's page-locked mirror

  // Waits (sched_yield between polls) until NCCL queued the work of a call
  // that answered `r`.
  void Settle(int r, const char* what) const {
    if (r == kNcclInProgress && !blocking) {
      int state = kNcclInProgress;
      while (true) {
        if (n->CommGetAsyncError(comm, &state) != kNcclSuccess) {
          Die(absl::StrCat(what, ": ncclCommGetAsyncError failed"));
        }
        if (state != kNcclInProgress) break;
        sched_yield();
      }
      r = state;
    }
    if (r != kNcclSuccess) Die(absl::StrCat(what, ": NCCL error ", r));
  }
};

// --- the operations --------------------------------------------------------

enum class Op { kAllReduce, kAllGather, kAllToAllV, kSendReceive };
const char* OpName(Op op) {
  switch (op) {
    case Op::kAllReduce:
      return "all_reduce_sum";
    case Op::kAllGather:
      return "all_gather";
    case Op::kAllToAllV:
      return "all_to_all_v";
    case Op::kSendReceive:
      return "send_receive";
  }
  return "?";
}

// A rank's part of send_receive: rank 2k sends to 2k+1; an odd world's last
// rank sits out.
int Partner(int rank, int world) {
  const int p = rank % 2 == 0 ? rank + 1 : rank - 1;
  return p < world ? p : -1;
}

// The direct call(s) of `op` on `bytes` per rank; returns once NCCL queued
// the work. direct_same adds what rankd's layer calls for the operation:
// its agreement record (an 8-byte host-to-device copy, then, in the
// payload's group, an all_gather of 8 bytes, or for send_receive the
// record sent each way) and a completion event recorded after the work.
void DirectSubmit(DirectRank& d, Op op, size_t bytes) {
  const Native& n = *d.n;
  char* record = static_cast<char*>(d.record);
  if (d.same_calls) {
    ++d.host[0];
    CheckCuda(
        n.MemcpyAsync(record, d.host, 8, kCudaMemcpyHostToDevice, d.stream),
        "cudaMemcpyAsync");
    n.GroupStart();
  }
  const int peer = Partner(d.rank, d.world);
  if (d.same_calls && op != Op::kSendReceive) {
    n.AllGather(record, record + 8, 8, kNcclUint8, d.comm, d.stream);
  } else if (d.same_calls && peer >= 0) {
    n.Send(record, 8, kNcclUint8, peer, d.comm, d.stream);
    n.Recv(record + 8, 8, kNcclUint8, peer, d.comm, d.stream);
  }
  int r = kNcclSuccess;
  const char* what = "";
  switch (op) {
    case Op::kAllReduce:
      r = n.AllReduce(d.in, d.out, bytes / 4, kNcclFloat32, kNcclSum, d.comm,
                      d.stream);
      what = "ncclAllReduce";
      break;
    case Op::kAllGather:
      r = n.AllGather(d.in, d.out, bytes, kNcclUint8, d.comm, d.stream);
      what = "ncclAllGather";
      break;
    case Op::kAllToAllV: {
      const size_t slice = bytes / d.world;
      CheckCuda(n.MemcpyAsync(static_cast<char*>(d.out) + d.rank * slice,
                              static_cast<char*>(d.in) + d.rank * slice, slice,
                              kCudaMemcpyDeviceToDevice, d.stream),
                "cudaMemcpyAsync");
      n.GroupStart();
      for (int p = 0; p < d.world; ++p) {
        if (p == d.rank) continue;
        n.Send(static_cast<char*>(d.in) + p * slice, slice, kNcclUint8, p,
               d.comm, d.stream);
        n.Recv(static_cast<char*>(d.out) + p * slice, slice, kNcclUint8, p,
               d.comm, d.stream);
      }
      r = n.GroupEnd();
      what = "all_to_all_v group";
      break;
    }
    case Op::kSendReceive:
      if (peer < 0) break;
      r = d.rank % 2 == 0
              ? n.Send(d.in, bytes, kNcclUint8, peer, d.comm, d.stream)
              : n.Recv(d.out, bytes, kNcclUint8, peer, d.comm, d.stream);
      what = d.rank % 2 == 0 ? "ncclSend" : "ncclRecv";
      break;
  }
  if (d.same_calls) {
    if (r != kNcclSuccess && r != kNcclInProgress) {
      Die(absl::StrCat(what, ": NCCL error ", r));
    }
    r = n.GroupEnd();
  }
  d.Settle(r, what);
  if (d.same_calls) {
    // The records back to page-locked memory, then the completion event.
    CheckCuda(n.MemcpyAsync(d.host + 1, record + 8, 8 * d.world,
                            kCudaMemcpyDeviceToHost, d.stream),
              "cudaMemcpyAsync");
    CheckCuda(n.EventRecord(d.event, d.stream), "cudaEventRecord");
  }
}

// One rank's rankd session and the tensors of one size.
struct RankdRank {
  NcclSession* session = nullptr;
  int rank = 0, world = 0;
  std::shared_ptr<CudaStream> stream;
  std::map<std::pair<Op, size_t>, std::pair<DeviceTensor, DeviceTensor>>
      tensors;  // input, caller-owned output

  const std::pair<DeviceTensor, DeviceTensor>& For(Op op, size_t bytes) {
    auto it = tensors.find({op, bytes});
    if (it != tensors.end()) return it->second;
    const size_t f32s = bytes / 4;
    ValueDescriptor in_desc =
        *ValueDescriptor::Create({f32s}, TensorDtype::kF32);
    ValueDescriptor out_desc = in_desc;
    if (op == Op::kAllGather) {
      out_desc = *ValueDescriptor::Create({f32s * world}, TensorDtype::kF32);
    }
    if (op == Op::kAllToAllV) {  // rows of 4 bytes, an even split
      in_desc =
          *ValueDescriptor::Create({f32s / world * world}, TensorDtype::kF32);
      out_desc = in_desc;
    }
    std::vector<float> values(in_desc.element_count());
    for (size_t i = 0; i < values.size(); ++i) {
      values[i] = static_cast<float>(rank + 1) * static_cast<float>(1 + i % 5);
    }
    auto in = DeviceTensor::FromHostVector(in_desc, values, stream);
    Check(in.status(), "upload");
    auto out = DeviceTensor::Allocate(out_desc, stream);
    Check(out.status(), "allocate");
    return tensors.emplace(std::make_pair(op, bytes), std::make_pair(*in, *out))
        .first->second;
  }

  // Submits `op`; returns the completion to wait for (null: nothing to do).
  std::shared_ptr<dataplane::BoundedCompletion> Submit(Op op, size_t bytes) {
    const auto& [in, out] = For(op, bytes);
    const CollectiveScope world_scope = CollectiveScope::World();
    absl::StatusOr<NcclSession::ValueSubmission> s;
    switch (op) {
      case Op::kAllReduce:
        s = session->AllReduceSumInto(world_scope, in, out);
        break;
      case Op::kAllGather:
        s = session->AllGatherInto(world_scope, in, out);
        break;
      case Op::kAllToAllV: {
        std::vector<size_t> counts(world, in.descriptor().rows() / world);
        s = session->AllToAllVInto(world_scope, in, counts, counts, out);
        break;
      }
      case Op::kSendReceive: {
        const int peer = Partner(rank, world);
        if (peer < 0) return nullptr;
        s = rank % 2 == 0 ? session->Send(world_scope, peer, in)
                          : session->ReceiveInto(world_scope, peer, out);
        break;
      }
    }
    Check(s.status(), absl::StrCat("rankd ", OpName(op)));
    return s->completion;
  }
};

// --- statistics ------------------------------------------------------------

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * v.size()));
  return v[i];
}
double Median(std::vector<double> v) { return Percentile(std::move(v), 0.5); }

std::string Bytes(size_t b) {
  if (b >= (1u << 20) && b % (1u << 20) == 0)
    return absl::StrCat(b >> 20, " MiB");
  if (b >= 1024 && b % 1024 == 0) return absl::StrCat(b >> 10, " KiB");
  return absl::StrCat(b, " B");
}

// Samples of one (op, size, mode): per block, every rank's submit times.
struct Samples {
  std::vector<std::vector<double>> blocks;  // µs
  void Add(int block, double us) {
    absl::MutexLock lock(&mu);
    if (blocks.size() <= static_cast<size_t>(block)) blocks.resize(block + 1);
    blocks[block].push_back(us);
  }
  double P(double q) const {
    std::vector<double> per_block;
    for (const auto& b : blocks) per_block.push_back(Percentile(b, q));
    return Median(per_block);
  }
  absl::Mutex mu;
};

// --- the run ----------------------------------------------------------------

int Main() {
  const auto report = dataplane::nccl::DescribeNativeRuntime();
  std::printf("Runtime: %s\n", report.Summary().c_str());
  if (!report.cuda_loaded() || !report.nccl_loaded() || report.gpus.empty()) {
    Die(absl::StrCat("no device: ", report.Summary()));
  }
  // One rank per device, up to --ranks.
  const int world = std::min(absl::GetFlag(FLAGS_ranks),
                             static_cast<int>(report.gpus.size()));
  std::vector<size_t> sizes;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_sizes), ',')) {
    size_t v;
    if (!absl::SimpleAtoi(s, &v) || v < 4 * static_cast<size_t>(world)) {
      Die(absl::StrCat("bad size ", s));
    }
    sizes.push_back(v / (4 * world) * (4 * world));
  }
  std::vector<int> iters;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_iters), ',')) {
    int v;
    if (!absl::SimpleAtoi(s, &v) || v < 1) Die(absl::StrCat("bad iters ", s));
    iters.push_back(v);
  }
  if (iters.size() != sizes.size()) Die("--iters needs one count per size");
  std::vector<Op> ops;
  for (absl::string_view s :
       absl::StrSplit(absl::GetFlag(FLAGS_ops), ',', absl::SkipEmpty())) {
    bool found = false;
    for (Op op :
         {Op::kAllReduce, Op::kAllGather, Op::kAllToAllV, Op::kSendReceive}) {
      if (s == OpName(op)) {
        ops.push_back(op);
        found = true;
      }
    }
    if (!found) Die(absl::StrCat("unknown op ", s));
  }
  std::vector<std::string> modes =
      absl::StrSplit(absl::GetFlag(FLAGS_modes), ',');
  for (const std::string& mode : modes) {
    if (mode != "rankd" && mode != "direct_same" && mode != "direct_nb" &&
        mode != "direct_b") {
      Die("unknown mode " + mode);
    }
  }
  const int blocks = absl::GetFlag(FLAGS_blocks);
  const int warmup = absl::GetFlag(FLAGS_warmup);

  const Native& native = LoadNative(report);
  const auto* standin = dataplane::nccl::testing::Standin();
  std::printf("Ranks: %d (threads of one process, one device each); CPUs: %u\n",
              world, std::thread::hardware_concurrency());

  // Direct communicators, one per direct mode (direct_b blocking).
  const std::vector<std::string> direct_modes = {"direct_nb", "direct_same",
                                                 "direct_b"};
  std::vector<NcclUniqueId> ids(direct_modes.size());
  for (auto& id : ids) {
    if (native.GetUniqueId(&id) != kNcclSuccess) Die("ncclGetUniqueId");
  }
  std::map<std::string, std::vector<DirectRank>> direct;
  for (const std::string& mode : direct_modes) direct[mode].resize(world);
  auto job = InProcessJob::Create(world);
  std::vector<std::unique_ptr<dataplane::ControlPlane>> control_planes(world);
  std::vector<std::unique_ptr<NcclSession>> sessions(world);
  std::vector<RankdRank> rankd(world);
  const size_t largest = *std::max_element(sizes.begin(), sizes.end());
  {
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        control_planes[r] = job->ForRank(r);
        ParallelTopology topology;
        topology.data = world;
        auto descriptor =
            DistributedSessionDescriptor::FromTopology(topology, world, r);
        Check(descriptor.status(), "descriptor");
        NcclSessionOptions options;
        options.device = r;
        auto session =
            NcclSession::Open(*descriptor, control_planes[r].get(), options);
        Check(session.status(), absl::StrCat("rank ", r, " open"));
        sessions[r] = *std::move(session);
        rankd[r].session = sessions[r].get();
        rankd[r].rank = r;
        rankd[r].world = world;
        rankd[r].stream = sessions[r]->stream();
        for (size_t m = 0; m < direct_modes.size(); ++m) {
          DirectRank& d = direct.at(direct_modes[m])[r];
          d.n = &native;
          d.blocking = direct_modes[m] == "direct_b";
          d.same_calls = direct_modes[m] == "direct_same";
          d.rank = r;
          d.world = world;
          CheckCuda(native.SetDevice(r), "cudaSetDevice");
          CheckCuda(
              native.StreamCreateWithFlags(&d.stream, kCudaStreamNonBlocking),
              "cudaStreamCreateWithFlags");
          CheckCuda(native.Malloc(&d.in, largest), "cudaMalloc");
          CheckCuda(native.Malloc(&d.out, largest * world), "cudaMalloc");
          CheckCuda(native.Malloc(&d.record, 8 * (world + 1)), "cudaMalloc");
          CheckCuda(native.MallocHost(reinterpret_cast<void**>(&d.host),
                                      8 * (world + 1)),
                    "cudaMallocHost");
          d.host[0] = 0;
          CheckCuda(
              native.EventCreateWithFlags(&d.event, kCudaEventDisableTiming),
              "cudaEventCreateWithFlags");
          NcclConfig config;
          config.blocking = d.blocking ? 1 : 0;
          const int rc =
              native.CommInitRankConfig(&d.comm, world, ids[m], r, &config);
          if (rc == kNcclInProgress) {
            int state = kNcclInProgress;
            while (state == kNcclInProgress) {
              native.CommGetAsyncError(d.comm, &state);
              std::this_thread::sleep_for(std::chrono::milliseconds(1));
            }
            if (state != kNcclSuccess) Die("non-blocking init failed");
          } else if (rc != kNcclSuccess) {
            Die(absl::StrCat("ncclCommInitRankConfig: ", rc));
          }
        }
      });
    }
    for (auto& t : threads) t.join();
  }

  // Every cell exists before the rank threads fill them concurrently.
  std::map<std::tuple<Op, size_t, std::string>, Samples> samples;
  for (Op op : ops) {
    for (size_t bytes : sizes) {
      for (const std::string& mode : modes) {
        samples[{op, bytes, mode}];
        if (mode != "rankd") samples[{op, bytes, "rankd-" + mode}];
      }
    }
  }
  for (Op op : ops) {
    for (size_t si = 0; si < sizes.size(); ++si) {
      const size_t bytes = sizes[si];
      const int timed = iters[si];
      const int warm = bytes >= (32u << 20) ? std::min(warmup, 2) : warmup;
      for (int block = 0; block < blocks; ++block) {
        absl::Barrier* start = new absl::Barrier(world);
        std::vector<std::thread> threads;
        for (int r = 0; r < world; ++r) {
          threads.emplace_back([&, r, start] {
            if (start->Block()) delete start;
            const bool takes_part =
                op != Op::kSendReceive || Partner(r, world) >= 0;
            std::vector<double> rankd_us;
            for (int i = 0; i < warm + timed; ++i) {
              for (const std::string& mode : modes) {
                // rankd's all_to_all_v sends its agreement records in two
                // launches of their own ahead of the payload (issue 34,
                // defect 2; docs/nccl.md): direct_same does not model that.
                if (mode == "direct_same" && op == Op::kAllToAllV) continue;
                const auto t0 = Clock::now();
                std::shared_ptr<dataplane::BoundedCompletion> completion;
                DirectRank* d = nullptr;
                if (mode == "rankd") {
                  completion = rankd[r].Submit(op, bytes);
                } else {
                  d = &direct.at(mode)[r];
                  CheckCuda(native.SetDevice(r), "cudaSetDevice");
                  DirectSubmit(*d, op, bytes);
                }
                const auto t1 = Clock::now();
                if (completion != nullptr) Check(completion->Wait(), "wait");
                if (d != nullptr) {
                  CheckCuda(native.StreamSynchronize(d->stream),
                            "cudaStreamSynchronize");
                }
                if (i < warm || !takes_part) continue;
                const double us =
                    std::chrono::duration<double, std::micro>(t1 - t0).count();
                samples.at({op, bytes, mode}).Add(block, us);
                // Paired with rankd's operation just before (same rank,
                // same index), so that load drifts cancel.
                if (mode == "rankd") rankd_us.push_back(us);
                if (mode != "rankd" && !rankd_us.empty()) {
                  samples.at({op, bytes, "rankd-" + mode})
                      .Add(block, rankd_us.back() - us);
                }
              }
            }
          });
        }
        for (auto& t : threads) t.join();
      }
      // rankd's result, checked once (untimed): the last operation's.
      if (op == Op::kAllReduce &&
          std::count(modes.begin(), modes.end(), "rankd")) {
        auto got = rankd[0].For(op, bytes).second.ToHostVector<float>();
        Check(got.status(), "read back");
        const float scale = world * (world + 1) / 2.0f;
        for (size_t i = 0; i < got->size(); i += 997) {
          if ((*got)[i] != scale * static_cast<float>(1 + i % 5)) {
            Die(absl::StrCat("rankd all_reduce_sum ", Bytes(bytes),
                             ": element ", i, " is ", (*got)[i]));
          }
        }
      }
    }
  }

  std::printf(
      "\nHost time per operation (the submitting call), µs: p50 (p90), the "
      "median over %d blocks of every rank's samples. The modes take turns "
      "operation by operation; rankd - X is the median of the differences "
      "between rankd's operation and X's of the same index on the same rank, "
      "which ran just after it, so that load drifts cancel.\n\n",
      blocks);
  std::printf(
      "| operation | size | rankd | direct_same | direct_nb | direct_b | "
      "rankd - direct_same | rankd - direct_nb | rankd / direct_nb | "
      "rankd - direct_b |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (Op op : ops) {
    for (size_t bytes : sizes) {
      auto found = [&](const std::string& mode) -> const Samples* {
        auto it = samples.find({op, bytes, mode});
        return it == samples.end() || it->second.blocks.empty() ? nullptr
                                                                : &it->second;
      };
      auto cell = [&](const std::string& mode) -> std::string {
        const Samples* s = found(mode);
        return s == nullptr
                   ? "-"
                   : absl::StrFormat("%.1f (%.1f)", s->P(0.5), s->P(0.9));
      };
      auto diff = [&](const std::string& mode) -> std::string {
        const Samples* s = found("rankd-" + mode);
        return s == nullptr ? "-" : absl::StrFormat("%+.1f", s->P(0.5));
      };
      const Samples* r = found("rankd");
      const Samples* nb = found("direct_nb");
      const std::string ratio =
          r != nullptr && nb != nullptr && nb->P(0.5) > 0
              ? absl::StrFormat("%.2f", r->P(0.5) / nb->P(0.5))
              : "-";
      std::printf("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
                  OpName(op), Bytes(bytes).c_str(), cell("rankd").c_str(),
                  cell("direct_same").c_str(), cell("direct_nb").c_str(),
                  cell("direct_b").c_str(), diff("direct_same").c_str(),
                  diff("direct_nb").c_str(), ratio.c_str(),
                  diff("direct_b").c_str());
    }
  }

  // The MoE-shaped loop.
  const int steps = absl::GetFlag(FLAGS_moe_steps);
  const size_t row_bytes = absl::GetFlag(FLAGS_moe_row_bytes) / 4 * 4;
  if (steps > 0 && 5 * row_bytes * world > largest) {
    Die("the MoE-shaped loop needs --sizes up to 5 * --moe_row_bytes * "
        "--ranks");
  }
  if (steps > 0) {
    const ValueDescriptor row =
        *ValueDescriptor::Create({row_bytes / 4}, TensorDtype::kF32);
    auto rows = [&](int step, int src, int dst) -> size_t {
      return 1 + (step + 3 * src + dst) % 5;
    };
    struct MoeResult {
      std::vector<double> us;
      std::vector<int64_t> syncs;
      std::vector<int64_t> warmup_syncs;  // the first, untimed runs
      absl::Mutex mu;
    };
    std::map<std::string, MoeResult> moe;
    const int moe_warmup = absl::GetFlag(FLAGS_moe_warmup);
    for (int block = -moe_warmup; block < absl::GetFlag(FLAGS_moe_blocks);
         ++block) {
      for (const std::string& mode :
           {std::string("rankd"), std::string("direct_nb")}) {
        if (!std::count(modes.begin(), modes.end(), mode)) continue;
        MoeResult& result = moe[mode];
        std::vector<std::thread> threads;
        for (int r = 0; r < world; ++r) {
          threads.emplace_back([&, r] {
            // Inputs and outputs of every step, made before the loop.
            std::vector<std::vector<size_t>> send(steps), recv(steps);
            size_t most_in = 0, most_out = 0;
            for (int s = 0; s < steps; ++s) {
              size_t in = 0, out = 0;
              for (int p = 0; p < world; ++p) {
                send[s].push_back(rows(s, r, p));
                recv[s].push_back(rows(s, p, r));
                in += send[s].back();
                out += recv[s].back();
              }
              most_in = std::max(most_in, in);
              most_out = std::max(most_out, out);
            }
            std::vector<std::pair<DeviceTensor, DeviceTensor>> tensors;
            if (mode == "rankd") {
              for (int s = 0; s < steps; ++s) {
                size_t in = 0, out = 0;
                for (int p = 0; p < world; ++p) {
                  in += send[s][p];
                  out += recv[s][p];
                }
                auto x = DeviceTensor::Allocate(*ValueDescriptor::Rows(in, row),
                                                rankd[r].stream);
                auto y = DeviceTensor::Allocate(
                    *ValueDescriptor::Rows(out, row), rankd[r].stream);
                Check(x.status(), "allocate");
                Check(y.status(), "allocate");
                tensors.emplace_back(*x, *y);
              }
              Check(rankd[r].stream->Synchronize(), "synchronize");
            }
            DirectRank& d = direct.at("direct_nb")[r];
            CheckCuda(native.SetDevice(r), "cudaSetDevice");
            const int64_t syncs0 =
                standin != nullptr ? standin->thread_host_syncs() : 0;
            std::vector<std::shared_ptr<dataplane::BoundedCompletion>> pending;
            const auto t0 = Clock::now();
            for (int s = 0; s < steps; ++s) {
              if (mode == "rankd") {
                auto out = rankd[r].session->AllToAllVInto(
                    CollectiveScope::World(), tensors[s].first, send[s],
                    recv[s], tensors[s].second);
                Check(out.status(), "rankd all_to_all_v");
                pending.push_back(out->completion);
                continue;
              }
              size_t in_off = 0, out_off = 0;
              native.GroupStart();
              for (int p = 0; p < world; ++p) {
                const size_t sb = send[s][p] * row_bytes;
                const size_t rb = recv[s][p] * row_bytes;
                if (p == r) {
                  native.MemcpyAsync(static_cast<char*>(d.out) + out_off,
                                     static_cast<char*>(d.in) + in_off, sb,
                                     kCudaMemcpyDeviceToDevice, d.stream);
                } else {
                  native.Send(static_cast<char*>(d.in) + in_off, sb, kNcclUint8,
                              p, d.comm, d.stream);
                  native.Recv(static_cast<char*>(d.out) + out_off, rb,
                              kNcclUint8, p, d.comm, d.stream);
                }
                in_off += sb;
                out_off += rb;
              }
              d.Settle(native.GroupEnd(), "moe group");
            }
            const auto t1 = Clock::now();
            const int64_t syncs =
                standin != nullptr ? standin->thread_host_syncs() - syncs0 : -1;
            for (auto& c : pending) Check(c->Wait(), "moe wait");
            CheckCuda(native.StreamSynchronize(d.stream), "synchronize");
            absl::MutexLock lock(&result.mu);
            if (block < 0) {
              result.warmup_syncs.push_back(syncs);
              return;
            }
            result.us.push_back(
                std::chrono::duration<double, std::micro>(t1 - t0).count());
            result.syncs.push_back(syncs);
          });
        }
        for (auto& t : threads) t.join();
      }
    }
    std::printf(
        "\nMoE-shaped loop: %d all_to_all_v in a row, counts changing every "
        "step (five patterns in turn, 1-5 rows of %zu bytes per pair), one "
        "wait at the end; %d untimed warm-up run(s), then %d runs per mode, "
        "every rank\n\n",
        steps, row_bytes, moe_warmup, absl::GetFlag(FLAGS_moe_blocks));
    std::printf(
        "| mode | host time of the %d steps, µs, p50 (max) | per step, µs | "
        "host waits for device work during the steps, per rank (max) | "
        "the same in the warm-up runs |\n",
        steps);
    std::printf("|---|---:|---:|---:|---:|\n");
    for (auto& [mode, result] : moe) {
      const double p50 = Median(result.us);
      const double max = *std::max_element(result.us.begin(), result.us.end());
      auto count = [&](const std::vector<int64_t>& v) -> std::string {
        if (standin == nullptr) return "n/a (real libraries)";
        if (v.empty()) return "-";
        return absl::StrCat(Median(std::vector<double>(v.begin(), v.end())),
                            " (", *std::max_element(v.begin(), v.end()), ")");
      };
      std::printf("| %s | %.0f (%.0f) | %.1f | %s | %s |\n", mode.c_str(), p50,
                  max, p50 / steps, count(result.syncs).c_str(),
                  count(result.warmup_syncs).c_str());
    }
  }

  // Nothing is torn down: the process ends here.
  std::fflush(stdout);
  std::_Exit(0);
}

}  // namespace
}  // namespace rankd::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return rankd::bench::Main();
}
