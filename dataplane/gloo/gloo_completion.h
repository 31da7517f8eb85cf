// GlooCompletion: the exact completion of one operation submitted to the
// Gloo executor (the backend's CommunicationCompletion and the session's
// Completion). It retains every resource the operation uses (tensor buffers,
// the group and its Gloo context) until the executor finishes the operation,
// and it is complete only after the operation's last native call returned
// and its output was written. WaitBounded applies a cancellation mode
// through the owning communicator (ExecutionHost): QuarantineUntilComplete
// moves the retained resources to the communicator's quarantine;
// NativeCancel aborts the communicator's Gloo contexts and returns only
// after every executor has unwound (see docs/dataplane.md). Thread-safe.
// Depends on dataplane/completion.h, gloo/execution_host.h and absl.
#ifndef RANKD_DATAPLANE_GLOO_GLOO_COMPLETION_H_
#define RANKD_DATAPLANE_GLOO_GLOO_COMPLETION_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "dataplane/completion.h"
#include "dataplane/gloo/internal/execution_host.h"

namespace rankd::dataplane::gloo {

class GlooCompletion final
    : public BoundedCompletion,
      public std::enable_shared_from_this<GlooCompletion> {
 public:
  // `operation` names the work in errors ("all_reduce_sum on group 3").
  GlooCompletion(std::string operation, std::weak_ptr<ExecutionHost> host,
                 std::vector<std::shared_ptr<const void>> resources);

  bool IsComplete() const override;
  absl::Status Wait() override;
  bool SupportsCancellation(CancellationMode mode) const override;
  absl::StatusOr<WaitOutcome> WaitBounded(absl::Duration timeout,
                                          CancellationMode mode) override;

  const std::string& operation() const { return operation_; }

  // Waits up to `timeout`; returns whether the work completed.
  bool WaitFor(absl::Duration timeout) const;

  // Resources still retained by this completion (0 once finished or
  // quarantined).
  size_t retained() const;

  // Executor side: releases the retained resources, then marks the work
  // complete with `status` (so a woken waiter's next allocation can reuse
  // them). Only the first call counts.
  void Finish(absl::Status status);

  // Host side: moves the retained resources out (to a quarantine).
  std::vector<std::shared_ptr<const void>> TakeResources();

 private:
  const std::string operation_;
  const std::weak_ptr<ExecutionHost> host_;
  mutable absl::Mutex mu_;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<const void>> resources_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rankd::dataplane::gloo

#endif  // RANKD_DATAPLANE_GLOO_GLOO_COMPLETION_H_
