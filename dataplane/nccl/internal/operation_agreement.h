// OperationAgreement: how the NCCL backend makes sure that members which
// submitted different work never report success.
//
// NCCL pairs whatever its members call, in order: an f32[4] send received
// as i32[4] "works", counts that disagree truncate, and another operation
// at the same point may hang or move garbage. So every operation between
// two or more members carries a small agreement record in the same NCCL
// group as its payload, issued first so that it always pairs:
//   - a collective: every member's fingerprint of its canonical description
//     is all-gathered (8 bytes per member, the same on every member, so it
//     pairs whatever they submitted); all_to_all_v then all-gathers each
//     member's send and receive counts;
//   - a transfer: both ends send each other their fingerprint.
// When the work finished, Verify() reads the records back and compares:
// a disagreement fails the operation with InvalidArgument naming which
// members (world ranks) submitted what, and the output is never handed out
// as valid. What hangs instead is caught by op_timeout and the mismatch
// diagnosis (dataplane/mismatch_diagnosis.h). Costs per operation: one
// tiny extra NCCL call inside the payload's group (no extra launch) and two
// small copies in stream order from and to page-locked memory: no host
// synchronization (docs/nccl.md, "Members must agree"). With
// NcclSessionOptions::verify_agreement (and for count-carrying operations
// whose counts this member has not seen agreed yet) the records travel
// alone first and Verify() runs before the payload is queued, so
// disagreeing work is refused before NCCL sees it.
//
// A member that refuses an operation on its own arguments still sends a
// record when its peers wait for it (SessionImpl::RefuseWithPeers): the
// fingerprint of kRefusedCanonical (dataplane/agreement.h), which
// Verify names as a refusal.
//
// Private to dataplane/nccl. Depends on internal/batch_transfer.h,
// cuda_stream.h, device_buffer.h, nccl_comm.h, dataplane/agreement.h (the
// fingerprint and the verdicts), absl; operation_agreement.cc also on
// cuda_copy.h.
#ifndef RANKD_DATAPLANE_NCCL_INTERNAL_OPERATION_AGREEMENT_H_
#define RANKD_DATAPLANE_NCCL_INTERNAL_OPERATION_AGREEMENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "dataplane/agreement.h"
#include "dataplane/nccl/cuda_stream.h"
#include "dataplane/nccl/device_buffer.h"
#include "dataplane/nccl/internal/batch_transfer.h"
#include "dataplane/nccl/nccl_comm.h"

namespace rankd::dataplane::nccl::internal {

// Where agreement records live: a device buffer, which NCCL moves, and a
// page-locked host mirror of the same size (cuda_copy.h,
// AllocatePinnedHost), which this member's record is staged from and the
// gathered records are copied back into, both in stream order, so neither
// copy makes the host wait. Recycled: a slot returns here when the
// operation that used it released its resources (after its work
// finished), so a steady loop allocates no memory for records. Keeps at
// most kMaxIdle idle slots; page-locked memory is never freed
// (cudaFreeHost synchronizes the device): beyond that it waits, per device
// and size, for the next pool that needs it. Thread-safe; slots handed out
// may outlive the pool.
struct RecordSlot {
  DeviceBuffer* device = nullptr;
  uint64_t* host = nullptr;  // page-locked, device->size() bytes
};
class RecordBuffers {
 public:
  static constexpr size_t kMaxIdle = 64;
  RecordBuffers();
  // A slot of exactly `bytes` bytes on stream->device(): an idle one, or a
  // new one (the device buffer allocated on `stream`).
  absl::StatusOr<std::shared_ptr<RecordSlot>> Get(
      size_t bytes, const std::shared_ptr<CudaStream>& stream);
  size_t idle() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

class OperationAgreement {
 public:
  // A collective over `members` (world ranks, member order) where this
  // member is index `me`. `words` is this member's record: its fingerprint
  // first; with `counts_matrix`, then n send counts and n receive counts
  // (member s's send[d] must equal member d's receive[s]).
  static absl::StatusOr<std::shared_ptr<const OperationAgreement>>
  ForCollective(std::vector<uint32_t> members, uint32_t me,
                std::vector<uint64_t> words, bool counts_matrix,
                const std::shared_ptr<CudaStream>& stream,
                RecordBuffers& buffers);
  // A transfer from member index `source` to `destination` of a
  // communicator whose world ranks are `members`; this member is `me` (one
  // of the two).
  static absl::StatusOr<std::shared_ptr<const OperationAgreement>> ForRoute(
      std::vector<uint32_t> members, uint32_t me, uint32_t source,
      uint32_t destination, uint64_t fingerprint,
      const std::shared_ptr<CudaStream>& stream, RecordBuffers& buffers);

