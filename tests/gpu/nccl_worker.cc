// nccl_worker: a rank process for tests/gpu/nccl_cluster_test. It joins a
// rankd job through its node's daemon (rankd::Client), opens an NcclSession
// on its GPU over the client's control plane (MakeClientControlPlane), runs
// one --scenario and checks every result itself. Output, one line each:
//
//   JOINED rank=R world=W
//   INIT_OK device=D communicators=C         (the session is ready)
//   INIT_STARTED                             (init_abort: before Initialize)
//   POSTED                                   (abort scenarios: work queued)
//   SUMMED epoch=1                           (reform, domain_reform: summed
//                                            before the loss)
//   POISONED unix_us=T <status>              (reform, domain_reform: a
//                                            survivor saw the loss)
//   EPOCH2_ALL_REDUCE unix_us=T              (reform, domain_reform: first
//                                            sum at epoch 2)
//   TENSOR_SUM n=K                           (domain_reform, replica 0: its
//                                            K-th sum)
//   CASE <name> OK
//   CASE <name> FAIL <message>
//   SKIP <reason>                            exit 5 (no CUDA device)
//   ERROR <message>                          exit 3
//   DONE                                     exit 0, or 4 if a case failed
//
// Scenarios:
//   collectives    every DistributedSession operation, on the world and on
//                  the topology's groups, checked against exact values
//   backend        every NcclBackend operation on its own executor stream
//   quarantine     a bounded wait that misses its deadline in
//                  QuarantineUntilComplete mode; the work still finishes
//   native_cancel  a bounded wait that misses its deadline in NativeCancel
//                  mode: communicators aborted, no rank hangs
//   agreement      with verify_agreement: ranks submit collectives of
//                  different shapes and a transfer of different dtypes;
//                  every rank is refused before the payload, naming what
//                  it submitted, and the session stays usable
//   abort_peer     work that cannot finish until a peer (the control-only
//                  rank, killed by the test) is lost: the job failure aborts
//                  it (--nccl_world = job world - 1)
//   init_abort     communicator init that waits for a rank that never
//                  comes; its loss aborts the init (--nccl_world = job world)
//   one_gpu_each   run where the test gave each rank process one GPU of
//                  its own (CUDA_VISIBLE_DEVICES per process): the session
//                  opens on the default device (NcclSessionOptions::device
//                  -1), which is the process's one GPU, device 0, whatever
//                  the local rank; an all_reduce across the processes
//   reform         in-place recovery (the daemon runs with --recovery=on):
//                  every rank sums at epoch 1; the last rank waits to be
//                  killed (SIGKILL, by the test); the survivors see their
//                  session poisoned naming it, re-form it with
//                  NcclSession::Reform (epoch 2, same device, new unique
//                  ids) and sum again with a --replacement process that
//                  took the lost slot and opened its session at epoch 2; a
//                  device tensor a survivor allocated before the loss is
//                  bit-identical after it
//   domain_reform  recovery by data-parallel domain (the daemon runs with
//                  --recovery=domain; dp 2 x tp 2, 4 ranks): every session
//                  holds only its replica's tensor group (the world and the
//                  data-parallel group refused with the rule's words, not
//                  advertised). Replica 0 sums on its tensor group
//                  throughout, never poisoned, its job health OK, until
//                  rank 2 says replica 1 re-formed. Replica 1 sums at epoch
//                  1; the test kills rank 3 (SIGKILL); rank 2 sees its
//                  session poisoned naming it, re-forms it alone
//                  (NcclSession::Reform: epoch 2, still confined to domain
//                  1) and sums again with a --replacement process in the
//                  lost slot, opened at epoch 2. Each tensor group's
//                  members wait for each other through the key-value store
//                  before closing
//   control_only   joins and stays, without a GPU (killed by the test)
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "dataplane/control_plane.h"
#include "dataplane/descriptor_proto.h"
#include "dataplane/nccl/cuda_device.h"
#include "dataplane/nccl/cuda_stream.h"
#include "dataplane/nccl/nccl_backend.h"
#include "dataplane/nccl/nccl_session.h"
#include "dataplane/nccl/nccl_unique_id.h"
#include "dataplane/nccl/testing/nccl_session_peer.h"
#include "dataplane/nccl/testing/stream_stall.h"

ABSL_FLAG(std::string, target, "", "daemon target");
ABSL_FLAG(std::string, job_id, "gpu", "job id");
ABSL_FLAG(uint32_t, local_rank, 0, "local rank");
ABSL_FLAG(uint32_t, world_size, 0, "the job's world size");
ABSL_FLAG(std::string, scenario, "collectives", "what to run (see above)");
ABSL_FLAG(int, device, -1,
          "CUDA device (-1: the local rank; one_gpu_each: the session's "
          "default device)");
ABSL_FLAG(uint32_t, nccl_world, 0,
          "NCCL world size when it differs from the job's (abort scenarios): "
          "the session is one data-parallel group of nccl_world ranks");
ABSL_FLAG(std::string, tag, "gpu", "session tag");
ABSL_FLAG(int, init_timeout_ms, 60000, "communicator init deadline");
ABSL_FLAG(bool, replacement, false,
          "reform, domain_reform: this process replaces the lost rank "
          "(joins its slot while the job recovers)");

namespace {

using rankd::dataplane::CancellationMode;
using rankd::dataplane::CollectiveScope;
using rankd::dataplane::DistributedCapabilities;
using rankd::dataplane::DistributedSessionDescriptor;
using rankd::dataplane::PeerCounts;
using rankd::dataplane::TensorDtype;
using rankd::dataplane::ValueDescriptor;
using rankd::dataplane::nccl::CudaStream;
using rankd::dataplane::nccl::DeviceTensor;
using rankd::dataplane::nccl::NcclBackend;
using rankd::dataplane::nccl::NcclExecutor;
using rankd::dataplane::nccl::NcclSession;
using rankd::dataplane::nccl::NcclSessionOptions;
using rankd::dataplane::nccl::testing::Stall;
using rankd::dataplane::nccl::testing::StallStream;

void Print(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

#define RETURN_IF_ERROR(expr)       \
  do {                              \
    const absl::Status _s = (expr); \
    if (!_s.ok()) return _s;        \
  } while (0)

#define ASSIGN_OR_RETURN(lhs, expr)             \
  auto lhs##_or = (expr);                       \
  if (!lhs##_or.ok()) return lhs##_or.status(); \
  auto& lhs = *lhs##_or

absl::Status Expect(bool condition, const std::string& what) {
  return condition ? absl::OkStatus() : absl::InternalError(what);
}

template <typename T>
absl::Status ExpectEqual(const std::vector<T>& got, const std::vector<T>& want,
                         const std::string& what) {
  if (got == want) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": got [",
                                          absl::StrJoin(got, ","), "] want [",
                                          absl::StrJoin(want, ","), "]"));
}

absl::Status ExpectCode(const absl::Status& status, absl::StatusCode code,
                        const std::string& what) {
  if (status.code() == code) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": expected ",
                                          absl::StatusCodeToString(code),
                                          ", got ", status.ToString()));
}

class Checks {
 public:
  void Run(const std::string& name, const std::function<absl::Status()>& fn) {
    absl::Status s = fn();
    if (s.ok()) {
      Print(absl::StrCat("CASE ", name, " OK"));
    } else {
      ++failures_;
      Print(absl::StrCat("CASE ", name, " FAIL ", s.ToString()));
    }
  }
  int failures() const { return failures_; }

 private:
  int failures_ = 0;
};

ValueDescriptor Desc(std::vector<size_t> shape,
                     TensorDtype dtype = TensorDtype::kF32) {
  return *ValueDescriptor::Create(std::move(shape), dtype);
}

template <typename T>
absl::StatusOr<DeviceTensor> Upload(const ValueDescriptor& desc,
                                    const std::vector<T>& values,
                                    const std::shared_ptr<CudaStream>& stream) {
  return DeviceTensor::FromHostVector(desc, values, stream);
}

