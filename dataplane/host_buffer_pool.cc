#include "dataplane/host_buffer_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <new>
#include <set>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/synchronization/mutex.h"

namespace rankd::dataplane {
namespace host_buffer_internal {

void BlockDeleter::operator()(uint8_t* block) const noexcept {
  ::operator delete (block, std::align_val_t{alignment});
}

namespace {

// Blocks of at least a huge page are aligned to one and advised to use
// transparent huge pages, as PyTorch's CPU allocator does: the reductions
// and socket copies of a large collective then take far fewer TLB misses.
// Best effort: where THP is off, madvise fails and nothing changes.
constexpr size_t kHugePageBytes = size_t{2} << 20;

// Uninitialised, aligned storage: operator new implicitly creates the byte
// array, and nothing writes to it (no zero fill).
Block AllocateBlock(size_t bytes) {
  const size_t alignment =
      bytes >= kHugePageBytes ? kHugePageBytes : HostBufferPool::kAlignment;
  auto* block = static_cast<uint8_t*>(
      ::operator new (bytes, std::align_val_t{alignment}));
  if (alignment == kHugePageBytes) madvise(block, bytes, MADV_HUGEPAGE);
  return Block(block, BlockDeleter{alignment});
}

// Rounds `bytes` up to a multiple of `unit` (a power of two); throws
// std::bad_alloc where that overflows, as operator new would for the size.
size_t RoundUp(size_t bytes, size_t unit) {
  if (bytes > std::numeric_limits<size_t>::max() - (unit - 1)) {
    throw std::bad_alloc();
  }
  return (bytes + unit - 1) & ~(unit - 1);
}

}  // namespace

// The idle blocks of one pool and its statistics, shared by the pool and its
// outstanding buffers.
struct PoolState {
  explicit PoolState(size_t capacity) : capacity(capacity) {}

  // An idle block of capacity in [bytes, bytes + bytes / 4] (the smallest,
  // most recently freed one), or null; `*block_capacity` is its capacity.
  Block Take(size_t bytes, size_t* block_capacity) ABSL_LOCKS_EXCLUDED(mu) {
    absl::MutexLock lock(&mu);
    auto it = by_capacity.lower_bound({bytes, 0});
    if (it == by_capacity.end() || it->first > bytes + bytes / 4) {
      ++misses;
      return nullptr;
    }
    // The last entry of that capacity is the most recently freed (warmest).
    it = std::prev(by_capacity.lower_bound({it->first + 1, 0}));
    auto node = by_age.extract(it->second);
    by_capacity.erase(it);
    idle_bytes -= node.mapped().capacity;
    ++hits;
    *block_capacity = node.mapped().capacity;
    return std::move(node.mapped().block);
  }

  // Keeps `block` idle unless the cap forbids it; may evict older blocks.
  // What it does not keep is freed after the lock is released: `evicted` is
  // declared before `lock`, and parameters outlive the function's locals.
  void Give(Block block, size_t block_capacity) ABSL_LOCKS_EXCLUDED(mu) {
    std::vector<Block> evicted;
    absl::MutexLock lock(&mu);
    if (block_capacity > capacity) return;  // `block` is freed
    EvictDownTo(capacity - block_capacity, evicted);
    const uint64_t age = next_age++;
    by_age.emplace(age, Idle{block_capacity, std::move(block)});
    by_capacity.emplace(block_capacity, age);
    idle_bytes += block_capacity;
  }

  // Moves least recently freed blocks to `out` until idle_bytes <= limit.
  void EvictDownTo(size_t limit, std::vector<Block>& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    while (idle_bytes > limit) {
      auto oldest = by_age.begin();
      by_capacity.erase({oldest->second.capacity, oldest->first});
      idle_bytes -= oldest->second.capacity;
      out.push_back(std::move(oldest->second.block));
      by_age.erase(oldest);
      ++evictions;
    }
  }

  struct Idle {
    size_t capacity;
    Block block;
  };

  mutable absl::Mutex mu;
  size_t capacity ABSL_GUARDED_BY(mu);
  size_t idle_bytes ABSL_GUARDED_BY(mu) = 0;
  uint64_t hits ABSL_GUARDED_BY(mu) = 0;
  uint64_t misses ABSL_GUARDED_BY(mu) = 0;
  uint64_t evictions ABSL_GUARDED_BY(mu) = 0;
  uint64_t next_age ABSL_GUARDED_BY(mu) = 0;
  // Every Allocate call, whatever its size (not under `mu`: small requests
  // never take the lock).
  std::atomic<uint64_t> requests{0};
  // Idle blocks by the order they were freed (begin: least recent) ...
  std::map<uint64_t, Idle> by_age ABSL_GUARDED_BY(mu);
  // ... and the same blocks as (capacity, age), for best-fit lookups.
  std::set<std::pair<size_t, uint64_t>> by_capacity ABSL_GUARDED_BY(mu);
};

}  // namespace host_buffer_internal

using host_buffer_internal::AllocateBlock;
using host_buffer_internal::Block;
using host_buffer_internal::PoolState;
using host_buffer_internal::RoundUp;

// ---- HostBuffer ------------------------------------------------------------

HostBuffer::HostBuffer(std::shared_ptr<PoolState> pool, Block block,
                       size_t size, size_t capacity)
    : pool_(std::move(pool)),
      block_(std::move(block)),
      size_(size),
      capacity_(capacity) {}

HostBuffer::HostBuffer(HostBuffer&& other) noexcept
    : pool_(std::move(other.pool_)),
      block_(std::move(other.block_)),
      size_(std::exchange(other.size_, 0)),
      capacity_(std::exchange(other.capacity_, 0)) {}

HostBuffer& HostBuffer::operator=(HostBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    pool_ = std::move(other.pool_);
    block_ = std::move(other.block_);
    size_ = std::exchange(other.size_, 0);
    capacity_ = std::exchange(other.capacity_, 0);
  }
  return *this;
}

