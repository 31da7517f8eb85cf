// allreduce_bench: one rank of the all_reduce_sum bandwidth benchmark
// (bench/run_allreduce.sh starts the daemons and one of these per rank).
// It connects to its node's daemon through the client library, joins the
// job, builds GlooSession(s) over the client's control plane exactly as a
// serving process does (tests/dataplane_worker.cc), and for every size of
// --schedule runs its f32 all_reduce_sum operations on the world, back to
// back, in every mode: each mode's warmup operations (untimed) first, then
// the timed operations in --blocks blocks, the modes taking turns block by
// block (rankd block 0, direct block 0, ..., rankd block 1, ...), so that
// every mode sees the same background load on a shared machine. The modes:
//
//   rankd           GlooSession::AllReduceSum(World, Donate(x)) then
//                   completion->Wait(), default GlooSessionOptions (the product
//                   path: no explicit agreement check, mismatches are kept
//                   apart by the operation's Gloo tag). The input is donated
//                   (HostTensor::Donate) and the output becomes the next
//                   input, so the sum runs in place, as torch's
//                   dist.all_reduce does;
//   rankd_copy      DIAGNOSTIC: the same, input not donated (kept by the
//                   caller), so the sum is out of place: a second buffer
//                   (from the pool) that Gloo fills inside its ring;
//   direct          gloo::allreduce on a gloo::rendezvous::Context this
//                   program connects itself (its own TCP device on
//                   127.0.0.1, rendezvous keys on the same broker under
//                   "gloo/<namespace>/direct/bench/", through
//                   dataplane/gloo/gloo_interop.h), in place on a
//                   preallocated buffer of the same kind as rankd's (a
//                   HostTensor: 64-byte aligned, and from 2 MiB on aligned
//                   to and advised onto transparent huge pages, as
//                   host_buffer_pool.h says), with the same options rankd's
//                   layer uses (dataplane/gloo/internal/native_ops.cc: bcube up
//                   to 1 MiB and the ring with 8 MiB segments above, as
//                   rankd's default options choose, rankd's own f32 sum
//                   kernel (gloo_interop.h's SumFunctionFor), one tag per
//                   operation, op_timeout) and nothing else: no executor
//                   thread, no completion, no validation, no output copy;
//   rankd_verify    DIAGNOSTIC: as rankd, on a second GlooSession
//                   (instance 1) with GlooSessionOptions::verify_agreement =
//                   true, to measure what the opt-in agreement check costs;
//   rankd_local     DIAGNOSTIC: the product session's AllReduceSum on this
//                   rank's one-member group (the tensor-parallel group when
//                   tensor_parallel = 1), donated as in rankd: the whole
//                   layer (validation, executor hand-off, completion) with no
//                   Gloo call (a one-member group has no Gloo context), i.e.
//                   the layer's own cost per operation. Only rank 0 runs it
//                   (the other ranks wait, blocked, in the next collective), so
//                   it is measured without the other ranks competing for the
//                   CPUs. It runs at least kLocalOpsPerBlock operations per
//                   block whatever the schedule says: each costs microseconds,
//                   and the 8 to 50 of a large size's schedule would make its
//                   p50 the cost of a layer whose memory the size's
//                   collectives just evicted from the caches, not the layer's.
//
// --schedule is "bytes:warmup:iters,..." (the launcher passes the same one
// to the torch peer). Every rank must get the same flags. Per rank, --out
// receives
//   # header
//   C <mode> <bytes> <iters> <cpu_us> <vcsw> <ivcsw> <minflt>  (timed ops,
//                                                 this process, getrusage)
//   T <mode> <bytes> <start_ns> <end_ns> <block>        (one per timed op)
// with steady_clock (CLOCK_MONOTONIC) times, comparable across processes on
// one machine; --out is appended to (the launcher runs phases). On stdout:
// "JOINED rank=R world=W", "SESSION_READY", and one "SIZE ..." line per mode
// and size; exit 0. Any error: "ERROR ..." and a non-zero exit.
//
// Values are checked exactly, never inside a timed span: rank r contributes
// x[i] = (r + 1) * (1 + i % 5), so every element of the sum is
// W(W+1)/2 * (1 + i % 5), exact in f32. In every mode and turn the first
// warmup operation is checked, and after the timed operations one more,
// untimed operation runs on freshly filled input and is checked. In place
// (rankd, direct, like torch) the values compound in between (x W per
// operation, to inf after ~60 operations, which costs nothing extra on x86
// SSE); rankd_copy's input stays as filled.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "bench/bench_rank.h"
#include "client/client.h"
#include "dataplane/control_plane.h"
#include "dataplane/descriptor_proto.h"
#include "dataplane/gloo/gloo_interop.h"
#include "dataplane/gloo/gloo_session.h"
#include "dataplane/host_tensor.h"
#include "gloo/allreduce.h"
#include "gloo/common/error.h"
#include "gloo/rendezvous/context.h"
#include "gloo/transport/tcp/device.h"