uint16_t Bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return static_cast<uint16_t>(bits >> 16);
}

struct World {
  NcclSession* session;
  uint32_t rank;
  uint32_t size;
};

// One all_reduce on the world with every rank: NCCL connects peers lazily
// (and a non-blocking communicator answers ncclInProgress until the peers
// joined the first operation), so scenarios that make one rank miss an
// operation run this first.
absl::Status WarmUp(NcclSession& s) {
  auto x = DeviceTensor::FromHostVector(
      *ValueDescriptor::Create({4}, TensorDtype::kF32),
      std::vector<float>(4, 1), s.stream());
  if (!x.ok()) return x.status();
  auto sum = s.AllReduceSum(CollectiveScope::World(), *x);
  if (!sum.ok()) return sum.status();
  return sum->completion->Wait();
}

// --- one GPU per rank process ------------------------------------------------

void OneGpuEach(const World& w, Checks& checks) {
  NcclSession& s = *w.session;
  const uint32_t r = w.rank, n = w.size;
  checks.Run("default_device_is_the_visible_one", [&]() -> absl::Status {
    return Expect(
        s.device() == 0,
        absl::StrCat("the session chose device ", s.device(),
                     " of the 1 this process sees (local rank ", r, ")"));
  });
  checks.Run("all_reduce_across_processes", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(
        x, Upload(Desc({4}), std::vector<float>(4, r + 1.0f), s.stream()));
    ASSIGN_OR_RETURN(sum, s.AllReduceSum(CollectiveScope::World(), x));
    RETURN_IF_ERROR(sum.completion->Wait());
    ASSIGN_OR_RETURN(got, sum.output.ToHostVector<float>());
    return ExpectEqual(got, std::vector<float>(4, n * (n + 1) / 2.0f), "sum");
  });
}

// --- collectives -----------------------------------------------------------

void Collectives(const World& w, Checks& checks) {
  NcclSession& s = *w.session;
  const uint32_t r = w.rank, n = w.size;
  auto stream = s.stream();

  checks.Run("capabilities", [&]() -> absl::Status {
    DistributedCapabilities caps = s.capabilities();
    RETURN_IF_ERROR(Expect(caps.world_collectives && caps.point_to_point &&
                               caps.variable_all_to_all &&
                               caps.exact_completion,
                           "a capability is off"));
    for (const auto& g : s.descriptor().groups()) {
      RETURN_IF_ERROR(Expect(caps.collective_groups.count(g.id()) == 1,
                             absl::StrCat("group ", g.id(), " not served")));
    }
    return absl::OkStatus();
  });

  checks.Run("all_gather_words", [&]() -> absl::Status {
    std::vector<uint32_t> local = {r, 7};
    ASSIGN_OR_RETURN(words, s.AllGatherWords(local));
    std::vector<uint32_t> want;
    for (uint32_t k = 0; k < n; ++k) {
      want.push_back(k);
      want.push_back(7);
    }
    return ExpectEqual(words, want, "words");
  });

  checks.Run("all_reduce_sum_f32", [&]() -> absl::Status {
    std::vector<float> x(64);
    std::iota(x.begin(), x.end(), static_cast<float>(r));
    ASSIGN_OR_RETURN(in, Upload(Desc({8, 8}), x, stream));
    ASSIGN_OR_RETURN(sum, s.AllReduceSum(CollectiveScope::World(), in));
    RETURN_IF_ERROR(sum.completion->Wait());
    std::vector<float> want(64);
    for (int i = 0; i < 64; ++i) want[i] = n * i + n * (n - 1) / 2.0f;
    ASSIGN_OR_RETURN(got, sum.output.ToHostVector<float>());
    return ExpectEqual(got, want, "sum");
  });

  checks.Run("all_reduce_sum_bf16", [&]() -> absl::Status {
    std::vector<uint16_t> x(16, Bf16(static_cast<float>(r + 1)));
    ASSIGN_OR_RETURN(in, Upload(Desc({16}, TensorDtype::kBf16), x, stream));
    ASSIGN_OR_RETURN(sum, s.AllReduceSum(CollectiveScope::World(), in));
    RETURN_IF_ERROR(sum.completion->Wait());
    ASSIGN_OR_RETURN(got, sum.output.ToHostVector<uint16_t>());
    return ExpectEqual(got, std::vector<uint16_t>(16, Bf16(n * (n + 1) / 2.0f)),
                       "bf16 sum");
  });

  checks.Run("all_reduce_sum_complex64", [&]() -> absl::Status {
    std::vector<float> x = {static_cast<float>(r), -2.0f * r, 1.0f, 0.5f};
    ASSIGN_OR_RETURN(in, Upload(Desc({2}, TensorDtype::kComplex64), x, stream));
    ASSIGN_OR_RETURN(sum, s.AllReduceSum(CollectiveScope::World(), in));
    RETURN_IF_ERROR(sum.completion->Wait());
    const float tri = n * (n - 1) / 2.0f;
    ASSIGN_OR_RETURN(got, sum.output.ToHostVector<float>());
    return ExpectEqual(got,
                       std::vector<float>{tri, -2.0f * tri, 1.0f * n, 0.5f * n},
                       "complex sum");
  });

  checks.Run("all_reduce_sum_groups", [&]() -> absl::Status {
    for (const auto& g : s.descriptor().groups()) {
      std::vector<int64_t> x(4, r + 1);
      ASSIGN_OR_RETURN(in, Upload(Desc({4}, TensorDtype::kI64), x, stream));
      ASSIGN_OR_RETURN(sum, s.AllReduceSum(CollectiveScope::Group(g.id()), in));
      RETURN_IF_ERROR(sum.completion->Wait());
      int64_t want = 0;
      for (uint32_t m : g.members()) want += m + 1;
      ASSIGN_OR_RETURN(got, sum.output.ToHostVector<int64_t>());
      RETURN_IF_ERROR(ExpectEqual(got, std::vector<int64_t>(4, want),
                                  absl::StrCat("group ", g.id())));
    }
    return absl::OkStatus();
  });

  checks.Run("bool_is_not_summable", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(in, Upload(Desc({3}, TensorDtype::kBool),
                                std::vector<uint8_t>{1, 0, 1}, stream));
    RETURN_IF_ERROR(
        ExpectCode(s.AllReduceSum(CollectiveScope::World(), in).status(),
                   absl::StatusCode::kInvalidArgument, "bool sum"));
    return Expect(s.poison().ok(), "a validation error poisoned");
  });

  checks.Run("all_gather", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(
        me, Upload(Desc({}, TensorDtype::kI32),
                   std::vector<int32_t>{static_cast<int32_t>(r)}, stream));
    ASSIGN_OR_RETURN(g, s.AllGather(CollectiveScope::World(), me));
    RETURN_IF_ERROR(g.completion->Wait());
    std::vector<int32_t> ranks(n);
    std::iota(ranks.begin(), ranks.end(), 0);
    ASSIGN_OR_RETURN(got, g.output.ToHostVector<int32_t>());
    RETURN_IF_ERROR(ExpectEqual(got, ranks, "scalar gather"));
    std::vector<float> x(6);
    std::iota(x.begin(), x.end(), 100.0f * r);
    ASSIGN_OR_RETURN(rows, Upload(Desc({2, 3}), x, stream));
    ASSIGN_OR_RETURN(g2, s.AllGather(CollectiveScope::World(), rows));
    RETURN_IF_ERROR(g2.completion->Wait());
    RETURN_IF_ERROR(
        Expect(g2.output.descriptor().shape() == std::vector<size_t>{2 * n, 3},
               "gathered shape"));
    std::vector<float> want;
    for (uint32_t m = 0; m < n; ++m) {
      for (int i = 0; i < 6; ++i) want.push_back(100.0f * m + i);
    }
    ASSIGN_OR_RETURN(got2, g2.output.ToHostVector<float>());
    return ExpectEqual(got2, want, "row gather");
  });

  checks.Run("all_gather_groups", [&]() -> absl::Status {
    for (const auto& g : s.descriptor().groups()) {
      ASSIGN_OR_RETURN(me, Upload(Desc({1}, TensorDtype::kU32),
                                  std::vector<uint32_t>{r}, stream));
      ASSIGN_OR_RETURN(out, s.AllGather(CollectiveScope::Group(g.id()), me));
      RETURN_IF_ERROR(out.completion->Wait());
      ASSIGN_OR_RETURN(got, out.output.ToHostVector<uint32_t>());
      RETURN_IF_ERROR(
          ExpectEqual(got, g.members(), absl::StrCat("group ", g.id())));
    }
    return absl::OkStatus();
  });

  checks.Run("all_to_all_v", [&]() -> absl::Status {
    // Rank r sends (r + d) % 3 rows to d (zero is valid); a row from src to
    // dst is {1000 src + 10 dst + k, -(same)}.
    std::vector<size_t> send(n), recv(n);
    std::vector<int32_t> rows;
    for (uint32_t d = 0; d < n; ++d) {
      send[d] = (r + d) % 3;
      recv[d] = (d + r) % 3;
      for (size_t k = 0; k < send[d]; ++k) {
        const int32_t v = 1000 * r + 10 * d + static_cast<int32_t>(k);
        rows.push_back(v);
        rows.push_back(-v);
      }
    }
    const ValueDescriptor row = Desc({2}, TensorDtype::kI32);
    ASSIGN_OR_RETURN(desc, ValueDescriptor::Rows(rows.size() / 2, row));
    ASSIGN_OR_RETURN(in, Upload(desc, rows, stream));
    ASSIGN_OR_RETURN(out,
                     s.AllToAllV(CollectiveScope::World(), in, send, recv));
    RETURN_IF_ERROR(out.completion->Wait());
    std::vector<int32_t> want;
    for (uint32_t src = 0; src < n; ++src) {
      for (size_t k = 0; k < recv[src]; ++k) {
        const int32_t v = 1000 * src + 10 * r + static_cast<int32_t>(k);
        want.push_back(v);
        want.push_back(-v);
      }
    }
    ASSIGN_OR_RETURN(got, out.output.ToHostVector<int32_t>());
    RETURN_IF_ERROR(ExpectEqual(got, want, "all_to_all_v"));
    // Mismatched totals fail before any native work.
    std::vector<size_t> wrong = send;
    wrong[0] += 1;
    return ExpectCode(
        s.AllToAllV(CollectiveScope::World(), in, wrong, recv).status(),
        absl::StatusCode::kInvalidArgument, "wrong totals");
  });

  if (n >= 2) {
    checks.Run("send_receive_ring", [&]() -> absl::Status {
      const uint32_t next = (r + 1) % n, prev = (r + n - 1) % n;
      ASSIGN_OR_RETURN(token,
                       Upload(Desc({3}, TensorDtype::kI64),
                              std::vector<int64_t>{r, 2 * r, 3 * r}, stream));
      absl::StatusOr<NcclSession::ValueSubmission> sent, received;
      if (r % 2 == 0) {
        sent = s.Send(CollectiveScope::World(), next, token);
        received =
            s.Receive(CollectiveScope::World(), prev, token.descriptor());
      } else {
        received =
            s.Receive(CollectiveScope::World(), prev, token.descriptor());
        sent = s.Send(CollectiveScope::World(), next, token);
      }
      RETURN_IF_ERROR(sent.status());
      RETURN_IF_ERROR(received.status());
      RETURN_IF_ERROR(sent->completion->Wait());
      RETURN_IF_ERROR(received->completion->Wait());
      ASSIGN_OR_RETURN(got, received->output.ToHostVector<int64_t>());
      return ExpectEqual(got, std::vector<int64_t>{prev, 2 * prev, 3 * prev},
                         "ring");
    });
  }
  checks.Run("point_to_point_self_is_invalid", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(x, Upload(Desc({1}), std::vector<float>{1}, stream));
    return ExpectCode(s.Send(CollectiveScope::World(), r, x).status(),
                      absl::StatusCode::kInvalidArgument, "send to self");
  });

  checks.Run("bounded_wait_completes", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(x,
                     Upload(Desc({1024}), std::vector<float>(1024, 1), stream));
    ASSIGN_OR_RETURN(sum, s.AllReduceSum(CollectiveScope::World(), x));
    RETURN_IF_ERROR(ExpectCode(
        sum.completion
            ->WaitBounded(absl::ZeroDuration(), CancellationMode::kNativeCancel)
            .status(),
        absl::StatusCode::kInvalidArgument, "zero timeout"));
    ASSIGN_OR_RETURN(
        outcome, sum.completion->WaitBounded(absl::Seconds(60),
                                             CancellationMode::kNativeCancel));
    RETURN_IF_ERROR(Expect(outcome.completed(), "deadline"));
    ASSIGN_OR_RETURN(got, sum.output.ToHostVector<float>());
    return ExpectEqual(got, std::vector<float>(1024, static_cast<float>(n)),
                       "sum");
  });
}

