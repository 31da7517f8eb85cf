// ReformGate: admits calls on one rankd_session, except while
// rankd_session_reform holds it. Calls never wait and are never refused
// spuriously; a re-form waits for the calls already admitted (submissions:
// short) and then has the session to itself until it reopens the gate.
//
// Private to capi/. Depends on absl only.
#ifndef RANKD_CAPI_INTERNAL_REFORM_GATE_H_
#define RANKD_CAPI_INTERNAL_REFORM_GATE_H_

#include <atomic>
#include <cstdint>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace rankd::capi::internal {

class ReformGate {
 public:
  // Admits one call: true, and the caller must call Leave() once done;
  // false while a re-form holds the gate (the call must not touch the
  // session's state). Never waits.
  bool Enter() {
    // Announce, then look (both sequentially consistent): of a call and a
    // re-form starting together, at least one sees the other.
    calls_.fetch_add(1);
    if (!reforming_.load()) return true;
    Leave();
    return false;
  }

  void Leave() {
    if (calls_.fetch_sub(1) == 1 && reforming_.load()) {
      absl::MutexLock lock(&mu_);
      drained_.SignalAll();
    }
  }

  // Takes the gate for a re-form: false at once when another re-form holds
  // it; otherwise waits until the calls admitted before it left, and
  // returns true. The caller must call Reopen() once done.
  bool Close() {
    if (reforming_.exchange(true)) return false;
    absl::MutexLock lock(&mu_);
    while (calls_.load() != 0) {
      // Leave() signals under mu_; the bound only guards this loop.
      drained_.WaitWithTimeout(&mu_, absl::Milliseconds(1));
    }
    return true;
  }

  void Reopen() { reforming_ = false; }

 private:
  std::atomic<int64_t> calls_{0};
  std::atomic<bool> reforming_{false};
  absl::Mutex mu_;
  absl::CondVar drained_;
};

}  // namespace rankd::capi::internal

#endif  // RANKD_CAPI_INTERNAL_REFORM_GATE_H_
