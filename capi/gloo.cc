// The C ABI's data plane with Gloo (capi/include/rankd/rankd.h, "Data-plane
// sessions" and "Completions"), and the entry points both backends share:
// rankd_session_open picks the backend; every operation's rankd_* function
// checks its arguments, hands an NCCL session's call to nccl.cc
// (capi/internal/nccl.h) and runs a Gloo session's here, on host buffers;
// works (rankd_work_*) complete either.
//
// Host buffers are copied: an input into a library-owned tensor during the
// submitting call, an output from the operation's result into the caller's
// buffer when the work's success is first observed (rankd_work_is_complete,
// rankd_work_wait, rankd_work_wait_bounded). The session itself validates
// everything else (shapes, counts, peers, groups, capabilities), so its
// messages reach the caller unchanged.
//
// Depends on the Gloo session, the contract's type headers, host_tensor.h and
// absl.
#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "capi/internal/handles.h"
#include "capi/internal/nccl.h"
#include "dataplane/capabilities.h"
#include "dataplane/collective_scope.h"
#include "dataplane/completion.h"
#include "dataplane/descriptor_proto.h"
#include "dataplane/dtype.h"
#include "dataplane/gloo/gloo_session.h"
#include "dataplane/host_tensor.h"
#include "dataplane/peer_transfer.h"
#include "dataplane/session_descriptor.h"
#include "dataplane/value_descriptor.h"
#include "rankd/rankd.h"

namespace rankd::capi::internal {

using dataplane::CancellationMode;
using dataplane::CollectiveScope;
using dataplane::HostTensor;
using dataplane::PeerValue;
using dataplane::TensorDtype;
using dataplane::ValueDescriptor;

// More dimensions than any tensor a serving program passes has.
constexpr size_t kMaxTensorDims = 64;

// The descriptor of a caller's tensor: `what` ("input", "sends[2]", ...)
// names it in errors.
absl::StatusOr<ValueDescriptor> DescriptorOf(const rankd_tensor* t,
                                             const char* function,
                                             const std::string& what) {
  if (t == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(function, ": ", what, " is NULL"));
  }
  if (t->dtype < RANKD_BOOL || t->dtype > RANKD_COMPLEX64) {
    return absl::InvalidArgumentError(absl::StrCat(
        function, ": ", what, ".dtype is ", t->dtype, ", not a rankd_dtype"));
  }
  // Before copying the extents: a garbage ndim must not become an
  // allocation that throws across the C boundary.
  if (t->ndim > kMaxTensorDims) {
    return absl::InvalidArgumentError(
        absl::StrCat(function, ": ", what, ".ndim is ", t->ndim, "; at most ",
                     kMaxTensorDims, " dimensions"));
  }
  if (t->ndim > 0 && t->shape == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        function, ": ", what, ".shape is NULL with ndim ", t->ndim));
  }
  // The contract's rule, as C++ states it: only the leading extent may be 0.
  absl::StatusOr<ValueDescriptor> d =
      ValueDescriptor::Create(std::vector<size_t>(t->shape, t->shape + t->ndim),
                              static_cast<TensorDtype>(t->dtype));
  if (!d.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(function, ": ", what, ": ", d.status().message()));
  }
  if (t->data == nullptr && d->byte_size() > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(function, ": ", what, ".data is NULL"));
  }
  return d;
}

CollectiveScope ScopeOf(uint32_t group) {
  return group == RANKD_WORLD_GROUP ? CollectiveScope::World()
                                    : CollectiveScope::Group(group);
}