ABSL_FLAG(std::string, schedule, "1024:5:100",
          "bytes:warmup:iters,... (bytes a multiple of 4)");
ABSL_FLAG(std::string, modes, "rankd,direct,rankd_copy,rankd_verify",
          "modes to run for each size, in this order: rankd, direct, "
          "rankd_copy, rankd_verify, rankd_local");
ABSL_FLAG(int, op_timeout_ms, 60000, "Gloo per-operation timeout (all modes)");
ABSL_FLAG(int, blocks, 4,
          "timed operations of each size are split into this many blocks; the "
          "modes take turns block by block");
ABSL_FLAG(int, block_offset, 0,
          "added to the block numbers written to --out (the launcher runs "
          "several phases into one file)");
ABSL_FLAG(std::string, out, "", "file for per-operation timestamps (required)");

namespace {

using rankd::dataplane::CollectiveScope;
using rankd::dataplane::HostTensor;
using rankd::dataplane::TensorDtype;
using rankd::dataplane::ValueDescriptor;
using rankd::dataplane::gloo::GlooSession;
using rankd::dataplane::gloo::GlooSessionOptions;

struct Step {
  size_t bytes = 0;
  int warmup = 0;
  int iters = 0;
};

// CPU time (user + system, every thread) and context switches so far.
struct Usage {
  int64_t cpu_us = 0, vcsw = 0, ivcsw = 0, minflt = 0;
};
Usage SelfUsage() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto us = [](const timeval& tv) {
    return static_cast<int64_t>(tv.tv_sec) * 1000000 + tv.tv_usec;
  };
  return {us(ru.ru_utime) + us(ru.ru_stime), ru.ru_nvcsw, ru.ru_nivcsw,
          ru.ru_minflt};
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Print(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

absl::StatusOr<std::vector<Step>> ParseSchedule(const std::string& text) {
  std::vector<Step> steps;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    std::vector<absl::string_view> f = absl::StrSplit(item, ':');
    Step s;
    uint64_t bytes = 0;
    if (f.size() != 3 || !absl::SimpleAtoi(f[0], &bytes) ||
        !absl::SimpleAtoi(f[1], &s.warmup) ||
        !absl::SimpleAtoi(f[2], &s.iters) || bytes == 0 ||
        bytes % sizeof(float) != 0 || s.warmup < 1 || s.iters < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bad --schedule item '", std::string(item),
          "' (want bytes:warmup:iters, bytes a positive multiple of 4, "
          "warmup and iters >= 1)"));
    }
    s.bytes = bytes;
    steps.push_back(s);
  }
  if (steps.empty()) return absl::InvalidArgumentError("empty --schedule");
  return steps;
}

float Contribution(uint32_t rank, size_t i) {
  return static_cast<float>((rank + 1) * (1 + i % 5));
}

void Fill(float* x, size_t n, uint32_t rank) {
  for (size_t i = 0; i < n; ++i) x[i] = Contribution(rank, i);
}

