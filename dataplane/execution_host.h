// ExecutionHost: what a host executor (host_executor.h) and its completions
// need from the session that owns them: admission (poison and quarantine
// fence), turning a native failure into the session's poison cause, and, as
// the operations' owner, the native hooks of the engine's one cancellation
// policy (cancellation.h). An interface so that completion and executor do
// not depend on the session (which owns them). Gloo's session implements
// it. Depends on cancellation.h, operation.h and absl.
#ifndef RANKD_DATAPLANE_EXECUTION_HOST_H_
#define RANKD_DATAPLANE_EXECUTION_HOST_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dataplane/cancellation.h"
#include "dataplane/completion.h"
#include "dataplane/operation.h"

namespace rankd::dataplane {

class ExecutionHost : public CancellingOwner {
 public:
  virtual ~ExecutionHost() = default;

  // OK when new work named `operation` may be submitted: the session is not
  // poisoned and nothing is quarantined.
  virtual absl::Status Admission(const char* operation) const = 0;

  // OK when queued work may start now: the session's native contexts are
  // not aborted (a poison alone only latches, so work submitted before it
  // still runs, as on NCCL's stream). The poison cause otherwise (the work
  // is then finished with it without running).
  virtual absl::Status BeforeRun(const std::string& operation) const = 0;

  // Called on the executor thread when `operation` failed natively with
  // `error`. Poisons the session (attributing the failure to a lost rank
  // when the control plane reports one, unless `explained`: the cause is
  // already established) and returns the status the operation's completion
  // reports.
  virtual absl::Status OnNativeFailure(const std::string& operation,
                                       const absl::Status& error,
                                       bool explained) = 0;

  // Called as `op` is queued, under the executor's lock: the session's
  // watchdog holds it to its deadline (dataplane/watchdog.h). Must not
  // block or call back into the executor.
  virtual void Track(const std::shared_ptr<Operation>& op) = 0;

  // Called after work finished, so a quarantine can release it promptly.
  virtual void WorkFinished() = 0;
};

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_EXECUTION_HOST_H_