namespace {

// rankd_dtype's values are TensorDtype's, in order.
static_assert(RANKD_BOOL == static_cast<int>(TensorDtype::kBool));
static_assert(RANKD_F32 == static_cast<int>(TensorDtype::kF32));
static_assert(RANKD_F16 == static_cast<int>(TensorDtype::kF16));
static_assert(RANKD_BF16 == static_cast<int>(TensorDtype::kBf16));
static_assert(RANKD_F64 == static_cast<int>(TensorDtype::kF64));
static_assert(RANKD_I8 == static_cast<int>(TensorDtype::kI8));
static_assert(RANKD_I16 == static_cast<int>(TensorDtype::kI16));
static_assert(RANKD_I32 == static_cast<int>(TensorDtype::kI32));
static_assert(RANKD_I64 == static_cast<int>(TensorDtype::kI64));
static_assert(RANKD_U8 == static_cast<int>(TensorDtype::kU8));
static_assert(RANKD_U16 == static_cast<int>(TensorDtype::kU16));
static_assert(RANKD_U32 == static_cast<int>(TensorDtype::kU32));
static_assert(RANKD_U64 == static_cast<int>(TensorDtype::kU64));
static_assert(RANKD_COMPLEX64 == static_cast<int>(TensorDtype::kComplex64));

// A library-owned copy of the caller's input.
absl::StatusOr<HostTensor> CopyIn(const rankd_tensor* t, const char* function,
                                  const std::string& what) {
  auto d = DescriptorOf(t, function, what);
  if (!d.ok()) return d.status();
  HostTensor copy = HostTensor::Uninitialized(*d);
  if (d->byte_size() > 0) std::memcpy(copy.data(), t->data, d->byte_size());
  return copy;
}

// A library-owned output of the caller's output's descriptor.
absl::StatusOr<HostTensor> OutputLike(const rankd_tensor* t,
                                      const char* function,
                                      const std::string& what) {
  auto d = DescriptorOf(t, function, what);
  if (!d.ok()) return d.status();
  return HostTensor::Uninitialized(*d);
}

// What every operation checks first.
absl::Status CheckCall(const rankd_session* session, void* stream,
                       rankd_work** work, const char* function) {
  if (session == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(function, ": session is NULL"));
  }
  if (work == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(function, ": work is NULL"));
  }
  if (session->state->gloo == nullptr) {  // a failed rankd_session_reform
    return absl::Status(session->state->ended.code(),
                        absl::StrCat(function, ": the session is gone: ",
                                     session->state->ended.message()));
  }
  if (stream != nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(function,
                     ": stream must be NULL for a Gloo session (it is the CUDA "
                     "stream of an NCCL session)"));
  }
  return absl::OkStatus();
}

// A collective's checks, its input copied and its output allocated.
struct Operands {
  HostTensor input;
  HostTensor output;
};
absl::StatusOr<Operands> Prepare(const rankd_session* session, void* stream,
                                 rankd_work** work, const char* function,
                                 const rankd_tensor* input,
                                 const rankd_tensor* output) {
  if (absl::Status s = CheckCall(session, stream, work, function); !s.ok()) {
    return s;
  }
  auto in = CopyIn(input, function, "input");
  if (!in.ok()) return in.status();
  auto out = OutputLike(output, function, "output");
  if (!out.ok()) return out.status();
  return Operands{*std::move(in), *std::move(out)};
}

// Hands submitted work to the caller, with the outputs to deliver.
rankd_status* HandOut(rankd_session* session,
                      std::shared_ptr<dataplane::BoundedCompletion> completion,
                      std::vector<rankd_work::Delivery> deliveries,
                      rankd_work** work) {
  auto w = std::make_unique<rankd_work>();
  w->session = session->state;
  w->completion = std::move(completion);
  {
    absl::MutexLock lock(&w->mu);
    w->deliveries = std::move(deliveries);
  }
  *work = w.release();  // rankd_work_free
  return nullptr;
}

// One operation's submission as a work; its output goes to `destination`
// (none for a send).
rankd_status* MakeWork(
    rankd_session* session,
    absl::StatusOr<dataplane::DistributedSession<HostTensor>::ValueSubmission>
        submitted,
    void* destination, rankd_work** work) {
  if (!submitted.ok()) return ToC(submitted.status());
  std::vector<rankd_work::Delivery> deliveries;
  if (destination != nullptr) {
    deliveries.push_back({std::move(submitted->output), destination});
  }
  return HandOut(session, std::move(submitted->completion),
                 std::move(deliveries), work);
}