// OK when every element is the exact sum over `world` ranks (over this rank
// alone when `local_rank` is set).
absl::Status Check(const float* x, size_t n, uint32_t world,
                   const std::string& what,
                   std::optional<uint32_t> local_rank = std::nullopt) {
  const float scale = local_rank ? static_cast<float>(*local_rank + 1)
                                 : static_cast<float>(world * (world + 1) / 2);
  for (size_t i = 0; i < n; ++i) {
    const float want = scale * static_cast<float>(1 + i % 5);
    if (x[i] != want) {
      return absl::InternalError(absl::StrCat(what, ": element ", i, " is ",
                                              x[i], ", expected ", want));
    }
  }
  return absl::OkStatus();
}

// A Gloo context connected directly (no rankd layer), for the direct mode.
struct Direct {
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::rendezvous::Context> context;
  rankd::dataplane::gloo::SumFunction sum;
  uint32_t next_tag = 0;
  std::chrono::milliseconds timeout{60000};
  // Reduced in place. A HostTensor like rankd's input, so that both modes
  // sum and copy through the same kind of pages (rankd's blocks of 2 MiB
  // or more are on transparent huge pages; a std::vector's are not).
  std::optional<HostTensor> buffer;
};

absl::StatusOr<std::unique_ptr<Direct>> ConnectDirect(
    rankd::dataplane::ControlPlane* control_plane, uint32_t rank,
    uint32_t world, std::chrono::milliseconds timeout) {
  auto direct = std::make_unique<Direct>();
  auto sum = rankd::dataplane::gloo::SumFunctionFor(TensorDtype::kF32);
  if (!sum.ok()) return sum.status();
  direct->sum = *std::move(sum);
  direct->timeout = timeout;
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    direct->device = gloo::transport::tcp::CreateDevice(attr);
    direct->context = std::make_shared<gloo::rendezvous::Context>(
        static_cast<int>(rank), static_cast<int>(world));
    direct->context->setTimeout(std::chrono::milliseconds(60000));
    std::unique_ptr<gloo::rendezvous::Store> store =
        rankd::dataplane::gloo::NewBrokerStore(control_plane, "bench",
                                               absl::Seconds(60));
    direct->context->connectFullMesh(*store, direct->device);
    direct->context->setTimeout(timeout);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("connecting the direct Gloo context: ", e.what()));
  }
  return direct;
}

// One gloo::allreduce, as native_ops.cc's NativeAllReduce issues it with
// default options: the same algorithm for the same size.
void DirectAllReduce(Direct& d, float* data, size_t elements) {
  gloo::AllreduceOptions options(d.context);
  options.setOutput(data, elements);
  options.setReduceFunction(d.sum);
  options.setTag(d.next_tag++);
  options.setTimeout(d.timeout);
  options.setAlgorithm(
      elements * sizeof(float) <=
              rankd::dataplane::gloo::kDefaultAllReduceBcubeMaxBytes
          ? gloo::AllreduceOptions::Algorithm::BCUBE
          : gloo::AllreduceOptions::Algorithm::RING);
  options.setMaxSegmentSize(
      rankd::dataplane::gloo::kDefaultAllReduceRingSegmentBytes);
  gloo::allreduce(options);
}

struct Timed {
  std::vector<int64_t> start, end;
  Usage usage;
  int block = 0;
};

// One turn of a mode: `warmup` untimed operations, then `iters` timed ones
// recorded as block `block`.
struct Turn {
  int warmup = 0;
  int iters = 0;
  int block = 0;
};

// rankd_local's operations per block, at least (see the header comment).
constexpr int kLocalOpsPerBlock = 64;

struct Runner {
  uint32_t rank = 0;
  uint32_t world = 0;
  FILE* out = nullptr;

