// ControlPlane: what the data plane needs from rankd's control plane:
// all_gather_words (scheduling metadata, not tensors), the key-value broker
// (NCCL unique ids, Gloo rendezvous) and the job's health, including a push
// notification when a peer is lost so communicators can be aborted.
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

  // A string unique to this job incarnation, to namespace keys.
  virtual std::string Namespace() const = 0;
};

// `key` as a key of rank `owner`: "r<owner>/<key>". The job's key-value
// broker lets only that rank create, change or delete such a key
// (docs/operations.md, "Key-value ownership"), so another rank can neither
// set first, overwrite nor delete a key its peers wait on. Every key the
// data plane writes is named so, after the rank the protocol names as its
// writer.
std::string OwnedKey(uint32_t owner, absl::string_view key);

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
// and outlive the returned object. It takes over the client's (single)
// failure callback, Client::SetFailureCallback, to fan it out to every
// OnJobFailure registration.
std::unique_ptr<ControlPlane> MakeClientControlPlane(Client* client);

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_CONTROL_PLANE_H_