// --- backend ---------------------------------------------------------------

void Backend(const World& w, Checks& checks) {
  NcclSession& s = *w.session;
  const uint32_t r = w.rank, n = w.size;
  NcclBackend backend(s);
  auto executor_or = NcclExecutor::Create(s.device());
  if (!executor_or.ok()) {
    checks.Run("executor", [&] { return executor_or.status(); });
    return;
  }
  NcclExecutor executor = *executor_or;
  auto stream = executor.stream();
  auto group_or = backend.Group(CollectiveScope::World());
  if (!group_or.ok()) {
    checks.Run("group", [&] { return group_or.status(); });
    return;
  }
  auto& group = *group_or;

  checks.Run("broadcast", [&]() -> absl::Status {
    for (uint32_t root : {0u, n - 1}) {
      std::vector<float> x(5);
      std::iota(x.begin(), x.end(), 10.0f * r);
      ASSIGN_OR_RETURN(in, Upload(Desc({5}), x, stream));
      ASSIGN_OR_RETURN(
          b, rankd::dataplane::Broadcast(backend, in, root, group, executor));
      RETURN_IF_ERROR(b.completion->Wait());
      std::vector<float> want(5);
      std::iota(want.begin(), want.end(), 10.0f * root);
      ASSIGN_OR_RETURN(got, b.output.ToHostVector<float>());
      RETURN_IF_ERROR(ExpectEqual(got, want, absl::StrCat("root ", root)));
    }
    return absl::OkStatus();
  });

  checks.Run("barrier", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(b, rankd::dataplane::Barrier(backend, group, executor));
    return b.completion->Wait();
  });

  checks.Run("agree_success", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(
        yes, rankd::dataplane::AgreeSuccess(backend, true, group, executor));
    RETURN_IF_ERROR(yes.completion->Wait());
    ASSIGN_OR_RETURN(all, yes.output->Resolve());
    RETURN_IF_ERROR(Expect(all, "all true resolved false"));
    ASSIGN_OR_RETURN(
        no, rankd::dataplane::AgreeSuccess(backend, r != 0, group, executor));
    RETURN_IF_ERROR(no.completion->Wait());
    ASSIGN_OR_RETURN(some, no.output->Resolve());
    return Expect(!some, "rank 0 said no, resolved true");
  });

  checks.Run("all_gather_even_axis1", [&]() -> absl::Status {
    std::vector<float> x(4);
    std::iota(x.begin(), x.end(), 100.0f * r);
    ASSIGN_OR_RETURN(in, Upload(Desc({2, 2}), x, stream));
    ASSIGN_OR_RETURN(
        g, rankd::dataplane::AllGatherEven(backend, in, 1, group, executor));
    RETURN_IF_ERROR(g.completion->Wait());
    std::vector<float> want;
    for (int row = 0; row < 2; ++row) {
      for (uint32_t m = 0; m < n; ++m) {
        for (int j = 0; j < 2; ++j) want.push_back(100.0f * m + row * 2 + j);
      }
    }
    ASSIGN_OR_RETURN(got, g.output.ToHostVector<float>());
    return ExpectEqual(got, want, "even gather");
  });

  checks.Run("all_gather_uneven_axis0", [&]() -> absl::Status {
    std::vector<size_t> counts(n);
    for (uint32_t m = 0; m < n; ++m) counts[m] = m + 1;
    std::vector<int32_t> x(3 * (r + 1));
    std::iota(x.begin(), x.end(), static_cast<int32_t>(100 * r));
    ASSIGN_OR_RETURN(in,
                     Upload(Desc({r + 1, 3}, TensorDtype::kI32), x, stream));
    ASSIGN_OR_RETURN(g, rankd::dataplane::AllGatherUneven(backend, in, counts,
                                                          0, group, executor));
    RETURN_IF_ERROR(g.completion->Wait());
    std::vector<int32_t> want;
    for (uint32_t m = 0; m < n; ++m) {
      for (size_t i = 0; i < 3 * (m + 1); ++i) {
        want.push_back(static_cast<int32_t>(100 * m + i));
      }
    }
    ASSIGN_OR_RETURN(got, g.output.ToHostVector<int32_t>());
    return ExpectEqual(got, want, "uneven gather");
  });

  checks.Run("variable_all_to_all_axis1", [&]() -> absl::Status {
    // Rank r: input [2, S] with S = sum(d + 1); columns for d follow those
    // for d - 1. Receives r + 1 columns from every source.
    PeerCounts counts;
    size_t total = 0;
    for (uint32_t d = 0; d < n; ++d) {
      counts.send.push_back(d + 1);
      counts.receive.push_back(r + 1);
      total += d + 1;
    }
    std::vector<int32_t> x;
    for (int row = 0; row < 2; ++row) {
      for (size_t col = 0; col < total; ++col) {
        x.push_back(static_cast<int32_t>(1000 * r + 100 * row + col));
      }
    }
    ASSIGN_OR_RETURN(in,
                     Upload(Desc({2, total}, TensorDtype::kI32), x, stream));
    ASSIGN_OR_RETURN(out, rankd::dataplane::VariableAllToAll(
                              backend, in, counts, 1, group, executor));
    RETURN_IF_ERROR(out.completion->Wait());
    const size_t offset = r * (r + 1) / 2;  // columns before mine at a source
    std::vector<int32_t> want;
    for (int row = 0; row < 2; ++row) {
      for (uint32_t src = 0; src < n; ++src) {
        for (size_t k = 0; k <= r; ++k) {
          want.push_back(
              static_cast<int32_t>(1000 * src + 100 * row + offset + k));
        }
      }
    }
    ASSIGN_OR_RETURN(got, out.output.ToHostVector<int32_t>());
    return ExpectEqual(got, want, "variable all_to_all");
  });

  if (n >= 2) {
    checks.Run("send_receive_bundle", [&]() -> absl::Status {
      auto route_or = backend.Route(CollectiveScope::World(), 0, 1);
      if (r > 1) {
        return ExpectCode(route_or.status(), absl::StatusCode::kInvalidArgument,
                          "bystander route");
      }
      RETURN_IF_ERROR(route_or.status());
      auto& route = *route_or;
      std::vector<DeviceTensor> bundle;
      ASSIGN_OR_RETURN(
          a, Upload(Desc({2}), std::vector<float>{1.5f + r, 2.5f}, stream));
      ASSIGN_OR_RETURN(b, Upload(Desc({1}, TensorDtype::kU64),
                                 std::vector<uint64_t>{99}, stream));
      bundle.push_back(a);
      bundle.push_back(b);
      ASSIGN_OR_RETURN(moved, rankd::dataplane::SendReceive(backend, bundle,
                                                            route, executor));
      RETURN_IF_ERROR(moved.completion->Wait());
      RETURN_IF_ERROR(Expect(moved.output.size() == 2, "bundle size"));
      ASSIGN_OR_RETURN(got_a, moved.output[0].ToHostVector<float>());
      ASSIGN_OR_RETURN(got_b, moved.output[1].ToHostVector<uint64_t>());
      RETURN_IF_ERROR(ExpectEqual(got_a, std::vector<float>{1.5f, 2.5f}, "a"));
      return ExpectEqual(got_b, std::vector<uint64_t>{99}, "b");
    });
  }

  checks.Run("groups", [&]() -> absl::Status {
    for (const auto& g : s.descriptor().groups()) {
      ASSIGN_OR_RETURN(grp, backend.Group(CollectiveScope::Group(g.id())));
      ASSIGN_OR_RETURN(in, Upload(Desc({2}), std::vector<float>(2, 1), stream));
      ASSIGN_OR_RETURN(
          sum, rankd::dataplane::AllReduceSum(backend, in, grp, executor));
      RETURN_IF_ERROR(sum.completion->Wait());
      ASSIGN_OR_RETURN(got, sum.output.ToHostVector<float>());
      RETURN_IF_ERROR(
          ExpectEqual(got, std::vector<float>(2, static_cast<float>(g.size())),
                      absl::StrCat("group ", g.id())));
    }
    return absl::OkStatus();
  });

  checks.Run("local_dependencies", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(in, Upload(Desc({4}), std::vector<float>(4, 1), stream));
    const DeviceTensor* values[] = {&in};
    ASSIGN_OR_RETURN(local,
                     NcclBackend::SubmitLocalDependencies(values, executor));
    return local.completion->Wait();
  });
}