  void Record(const std::string& mode, const Step& step, const Timed& t) {
    const int iters = static_cast<int>(t.start.size());
    std::fprintf(out, "C %s %zu %d %lld %lld %lld %lld\n", mode.c_str(),
                 step.bytes, iters, static_cast<long long>(t.usage.cpu_us),
                 static_cast<long long>(t.usage.vcsw),
                 static_cast<long long>(t.usage.ivcsw),
                 static_cast<long long>(t.usage.minflt));
    for (int i = 0; i < iters; ++i) {
      std::fprintf(out, "T %s %zu %lld %lld %d\n", mode.c_str(), step.bytes,
                   static_cast<long long>(t.start[i]),
                   static_cast<long long>(t.end[i]), t.block);
    }
    std::vector<int64_t> lat(iters);
    for (int i = 0; i < iters; ++i) lat[i] = t.end[i] - t.start[i];
    std::sort(lat.begin(), lat.end());
    const double total_s = (t.end.back() - t.start.front()) / 1e9;
    Print(absl::StrCat("SIZE rank=", rank, " mode=", mode, " bytes=",
                       step.bytes, " block=", t.block, " iters=", iters,
                       " p50_us=", lat[lat.size() / 2] / 1000.0,
                       " avg_us=", total_s * 1e6 / iters));
  }

  // GlooSession::AllReduceSum on `scope`, waited for, `turn` times.
  // `donate`: the input is donated and each output is the next input (in
  // place); otherwise the same input every time (out of place). `local`
  // when the scope is this rank's one-member group.
  absl::Status RunSession(GlooSession& session, const std::string& mode,
                          const Step& step, const Turn& turn,
                          const CollectiveScope& scope, bool donate,
                          bool local = false) {
    const size_t n = step.bytes / sizeof(float);
    auto descriptor = ValueDescriptor::Create({n}, TensorDtype::kF32);
    if (!descriptor.ok()) return descriptor.status();
    HostTensor input = HostTensor::Zeros(*descriptor);
    Fill(reinterpret_cast<float*>(input.data()), n, rank);
    const std::optional<uint32_t> only =
        local ? std::optional<uint32_t>(rank) : std::nullopt;
    // One operation, waited for; its result is `input` when donated.
    absl::StatusOr<HostTensor> last = absl::UnknownError("no operation yet");
    auto run_one = [&]() -> absl::Status {
      auto sum = session.AllReduceSum(
          scope, donate ? HostTensor::Donate(std::move(input)) : input);
      if (!sum.ok()) return sum.status();
      if (absl::Status s = sum->completion->Wait(); !s.ok()) return s;
      if (donate) {
        input = std::move(sum->output);
      } else {
        last = std::move(sum->output);
      }
      // Anything else (the completion) is released here, as a caller would.
      return absl::OkStatus();
    };
    auto check = [&](const std::string& what) -> absl::Status {
      const HostTensor& result = donate ? input : *last;
      return Check(reinterpret_cast<const float*>(result.data()), n, world,
                   absl::StrCat(mode, " ", step.bytes, " B ", what), only);
    };
    // Warmup, the first operation checked (untimed).
    for (int i = 0; i < turn.warmup; ++i) {
      if (absl::Status s = run_one(); !s.ok()) return s;
      if (i == 0) {
        if (absl::Status s = check("op 0"); !s.ok()) return s;
      }
    }
    Timed t;
    t.block = turn.block;
    t.start.resize(turn.iters);
    t.end.resize(turn.iters);
    const Usage before = SelfUsage();
    for (int i = 0; i < turn.iters; ++i) {
      t.start[i] = NowNs();
      if (absl::Status s = run_one(); !s.ok()) return s;
      t.end[i] = NowNs();
    }
    const Usage after = SelfUsage();
    t.usage = {after.cpu_us - before.cpu_us, after.vcsw - before.vcsw,
               after.ivcsw - before.ivcsw, after.minflt - before.minflt};
    // One more, untimed and checked (donated sums compound, x world per
    // operation, to inf after about 60, which costs nothing extra: refill).
    if (donate) Fill(reinterpret_cast<float*>(input.data()), n, rank);
    if (absl::Status s = run_one(); !s.ok()) return s;
    if (absl::Status s = check("final op"); !s.ok()) return s;
    Record(mode, step, t);
    return absl::OkStatus();
  }

