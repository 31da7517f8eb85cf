// What the C ABI's opaque handles (capi/include/rankd/rankd.h) hold, and the
// conversions every entry point shares: absl::Status to rankd_status*,
// seconds to absl::Duration, NULL checks.
//
// Ownership: a handle holds shared state, so handles may be freed in any
// order: a session holds its rank's state, a work its session's state.
// Within RankState the control plane is destroyed before the client it
// uses; within SessionState the session before the rank state.
//
// Private to capi/. Depends on the client library, the data plane's contract,
// its Gloo and NCCL sessions, and absl.
#ifndef RANKD_CAPI_INTERNAL_HANDLES_H_
#define RANKD_CAPI_INTERNAL_HANDLES_H_

#include <cstdint>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "capi/internal/reform_gate.h"
#include "client/client.h"
#include "dataplane/capabilities.h"
#include "dataplane/collective_scope.h"
#include "dataplane/completion.h"
#include "dataplane/control_plane.h"
#include "dataplane/gloo/gloo_session.h"
#include "dataplane/host_tensor.h"
#include "dataplane/nccl/nccl_session.h"
#include "dataplane/value_descriptor.h"
#include "rankd/rankd.h"

namespace rankd::capi::internal {

// A joined rank: the client, the control plane over it, and what the
// descriptor getters hand out (valid for the state's life).
struct RankState {
  ~RankState();
  std::unique_ptr<Client> client;
  std::unique_ptr<dataplane::ControlPlane> control_plane;
  v1::SessionDescriptor proto;
  std::vector<std::vector<uint32_t>> group_members;  // one per proto group
  // The CUDA device the rank joined with (device_kind "cuda"), or -1 (an
  // NCCL session then takes the local rank's device).
  int32_t cuda_device = -1;
};

// Exactly one of `gloo` and `nccl` is set.
struct SessionState {
  ~SessionState();
  std::shared_ptr<RankState> rank;
  std::unique_ptr<dataplane::gloo::GlooSession> gloo;
  std::unique_ptr<dataplane::nccl::NcclSession> nccl;
  // Set, with neither session, once rankd_session_reform failed: the ended
  // session is gone and every operation is refused with this.
  absl::Status ended;

  dataplane::DistributedCapabilities capabilities() const {
    if (gloo != nullptr) return gloo->capabilities();
    if (nccl != nullptr) return nccl->capabilities();
    return {};
  }

  // The session's failure state, on whichever backend it is (SessionFront's
  // poison, Poison and Abort). A session must be set (not `ended`).
  absl::Status poison() const {
    return gloo != nullptr ? gloo->poison() : nccl->poison();
  }
  void Poison(const absl::Status& cause) {
    if (gloo != nullptr) {
      gloo->Poison(cause);
    } else {
      nccl->Poison(cause);
    }
  }
  void Abort(const absl::Status& cause) {
    if (gloo != nullptr) {
      gloo->Abort(cause);
    } else {
      nccl->Abort(cause);
    }
  }
};

// A status the caller owns; NULL for OK. `function` prefixes messages of
// errors the C layer makes itself ("rankd_join: ...").
rankd_status* ToC(const absl::Status& status);
rankd_status* Error(absl::StatusCode code, const char* function,
                    absl::string_view message);
rankd_status* NullArgument(const char* function, const char* argument);
// The status of an entry point that ran out of memory: RESOURCE_EXHAUSTED,
// "<function>: out of memory". When even that status cannot be allocated,
// one made when the library loaded, which rankd_status_free leaves alone.
rankd_status* OutOfMemory(const char* function) noexcept;
// The status of an entry point whose C++ code threw something other than
// std::bad_alloc (none is expected): INTERNAL, naming `function`.
rankd_status* Unexpected(const char* function, const char* what) noexcept;

// Runs `body`, an entry point's work returning its status, so that no C++
// exception unwinds into the C caller (undefined behaviour there): the
// entry point returns OutOfMemory or Unexpected instead. Every exported
// function returning rankd_status* runs its body through this.
template <typename Body>
rankd_status* Guarded(const char* function, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return OutOfMemory(function);
  } catch (const std::exception& e) {
    return Unexpected(function, e.what());
  } catch (...) {
    return Unexpected(function, "an unknown exception");
  }
}

