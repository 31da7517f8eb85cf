// CallCancellation: how a caller's cancellation reaches the wait its call
// started. A gRPC service cancels it when the client cancels or goes away;
// whoever parks a waiter for the call (the key-value broker, the link to
// the coordinator) registers how to release it, so an abandoned call frees
// what it held at once instead of at its deadline. Depends on absl only.
#ifndef RANKD_DAEMON_CALL_CANCELLATION_H_
#define RANKD_DAEMON_CALL_CANCELLATION_H_

#include <functional>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace rankd {

// Thread-safe. Shared by the call's reactor and whatever it waits on.
class CallCancellation {
 public:
  // Runs `release` once, on the thread that calls Cancel() (at once, on
  // this thread, if the call was already cancelled). `release` must stay
  // safe to run while the call is in flight: it typically looks its
  // waiter up by id and does nothing when the waiter is gone.
  void OnCancel(std::function<void()> release);

  // Runs every registered release; later calls do nothing.
  void Cancel();

  bool cancelled() const;

 private:
  mutable absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::function<void()>> releases_ ABSL_GUARDED_BY(mu_);
};

// May be null: the call cannot be cancelled (an in-process caller).
using CancellationRef = std::shared_ptr<CallCancellation>;

}  // namespace rankd

#endif  // RANKD_DAEMON_CALL_CANCELLATION_H_