  absl::Status RunDirect(Direct& d, const Step& step, const Turn& turn) {
    const size_t n = step.bytes / sizeof(float);
    // Kept across turns, so later blocks do not pay first-touch page faults.
    if (!d.buffer.has_value() || d.buffer->byte_size() != step.bytes) {
      auto descriptor = ValueDescriptor::Create({n}, TensorDtype::kF32);
      if (!descriptor.ok()) return descriptor.status();
      d.buffer.reset();  // back to the pool first
      d.buffer = HostTensor::Zeros(*descriptor);
    }
    float* const buffer = reinterpret_cast<float*>(d.buffer->data());
    Fill(buffer, n, rank);
    Timed t;
    t.block = turn.block;
    t.start.resize(turn.iters);
    t.end.resize(turn.iters);
    try {
      // Warmup, the first operation checked (untimed).
      for (int i = 0; i < turn.warmup; ++i) {
        DirectAllReduce(d, buffer, n);
        if (i == 0) {
          absl::Status s = Check(
              buffer, n, world, absl::StrCat("direct ", step.bytes, " B op 0"));
          if (!s.ok()) return s;
        }
      }
      const Usage before = SelfUsage();
      for (int i = 0; i < turn.iters; ++i) {
        t.start[i] = NowNs();
        DirectAllReduce(d, buffer, n);
        t.end[i] = NowNs();
      }
      const Usage after = SelfUsage();
      t.usage = {after.cpu_us - before.cpu_us, after.vcsw - before.vcsw,
                 after.ivcsw - before.ivcsw, after.minflt - before.minflt};
      // One more, untimed and checked, refilled (in place, it compounds).
      Fill(buffer, n, rank);
      DirectAllReduce(d, buffer, n);
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat("direct gloo::allreduce of ",
                                                 step.bytes, " B: ", e.what()));
    }
    absl::Status s = Check(buffer, n, world,
                           absl::StrCat("direct ", step.bytes, " B final op"));
    if (!s.ok()) return s;
    Record("direct", step, t);
    return absl::OkStatus();
  }
};