// --- agreement ----------------------------------------------------------

// Run with NcclSessionOptions::verify_agreement (set in main): members that
// disagree are refused before any payload, and the session stays usable.
void Agreement(const World& w, Checks& checks) {
  NcclSession& s = *w.session;
  const uint32_t r = w.rank, n = w.size;
  auto stream = s.stream();
  const CollectiveScope world = CollectiveScope::World();
  checks.Run("collectives_that_disagree_are_refused", [&]() -> absl::Status {
    if (n < 2) return absl::OkStatus();  // nobody to disagree with
    const size_t len = r == 0 ? 4 : 8;
    ASSIGN_OR_RETURN(x,
                     Upload(Desc({len}), std::vector<float>(len, 1), stream));
    ASSIGN_OR_RETURN(sum, s.AllReduceSumInto(world, x, x));
    absl::Status waited = sum.completion->Wait();
    RETURN_IF_ERROR(
        ExpectCode(waited, absl::StatusCode::kInvalidArgument, "refusal"));
    RETURN_IF_ERROR(Expect(
        absl::StrContains(
            waited.message(),
            absl::StrCat(" submitted `all_reduce_sum f32[", len, "]`; ")),
        waited.ToString()));
    ASSIGN_OR_RETURN(kept, x.ToHostVector<float>());
    RETURN_IF_ERROR(ExpectEqual(kept, std::vector<float>(len, 1), "input"));
    return s.poison();
  });
  checks.Run("transfers_that_disagree_are_refused", [&]() -> absl::Status {
    if (n < 2 || r > 1) return absl::OkStatus();
    absl::StatusOr<NcclSession::ValueSubmission> moved;
    if (r == 0) {
      ASSIGN_OR_RETURN(x, Upload(Desc({4}), std::vector<float>(4, 1), stream));
      moved = s.Send(world, 1, x);
    } else {
      moved = s.Receive(world, 0, Desc({4}, TensorDtype::kI32));
    }
    RETURN_IF_ERROR(moved.status());
    absl::Status waited = moved->completion->Wait();
    RETURN_IF_ERROR(
        ExpectCode(waited, absl::StatusCode::kInvalidArgument, "refusal"));
    RETURN_IF_ERROR(Expect(absl::StrContains(waited.message(), "disagree"),
                           waited.ToString()));
    return s.poison();
  });
  checks.Run("agreeing_work_still_runs", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(
        x, Upload(Desc({3}), std::vector<float>{1, 2, static_cast<float>(r)},
                  stream));
    ASSIGN_OR_RETURN(sum, s.AllReduceSum(world, x));
    RETURN_IF_ERROR(sum.completion->Wait());
    ASSIGN_OR_RETURN(got, sum.output.ToHostVector<float>());
    return ExpectEqual(
        got,
        std::vector<float>{static_cast<float>(n), static_cast<float>(2 * n),
                           static_cast<float>(n * (n - 1) / 2)},
        "sum");
  });
}

