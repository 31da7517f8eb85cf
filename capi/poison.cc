// The C ABI's poisoning and aborting of a session (capi/include/rankd/rankd.h,
// "Poisoning and aborting a session"): rankd_session_poison,
// rankd_session_abort and rankd_session_poison_status, on either backend,
// over the sessions' one failure vocabulary (SessionFront's Poison, Abort
// and poison(); docs/contract.md, "Failures: one vocabulary").
//
// Depends on capi/internal/handles.h and absl.
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "capi/internal/handles.h"
#include "rankd/rankd.h"

namespace rankd::capi::internal {
namespace {

// A session a failed rankd_session_reform ended: that error, as every
// other call on it answers (CheckCall in gloo.cc).
absl::Status Gone(const SessionState& state, const char* function) {
  return absl::Status(
      state.ended.code(),
      absl::StrCat(function, ": the session is gone: ", state.ended.message()));
}

// Checks what rankd_session_poison and rankd_session_abort are given, as
// rankd.h says, before anything is latched: a live session, a message, and
// a code that is an error. (Not a
// StatusOr<Status>: its error and its value would both be a Status.)
absl::Status CheckCause(const rankd_session* session, int32_t code,
                        const char* message, const char* function) {
  if (session == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(function, ": session is NULL"));
  }
  if (message == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(function, ": message is NULL; a cause needs words"));
  }
  if (code < RANKD_OK || code > RANKD_UNAUTHENTICATED) {
    return absl::InvalidArgumentError(
        absl::StrCat(function, ": code is ", code, ", not a rankd_code"));
  }
  if (code == RANKD_OK) {
    return absl::InvalidArgumentError(absl::StrCat(
        function, ": code is RANKD_OK; a cause must be an error code"));
  }
  const SessionState& state = *session->state;
  if (state.gloo == nullptr && state.nccl == nullptr) {
    return Gone(state, function);
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace rankd::capi::internal

using rankd::capi::internal::CheckCause;
using rankd::capi::internal::Guarded;
using rankd::capi::internal::GuardedCall;
using rankd::capi::internal::ToC;

extern "C" {

rankd_status* rankd_session_poison(rankd_session* session, int32_t code,
                                   const char* message) {
  return GuardedCall("rankd_session_poison", session, [&]() -> rankd_status* {
    constexpr char kFn[] = "rankd_session_poison";
    if (absl::Status s = CheckCause(session, code, message, kFn); !s.ok()) {
      return ToC(s);
    }
    session->state->Poison(
        absl::Status(static_cast<absl::StatusCode>(code), message));
    return nullptr;
  });
}

rankd_status* rankd_session_abort(rankd_session* session, int32_t code,
                                  const char* message) {
  return GuardedCall("rankd_session_abort", session, [&]() -> rankd_status* {
    constexpr char kFn[] = "rankd_session_abort";
    if (absl::Status s = CheckCause(session, code, message, kFn); !s.ok()) {
      return ToC(s);
    }
    session->state->Abort(
        absl::Status(static_cast<absl::StatusCode>(code), message));
    return nullptr;
  });
}

rankd_status* rankd_session_poison_status(const rankd_session* session) {
  return GuardedCall(
      "rankd_session_poison_status", session, [&]() -> rankd_status* {
        constexpr char kFn[] = "rankd_session_poison_status";
        if (session == nullptr) {
          return rankd::capi::internal::NullArgument(kFn, "session");
        }
        const rankd::capi::internal::SessionState& state = *session->state;
        if (state.gloo == nullptr && state.nccl == nullptr) {
          return ToC(rankd::capi::internal::Gone(state, kFn));
        }
        return ToC(state.poison());
      });
}

}  // extern "C"