int Fail(const std::string& what, const absl::Status& status) {
  Print(absl::StrCat("ERROR ", what, ": ", status.ToString()));
  return 3;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  auto schedule = ParseSchedule(absl::GetFlag(FLAGS_schedule));
  if (!schedule.ok()) return Fail("usage", schedule.status());
  std::vector<std::string> modes =
      absl::StrSplit(absl::GetFlag(FLAGS_modes), ',', absl::SkipEmpty());
  bool want_verify = false, want_direct = false;
  for (const std::string& m : modes) {
    if (m == "rankd_verify") {
      want_verify = true;
    } else if (m == "direct") {
      want_direct = true;
    } else if (m != "rankd" && m != "rankd_copy" && m != "rankd_local") {
      return Fail(
          "usage",
          absl::InvalidArgumentError(
              "--modes: rankd, direct, rankd_copy, rankd_verify, rankd_local"));
    }
  }
  const std::string out_path = absl::GetFlag(FLAGS_out);
  if (out_path.empty()) {
    return Fail("usage", absl::InvalidArgumentError("--out is required"));
  }
  FILE* out = std::fopen(out_path.c_str(), "a");  // phases append
  if (out == nullptr) {
    return Fail("usage",
                absl::InvalidArgumentError("cannot write " + out_path));
  }
  const absl::Duration op_timeout =
      absl::Milliseconds(absl::GetFlag(FLAGS_op_timeout_ms));

  auto joined = rankd::bench::JoinFromFlags();
  if (!joined.ok()) return Fail("join", joined.status());
  std::unique_ptr<rankd::Client>& client = joined->client;
  Runner runner;
  runner.rank = joined->descriptor.rank();
  runner.world = joined->descriptor.world_size();
  runner.out = out;
  Print(absl::StrCat("JOINED rank=", runner.rank, " world=", runner.world));

  auto control_plane = rankd::dataplane::MakeClientControlPlane(client.get());
  // The product path: default options except the per-operation timeout.
  GlooSessionOptions gloo;
  gloo.op_timeout = op_timeout;
  gloo.connect_timeout = absl::Seconds(60);
  auto converted = rankd::dataplane::DescriptorFromProto(joined->descriptor);
  if (!converted.ok()) return Fail("descriptor", converted.status());
  auto session = GlooSession::Open(*converted, control_plane.get(), gloo);
  if (!session.ok()) return Fail("session", session.status());
  std::unique_ptr<GlooSession> verifying;
  if (want_verify) {
    GlooSessionOptions g = gloo;
    g.verify_agreement = true;
    g.instance = 1;
    auto s = GlooSession::Open(*converted, control_plane.get(), g);
    if (!s.ok()) return Fail("session (verify_agreement)", s.status());
    verifying = *std::move(s);
  }
  std::unique_ptr<Direct> direct;
  if (want_direct) {
    auto d = ConnectDirect(
        control_plane.get(), runner.rank, runner.world,
        std::chrono::milliseconds(absl::ToInt64Milliseconds(op_timeout)));
    if (!d.ok()) return Fail("direct", d.status());
    direct = *std::move(d);
  }
  // This rank's one-member group, for rankd_local.
  std::optional<CollectiveScope> local_scope;
  for (const auto& g : (*session)->descriptor().groups()) {
    if (g.size() == 1 && !local_scope) {
      local_scope = CollectiveScope::Group(g.id());
    }
  }
  if (!local_scope &&
      absl::StrContains(absl::GetFlag(FLAGS_modes), "rankd_local")) {
    return Fail("usage", absl::FailedPreconditionError(
                             "rankd_local needs a one-member group in the "
                             "session descriptor (tensor_parallel = 1)"));
  }
  std::fprintf(out, "# rankd all_reduce_sum f32 rank=%u world=%u modes=%s\n",
               runner.rank, runner.world, absl::GetFlag(FLAGS_modes).c_str());
  Print("SESSION_READY");

  const int blocks = std::max(1, absl::GetFlag(FLAGS_blocks));
  for (const Step& step : *schedule) {
    const int turns = std::min(blocks, step.iters);
    for (int b = 0; b < turns; ++b) {
      // Blocks differ in size by at most one operation.
      const Turn turn{b == 0 ? step.warmup : 0,
                      step.iters / turns + (b < step.iters % turns ? 1 : 0),
                      absl::GetFlag(FLAGS_block_offset) + b};
      for (const std::string& mode : modes) {
        absl::Status s;
        if (mode == "rankd" || mode == "rankd_copy") {
          s = runner.RunSession(**session, mode, step, turn,
                                CollectiveScope::World(), mode == "rankd");
        } else if (mode == "rankd_verify") {
          s = runner.RunSession(*verifying, mode, step, turn,
                                CollectiveScope::World(), true);
        } else if (mode == "rankd_local") {
          // Rank 0 only, so that it has the machine to itself: the others
          // go on to the next collective and wait there (blocked, no CPU).
          if (runner.rank == 0) {
            Turn local_turn = turn;
            local_turn.iters = std::max(turn.iters, kLocalOpsPerBlock);
            s = runner.RunSession(**session, mode, step, local_turn,
                                  *local_scope,
                                  /*donate=*/true, /*local=*/true);
          }
        } else {
          s = runner.RunDirect(*direct, step, turn);
        }
        if (!s.ok()) {
          return Fail(absl::StrCat(mode, " ", step.bytes, " B block ", b), s);
        }
      }
    }
  }
  if (std::fclose(out) != 0) {
    return Fail("write", absl::DataLossError("writing " + out_path));
  }
  // Every rank is done with the data plane before anyone closes it.
  auto done = (*session)->AllGatherWords(std::vector<uint32_t>{runner.rank});
  if (!done.ok()) return Fail("final barrier", done.status());
  direct.reset();
  verifying.reset();
  session->reset();
  if (absl::Status s = client->Leave(); !s.ok()) return Fail("leave", s);
  Print("DONE");
  return 0;
}