// --- bounded waits -------------------------------------------------------

// Rank 0's all_reduce cannot finish before its deadline: with one rank a
// host function holds its stream; with more, rank 1 joins late.
void Bounded(const World& w, Checks& checks, CancellationMode mode) {
  NcclSession& s = *w.session;
  const uint32_t r = w.rank, n = w.size;
  auto stream = s.stream();
  const bool native = mode == CancellationMode::kNativeCancel;
  checks.Run(native ? "native_cancel" : "quarantine", [&]() -> absl::Status {
    RETURN_IF_ERROR(WarmUp(s));
    ASSIGN_OR_RETURN(
        x, Upload(Desc({1 << 16}), std::vector<float>(1 << 16, 1), stream));
    Stall* stall = nullptr;
    if (n == 1) stall = StallStream(*stream);
    if (r == 1) absl::SleepFor(absl::Milliseconds(1500));
    ASSIGN_OR_RETURN(sum, s.AllReduceSum(CollectiveScope::World(), x));
    if (r == 0) {
      ASSIGN_OR_RETURN(
          outcome, sum.completion->WaitBounded(absl::Milliseconds(100), mode));
      if (stall != nullptr) stall->released = true;
      RETURN_IF_ERROR(Expect(!outcome.completed() && outcome.mode() == mode,
                             "the wait did not miss its deadline"));
      RETURN_IF_ERROR(ExpectCode(
          s.poison(), absl::StatusCode::kDeadlineExceeded, "poison"));
      RETURN_IF_ERROR(
          ExpectCode(s.AllReduceSum(CollectiveScope::World(), x).status(),
                     absl::StatusCode::kDeadlineExceeded, "later work"));
      if (native) {
        // Teardown finished; the work reports the cause.
        return ExpectCode(sum.completion->Wait(),
                          absl::StatusCode::kDeadlineExceeded, "wait");
      }
      // Quarantined until it completes (rank 1 arrives, or the stall ends).
      sum.completion.reset();
      sum.output = x;
      RETURN_IF_ERROR(Expect(s.quarantined() >= 1, "nothing quarantined"));
      const absl::Time give_up = absl::Now() + absl::Seconds(30);
      while (s.quarantined() > 0 && absl::Now() < give_up) {
        absl::SleepFor(absl::Milliseconds(10));
      }
      return Expect(s.quarantined() == 0, "the quarantine never drained");
    }
    // Other ranks.
    if (!native) {
      ASSIGN_OR_RETURN(outcome,
                       sum.completion->WaitBounded(
                           absl::Seconds(60), CancellationMode::kNativeCancel));
      return Expect(outcome.completed(), "peer of a quarantined op timed out");
    }
    // Rank 0 aborted: this rank must not hang either.
    const absl::Time start = absl::Now();
    auto outcome = sum.completion->WaitBounded(absl::Seconds(5),
                                               CancellationMode::kNativeCancel);
    RETURN_IF_ERROR(Expect(absl::Now() - start < absl::Seconds(30),
                           "the bounded wait overran"));
    if (outcome.ok() && outcome->completed()) {
      return absl::InternalError("completed although rank 0 aborted");
    }
    return absl::OkStatus();
  });
}

// --- abort on job failure --------------------------------------------------

void AbortPeer(const World& w, Checks& checks) {
  NcclSession& s = *w.session;
  const uint32_t r = w.rank, n = w.size;
  checks.Run("job_failure_aborts", [&]() -> absl::Status {
    RETURN_IF_ERROR(WarmUp(s));
    ASSIGN_OR_RETURN(
        x, Upload(Desc({1 << 20}), std::vector<float>(1 << 20, 1), s.stream()));
    // With one rank a host function holds the stream; with more, rank 0
    // never joins the collective, so every other rank is stuck in it.
    Stall* stall = nullptr;
    absl::StatusOr<NcclSession::ValueSubmission> sum =
        absl::UnknownError("not posted");
    if (n == 1) stall = StallStream(*s.stream());
    if (n == 1 || r != 0) {
      sum = s.AllReduceSum(CollectiveScope::World(), x);
      RETURN_IF_ERROR(sum.status());
    }
    Print("POSTED");
    const absl::Time start = absl::Now();
    if (!sum.ok()) {
      while (s.poison().ok() && absl::Now() - start < absl::Seconds(60)) {
        absl::SleepFor(absl::Milliseconds(10));
      }
    } else if (stall != nullptr) {
      while (s.poison().ok() && absl::Now() - start < absl::Seconds(60)) {
        absl::SleepFor(absl::Milliseconds(10));
      }
      stall->released = true;
    }
    if (sum.ok()) {
      // An unbounded wait: it returns only because the job failure aborted
      // the communicators.
      RETURN_IF_ERROR(ExpectCode(sum->completion->Wait(),
                                 absl::StatusCode::kAborted, "wait"));
    }
    Print(absl::StrCat("ABORTED_AFTER_MS ",
                       absl::ToInt64Milliseconds(absl::Now() - start)));
    RETURN_IF_ERROR(
        ExpectCode(s.poison(), absl::StatusCode::kAborted, "poison"));
    // The lost peer is the control-only rank after the NCCL ranks.
    const std::string lost = absl::StrCat("rank ", n, " ");
    RETURN_IF_ERROR(Expect(absl::StrContains(s.poison().message(), lost),
                           absl::StrCat("the abort does not name the lost ",
                                        lost, ": ", s.poison().message())));
    return Expect(!s.capabilities().world_collectives,
                  "capabilities still on after the abort");
  });
}

// --- in-place re-form after a lost rank --------------------------------------

int64_t UnixMicros() { return absl::ToUnixMicros(absl::Now()); }

// (rank + 1) x epoch in every element, summed over the world: exact in f32.
absl::Status AllReduceAtEpoch(NcclSession& s, uint32_t rank, uint32_t n,
                              uint64_t epoch) {
  const float mine = static_cast<float>((rank + 1) * epoch);
  ASSIGN_OR_RETURN(
      x, Upload(Desc({256}), std::vector<float>(256, mine), s.stream()));
  ASSIGN_OR_RETURN(sum, s.AllReduceSum(CollectiveScope::World(), x));
  RETURN_IF_ERROR(sum.completion->Wait());
  ASSIGN_OR_RETURN(got, sum.output.ToHostVector<float>());
  return ExpectEqual(
      got, std::vector<float>(256, static_cast<float>(n * (n + 1) / 2 * epoch)),
      absl::StrCat("sum at epoch ", epoch));
}

// The world communicator's unique id at `epoch`, as its root (rank 0)
// published it through the daemon (the key layout of docs/nccl.md, "Unique
// ids"; one id for a world this small). Read in that epoch.
absl::StatusOr<std::string> WorldUniqueId(rankd::dataplane::ControlPlane& cp,
                                          const std::string& tag,
                                          uint64_t epoch) {
  using rankd::dataplane::OwnedKey;
  using rankd::dataplane::nccl::UniqueIdKey;
  return cp.KvGet(
      OwnedKey(0, UniqueIdKey(cp.Namespace(), tag, "world", 0, 1), epoch),
      absl::Seconds(10));
}