HostBuffer::~HostBuffer() { Reset(); }

void HostBuffer::Reset() noexcept {
  if (block_ != nullptr && pool_ != nullptr) {
    pool_->Give(std::move(block_), capacity_);
  }
  block_.reset();
  pool_.reset();
  size_ = 0;
  capacity_ = 0;
}

// ---- HostBufferPool --------------------------------------------------------

HostBufferPool& HostBufferPool::Default() {
  // Deliberately never destroyed: threads still running at exit may release
  // buffers or allocate.
  static HostBufferPool& pool =
      *std::make_unique<HostBufferPool>(CapacityFromEnvironment()).release();
  return pool;
}

size_t HostBufferPool::CapacityFromEnvironment() {
  const char* env = std::getenv(kCapacityEnvVar);
  if (env == nullptr || *env == '\0') return kDefaultCapacityBytes;
  absl::string_view text = absl::StripAsciiWhitespace(env);
  int shift = 0;
  if (!text.empty()) {
    switch (absl::ascii_toupper(text.back())) {
      case 'K':
        shift = 10;
        break;
      case 'M':
        shift = 20;
        break;
      case 'G':
        shift = 30;
        break;
      default:
        break;
    }
    if (shift != 0) text.remove_suffix(1);
  }
  uint64_t value = 0;
  const bool digits_only =
      !text.empty() &&
      std::all_of(text.begin(), text.end(), absl::ascii_isdigit);
  if (!digits_only || !absl::SimpleAtoi(text, &value) ||
      value > (std::numeric_limits<size_t>::max() >> shift)) {
    std::fprintf(stderr,
                 "rankd: ignoring %s=\"%s\" (want a byte count, optionally "
                 "with K, M or G); using %zu\n",
                 kCapacityEnvVar, env, kDefaultCapacityBytes);
    return kDefaultCapacityBytes;
  }
  return static_cast<size_t>(value) << shift;
}

HostBufferPool::HostBufferPool(size_t capacity_bytes)
    : state_(std::make_shared<PoolState>(capacity_bytes)) {}

HostBufferPool::~HostBufferPool() {
  // Outstanding buffers keep state_ alive; with capacity 0 they free their
  // blocks when they are destroyed.
  SetCapacityBytes(0);
}

HostBuffer HostBufferPool::Allocate(size_t bytes) {
  state_->requests.fetch_add(1, std::memory_order_relaxed);
  if (bytes < kMinPooledBytes) {
    const size_t capacity = RoundUp(std::max<size_t>(bytes, 1), kAlignment);
    return HostBuffer(nullptr, AllocateBlock(capacity), bytes, capacity);
  }
  const size_t capacity = RoundUp(bytes, kPageBytes);
  size_t reused_capacity = 0;
  if (Block block = state_->Take(capacity, &reused_capacity)) {
    return HostBuffer(state_, std::move(block), bytes, reused_capacity);
  }
  return HostBuffer(state_, AllocateBlock(capacity), bytes, capacity);
}

void HostBufferPool::SetCapacityBytes(size_t capacity_bytes) {
  std::vector<Block> evicted;  // freed after `lock` is released
  absl::MutexLock lock(&state_->mu);
  state_->capacity = capacity_bytes;
  state_->EvictDownTo(capacity_bytes, evicted);
}

size_t HostBufferPool::capacity_bytes() const {
  absl::MutexLock lock(&state_->mu);
  return state_->capacity;
}

size_t HostBufferPool::Trim() {
  std::map<uint64_t, PoolState::Idle> idle;  // freed after `lock` is released
  absl::MutexLock lock(&state_->mu);
  idle.swap(state_->by_age);
  state_->by_capacity.clear();
  return std::exchange(state_->idle_bytes, 0);
}

HostBufferPool::Stats HostBufferPool::GetStats() const {
  absl::MutexLock lock(&state_->mu);
  Stats stats;
  stats.capacity_bytes = state_->capacity;
  stats.idle_bytes = state_->idle_bytes;
  stats.idle_blocks = state_->by_age.size();
  stats.hits = state_->hits;
  stats.misses = state_->misses;
  stats.evictions = state_->evictions;
  stats.requests = state_->requests.load(std::memory_order_relaxed);
  return stats;
}

}  // namespace rankd::dataplane
