#include "dataplane/nccl/internal/operation_agreement.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "dataplane/agreement.h"
#include "dataplane/nccl/cuda_copy.h"
#include "dataplane/nccl/nccl_types.h"

namespace rankd::dataplane::nccl::internal {
namespace {

constexpr size_t kWord = sizeof(uint64_t);

}  // namespace

struct RecordBuffers::State {
  mutable absl::Mutex mu;
  std::multimap<size_t, std::shared_ptr<DeviceBuffer>> idle ABSL_GUARDED_BY(mu);
};

RecordBuffers::RecordBuffers() : state_(std::make_shared<State>()) {}

size_t RecordBuffers::idle() const {
  absl::MutexLock lock(&state_->mu);
  return state_->idle.size();
}

absl::StatusOr<std::shared_ptr<DeviceBuffer>> RecordBuffers::Get(
    size_t bytes, const std::shared_ptr<CudaStream>& stream) {
  std::shared_ptr<DeviceBuffer> buffer;
  {
    absl::MutexLock lock(&state_->mu);
    auto it = state_->idle.find(bytes);
    if (it != state_->idle.end()) {
      buffer = std::move(it->second);
      state_->idle.erase(it);
    }
  }
  if (buffer == nullptr) {
    auto made = DeviceBuffer::Allocate(bytes, stream);
    if (!made.ok()) return made.status();
    buffer = *std::move(made);
  }
  // The handle's deleter gives the buffer back (or frees it, when the pool
  // is gone or full).
  DeviceBuffer* raw = buffer.get();
  std::weak_ptr<State> home = state_;
  return std::shared_ptr<DeviceBuffer>(
      raw, [home, buffer = std::move(buffer)](DeviceBuffer*) mutable {
        if (auto state = home.lock()) {
          absl::MutexLock lock(&state->mu);
          if (state->idle.size() < kMaxIdle) {
            const size_t size = buffer->size();
            state->idle.emplace(size, std::move(buffer));
          }
        }
      });
}

absl::StatusOr<std::shared_ptr<const OperationAgreement>>
OperationAgreement::ForCollective(std::vector<uint32_t> members, uint32_t me,
                                  std::vector<uint64_t> words,
                                  bool counts_matrix,
                                  const std::shared_ptr<CudaStream>& stream,
                                  RecordBuffers& buffers) {
  const size_t n = members.size();
  if (words.empty() || me >= n ||
      (counts_matrix && words.size() != 1 + 2 * n) ||
      (!counts_matrix && words.size() != 1)) {
    return absl::InternalError("nccl backend: malformed agreement record");
  }
  // [this member's words][every member's words]
  auto buffer = buffers.Get((1 + n) * words.size() * kWord, stream);
  if (!buffer.ok()) return buffer.status();
  std::shared_ptr<OperationAgreement> a(new OperationAgreement());
  a->members_ = std::move(members);
  a->me_ = me;
  a->counts_matrix_ = counts_matrix;
  a->words_ = std::make_shared<const std::vector<uint64_t>>(std::move(words));
  a->buffer_ = *std::move(buffer);
  return a;
}

absl::StatusOr<std::shared_ptr<const OperationAgreement>>
OperationAgreement::ForRoute(std::vector<uint32_t> members, uint32_t me,
                             uint32_t source, uint32_t destination,
                             uint64_t fingerprint,
                             const std::shared_ptr<CudaStream>& stream,
                             RecordBuffers& buffers) {
  if (source >= members.size() || destination >= members.size() ||
      (me != source && me != destination)) {
    return absl::InternalError("nccl backend: malformed agreement route");
  }
  // [this end's fingerprint][the other end's]
  auto buffer = buffers.Get(2 * kWord, stream);
  if (!buffer.ok()) return buffer.status();
  std::shared_ptr<OperationAgreement> a(new OperationAgreement());
  a->members_ = std::move(members);
  a->me_ = me;
  a->route_ = true;
  a->source_ = source;
  a->destination_ = destination;
  a->words_ = std::make_shared<const std::vector<uint64_t>>(
      std::vector<uint64_t>{fingerprint});
  a->buffer_ = *std::move(buffer);
  return a;
}

absl::StatusOr<std::shared_ptr<const OperationAgreement>>
OperationAgreement::ForBatch(std::vector<uint32_t> members, uint32_t me,
                             std::vector<BatchEntry> entries,
                             const std::shared_ptr<CudaStream>& stream,
                             RecordBuffers& buffers) {
  if (entries.empty() || me >= members.size()) {
    return absl::InternalError("nccl backend: malformed agreement batch");
  }
  std::vector<uint64_t> words;
  for (const BatchEntry& e : entries) {
    if (e.peer >= members.size() || e.peer == me) {
      return absl::InternalError("nccl backend: malformed agreement batch");
    }
    words.push_back(e.fingerprint);
  }
  // [this end's fingerprint per transfer][the other ends']
  auto buffer = buffers.Get(2 * words.size() * kWord, stream);
  if (!buffer.ok()) return buffer.status();
  std::shared_ptr<OperationAgreement> a(new OperationAgreement());
  a->members_ = std::move(members);
  a->me_ = me;
  a->batch_ = std::move(entries);
  a->words_ = std::make_shared<const std::vector<uint64_t>>(std::move(words));
  a->buffer_ = *std::move(buffer);
  return a;
}

absl::Status OperationAgreement::Stage(const CudaStream& stream) const {
  return CopyHostToDeviceAsync(buffer_->data(), words_->data(),
                               words_->size() * kWord, stream);
}

int OperationAgreement::Exchange(NcclCommHandle comm, CudaStreamHandle stream,
                                 Part part) const {
  char* base = static_cast<char*>(buffer_->data());
  if (!batch_.empty()) {
    // Per peer: my records of my sends to it, then of my receives from it
    // (what it receives as "its receives from me, then its sends to me");
    // and the other way round for what I receive.
    const size_t n = batch_.size();
    std::vector<uint32_t> peers;
    for (const BatchEntry& e : batch_) peers.push_back(e.peer);
    std::sort(peers.begin(), peers.end());
    peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
    for (uint32_t p : peers) {
      for (bool sending : {true, false}) {
        for (size_t i = 0; i < n; ++i) {
          if (batch_[i].peer != p || batch_[i].send != sending) continue;
          int r = NcclSend(base + i * kWord, kWord, NcclDataType::kInt8,
                           static_cast<int>(p), comm, stream);
          if (r != kNcclSuccess && r != kNcclInProgress) return r;
        }
      }
      for (bool sending : {false, true}) {
        for (size_t i = 0; i < n; ++i) {
          if (batch_[i].peer != p || batch_[i].send != sending) continue;
          int r = NcclRecv(base + (n + i) * kWord, kWord, NcclDataType::kInt8,
                           static_cast<int>(p), comm, stream);
          if (r != kNcclSuccess && r != kNcclInProgress) return r;
        }
      }
    }
    return kNcclSuccess;
  }
  if (route_) {
    // Both ends tell each other what they submitted.
    const int other = static_cast<int>(me_ == source_ ? destination_ : source_);
    int r = NcclSend(base, kWord, NcclDataType::kInt8, other, comm, stream);
    if (r != kNcclSuccess && r != kNcclInProgress) return r;
    return NcclRecv(base + kWord, kWord, NcclDataType::kInt8, other, comm,
                    stream);
  }
  // The fingerprint first, the same size on every member whatever they
  // submitted, so it always pairs; all_to_all_v's counts follow.
  const size_t n = members_.size();
  const size_t w = words_->size();
  char* all = base + w * kWord;
  int r = kNcclSuccess;
  if (part != Part::kCounts) {
    r = NcclAllGather(base, all, kWord, NcclDataType::kInt8, comm, stream);
    if (r != kNcclSuccess && r != kNcclInProgress) return r;
  }
  if (!counts_matrix_ || part == Part::kFingerprints) return r;
  return NcclAllGather(base + kWord, all + n * kWord, (w - 1) * kWord,
                       NcclDataType::kInt8, comm, stream);
}

absl::Status OperationAgreement::Verify(absl::string_view where,
                                        absl::string_view canonical,
                                        VerdictPoint point,
                                        std::vector<bool>* disagreeing,
                                        Part part) const {
  auto transfers = CudaStream::ForTransfers(buffer_->device());
  if (!transfers.ok()) return transfers.status();
  const size_t w = words_->size();
  auto read = [&](size_t first_word, std::vector<uint64_t>* out) {
    return CopyDeviceToHost(
        out->data(),
        static_cast<const char*>(buffer_->data()) + first_word * kWord,
        out->size() * kWord, **transfers);
  };
  if (!batch_.empty() || route_) {
    // Every transfer's other end's fingerprint follows this end's.
    std::vector<uint64_t> theirs(w);
    if (absl::Status s = read(w, &theirs); !s.ok()) return s;
    std::vector<TransferRecord> records;
    if (route_) {
      const uint32_t other = me_ == source_ ? destination_ : source_;
      records.push_back({other, members_[other], me_ == source_,
                         std::string(canonical), (*words_)[0], theirs[0]});
    } else {
      for (size_t i = 0; i < w; ++i) {
        const BatchEntry& e = batch_[i];
        records.push_back({e.peer, members_[e.peer], e.send, e.canonical,
                           (*words_)[i], theirs[i]});
      }
    }
    return TransfersVerdict(where, records, point, disagreeing);
  }
  // Layout after this member's words: n fingerprints, then (counts
  // matrix) n records of 2n counts.
  const size_t n = members_.size();
  std::vector<uint64_t> all(n * w);
  if (absl::Status s = read(w, &all); !s.ok()) return s;
  if (part != Part::kCounts) {
    absl::Status verdict =
        CollectiveVerdict(where, canonical, members_, me_,
                          absl::MakeConstSpan(all).subspan(0, n), point);
    if (!verdict.ok()) return verdict;
  }
  if (!counts_matrix_ || part == Part::kFingerprints) return absl::OkStatus();
  std::vector<uint64_t> sends(n * n), receives(n * n);
  for (size_t m = 0; m < n; ++m) {
    const uint64_t* record = &all[n + m * (w - 1)];
    for (size_t p = 0; p < n; ++p) {
      sends[m * n + p] = record[p];
      receives[m * n + p] = record[n + p];
    }
  }
  return CountMatrixVerdict(where, members_, sends, receives, point);
}

std::vector<std::shared_ptr<const void>> OperationAgreement::Retained() const {
  return {words_, buffer_};
}

}  // namespace rankd::dataplane::nccl::internal