// The job runs with rankd --recovery=on. Every rank sums at epoch 1; the
// last rank then waits to be killed by the test (SIGKILL). The survivors
// see their session poisoned naming it, keep a device tensor they
// allocated before the loss (their "weights"), re-form with
// NcclSession::Reform and sum at epoch 2 with the replacement, a new
// process that the test starts into the lost slot (--replacement), which
// opens its session at epoch 2. Takes the session: Reform consumes it.
// Returns false when a step failed (later steps would mean nothing).
bool InPlaceReform(std::unique_ptr<NcclSession>& session,
                   rankd::dataplane::ControlPlane& control, uint32_t rank,
                   uint32_t n, bool replacement, Checks& checks) {
  const uint32_t lost = n - 1;
  const std::string tag = absl::GetFlag(FLAGS_tag);
  auto step = [&](const std::string& name,
                  const std::function<absl::Status()>& fn) {
    const int before = checks.failures();
    checks.Run(name, fn);
    return checks.failures() == before;
  };
  if (replacement) {
    // The test started this process into the lost slot once the job was
    // RECOVERING: it joined, and opened its session, at epoch 2.
    return step("opened_at_epoch_2",
                [&] {
                  return Expect(session->descriptor().epoch() == 2,
                                absl::StrCat("opened at epoch ",
                                             session->descriptor().epoch()));
                }) &&
           step("all_reduce_at_epoch_2", [&]() -> absl::Status {
             RETURN_IF_ERROR(AllReduceAtEpoch(*session, rank, n, 2));
             Print(absl::StrCat("EPOCH2_ALL_REDUCE unix_us=", UnixMicros()));
             return absl::OkStatus();
           });
  }

  // The weights: on a stream of the process's own, so that nothing of them
  // is the session's. Values whose every bit matters.
  const int device = session->device();
  std::vector<float> weights_host(1 << 16);
  for (size_t i = 0; i < weights_host.size(); ++i) {
    weights_host[i] = 1000.0f * (rank + 1) + static_cast<float>(i) / 7.0f;
  }
  std::shared_ptr<CudaStream> own_stream;
  std::optional<DeviceTensor> weights;
  std::string id_at_epoch_1;
  if (!step("all_reduce_at_epoch_1", [&]() -> absl::Status {
        RETURN_IF_ERROR(Expect(
            session->descriptor().epoch() == 1,
            absl::StrCat("opened at epoch ", session->descriptor().epoch())));
        ASSIGN_OR_RETURN(stream, CudaStream::Create(device));
        own_stream = stream;
        ASSIGN_OR_RETURN(
            w, Upload(Desc({weights_host.size()}), weights_host, own_stream));
        weights = w;
        RETURN_IF_ERROR(AllReduceAtEpoch(*session, rank, n, 1));
        ASSIGN_OR_RETURN(id, WorldUniqueId(control, tag, 1));
        id_at_epoch_1 = id;
        return absl::OkStatus();
      })) {
    return false;
  }
  Print("SUMMED epoch=1");
  if (rank == lost) {
    // The victim: the test kills it now. Still alive after a minute means
    // the test never did.
    absl::SleepFor(absl::Seconds(60));
    Print("ERROR the lost rank was never killed");
    return false;
  }

  if (!step("poisoned_by_the_loss", [&]() -> absl::Status {
        const absl::Time give_up = absl::Now() + absl::Seconds(60);
        while (session->poison().ok() && absl::Now() < give_up) {
          absl::SleepFor(absl::Milliseconds(5));
        }
        const absl::Status poison = session->poison();
        RETURN_IF_ERROR(Expect(
            !poison.ok(),
            absl::StrCat("no poison 60 s after rank ", lost, " was killed")));
        Print(absl::StrCat("POISONED unix_us=", UnixMicros(), " ",
                           poison.ToString()));
        RETURN_IF_ERROR(
            ExpectCode(poison, absl::StatusCode::kAborted, "poison"));
        const std::string named = absl::StrCat("rank ", lost, " ");
        return Expect(absl::StrContains(poison.message(), named),
                      absl::StrCat("the poison does not name the lost ", named,
                                   ": ", poison.message()));
      })) {
    return false;
  }

  if (!step("reformed_at_epoch_2", [&]() -> absl::Status {
        auto reformed =
            NcclSession::Reform(std::move(session), absl::Seconds(60));
        RETURN_IF_ERROR(reformed.status());
        session = *std::move(reformed);
        RETURN_IF_ERROR(Expect(session->descriptor().epoch() == 2,
                               absl::StrCat("re-formed at epoch ",
                                            session->descriptor().epoch())));
        RETURN_IF_ERROR(
            Expect(session->device() == device,
                   absl::StrCat("re-formed on device ", session->device(),
                                ", not ", device)));
        RETURN_IF_ERROR(Expect(session->ready() && session->poison().ok(),
                               "the re-formed session is not ready"));
        return Expect(session->capabilities().world_collectives,
                      "the re-formed session has no world collectives");
      })) {
    return false;
  }

  return step("all_reduce_at_epoch_2",
              [&]() -> absl::Status {
                RETURN_IF_ERROR(AllReduceAtEpoch(*session, rank, n, 2));
                Print(absl::StrCat("EPOCH2_ALL_REDUCE unix_us=", UnixMicros()));
                return absl::OkStatus();
              }) &&
         step("weights_bit_identical",
              [&]() -> absl::Status {
                ASSIGN_OR_RETURN(got, weights->ToHostVector<float>());
                return Expect(got.size() == weights_host.size() &&
                                  std::memcmp(got.data(), weights_host.data(),
                                              got.size() * sizeof(float)) == 0,
                              "the tensor allocated before the loss changed");
              }) &&
         step("new_unique_ids_at_epoch_2", [&]() -> absl::Status {
           ASSIGN_OR_RETURN(id, WorldUniqueId(control, tag, 2));
           return Expect(id != id_at_epoch_1,
                         "epoch 2's world communicator reused epoch 1's id");
         });
}

// --- one replica re-forms alone (recovery by domain) ------------------------

// dp 2 x tp 2: domain d is ranks 2d and 2d + 1, one tensor group.
constexpr uint32_t kDomainTensor = 2;

// The key rank 2 sets once replica 1 summed at epoch 2 (its own key,
// docs/operations.md "Key-value ownership"): replica 0 stops then.
constexpr char kReplicaReformedKey[] = "r2/domain-reform/reformed";

// The group of the session's descriptor whose members are `members`.
absl::StatusOr<uint32_t> GroupWith(const DistributedSessionDescriptor& d,
                                   const std::vector<uint32_t>& members) {
  for (const auto& g : d.groups()) {
    if (g.members() == members) return g.id();
  }
  return absl::NotFoundError(absl::StrCat("no group of members ",
                                          absl::StrJoin(members, ","),
                                          " in the descriptor"));
}

