#include "dataplane/nccl/internal/operation_agreement.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "dataplane/agreement.h"
#include "dataplane/nccl/cuda_copy.h"
#include "dataplane/nccl/nccl_data_type.h"

namespace rankd::dataplane::nccl::internal {
namespace {

constexpr size_t kWord = sizeof(uint64_t);

// The lowest bit of a collective's fingerprint word says whether its member
// submitted ahead of the check (OperationAgreement::Stage); the verdicts
// compare fingerprints without it (a refusal's stays recognisable).
constexpr uint64_t kAheadBit = 1;
uint64_t Fingerprint(uint64_t word) {
  static const uint64_t refused = OperationFingerprint(kRefusedCanonical);
  if ((word & ~kAheadBit) == (refused & ~kAheadBit)) return refused;
  return word & ~kAheadBit;
}

// Page-locked memory nobody pools at the moment, per (device, size): never
// freed (cudaFreeHost synchronizes the device).
struct SparePinned {
  absl::Mutex mu;
  std::multimap<std::pair<int, size_t>, uint64_t*> spare ABSL_GUARDED_BY(mu);
};
SparePinned& Spares() {
  static auto* spares = new SparePinned();
  return *spares;
}
absl::StatusOr<uint64_t*> TakePinned(int device, size_t bytes) {
  {
    SparePinned& s = Spares();
    absl::MutexLock lock(&s.mu);
    auto it = s.spare.find({device, bytes});
    if (it != s.spare.end()) {
      uint64_t* p = it->second;
      s.spare.erase(it);
      return p;
    }
  }
  auto made = AllocatePinnedHost(bytes, device);
  if (!made.ok()) return made.status();
  return static_cast<uint64_t*>(*made);
}
void GivePinned(int device, size_t bytes, uint64_t* p) {
  SparePinned& s = Spares();
  absl::MutexLock lock(&s.mu);
  s.spare.emplace(std::make_pair(device, bytes), p);
}

struct IdleSlot {
  std::shared_ptr<DeviceBuffer> device;
  uint64_t* host = nullptr;
};

}  // namespace

struct RecordBuffers::State {
  // The idle slots' pinned memory waits for the next pool, as a slot's
  // handed back after its pool is gone does (before, a session's idle
  // slots took theirs with them, up to kMaxIdle per session).
  ~State() {
    absl::MutexLock lock(&mu);
    for (auto& [size, slot] : idle) {
      GivePinned(slot.device->device(), slot.device->size(), slot.host);
    }
  }
  mutable absl::Mutex mu;
  std::multimap<size_t, IdleSlot> idle ABSL_GUARDED_BY(mu);
};

RecordBuffers::RecordBuffers() : state_(std::make_shared<State>()) {}

size_t RecordBuffers::idle() const {
  absl::MutexLock lock(&state_->mu);
  return state_->idle.size();
}

absl::StatusOr<std::shared_ptr<RecordSlot>> RecordBuffers::Get(
    size_t bytes, const std::shared_ptr<CudaStream>& stream) {
  IdleSlot slot;
  {
    absl::MutexLock lock(&state_->mu);
    auto it = state_->idle.find(bytes);
    if (it != state_->idle.end()) {
      slot = std::move(it->second);
      state_->idle.erase(it);
    }
  }
  if (slot.device == nullptr) {
    auto made = DeviceBuffer::Allocate(bytes, stream);
    if (!made.ok()) return made.status();
    auto host = TakePinned(stream->device(), bytes);
    if (!host.ok()) return host.status();
    slot.device = *std::move(made);
    slot.host = *host;
  }
  // The handle's deleter gives the slot back (or frees its device buffer
  // and spares its page-locked memory, when the pool is gone or full).
  auto handle = std::make_unique<RecordSlot>();
  handle->device = slot.device.get();
  handle->host = slot.host;
  std::weak_ptr<State> home = state_;
  return std::shared_ptr<RecordSlot>(
      handle.release(),
      [home, slot = std::move(slot)](RecordSlot* raw) mutable {
        delete raw;
        if (auto state = home.lock()) {
          absl::MutexLock lock(&state->mu);
          if (state->idle.size() < kMaxIdle) {
            const size_t size = slot.device->size();
            state->idle.emplace(size, std::move(slot));
            return;
          }
        }
        GivePinned(slot.device->device(), slot.device->size(), slot.host);
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
  auto slot = buffers.Get((1 + n) * words.size() * kWord, stream);
  if (!slot.ok()) return slot.status();
  std::shared_ptr<OperationAgreement> a(new OperationAgreement());
  a->members_ = std::move(members);
  a->me_ = me;
  a->counts_matrix_ = counts_matrix;
  a->words_ = std::make_shared<const std::vector<uint64_t>>(std::move(words));
  a->slot_ = *std::move(slot);
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
  auto slot = buffers.Get(2 * kWord, stream);
  if (!slot.ok()) return slot.status();
  std::shared_ptr<OperationAgreement> a(new OperationAgreement());
  a->members_ = std::move(members);
  a->me_ = me;
  a->route_ = true;
  a->source_ = source;
  a->destination_ = destination;
  a->words_ = std::make_shared<const std::vector<uint64_t>>(
      std::vector<uint64_t>{fingerprint});
  a->slot_ = *std::move(slot);
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
  auto slot = buffers.Get(2 * words.size() * kWord, stream);
  if (!slot.ok()) return slot.status();
  std::shared_ptr<OperationAgreement> a(new OperationAgreement());
  a->members_ = std::move(members);
  a->me_ = me;
  a->batch_ = std::move(entries);
  a->words_ = std::make_shared<const std::vector<uint64_t>>(std::move(words));
  a->slot_ = *std::move(slot);
  return a;
}

absl::Status OperationAgreement::Stage(const CudaStream& stream,
                                       bool ahead) const {
  uint64_t* host = slot_->host;
  std::copy(words_->begin(), words_->end(), host);
  if (!route_ && batch_.empty()) {
    host[0] = (host[0] & ~kAheadBit) | (ahead ? kAheadBit : 0);
  }
  return CopyHostToDeviceAsync(slot_->device->data(), host,
                               words_->size() * kWord, stream);
}

absl::Status OperationAgreement::Collect(const CudaStream& stream,
                                         Part part) const {
  const size_t w = words_->size();
  size_t first = w, count = w;  // a route's or a batch's other ends
  if (route_) count = 1;
  if (!route_ && batch_.empty()) {
    const size_t n = members_.size();
    count = n * w;  // every member's words
    if (part == Part::kFingerprints) count = n;
    if (part == Part::kCounts) {
      first = w + n;
      count = n * (w - 1);
    }
  }
  return CopyDeviceToPinnedHostAsync(
      slot_->host + first,
      static_cast<const char*>(slot_->device->data()) + first * kWord,
      count * kWord, stream);
}

uint64_t OperationAgreement::Signature() const {
  std::vector<uint64_t> words = *words_;
  if (!words.empty()) words[0] = Fingerprint(words[0]);
  return OperationFingerprint(absl::string_view(
      reinterpret_cast<const char*>(words.data()), words.size() * kWord));
}

int OperationAgreement::Exchange(NcclCommHandle comm, CudaStreamHandle stream,
                                 Part part) const {
  char* base = static_cast<char*>(slot_->device->data());
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
                                        Part part, bool* ahead_peers) const {
  const size_t w = words_->size();
  const uint64_t* host = slot_->host;
  if (!batch_.empty() || route_) {
    // Every transfer's other end's fingerprint follows this end's.
    std::vector<TransferRecord> records;
    if (route_) {
      const uint32_t other = me_ == source_ ? destination_ : source_;
      records.push_back({other, members_[other], me_ == source_,
                         std::string(canonical), (*words_)[0], host[w]});
    } else {
      for (size_t i = 0; i < w; ++i) {
        const BatchEntry& e = batch_[i];
        records.push_back({e.peer, members_[e.peer], e.send, e.canonical,
                           (*words_)[i], host[w + i]});
      }
    }
    return TransfersVerdict(where, records, point, disagreeing);
  }
  // Layout after this member's words: n fingerprints, then (counts
  // matrix) n records of 2n counts.
  const size_t n = members_.size();
  const uint64_t* all = host + w;
  if (part != Part::kCounts) {
    std::vector<uint64_t> fingerprints(n);
    for (size_t m = 0; m < n; ++m) {
      fingerprints[m] = Fingerprint(all[m]);
      if (ahead_peers != nullptr && m != me_ && (all[m] & kAheadBit) != 0) {
        *ahead_peers = true;
      }
    }
    absl::Status verdict =
        CollectiveVerdict(where, canonical, members_, me_, fingerprints, point);
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
  return {words_, slot_};
}

}  // namespace rankd::dataplane::nccl::internal