// `status` (a DEADLINE_EXCEEDED) marked as a bounded wait's own timeout,
// for rankd_status_is_wait_timeout.
rankd_status* AsWaitTimeout(rankd_status* status);

// `seconds` as a duration: positive and finite (or, with the flags, zero or
// +infinity); InvalidArgument naming `function` and `what` otherwise.
struct TimeoutRules {
  bool allow_zero = false;
  bool allow_infinite = false;
};
absl::StatusOr<absl::Duration> ToDuration(double seconds, const char* function,
                                          const char* what,
                                          TimeoutRules rules = {});

// The descriptor of a caller's tensor (dtype, shape, data checked); `what`
// ("input", "sends[2]", ...) names it in errors. Defined in gloo.cc.
absl::StatusOr<dataplane::ValueDescriptor> DescriptorOf(
    const rankd_tensor* t, const char* function, const std::string& what);
// RANKD_WORLD_GROUP or a group id as a scope.
dataplane::CollectiveScope ScopeOf(uint32_t group);

}  // namespace rankd::capi::internal

struct rankd_status {
  absl::Status status;
  std::string message;        // what rankd_status_message returns
  bool wait_timeout = false;  // rankd_status_is_wait_timeout
};

struct rankd_rank {
  std::shared_ptr<rankd::capi::internal::RankState> state;
};

struct rankd_session {
  // Replaced only by rankd_session_reform, holding `gate` closed.
  std::shared_ptr<rankd::capi::internal::SessionState> state;
  // Every other call on the session enters it for its duration
  // (GuardedCall); rankd_session_reform closes it, so that a call on
  // another thread is refused instead of racing with the ended session's
  // teardown.
  mutable rankd::capi::internal::ReformGate gate;
  // RANKD_BACKEND_GLOO or RANKD_BACKEND_NCCL, for the session's life (a
  // re-formed session keeps its backend).
  int32_t backend = 0;
};

namespace rankd::capi::internal {

// The refusal of a call made while rankd_session_reform runs on another
// thread: FAILED_PRECONDITION naming `function`.
absl::Status ReformInProgress(const char* function);

// Guarded, for a call on `session`: runs `body` admitted by the session's
// gate, or returns ReformInProgress without running it while
// rankd_session_reform holds the session. Never waits. A NULL session runs
// `body` as is (it reports the NULL).
template <typename Body>
rankd_status* GuardedCall(const char* function, const rankd_session* session,
                          Body&& body) noexcept {
  return Guarded(function, [&]() -> rankd_status* {
    if (session == nullptr) return body();
    if (!session->gate.Enter()) return ToC(ReformInProgress(function));
    struct Leave {
      ReformGate& gate;
      ~Leave() { gate.Leave(); }
    } leave{session->gate};
    return body();
  });
}

}  // namespace rankd::capi::internal

struct rankd_pending_words {
  std::shared_ptr<rankd::capi::internal::RankState> rank;
  std::unique_ptr<rankd::Client::PendingWords> pending;
  size_t result_words = 0;  // world_size * count
};

struct rankd_bytes {
  std::string value;
};

// A submitted operation: its completion, and (Gloo) the outputs to copy into
// the caller's buffers once its success is first observed. An NCCL work
// writes the caller's device memory itself and has no deliveries.
struct rankd_work {
  struct Delivery {
    rankd::dataplane::HostTensor output;
    void* destination = nullptr;
  };
  std::shared_ptr<rankd::capi::internal::SessionState> session;
  std::shared_ptr<rankd::dataplane::BoundedCompletion> completion;
  absl::Mutex mu;
  std::vector<Delivery> deliveries ABSL_GUARDED_BY(mu);
  bool delivered ABSL_GUARDED_BY(mu) = false;
};

#endif  // RANKD_CAPI_INTERNAL_HANDLES_H_