// The session holds only its domain's groups (docs/contract.md,
// "Data-parallel domains"): the descriptor is confined to the domain, the
// capabilities advertise neither the world nor the data-parallel group, and
// both are refused at submission with the rule's words.
absl::Status HeldOnlyItsDomain(NcclSession& s, uint32_t rank) {
  const uint32_t domain = rank / kDomainTensor;
  const uint32_t first = domain * kDomainTensor;
  const auto& confined = s.descriptor().recovery_domain();
  RETURN_IF_ERROR(Expect(
      confined.has_value() && confined->index == domain,
      absl::StrCat("the descriptor is not confined to domain ", domain)));
  ASSIGN_OR_RETURN(tensor, GroupWith(s.descriptor(), {first, first + 1}));
  const uint32_t peer = rank % kDomainTensor;
  ASSIGN_OR_RETURN(across, GroupWith(s.descriptor(), {peer, peer + 2}));
  const DistributedCapabilities caps = s.capabilities();
  RETURN_IF_ERROR(Expect(!caps.world_collectives &&
                             caps.collective_groups.count(tensor) == 1 &&
                             caps.collective_groups.count(across) == 0,
                         "the capabilities are not the domain's groups"));
  ASSIGN_OR_RETURN(x, Upload(Desc({1}), std::vector<float>{1.0f}, s.stream()));
  const absl::Status world =
      s.AllReduceSum(CollectiveScope::World(), x).status();
  RETURN_IF_ERROR(ExpectCode(world, absl::StatusCode::kFailedPrecondition,
                             "all_reduce_sum on the world"));
  RETURN_IF_ERROR(Expect(
      absl::StartsWith(
          world.message(),
          absl::StrCat("nccl backend: all_reduce_sum on world refused: the "
                       "job recovers by data-parallel domain and this "
                       "session holds only domain ",
                       domain, " (ranks ", first, "-", first + 1,
                       ")'s groups (")) &&
          absl::StrContains(world.message(),
                            "; the world spans every domain and is not "
                            "connected"),
      absl::StrCat("the world's refusal: ", world.message())));
  const absl::Status data =
      s.AllReduceSum(CollectiveScope::Group(across), x).status();
  RETURN_IF_ERROR(ExpectCode(data, absl::StatusCode::kFailedPrecondition,
                             "all_reduce_sum on the data-parallel group"));
  RETURN_IF_ERROR(Expect(
      absl::StrContains(
          data.message(),
          absl::StrCat("; group ", across, " (members ", peer, ", ", peer + 2,
                       ") spans domains 0 and 1 and is not "
                       "connected")),
      absl::StrCat("the data-parallel group's refusal: ", data.message())));
  return Expect(s.poison().ok(), "a refusal poisoned the session");
}

// Sums `values` on the rank's tensor group; the sums.
absl::StatusOr<std::vector<float>> TensorSum(NcclSession& s, uint32_t rank,
                                             const std::vector<float>& values) {
  const uint32_t first = rank / kDomainTensor * kDomainTensor;
  ASSIGN_OR_RETURN(tensor, GroupWith(s.descriptor(), {first, first + 1}));
  ASSIGN_OR_RETURN(x, Upload(Desc({values.size()}), values, s.stream()));
  ASSIGN_OR_RETURN(sum, s.AllReduceSum(CollectiveScope::Group(tensor), x));
  RETURN_IF_ERROR(sum.completion->Wait());
  return sum.output.ToHostVector<float>();
}

// Both members of the rank's tensor group reached the end at their epoch
// (a key each, read back): nobody's session closes under a peer's work. A
// world round would not do: replicas recover apart, so its numbering is not
// one replica's to choose.
absl::Status TensorGroupDone(rankd::Client& client, uint32_t rank,
                             uint64_t epoch) {
  const std::string done = absl::StrCat("domain-reform-done/", epoch, "/");
  RETURN_IF_ERROR(client.KvSet(absl::StrCat(done, rank), "1"));
  const uint32_t first = rank / kDomainTensor * kDomainTensor;
  for (uint32_t m = first; m < first + kDomainTensor; ++m) {
    auto seen = client.KvGet(absl::StrCat(done, m), absl::Seconds(60));
    if (!seen.ok()) {
      return absl::Status(seen.status().code(),
                          absl::StrCat("rank ", m, " never finished: ",
                                       seen.status().message()));
    }
  }
  return absl::OkStatus();
}

