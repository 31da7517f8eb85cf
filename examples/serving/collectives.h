// Collectives: the handful of data-plane operations the serving example
// needs, on host matrices, timed per kind. The example's model code is
// written against this interface; session_collectives.h implements it on
// any rankd DistributedSession (Gloo's HostTensor, NCCL's DeviceTensor)
// through a small codec that moves a Matrix in and out of the backend's
// value type.
//
// Every call is synchronous: it submits the operation and waits for its
// completion, so the caller may use the result at once. Errors keep the
// data plane's status code and message (which names a lost rank) behind a
// prefix naming the operation and group, e.g.
//   "all_reduce_sum on group 3: ABORTED: job failed: rank 5 ... lost".
#ifndef RANKD_EXAMPLES_SERVING_COLLECTIVES_H_
#define RANKD_EXAMPLES_SERVING_COLLECTIVES_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace rankd::examples {

// A row-major [rows, cols] float matrix in host memory. rows may be zero.
struct Matrix {
  size_t rows = 0;
  size_t cols = 0;
  std::vector<float> values;

  static Matrix Zeros(size_t rows, size_t cols) {
    return Matrix{rows, cols, std::vector<float>(rows * cols, 0.0f)};
  }
  float* row(size_t r) { return values.data() + r * cols; }
  const float* row(size_t r) const { return values.data() + r * cols; }
};

// The kinds of collective the example times, in report order.
enum class CollectiveKind {
  kAllGatherWords = 0,  // batch agreement (control plane)
  kAllReduceSum,        // tensor-parallel partial outputs
  kAllToAllV,           // expert dispatch and return
  kSendReceive,         // pipeline activations
  kAllGather,           // outputs gathered for rank 0's self-check
};
inline constexpr size_t kNumCollectiveKinds = 5;

// "all_gather_words", "all_reduce_sum", "all_to_all_v", "send/receive",
// "all_gather".
const char* CollectiveKindName(CollectiveKind kind);
// What the example uses the kind for: "batch agreement", ...
const char* CollectiveKindPurpose(CollectiveKind kind);

// Time spent in each kind of collective by this rank (submit to completion,
// including waiting for peers).
struct KindStats {
  uint64_t calls = 0;
  absl::Duration total;
  absl::Duration max;
};

class CollectiveStats {
 public:
  void Record(CollectiveKind kind, absl::Duration elapsed);
  const KindStats& of(CollectiveKind kind) const {
    return kinds_[static_cast<size_t>(kind)];
  }

 private:
  std::array<KindStats, kNumCollectiveKinds> kinds_{};
};

class Collectives {
 public:
  virtual ~Collectives() = default;

  // "gloo" or "nccl".
  virtual const char* backend() const = 0;

  // The job epoch the current session belongs to (1 until a re-form).
  virtual uint64_t epoch() const = 0;

  // Re-forms the data plane after a loss ended the session's epoch (rankd
  // --recovery=on; docs/dataplane.md, "Re-forming after a loss"): the ended
  // session is aborted and dropped, this rank joins the next epoch through
  // its control plane and a new session is opened there with the same
  // options (GlooSession::Reform, NcclSession::Reform), all within
  // `timeout`. Every rank of the new epoch must re-form (a replacement:
  // open) its session before its next operation. What the caller owns (the
  // model shard) is untouched; the statistics carry on.
  // Errors: the backend's Reform errors (DeadlineExceeded naming the epoch
  // and the missing ranks; the ended session's error class when the job
  // failed for good). After a failed Reform there is no session: every
  // later operation fails with FailedPrecondition.
  virtual absl::Status Reform(absl::Duration timeout) = 0;

  // World-wide all_gather_words over the control plane: the rank-major
  // concatenation of every rank's equal-length frame.
  virtual absl::StatusOr<std::vector<uint32_t>> AllGatherWords(
      absl::Span<const uint32_t> frame) = 0;
  // Element-wise sum over `group`'s members, in place.
  virtual absl::Status AllReduceSum(uint32_t group, Matrix& inout) = 0;
  // Rows to and from every member of `group`: send_counts[m] rows of the
  // (destination-major) input go to member m; receive_counts[m] rows arrive
  // from member m (source-major output).
  virtual absl::StatusOr<Matrix> AllToAllV(
      uint32_t group, const Matrix& input, absl::Span<const size_t> send_counts,
      absl::Span<const size_t> receive_counts) = 0;
  // Point to point to/from member `peer` of `group`; a Send pairs with a
  // Receive of the same shape.
  virtual absl::Status Send(uint32_t group, size_t peer,
                            const Matrix& input) = 0;
  virtual absl::StatusOr<Matrix> Receive(uint32_t group, size_t peer,
                                         size_t rows, size_t cols) = 0;
  // Every rank's equal-shaped input, concatenated in rank order.
  virtual absl::StatusOr<Matrix> AllGather(const Matrix& input) = 0;

  const CollectiveStats& stats() const { return stats_; }
  // Times an operation the caller ran outside the session (the world
  // round by replica, on the client: replica_round.h) under `kind`.
  void Record(CollectiveKind kind, absl::Duration elapsed) {
    stats_.Record(kind, elapsed);
  }

 protected:
  CollectiveStats stats_;
};

}  // namespace rankd::examples

#endif  // RANKD_EXAMPLES_SERVING_COLLECTIVES_H_
