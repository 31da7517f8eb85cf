// ControlPlane: what the data plane needs from rankd's control plane:
// all_gather_words (scheduling metadata, not tensors), the key-value broker
// (NCCL unique ids, Gloo rendezvous) and the job's health, including a push
// notification when a peer is lost so communicators can be aborted, and
// joining the next job epoch after a loss (Rejoin).
// ClientControlPlane implements it on the client library; unit tests may
// implement it in process. Depends on the client library and absl.
#ifndef RANKD_DATAPLANE_CONTROL_PLANE_H_
#define RANKD_DATAPLANE_CONTROL_PLANE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "dataplane/completion.h"
#include "dataplane/session_descriptor.h"

namespace rankd {
class Client;
}

namespace rankd::dataplane {

// A submitted all_gather_words round (the bounded form).
class PendingWords : public BoundedCompletion {
 public:
  // The rank-major result once complete; the round's error otherwise.
  // Blocks until complete.
  virtual absl::StatusOr<std::vector<uint32_t>> Result() = 0;
};

class ControlPlane {
 public:
  virtual ~ControlPlane() = default;

  // One synchronous all_gather_words round over the whole world.
  virtual absl::StatusOr<std::vector<uint32_t>> AllGatherWords(
      absl::Span<const uint32_t> local, absl::Duration timeout) = 0;
  // Submits a round now; resolve it later through the returned completion.
  virtual absl::StatusOr<std::unique_ptr<PendingWords>> SubmitAllGatherWords(
      absl::Span<const uint32_t> local, absl::Duration timeout) = 0;

  virtual absl::Status KvSet(absl::string_view key,
                             absl::string_view value) = 0;
  // Blocks until the key exists or `timeout` passes (DeadlineExceeded
  // naming the key).
  virtual absl::StatusOr<std::string> KvGet(absl::string_view key,
                                            absl::Duration timeout) = 0;
  virtual absl::StatusOr<int64_t> KvAdd(absl::string_view key,
                                        int64_t delta) = 0;

  // OK while the job is healthy; the failure (naming the lost rank or
  // node) once it is not.
  virtual absl::Status JobHealth() const = 0;
  // Registers a callback run once, from a control-plane thread, when the
  // job fails. It must not block.
  virtual void OnJobFailure(
      std::function<void(const absl::Status&)> callback) = 0;
  // OnJobFailure, for a callback that does nothing once `owner` is gone (a
  // session's): the control plane may drop it then, so that a process
  // opening and closing sessions keeps no registration per closed one.
  // The default keeps it (OnJobFailure).
  virtual void OnJobFailureWhileAlive(
      std::function<void(const absl::Status&)> callback,
      std::weak_ptr<const void> owner) {
    OnJobFailure(std::move(callback));
  }

  // A string unique to this job incarnation, to namespace keys.
  virtual std::string Namespace() const = 0;

  // Joins the job epoch after `ended_epoch` (docs/architecture.md, "Epochs
  // and recovery"): once a lost rank or node moved the job on, this rank's
  // process stays joined but fenced (its rounds and key-value calls are
  // refused) until it calls this. Returns at once with the current
  // descriptor when this rank already joined an epoch after `ended_epoch`;
  // otherwise waits until the job passed `ended_epoch`, joins again as the
  // same incarnation, and returns once the world is whole at the new
  // epoch, with the descriptor of that epoch (epoch() > ended_epoch).
  // Afterwards JobHealth() is OK again and OnJobFailure registrations made
  // from then on belong to the new epoch (those of the ended epoch have
  // run and never run again). Blocks at most `timeout`.
  //
  // Errors: DeadlineExceeded naming the epoch waited for (and, where known,
  // who is missing) when `timeout` passes; the job's failure when it failed
  // terminally instead of recovering; InvalidArgument for a non-positive
  // timeout. The default: Unimplemented, for control planes that cannot
  // join a later epoch.
  virtual absl::StatusOr<DistributedSessionDescriptor> Rejoin(
      uint64_t ended_epoch, absl::Duration timeout);

  // The job epoch this rank's process is joined into now: its Join's, then
  // each Rejoin's. A session of an earlier epoch re-forms into it without
  // waiting for a loss (another session of the process re-formed first).
  // The default: 0, for control planes that do not know epochs.
  virtual uint64_t JoinedEpoch() const { return 0; }
};

// Where every key of job epoch `epoch` lives in the job's key-value store,
// the one rule for the whole data plane: `key` itself at epoch 1 (so a job
// without recovery names its keys as it always did), "epoch/<epoch>/<key>"
// after. The broker lets a key under "epoch/<N>/" be written only at epoch
// N, owned as the rest of the key is (docs/operations.md, "Key-value
// ownership"), so a session of one epoch never reads another epoch's
// rendezvous addresses, unique ids or session counts: a replacement process
// opening its sessions fresh at epoch N and a survivor re-forming its own at
// epoch N name the same keys, and session numbering restarts at 0 in each
// epoch. Every key the data plane writes or reads goes through it (through
// OwnedKey below).
std::string EpochKey(uint64_t epoch, absl::string_view key);

// `key` as a key of rank `owner`: "r<owner>/<key>". The job's key-value
// broker lets only that rank create, change or delete such a key
// (docs/operations.md, "Key-value ownership"), so another rank can neither
// set first, overwrite nor delete a key its peers wait on. Every key the
// data plane writes is named so, after the rank the protocol names as its
// writer. The epoch form puts the key under `epoch` (EpochKey:
// "epoch/<N>/r<owner>/<key>" after epoch 1); the two-argument form is
// epoch 1's.
std::string OwnedKey(uint32_t owner, absl::string_view key, uint64_t epoch);
std::string OwnedKey(uint32_t owner, absl::string_view key);

// Waits for `key` as KvGet does, for at most `bound`, in KvGets of at most
// `slice` each, calling `stop` (when set) before each one: a wait the broker
// would not end by itself (a failure this process learned another way, an
// owner's interrupt) ends with stop's error. Returns the value; stop's
// error; a KvGet error other than DeadlineExceeded and NotFound (which a
// broker answers a get whose deadline passed on its way); or
// DeadlineExceeded once `bound` passed, for the caller to word. The data
// plane's rendezvous (Gloo's store, NCCL's unique ids) waits through it.
absl::StatusOr<std::string> AwaitKey(ControlPlane& control_plane,
                                     absl::string_view key,
                                     absl::Duration bound, absl::Duration slice,
                                     const std::function<absl::Status()>& stop);

// The number of sessions this rank opened before this one, counted in the
// job's key-value store under `key` (one key per rank and backend): the
// n-th call returns n - 1. Sessions name their keys with it, so a rank's
// second session never reads its first one's while every rank opens them
// in the same order. Errors: the KvAdd's, or Internal for a count out of
// range, prefixed "<backend> backend: numbering this session: ".
absl::StatusOr<uint32_t> NextSessionNumber(ControlPlane& control_plane,
                                           absl::string_view key,
                                           absl::string_view backend);

// The control plane through a joined rankd::Client. `client` must be joined
// and outlive the returned object. It adds one failure callback to the
// client (Client::AddFailureCallback, beside any other), fanned out to every
// OnJobFailure registration. Destroying it drops the registrations and waits
// for those running on other threads to return, so that nothing they
// captured is used afterwards (a registration that destroys the object runs
// on).
std::unique_ptr<ControlPlane> MakeClientControlPlane(Client* client);

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_CONTROL_PLANE_H_
