// The exceptions rankd's c10d store (c10d_store/store.h) throws: torch's
// own error class, as c10d stores throw, carrying rankd's status code and
// message. Depends on libtorch's c10 and abseil only.
#ifndef RANKD_C10D_STORE_ERRORS_H_
#define RANKD_C10D_STORE_ERRORS_H_

#include <string>

#include "absl/status/status.h"
#include "c10/util/Exception.h"

namespace rankd::c10d_store {

// Every error a store call throws: a c10::Error (what torch code, and
// torch's Python bindings as RuntimeError, catch from a store; torch 1.13
// has no DistStoreError) whose message is rankd's (without a backtrace).
// status() is rankd's status: its code (PermissionDenied, InvalidArgument,
// ...) and the same message.
class StoreError : public c10::Error {
 public:
  explicit StoreError(absl::Status status);
  const absl::Status& status() const { return status_; }

 private:
  absl::Status status_;
};

// A get or wait whose key was not set within its timeout (code
// DeadlineExceeded); the message names the key and the timeout.
class StoreTimeoutError : public StoreError {
 public:
  using StoreError::StoreError;
};

// A call that ended because the rankd job failed (code Aborted, or
// Unavailable when this process lost its daemon); the message is the job's
// failure as rankd reported it, naming the lost rank or node.
class JobFailedError : public StoreError {
 public:
  using StoreError::StoreError;
};

// JobFailedError of a loss the job recovers from in place (rankd
// --recovery=on or domain, the job serving; Client::EndsAnEpoch): it ended
// the job's epoch ("job J epoch E ended (MEMBER_LOST, ...)"); after
// Client::Rejoin a new Store (and new process groups) continue in the next
// epoch.
class EpochEndedError : public JobFailedError {
 public:
  using JobFailedError::JobFailedError;
};

}  // namespace rankd::c10d_store

#endif  // RANKD_C10D_STORE_ERRORS_H_