// Copies the outputs into the caller's buffers, once.
void Deliver(rankd_work& work) {
  absl::MutexLock lock(&work.mu);
  if (work.delivered) return;
  work.delivered = true;
  for (const rankd_work::Delivery& d : work.deliveries) {
    if (d.output.byte_size() > 0) {
      std::memcpy(d.destination, d.output.data(), d.output.byte_size());
    }
  }
  work.deliveries.clear();
}

std::optional<CancellationMode> ModeOf(int32_t mode) {
  switch (mode) {
    case RANKD_QUARANTINE_UNTIL_COMPLETE:
      return CancellationMode::kQuarantineUntilComplete;
    case RANKD_NATIVE_CANCEL:
      return CancellationMode::kNativeCancel;
  }
  return std::nullopt;
}

// $RANKD_BACKEND as a backend (0 when unset).
absl::StatusOr<int32_t> BackendFromEnvironment() {
  const char* env = std::getenv("RANKD_BACKEND");
  if (env == nullptr || *env == '\0') return RANKD_BACKEND_GLOO;
  const std::string name = env;
  if (name == "gloo") return RANKD_BACKEND_GLOO;
  if (name == "nccl") return RANKD_BACKEND_NCCL;
  return absl::InvalidArgumentError(
      absl::StrCat("rankd_session_open: $RANKD_BACKEND is '", name,
                   "'; use \"gloo\" or \"nccl\""));
}

// What options->restrict_capabilities and restrict_groups allow, as the
// backends' restrict_capabilities option takes it; nullopt when neither is
// set (nothing is narrowed).
absl::StatusOr<std::optional<dataplane::DistributedCapabilities>> RestrictionOf(
    const rankd_session_options& o,
    const dataplane::DistributedSessionDescriptor& descriptor,
    const char* function) {
  if (o.restrict_groups == nullptr && o.restrict_group_count > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(function,
                     ": options->restrict_groups is NULL with "
                     "restrict_group_count ",
                     o.restrict_group_count));
  }
  if (o.restrict_capabilities == nullptr && o.restrict_groups == nullptr) {
    return std::nullopt;
  }
  dataplane::DistributedCapabilities allow;
  allow.world_collectives = allow.point_to_point = allow.variable_all_to_all =
      allow.exact_completion = true;
  if (const rankd_capabilities* c = o.restrict_capabilities; c != nullptr) {
    if (c->struct_size < sizeof(rankd_capabilities)) {
      return absl::InvalidArgumentError(absl::StrCat(
          function, ": options->restrict_capabilities->struct_size is ",
          c->struct_size, "; set it to sizeof(rankd_capabilities), ",
          sizeof(rankd_capabilities)));
    }
    allow.world_collectives = c->world_collectives != 0;
    allow.point_to_point = c->point_to_point != 0;
    allow.variable_all_to_all = c->variable_all_to_all != 0;
    allow.exact_completion = c->exact_completion != 0;
  }
  if (o.restrict_groups != nullptr) {
    allow.collective_groups.insert(o.restrict_groups,
                                   o.restrict_groups + o.restrict_group_count);
  } else {
    for (const auto& g : descriptor.groups()) {
      allow.collective_groups.insert(g.id());
    }
  }
  return allow;
}

std::string GlooHostname(const char* option) {
  if (option != nullptr) return option;
  for (const char* name : {"RANKD_GLOO_HOSTNAME", "POD_IP"}) {
    const char* env = std::getenv(name);
    if (env != nullptr && *env != '\0') return env;
  }
  return "127.0.0.1";
}

}  // namespace
}  // namespace rankd::capi::internal

