// The C ABI's statuses, codes, version and the conversions every entry point
// shares (capi/internal/handles.h). Depends on absl, the client library
// (error reasons) and rankd.h.
#include "absl/status/status.h"

#include <cmath>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "capi/internal/handles.h"
#include "client/client.h"
#include "dataplane/dtype.h"
#include "rankd/rankd.h"

namespace rankd::capi::internal {

RankState::~RankState() {
  control_plane.reset();  // uses the client
  client.reset();
}

SessionState::~SessionState() {
  gloo.reset();  // both use the rank's control plane
  nccl.reset();
  rank.reset();
}

rankd_status* ToC(const absl::Status& status) {
  if (status.ok()) return nullptr;
  auto c = std::make_unique<rankd_status>();
  c->status = status;
  c->message = std::string(status.message());
  return c.release();  // the caller owns it: rankd_status_free
}

rankd_status* Error(absl::StatusCode code, const char* function,
                    absl::string_view message) {
  return ToC(absl::Status(code, absl::StrCat(function, ": ", message)));
}

rankd_status* NullArgument(const char* function, const char* argument) {
  return Error(absl::StatusCode::kInvalidArgument, function,
               absl::StrCat(argument, " is NULL"));
}

namespace {

// Made when the library loads, while memory is still there to make it.
rankd_status* OutOfMemorySentinel() {
  static rankd_status* const sentinel = [] {
    auto made = std::make_unique<rankd_status>();
    made->status = absl::ResourceExhaustedError("rankd: out of memory");
    made->message = std::string(made->status.message());
    return made.release();  // never freed: rankd_status_free skips it
  }();
  return sentinel;
}
[[maybe_unused]] rankd_status* const kOutOfMemoryMadeAtLoad =
    OutOfMemorySentinel();

}  // namespace

rankd_status* OutOfMemory(const char* function) noexcept {
  try {
    return Error(absl::StatusCode::kResourceExhausted, function,
                 "out of memory");
  } catch (...) {
    return OutOfMemorySentinel();
  }
}

rankd_status* Unexpected(const char* function, const char* what) noexcept {
  try {
    return Error(absl::StatusCode::kInternal, function,
                 absl::StrCat("unexpected C++ exception: ", what));
  } catch (...) {
    return OutOfMemorySentinel();
  }
}

absl::Status ReformInProgress(const char* function) {
  return absl::FailedPreconditionError(
      absl::StrCat(function,
                   ": the session is being re-formed (rankd_session_reform "
                   "on another thread); call again once that returned"));
}

rankd_status* AsWaitTimeout(rankd_status* status) {
  status->wait_timeout = true;
  return status;
}

absl::StatusOr<absl::Duration> ToDuration(double seconds, const char* function,
                                          const char* what,
                                          TimeoutRules rules) {
  if (std::isinf(seconds) && seconds > 0 && rules.allow_infinite) {
    return absl::InfiniteDuration();
  }
  const bool valid = std::isfinite(seconds) &&
                     (seconds > 0 || (seconds == 0 && rules.allow_zero));
  if (!valid) {
    return absl::InvalidArgumentError(absl::StrCat(
        function, ": ", what, " is ", seconds, " seconds; it must be ",
        rules.allow_zero ? "zero or positive" : "positive",
        rules.allow_infinite ? " (or INFINITY)" : " and finite"));
  }
  return absl::Seconds(seconds);
}

}  // namespace rankd::capi::internal

extern "C" {

uint32_t rankd_abi_version(void) { return RANKD_ABI_VERSION; }

rankd_code rankd_status_code(const rankd_status* status) {
  if (status == nullptr) return RANKD_OK;
  return static_cast<rankd_code>(status->status.code());
}

const char* rankd_status_message(const rankd_status* status) {
  return status == nullptr ? "" : status->message.c_str();
}

int rankd_status_is_wait_timeout(const rankd_status* status) {
  return status != nullptr && status->wait_timeout ? 1 : 0;
}

int rankd_status_is_epoch_fence(const rankd_status* status) {
  return status != nullptr && rankd::Client::FencedByALaterEpoch(status->status)
             ? 1
             : 0;
}

int rankd_status_ends_an_epoch(const rankd_status* status) {
  return status != nullptr && rankd::Client::EndsAnEpoch(status->status) ? 1
                                                                         : 0;
}

void rankd_status_free(rankd_status* status) {
  if (status == rankd::capi::internal::OutOfMemorySentinel()) return;
  std::unique_ptr<rankd_status> owned(status);
}

const char* rankd_code_name(int32_t code) {
  switch (code) {
    case RANKD_OK:
      return "OK";
    case RANKD_CANCELLED:
      return "CANCELLED";
    case RANKD_UNKNOWN:
      return "UNKNOWN";
    case RANKD_INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case RANKD_DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case RANKD_NOT_FOUND:
      return "NOT_FOUND";
    case RANKD_ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case RANKD_PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case RANKD_RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case RANKD_FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case RANKD_ABORTED:
      return "ABORTED";
    case RANKD_OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case RANKD_UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case RANKD_INTERNAL:
      return "INTERNAL";
    case RANKD_UNAVAILABLE:
      return "UNAVAILABLE";
    case RANKD_DATA_LOSS:
      return "DATA_LOSS";
    case RANKD_UNAUTHENTICATED:
      return "UNAUTHENTICATED";
  }
  return "UNKNOWN_CODE";
}

size_t rankd_dtype_size(int32_t dtype) {
  if (dtype < RANKD_BOOL || dtype > RANKD_COMPLEX64) return 0;
  return rankd::dataplane::DtypeSize(
      static_cast<rankd::dataplane::TensorDtype>(dtype));
}

}  // extern "C"