  // One transfer of a batched send/receive, seen from this member.
  using BatchEntry = BatchTransfer;
  // A batch: both ends of every transfer send each other its fingerprint.
  // The records to one peer travel in an order both ends derive from their
  // own batch alone (records of transfers from the sender to the receiver
  // first, each direction in batch order), so they pair whatever order
  // each end listed its sends and receives in.
  static absl::StatusOr<std::shared_ptr<const OperationAgreement>> ForBatch(
      std::vector<uint32_t> members, uint32_t me,
      std::vector<BatchEntry> entries,
      const std::shared_ptr<CudaStream>& stream, RecordBuffers& buffers);

  // Which records a call moves or compares. A collective's fingerprints are
  // the same size on every member whatever collective it submitted, so
  // they always pair; all_to_all_v's counts pair only between members that
  // all submitted it, so when the records travel before the payload the
  // fingerprints go (and are compared) first and the counts after.
  enum class Part { kAll, kFingerprints, kCounts };

  // Queues the copy of this member's record to the device (`stream` keeps
  // the order: before Exchange), from page-locked memory, so the host never
  // waits. `ahead` marks a collective's record as submitted ahead of its
  // check (the payload follows without waiting for the records: lowest bit
  // of the fingerprint word, which the verdicts ignore), so that members
  // that check first know a peer's payload is already under way.
  absl::Status Stage(const CudaStream& stream, bool ahead = false) const;
  // The NCCL calls that move the records (`part` of them; transfers and
  // batches have only fingerprints); call first inside the operation's
  // NCCL group. Returns the ncclResult_t.
  int Exchange(NcclCommHandle comm, CudaStreamHandle stream,
               Part part = Part::kAll) const;
  // Queues the copy of the records `part` moved back into the page-locked
  // mirror, right after Exchange on the same stream; Verify reads them from
  // there once the stream ran past it (an event recorded after this
  // completed), without synchronizing.
  absl::Status Collect(const CudaStream& stream, Part part = Part::kAll) const;
  // Once the records arrived (Collect ran): the engine's verdict on them
  // (dataplane/agreement.h: CollectiveVerdict, then CountMatrixVerdict for
  // the counts; TransfersVerdict for a route or a batch), given at `point`
  // (before the payload, or after it ran alongside). For a batch,
  // `disagreeing` (when set) gets one flag per entry: true where the two
  // ends' records differ. `part` says which records moved (and are
  // compared). Reads host memory only: never waits. With `ahead_peers`, a
  // collective's fingerprints also say whether another member submitted
  // ahead (Stage).
  absl::Status Verify(absl::string_view where, absl::string_view canonical,
                      VerdictPoint point,
                      std::vector<bool>* disagreeing = nullptr,
                      Part part = Part::kAll,
                      bool* ahead_peers = nullptr) const;
  // This member's record (fingerprint and counts) as one 64-bit digest:
  // what the counts check remembers as agreed (SessionImpl).
  uint64_t Signature() const;
  // Whether there are counts to exchange after the fingerprints.
  bool has_counts() const { return counts_matrix_; }

  // What the queued work uses (held by the operation until it finished).
  std::vector<std::shared_ptr<const void>> Retained() const;

 private:
  OperationAgreement() = default;

  std::vector<uint32_t> members_;
  uint32_t me_ = 0;
  bool route_ = false;
  uint32_t source_ = 0, destination_ = 0;
  bool counts_matrix_ = false;
  std::vector<BatchEntry> batch_;  // a batch when not empty
  std::shared_ptr<const std::vector<uint64_t>> words_;  // this member's
  // Collective: [this member's words][n fingerprints][n x 2n counts];
  // route: [this end's fingerprint][the other end's]; the same layout on
  // the device and in the page-locked mirror.
  std::shared_ptr<RecordSlot> slot_;
};

}  // namespace rankd::dataplane::nccl::internal

#endif  // RANKD_DATAPLANE_NCCL_INTERNAL_OPERATION_AGREEMENT_H_
