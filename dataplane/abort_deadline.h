// AbortDeadline: the bound on a native abort. NCCL's ncclCommAbort frees
// device memory, which waits for the device: a kernel that never ends (a
// stuck GPU, another communicator's kernel that nobody aborts) makes it
// wait forever, and the process would hang with no word while its peers
// have long failed. As PyTorch's heartbeat monitor does, an abort that has
// not returned within its bound ends the process: it writes what is stuck
// to stderr and exits with kExitNativeAbortHung (common/exit_codes.h), so
// that the launcher or Kubernetes replaces it. Depends on
// common/exit_codes.h and absl.
#ifndef RANKD_DATAPLANE_ABORT_DEADLINE_H_
#define RANKD_DATAPLANE_ABORT_DEADLINE_H_

#include <functional>
#include <string>
#include <thread>

#include "absl/strings/string_view.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace rankd::dataplane {

class AbortDeadline {
 public:
  // Arms the bound: unless this object is destroyed (the abort returned)
  // within `timeout`, writes "rankd: <backend> abort did not return within
  // <timeout>: <describe()>; ending the process (exit status 86, the
  // native abort hung)" to stderr and ends the process at once (_Exit: no
  // destructor could run past a stuck device). `describe` runs on the
  // monitor thread, only then, and must not block. An infinite `timeout`
  // arms nothing.
  AbortDeadline(absl::string_view backend, absl::Duration timeout,
                std::function<std::string()> describe);
  // Disarms the bound (the abort returned) and joins the monitor thread.
  ~AbortDeadline();

  AbortDeadline(const AbortDeadline&) = delete;
  AbortDeadline& operator=(const AbortDeadline&) = delete;

 private:
  absl::Notification returned_;
  std::thread monitor_;
};

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_ABORT_DEADLINE_H_