// The job runs with rankd --recovery=domain, dp 2 x tp 2 (4 ranks): every
// session holds only its replica's tensor group. Replica 0 (ranks 0, 1)
// sums {rank + 1, stop} on it, printing TENSOR_SUM for each, until rank 2
// says replica 1 re-formed; its session must never be poisoned and its job
// health stay OK. Replica 1 (ranks 2, 3) sums once at epoch 1; rank 3 then
// waits to be killed by the test (SIGKILL). Rank 2 sees its session
// poisoned naming rank 3, re-forms it alone (NcclSession::Reform: epoch 2,
// still confined to domain 1) and sums at epoch 2 with the --replacement
// process the test started into the lost slot. Returns false when a step
// failed (later steps would mean nothing).
bool DomainReform(std::unique_ptr<NcclSession>& session, rankd::Client& client,
                  rankd::dataplane::ControlPlane& control, uint32_t rank,
                  bool replacement, Checks& checks) {
  auto step = [&](const std::string& name,
                  const std::function<absl::Status()>& fn) {
    const int before = checks.failures();
    checks.Run(name, fn);
    return checks.failures() == before;
  };
  if (!step("held_only_its_domain",
            [&] { return HeldOnlyItsDomain(*session, rank); })) {
    return false;
  }
  if (rank < kDomainTensor) {
    // Replica 0: serves throughout, at epoch 1.
    return step("served_throughout",
                [&]() -> absl::Status {
                  const absl::Time give_up = absl::Now() + absl::Seconds(150);
                  for (int n = 1;; ++n) {
                    const bool stop =
                        client.KvGet(kReplicaReformedKey, absl::ZeroDuration())
                            .ok();
                    ASSIGN_OR_RETURN(sum,
                                     TensorSum(*session, rank,
                                               {static_cast<float>(rank + 1),
                                                stop ? 1.0f : 0.0f}));
                    RETURN_IF_ERROR(Expect(
                        sum[0] == 3.0f, absl::StrCat("sum ", n, ": ", sum[0])));
                    RETURN_IF_ERROR(session->poison());
                    RETURN_IF_ERROR(control.JobHealth());
                    Print(absl::StrCat("TENSOR_SUM n=", n));
                    if (sum[1] > 0.0f) break;
                    RETURN_IF_ERROR(
                        Expect(absl::Now() < give_up,
                               "replica 1 did not re-form within 150 s"));
                    absl::SleepFor(absl::Milliseconds(10));
                  }
                  return Expect(session->descriptor().epoch() == 1,
                                "replica 0's session left epoch 1");
                }) &&
           step("tensor_group_done",
                [&] { return TensorGroupDone(client, rank, 1); });
  }

  auto sum_at = [&](uint64_t epoch) -> absl::Status {
    const float mine = static_cast<float>((rank + 1) * epoch);
    ASSIGN_OR_RETURN(sum, TensorSum(*session, rank, {mine}));
    return ExpectEqual(sum, std::vector<float>{7.0f * epoch},
                       absl::StrCat("sum at epoch ", epoch));
  };
  auto epoch_2 = [&]() -> absl::Status {
    RETURN_IF_ERROR(sum_at(2));
    Print(absl::StrCat("EPOCH2_ALL_REDUCE unix_us=", UnixMicros()));
    if (rank == 2) {
      RETURN_IF_ERROR(client.KvSet(kReplicaReformedKey, "1"));
    }
    return absl::OkStatus();
  };
  if (replacement) {
    return step("opened_at_epoch_2",
                [&] {
                  return Expect(session->descriptor().epoch() == 2,
                                absl::StrCat("opened at epoch ",
                                             session->descriptor().epoch()));
                }) &&
           step("all_reduce_at_epoch_2", epoch_2) &&
           step("tensor_group_done",
                [&] { return TensorGroupDone(client, rank, 2); });
  }
  if (!step("all_reduce_at_epoch_1", [&] { return sum_at(1); })) return false;
  Print("SUMMED epoch=1");
  if (rank == 3) {
    // The victim: the test kills it now. Still alive after a minute means
    // the test never did.
    absl::SleepFor(absl::Seconds(60));
    Print("ERROR the lost rank was never killed");
    return false;
  }
  return step("poisoned_by_the_loss",
              [&]() -> absl::Status {
                const absl::Time give_up = absl::Now() + absl::Seconds(60);
                while (session->poison().ok() && absl::Now() < give_up) {
                  absl::SleepFor(absl::Milliseconds(5));
                }
                const absl::Status poison = session->poison();
                RETURN_IF_ERROR(Expect(
                    !poison.ok(), "no poison 60 s after rank 3 was killed"));
                Print(absl::StrCat("POISONED unix_us=", UnixMicros(), " ",
                                   poison.ToString()));
                RETURN_IF_ERROR(
                    ExpectCode(poison, absl::StatusCode::kAborted, "poison"));
                return Expect(absl::StrContains(poison.message(), "rank 3 "),
                              absl::StrCat("the poison does not name rank 3: ",
                                           poison.message()));
              }) &&
         step("reformed_alone_at_epoch_2",
              [&]() -> absl::Status {
                const int device = session->device();
                auto reformed =
                    NcclSession::Reform(std::move(session), absl::Seconds(60));
                RETURN_IF_ERROR(reformed.status());
                session = *std::move(reformed);
                RETURN_IF_ERROR(
                    Expect(session->descriptor().epoch() == 2,
                           absl::StrCat("re-formed at epoch ",
                                        session->descriptor().epoch())));
                RETURN_IF_ERROR(
                    Expect(session->device() == device && session->ready() &&
                               session->poison().ok(),
                           "the re-formed session is not ready on its device"));
                // Still one domain's session: the rule holds at epoch 2.
                return HeldOnlyItsDomain(*session, rank);
              }) &&
         step("all_reduce_at_epoch_2", epoch_2) &&
         step("tensor_group_done",
              [&] { return TensorGroupDone(client, rank, 2); });
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string scenario = absl::GetFlag(FLAGS_scenario);
  const uint32_t local_rank = absl::GetFlag(FLAGS_local_rank);
  int device = absl::GetFlag(FLAGS_device);
  // one_gpu_each leaves the choice to the session (-1).
  if (device < 0 && scenario != "one_gpu_each") {
    device = static_cast<int>(local_rank);
  }

  if (scenario != "control_only") {
    auto probe = rankd::dataplane::nccl::ProbeDevices();
    if (probe.device_count <= std::max(device, 0)) {
      Print(absl::StrCat("SKIP device ", device, " is not available: ",
                         probe.device_count, " CUDA devices; ", probe.reason));
      return 5;
    }
  }

  rankd::ClientOptions options;
  options.target = absl::GetFlag(FLAGS_target);
  auto client = rankd::Client::Connect(options);
  if (!client.ok()) {
    Print(absl::StrCat("ERROR connect: ", client.status().ToString()));
    return 3;
  }
  rankd::JoinOptions join;
  join.job_id = absl::GetFlag(FLAGS_job_id);
  join.local_rank = local_rank;
  join.world_size = absl::GetFlag(FLAGS_world_size);
  join.device.set_kind(scenario == "control_only" ? "cpu" : "cuda");
  join.device.set_index(scenario == "control_only" ? 0 : std::max(device, 0));
  join.wait_for_world = absl::Seconds(60);
  auto joined = (*client)->Join(join);
  if (!joined.ok()) {
    Print(absl::StrCat("ERROR join: ", joined.status().ToString()));
    return 3;
  }
  const uint32_t rank = joined->rank();
  Print(absl::StrCat("JOINED rank=", rank, " world=", joined->world_size()));
  if (scenario == "control_only") {
    absl::SleepFor(absl::Seconds(120));
    Print("DONE");
    return 0;
  }

  auto control = rankd::dataplane::MakeClientControlPlane(client->get());
  absl::StatusOr<DistributedSessionDescriptor> descriptor =
      rankd::dataplane::DescriptorFromProto(*joined);
  if (const uint32_t nccl_world = absl::GetFlag(FLAGS_nccl_world);
      nccl_world != 0) {
    rankd::ParallelTopology data_parallel;
    data_parallel.data = nccl_world;
    descriptor = DistributedSessionDescriptor::FromTopology(data_parallel,
                                                            nccl_world, rank);
  }
  if (!descriptor.ok()) {
    Print(absl::StrCat("ERROR descriptor: ", descriptor.status().ToString()));
    return 3;
  }
  NcclSessionOptions session_options;
  session_options.device = device;
  session_options.tag = absl::GetFlag(FLAGS_tag);
  session_options.init_timeout =
      absl::Milliseconds(absl::GetFlag(FLAGS_init_timeout_ms));
  session_options.abort_grace = absl::Seconds(5);
  session_options.destroy_timeout = absl::Seconds(3);
  session_options.verify_agreement = scenario == "agreement";
  auto session = rankd::dataplane::nccl::testing::NcclSessionPeer::Create(
      *descriptor, control.get(), session_options);
  if (!session.ok()) {
    Print(absl::StrCat("ERROR session: ", session.status().ToString()));
    return 3;
  }
  Checks checks;
  if (scenario == "init_abort") {
    Print("INIT_STARTED");
    const absl::Time start = absl::Now();
    absl::Status init =
        rankd::dataplane::nccl::testing::NcclSessionPeer::Initialize(**session);
    checks.Run("init_aborted_by_job_failure", [&]() -> absl::Status {
      RETURN_IF_ERROR(
          ExpectCode(init, absl::StatusCode::kAborted, "Initialize"));
      Print(absl::StrCat("ABORTED_AFTER_MS ",
                         absl::ToInt64Milliseconds(absl::Now() - start)));
      return Expect(!(*session)->capabilities().world_collectives,
                    "capabilities on after a failed init");
    });
  } else {
    absl::Status init =
        rankd::dataplane::nccl::testing::NcclSessionPeer::Initialize(**session);
    if (!init.ok()) {
      Print(absl::StrCat("ERROR init: ", init.ToString()));
      return 3;
    }
    Print(absl::StrCat("INIT_OK device=", (*session)->device(),
                       " communicators=", (*session)->communicator_count()));
    World w{session->get(), rank, descriptor->world_size()};
    if (scenario == "collectives") {
      Collectives(w, checks);
    } else if (scenario == "backend") {
      Backend(w, checks);
    } else if (scenario == "quarantine") {
      Bounded(w, checks, CancellationMode::kQuarantineUntilComplete);
    } else if (scenario == "native_cancel") {
      Bounded(w, checks, CancellationMode::kNativeCancel);
    } else if (scenario == "abort_peer") {
      AbortPeer(w, checks);
    } else if (scenario == "agreement") {
      Agreement(w, checks);
    } else if (scenario == "one_gpu_each") {
      OneGpuEach(w, checks);
    } else if (scenario == "domain_reform") {
      // Reform replaces the session: the scenario owns it from here.
      std::unique_ptr<NcclSession> owned = *std::move(session);
      const bool ok = DomainReform(owned, **client, *control, rank,
                                   absl::GetFlag(FLAGS_replacement), checks);
      *session = std::move(owned);
      if (!ok) {
        Print("DONE");
        return 4;
      }
    } else if (scenario == "reform") {
      // Reform replaces the session: the scenario owns it from here.
      std::unique_ptr<NcclSession> owned = *std::move(session);
      if (!InPlaceReform(owned, *control, rank, descriptor->world_size(),
                         absl::GetFlag(FLAGS_replacement), checks)) {
        Print("DONE");
        return 4;
      }
      *session = std::move(owned);
    } else {
      Print(absl::StrCat("ERROR unknown scenario ", scenario));
      return 3;
    }
    // Keep every rank in the job until all finished (the control plane
    // still works after the data plane was poisoned, unless the job failed).
    // domain_reform waited for its tensor group instead: its replicas'
    // epochs differ, so a world round is no single replica's to number.
    if (scenario != "abort_peer" && scenario != "domain_reform") {
      std::vector<uint32_t> token = {rank};
      auto done = (*session)->AllGatherWords(token);
      if (!done.ok()) {
        Print(absl::StrCat("ERROR final round: ", done.status().ToString()));
        return 3;
      }
    }
  }
  session->reset();
  if (scenario != "abort_peer" && scenario != "init_abort") {
    (void)(*client)->Leave();
  }
  Print("DONE");
  return checks.failures() == 0 ? 0 : 4;
}
