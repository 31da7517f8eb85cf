// Quarantine: the owner that QuarantineUntilComplete hands timed-out work to
// (docs/contract.md, Types). It takes ownership of a completion and every
// resource the work uses (tensors, buffers, groups, routes) and releases them
// only after the completion reports exact completion, from a reaper thread that
// polls IsComplete (and can be nudged with Notify). While anything is
// quarantined, Fence() fails; the Gloo communicator checks it before
// accepting new work (NCCL poisons the session instead).
//
//   quarantine.Admit(completion, {tensor.resource(), group}, "all_reduce_sum
//                    on group 3");
//   ...
//   if (absl::Status s = quarantine.Fence("gloo"); !s.ok()) return s;
//
// Both backends use it: Gloo for work past a QuarantineUntilComplete
// deadline (its work always finishes once the contexts are aborted, so the
// destructor may wait), NCCL also for operations whose completion was
// dropped while the GPU still ran them (a kernel waiting on a dead peer may
// never finish, so the NCCL session drains for a while, then Abandon()s).
//
// Thread-safe. Depends on dataplane/completion.h and absl.
#ifndef RANKD_DATAPLANE_QUARANTINE_H_
#define RANKD_DATAPLANE_QUARANTINE_H_

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "dataplane/completion.h"

namespace rankd::dataplane {

class Quarantine {
 public:
  // The reaper checks quarantined completions at least this often.
  explicit Quarantine(absl::Duration poll_interval = absl::Milliseconds(5));
  // Blocks until every quarantined item completed and was released: a
  // quarantine never frees live resources. Owners must make sure quarantined
  // work can finish (e.g. by draining their executor first), or Abandon().
  ~Quarantine();

  Quarantine(const Quarantine&) = delete;
  Quarantine& operator=(const Quarantine&) = delete;

  // Takes ownership of `completion` and `resources`. Both are released,
  // resources first, once completion->IsComplete() is true (at once if it
  // already is). `description` names the work in Fence() errors.
  void Admit(std::shared_ptr<const Completion> completion,
             std::vector<std::shared_ptr<const void>> resources,
             std::string description);

  // Asks the reaper to check now (e.g. after some work finished).
  void Notify();

  // Items quarantined now.
  size_t size() const;
  // Items ever admitted.
  size_t admitted() const;

  // OK while nothing is quarantined; otherwise FailedPrecondition naming
  // `backend`, the number of items and the first one, saying that the
  // communicator refuses new work until they complete.
  absl::Status Fence(const char* backend) const;

  // Waits until nothing is quarantined or `timeout` passes; returns whether
  // it is empty.
  bool WaitUntilEmpty(absl::Duration timeout);

  // Gives up on what is still quarantined: items that completed meanwhile
  // are released; the others' resources are leaked, never freed (a device
  // may still use them). The quarantine is empty afterwards. Returns how
  // many items were leaked.
  size_t Abandon();

 private:
  struct Item {
    std::shared_ptr<const Completion> completion;
    std::vector<std::shared_ptr<const void>> resources;
    std::string description;
  };
  void ReaperLoop();

  const absl::Duration poll_interval_;
  mutable absl::Mutex mu_;
  std::vector<Item> items_ ABSL_GUARDED_BY(mu_);
  // items_.size(), written under mu_, for Fence and Notify to read without
  // it: they run for every operation.
  std::atomic<size_t> held_{0};
  size_t admitted_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool nudged_ ABSL_GUARDED_BY(mu_) = false;
  std::thread reaper_;  // started on the first Admit
};

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_QUARANTINE_H_