using rankd::capi::internal::CheckCall;
using rankd::capi::internal::CopyIn;
using rankd::capi::internal::Error;
using rankd::capi::internal::Guarded;
using rankd::capi::internal::GuardedCall;
using rankd::capi::internal::HandOut;
using rankd::capi::internal::MakeWork;
using rankd::capi::internal::NullArgument;
using rankd::capi::internal::OutputLike;
using rankd::capi::internal::Prepare;
using rankd::capi::internal::ScopeOf;
using rankd::capi::internal::ToC;
using rankd::dataplane::HostTensor;
using rankd::dataplane::PeerValue;

extern "C" {

void rankd_session_options_init(rankd_session_options* options) {
  if (options == nullptr) return;
  *options = rankd_session_options{};
  options->struct_size = sizeof(rankd_session_options);
  options->backend = 0;
  options->op_timeout_seconds = 60;
}

rankd_status* rankd_session_open(rankd_rank* rank,
                                 const rankd_session_options* options,
                                 rankd_session** session) {
  return Guarded("rankd_session_open", [&]() -> rankd_status* {
    constexpr char kFn[] = "rankd_session_open";
    if (rank == nullptr) return NullArgument(kFn, "rank");
    if (session == nullptr) return NullArgument(kFn, "session");
    rankd_session_options o;
    rankd_session_options_init(&o);
    if (options != nullptr) {
      // A caller built against an older header has a smaller struct: its
      // fields are read, the later ones keep their defaults (rankd.h).
      constexpr size_t kAbi1Size =
          offsetof(rankd_session_options, gloo_hostname) +
          sizeof(o.gloo_hostname);
      if (options->struct_size < kAbi1Size) {
        return Error(
            absl::StatusCode::kInvalidArgument, kFn,
            absl::StrCat("options->struct_size is ", options->struct_size,
                         "; expected at least ", kAbi1Size,
                         " (call rankd_session_options_init)"));
      }
      std::memcpy(&o, options, std::min(options->struct_size, sizeof(o)));
    }
    int32_t backend = o.backend;
    if (backend == 0) {
      auto from_env = rankd::capi::internal::BackendFromEnvironment();
      if (!from_env.ok()) return ToC(from_env.status());
      backend = *from_env;
    }
    if (backend != RANKD_BACKEND_GLOO && backend != RANKD_BACKEND_NCCL) {
      return Error(absl::StatusCode::kInvalidArgument, kFn,
                   absl::StrCat("options->backend is ", backend,
                                ", not a rankd_backend"));
    }
    auto op_timeout = rankd::capi::internal::ToDuration(
        o.op_timeout_seconds, kFn, "options->op_timeout_seconds");
    if (!op_timeout.ok()) return ToC(op_timeout.status());
    // The epoch the rank is in now (after rankd_rejoin, a later one than
    // its join's): a session's keys are the epoch's.
    auto descriptor = rankd::dataplane::DescriptorFromProto(
        rank->state->client->descriptor());
    if (!descriptor.ok()) return ToC(descriptor.status());
    auto restriction =
        rankd::capi::internal::RestrictionOf(o, *descriptor, kFn);
    if (!restriction.ok()) return ToC(restriction.status());
    if (backend == RANKD_BACKEND_NCCL) {
      auto opened = rankd::capi::internal::OpenNccl(*rank->state, o,
                                                    *op_timeout, *restriction);
      if (!opened.ok()) {
        return Error(opened.status().code(), kFn,
                     absl::StrCat("opening an NCCL session: ",
                                  opened.status().message()));
      }
      auto state = std::make_shared<rankd::capi::internal::SessionState>();
      state->rank = rank->state;
      state->nccl = *std::move(opened);
      auto handle = std::make_unique<rankd_session>();
      handle->state = std::move(state);
      handle->backend = RANKD_BACKEND_NCCL;
      *session = handle.release();  // rankd_session_free
      return nullptr;
    }
    rankd::dataplane::gloo::GlooSessionOptions gloo;
    gloo.op_timeout = *op_timeout;
    gloo.restrict_capabilities = *restriction;
    gloo.verify_agreement = o.verify_agreement != 0;
    gloo.hostname = rankd::capi::internal::GlooHostname(o.gloo_hostname);
    // gloo.instance unset: the session numbers itself (a second one never
    // reads the first one's addresses).
    auto opened = rankd::dataplane::gloo::GlooSession::Open(
        *descriptor, rank->state->control_plane.get(), gloo);
    if (!opened.ok()) return ToC(opened.status());
    auto state = std::make_shared<rankd::capi::internal::SessionState>();
    state->rank = rank->state;
    state->gloo = *std::move(opened);
    auto handle = std::make_unique<rankd_session>();
    handle->state = std::move(state);
    handle->backend = RANKD_BACKEND_GLOO;
    *session = handle.release();  // rankd_session_free
    return nullptr;
  });
}

void rankd_session_free(rankd_session* session) {
  std::unique_ptr<rankd_session> owned(session);
}

// ---- rankd_session_reform (issue 38: re-forming after a loss) -------------

rankd_status* rankd_session_reform(rankd_session* session,
                                   double timeout_seconds) {
  return Guarded("rankd_session_reform", [&]() -> rankd_status* {
    constexpr char kFn[] = "rankd_session_reform";
    if (session == nullptr) return NullArgument(kFn, "session");
    auto timeout = rankd::capi::internal::ToDuration(timeout_seconds, kFn,
                                                     "timeout_seconds");
    if (!timeout.ok()) return ToC(timeout.status());
    if (!session->gate.Close()) {
      return Error(absl::StatusCode::kFailedPrecondition, kFn,
                   "the session is being re-formed already (on another "
                   "thread)");
    }
    // Calls from now on are refused until this returns (GuardedCall).
    struct Reopen {
      rankd::capi::internal::ReformGate& gate;
      ~Reopen() { gate.Reopen(); }
    } reopen{session->gate};
    std::shared_ptr<rankd::capi::internal::SessionState>& state =
        session->state;
    if (state->gloo == nullptr && state->nccl == nullptr) {
      return Error(
          absl::StatusCode::kFailedPrecondition, kFn,
          absl::StrCat("the session is gone: ", state->ended.message()));
    }
    // A new state: works of the ended session keep the old one (and see
    // their completions fail as the ended session is aborted).
    auto next = std::make_shared<rankd::capi::internal::SessionState>();
    next->rank = state->rank;
    absl::Status failed;
    if (state->gloo != nullptr) {
      auto reformed = rankd::dataplane::gloo::GlooSession::Reform(
          std::move(state->gloo), *timeout);
      if (reformed.ok()) {
        next->gloo = *std::move(reformed);
      } else {
        failed = reformed.status();
      }
    } else {
      auto reformed = rankd::dataplane::nccl::NcclSession::Reform(
          std::move(state->nccl), *timeout);
      if (reformed.ok()) {
        next->nccl = *std::move(reformed);
      } else {
        failed = reformed.status();
      }
    }
    if (!failed.ok()) {
      // Reform took the ended session in every case.
      state->ended = failed;
      return ToC(failed);
    }
    state = std::move(next);
    return nullptr;
  });
}

// ---- end of rankd_session_reform -------------------------------------------

rankd_status* rankd_session_capabilities(const rankd_session* session,
                                         rankd_capabilities* capabilities) {
  return GuardedCall(
      "rankd_session_capabilities", session, [&]() -> rankd_status* {
        constexpr char kFn[] = "rankd_session_capabilities";
        if (session == nullptr) return NullArgument(kFn, "session");
        if (capabilities == nullptr) return NullArgument(kFn, "capabilities");
        if (capabilities->struct_size < sizeof(rankd_capabilities)) {
          return Error(absl::StatusCode::kInvalidArgument, kFn,
                       absl::StrCat("capabilities->struct_size is ",
                                    capabilities->struct_size,
                                    "; set it to sizeof(rankd_capabilities), ",
                                    sizeof(rankd_capabilities)));
        }
        const rankd::dataplane::DistributedCapabilities caps =
            session->state->capabilities();
        capabilities->world_collectives = caps.world_collectives ? 1 : 0;
        capabilities->point_to_point = caps.point_to_point ? 1 : 0;
        capabilities->variable_all_to_all = caps.variable_all_to_all ? 1 : 0;
        capabilities->exact_completion = caps.exact_completion ? 1 : 0;
        return nullptr;
      });
}

int rankd_session_supports_group(const rankd_session* session, uint32_t group) {
  // As a status-returning call, through the gate and the guard (copying
  // the capabilities allocates); 0 for any failure.
  int supported = 0;
  rankd_status* failed = GuardedCall(
      "rankd_session_supports_group", session, [&]() -> rankd_status* {
        if (session == nullptr) return nullptr;
        const rankd::dataplane::DistributedCapabilities caps =
            session->state->capabilities();
        supported = group == RANKD_WORLD_GROUP
                        ? caps.world_collectives
                        : caps.collective_groups.count(group) > 0;
        return nullptr;
      });
  rankd_status_free(failed);
  return supported;
}

int32_t rankd_session_backend(const rankd_session* session) {
  return session == nullptr ? 0 : session->backend;
}

rankd_status* rankd_all_reduce_sum(rankd_session* session, uint32_t group,
                                   const rankd_tensor* input,
                                   const rankd_tensor* output, void* stream,
                                   rankd_work** work) {
  return GuardedCall("rankd_all_reduce_sum", session, [&]() -> rankd_status* {
    constexpr char kFn[] = "rankd_all_reduce_sum";
    if (session != nullptr && session->state->nccl != nullptr) {
      return rankd::capi::internal::NcclAllReduceSum(session, group, input,
                                                     output, stream, work);
    }
    auto operands = Prepare(session, stream, work, kFn, input, output);
    if (!operands.ok()) return ToC(operands.status());
    const HostTensor& in = operands->input;
    const HostTensor& out = operands->output;
    // In place on the library's copy (the caller's output is written at
    // delivery either way); an output of another shape at the same address
    // goes to the session, which refuses it.
    const bool in_place =
        output->data == input->data && out.descriptor() == in.descriptor();
    return MakeWork(session,
                    session->state->gloo->AllReduceSumInto(ScopeOf(group), in,
                                                           in_place ? in : out),
                    output->data, work);
  });
}

rankd_status* rankd_all_gather(rankd_session* session, uint32_t group,
                               const rankd_tensor* input,
                               const rankd_tensor* output, void* stream,
                               rankd_work** work) {
  return GuardedCall("rankd_all_gather", session, [&]() -> rankd_status* {
    constexpr char kFn[] = "rankd_all_gather";
    if (session != nullptr && session->state->nccl != nullptr) {
      return rankd::capi::internal::NcclAllGather(session, group, input, output,
                                                  stream, work);
    }
    auto operands = Prepare(session, stream, work, kFn, input, output);
    if (!operands.ok()) return ToC(operands.status());
    const HostTensor& in = operands->input;
    const HostTensor& out = operands->output;
    return MakeWork(
        session, session->state->gloo->AllGatherInto(ScopeOf(group), in, out),
        output->data, work);
  });
}

rankd_status* rankd_all_to_all_v(rankd_session* session, uint32_t group,
                                 const rankd_tensor* input,
                                 const size_t* send_counts,
                                 const size_t* receive_counts, size_t members,
                                 const rankd_tensor* output, void* stream,
                                 rankd_work** work) {
  return GuardedCall("rankd_all_to_all_v", session, [&]() -> rankd_status* {
    constexpr char kFn[] = "rankd_all_to_all_v";
    // The counts are checked here for both backends.
    if (members > 0 && send_counts == nullptr) {
      return NullArgument(kFn, "send_counts");
    }
    if (members > 0 && receive_counts == nullptr) {
      return NullArgument(kFn, "receive_counts");
    }
    if (session != nullptr && session->state->nccl != nullptr) {
      return rankd::capi::internal::NcclAllToAllV(
          session, group, input, send_counts, receive_counts, members, output,
          stream, work);
    }
    auto operands = Prepare(session, stream, work, kFn, input, output);
    if (!operands.ok()) return ToC(operands.status());
    const HostTensor& in = operands->input;
    const HostTensor& out = operands->output;
    return MakeWork(
        session,
        session->state->gloo->AllToAllVInto(
            ScopeOf(group), in, absl::MakeConstSpan(send_counts, members),
            absl::MakeConstSpan(receive_counts, members), out),
        output->data, work);
  });
}

rankd_status* rankd_send(rankd_session* session, uint32_t group, size_t peer,
                         const rankd_tensor* input, void* stream,
                         rankd_work** work) {
  return GuardedCall("rankd_send", session, [&]() -> rankd_status* {
    constexpr char kFn[] = "rankd_send";
    if (session != nullptr && session->state->nccl != nullptr) {
      return rankd::capi::internal::NcclSend(session, group, peer, input,
                                             stream, work);
    }
    if (absl::Status s = CheckCall(session, stream, work, kFn); !s.ok()) {
      return ToC(s);
    }
    auto in = CopyIn(input, kFn, "input");
    if (!in.ok()) return ToC(in.status());
    return MakeWork(session,
                    session->state->gloo->Send(ScopeOf(group), peer, *in),
                    /*destination=*/nullptr, work);
  });
}

rankd_status* rankd_receive(rankd_session* session, uint32_t group, size_t peer,
                            const rankd_tensor* output, void* stream,
                            rankd_work** work) {
  return GuardedCall("rankd_receive", session, [&]() -> rankd_status* {
    constexpr char kFn[] = "rankd_receive";
    if (session != nullptr && session->state->nccl != nullptr) {
      return rankd::capi::internal::NcclReceive(session, group, peer, output,
                                                stream, work);
    }
    if (absl::Status s = CheckCall(session, stream, work, kFn); !s.ok()) {
      return ToC(s);
    }
    auto out = OutputLike(output, kFn, "output");
    if (!out.ok()) return ToC(out.status());
    return MakeWork(
        session, session->state->gloo->ReceiveInto(ScopeOf(group), peer, *out),
        output->data, work);
  });
}

rankd_status* rankd_batch_send_receive(rankd_session* session, uint32_t group,
                                       const rankd_peer_tensor* sends,
                                       size_t send_count,
                                       const rankd_peer_tensor* receives,
                                       size_t receive_count, void* stream,
                                       rankd_work** work) {
  return GuardedCall(
      "rankd_batch_send_receive", session, [&]() -> rankd_status* {
        constexpr char kFn[] = "rankd_batch_send_receive";
        if (session != nullptr && session->state->nccl != nullptr) {
          return rankd::capi::internal::NcclBatchSendReceive(
              session, group, sends, send_count, receives, receive_count,
              stream, work);
        }
        if (absl::Status s = CheckCall(session, stream, work, kFn); !s.ok()) {
          return ToC(s);
        }
        if (send_count > 0 && sends == nullptr)
          return NullArgument(kFn, "sends");
        if (receive_count > 0 && receives == nullptr) {
          return NullArgument(kFn, "receives");
        }
        // The session checks the batch's size, peers and shared outputs; these
        // bounds only keep the copies below from growing without limit first.
        if (send_count > rankd::dataplane::kMaxBatchTransfers ||
            receive_count > rankd::dataplane::kMaxBatchTransfers) {
          return Error(absl::StatusCode::kInvalidArgument, kFn,
                       absl::StrCat("a batch holds at most ",
                                    rankd::dataplane::kMaxBatchTransfers,
                                    " transfers; got ", send_count,
                                    " sends and ", receive_count, " receives"));
        }
        std::vector<PeerValue<HostTensor>> send_values, receive_values;
        for (size_t i = 0; i < send_count; ++i) {
          auto in =
              CopyIn(&sends[i].tensor, kFn, absl::StrCat("sends[", i, "]"));
          if (!in.ok()) return ToC(in.status());
          send_values.push_back({sends[i].peer, *std::move(in)});
        }
        for (size_t i = 0; i < receive_count; ++i) {
          auto out = OutputLike(&receives[i].tensor, kFn,
                                absl::StrCat("receives[", i, "]"));
          if (!out.ok()) return ToC(out.status());
          receive_values.push_back({receives[i].peer, *std::move(out)});
        }
        auto submitted = session->state->gloo->BatchSendReceive(
            ScopeOf(group), send_values, receive_values);
        if (!submitted.ok()) return ToC(submitted.status());
        std::vector<rankd_work::Delivery> deliveries;
        for (size_t i = 0; i < receive_count; ++i) {
          deliveries.push_back(
              {std::move(submitted->output[i]), receives[i].tensor.data});
        }
        return HandOut(session, std::move(submitted->completion),
                       std::move(deliveries), work);
      });
}

int rankd_work_is_complete(rankd_work* work) {
  if (work == nullptr || !work->completion->IsComplete()) return 0;
  // Complete: Wait returns at once, with the work's status.
  if (work->completion->Wait().ok()) rankd::capi::internal::Deliver(*work);
  return 1;
}

rankd_status* rankd_work_wait(rankd_work* work) {
  return Guarded("rankd_work_wait", [&]() -> rankd_status* {
    if (work == nullptr) return NullArgument("rankd_work_wait", "work");
    absl::Status s = work->completion->Wait();
    if (s.ok()) rankd::capi::internal::Deliver(*work);
    return ToC(s);
  });
}

rankd_status* rankd_work_wait_bounded(rankd_work* work, double timeout_seconds,
                                      int32_t mode) {
  return Guarded("rankd_work_wait_bounded", [&]() -> rankd_status* {
    constexpr char kFn[] = "rankd_work_wait_bounded";
    if (work == nullptr) return NullArgument(kFn, "work");
    std::optional<rankd::dataplane::CancellationMode> m =
        rankd::capi::internal::ModeOf(mode);
    if (!m.has_value()) {
      return Error(
          absl::StatusCode::kInvalidArgument, kFn,
          absl::StrCat("mode is ", mode, ", not a rankd_cancellation"));
    }
    auto timeout = rankd::capi::internal::ToDuration(timeout_seconds, kFn,
                                                     "timeout_seconds");
    if (!timeout.ok()) return ToC(timeout.status());
    auto outcome = work->completion->WaitBounded(*timeout, *m);
    if (!outcome.ok()) return ToC(outcome.status());
    if (!outcome->completed()) {
      return rankd::capi::internal::AsWaitTimeout(
          Error(absl::StatusCode::kDeadlineExceeded, kFn,
                absl::StrCat("the work did not complete within ",
                             absl::FormatDuration(*timeout), "; ",
                             rankd::dataplane::CancellationModeName(*m),
                             " applied, and the session is poisoned")));
    }
    rankd::capi::internal::Deliver(*work);
    return nullptr;
  });
}

int rankd_work_supports_cancellation(const rankd_work* work, int32_t mode) {
  if (work == nullptr) return 0;
  std::optional<rankd::dataplane::CancellationMode> m =
      rankd::capi::internal::ModeOf(mode);
  return m.has_value() && work->completion->SupportsCancellation(*m) ? 1 : 0;
}

void rankd_work_free(rankd_work* work) {
  std::unique_ptr<rankd_work> owned(work);
}

}  // extern "C"
