// HostBufferPool: a bounded cache of large host memory blocks, so that the
// buffers of HostTensor (dataplane/host_tensor.h) are recycled instead of
// being returned to the operating system and faulted in again.
//
// glibc serves blocks above its mmap threshold (at most 32 MiB) with a fresh
// mmap and unmaps them on free, so a loop that allocates a 64 MiB output per
// operation page-faults every page of it every time (about 40 µs a fault on
// the benchmark VM, hundreds of milliseconds per operation; see
// bench/RESULTS.md, "all_reduce_sum analysis"). The pool keeps released
// blocks and hands them out again.
//
//   HostBuffer b = HostBufferPool::Default().Allocate(64 << 20);
//   std::memcpy(b.data(), src, 64 << 20);   // contents start unspecified
//   // ~HostBuffer returns the block to the pool.
//
// What it promises:
//   * Every HostBuffer that Allocate returns has a non-null data() aligned to
//     kAlignment (64) bytes, with capacity() >= size() writable bytes, even for
//     size 0. The contents are unspecified (never zeroed here): they may hold
//     a previous user's bytes.
//   * Blocks of 2 MiB or more are aligned to 2 MiB and advised to use
//     transparent huge pages (madvise MADV_HUGEPAGE, best effort), as
//     PyTorch's CPU allocator does: large collectives then take far fewer
//     TLB misses in their reductions and socket copies.
//   * Requests of kMinPooledBytes (64 KiB) or more are pooled. Smaller ones go
//     to the C++ allocator and back to it (malloc already caches them).
//   * Pooled blocks are rounded up to a multiple of kPageBytes (4 KiB). A
//     request reuses the smallest idle block whose capacity is at least the
//     rounded request and at most a quarter above it (the most recently freed
//     such block), so identical shapes in a serving loop reuse exact blocks
//     and nearby shapes (a varying token count) can share them. Waste is at
//     most 4 KiB for an exact fit and 25% for a shared one, against up to 2x
//     for power-of-two classes, which would also fill the cap twice as fast.
//   * The idle blocks together never exceed capacity_bytes(). When a release
//     would exceed it, the least recently freed idle blocks are returned to
//     the system first; a block larger than the whole capacity is never kept.
//     Capacity 0 disables pooling (every block goes straight back).
//   * Blocks are released to the system outside the lock.
//
// Thread safety: every member function of HostBufferPool may be called from
// any thread at once (one absl::Mutex guards the idle lists and statistics).
// A HostBuffer is a move-only owner like std::unique_ptr: one thread at a
// time, but it may be destroyed on a different thread than the one that
// allocated it.
//
// Ownership: a HostBuffer owns its block until it is destroyed, then the
// block belongs to the pool (idle) or to the system. A HostBuffer keeps its
// pool's internal state alive, so a pool may be destroyed while buffers are
// outstanding; their blocks are then freed when they are destroyed. The
// process-wide pool (Default()) is never destroyed.
//
// Depends on absl only.
#ifndef RANKD_DATAPLANE_HOST_BUFFER_POOL_H_
#define RANKD_DATAPLANE_HOST_BUFFER_POOL_H_

#include <cstddef>
#include <cstdint>
#include <memory>

namespace rankd::dataplane {

namespace host_buffer_internal {

// Frees a block made by AllocateBlock, with the alignment it was made with.
struct BlockDeleter {
  size_t alignment = 64;
  void operator()(uint8_t* block) const noexcept;
};
using Block = std::unique_ptr<uint8_t, BlockDeleter>;

struct PoolState;

}  // namespace host_buffer_internal

// One block of host memory, owned like a std::unique_ptr<uint8_t[]> and
// handed back to its pool (or freed) on destruction. A default-constructed or
// moved-from HostBuffer is empty: data() is null and size() is zero.
class HostBuffer {
 public:
  HostBuffer() = default;
  HostBuffer(HostBuffer&& other) noexcept;
  HostBuffer& operator=(HostBuffer&& other) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  ~HostBuffer();

  // Aligned to HostBufferPool::kAlignment; writable for capacity() bytes.
  uint8_t* data() const { return block_.get(); }
  // The bytes requested from Allocate.
  size_t size() const { return size_; }
  // The bytes of the block (at least size(), and at least 1).
  size_t capacity() const { return capacity_; }

 private:
  friend class HostBufferPool;
  HostBuffer(std::shared_ptr<host_buffer_internal::PoolState> pool,
             host_buffer_internal::Block block, size_t size, size_t capacity);
  // Returns the block to its pool or to the system; leaves *this empty.
  void Reset() noexcept;

  std::shared_ptr<host_buffer_internal::PoolState> pool_;  // null: unpooled
  host_buffer_internal::Block block_;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

class HostBufferPool {
 public:
  static constexpr size_t kAlignment = 64;
  static constexpr size_t kPageBytes = 4096;
  static constexpr size_t kMinPooledBytes = size_t{64} << 10;
  static constexpr size_t kDefaultCapacityBytes = size_t{256} << 20;
  // Read once, by Default(): a byte count, optionally with a binary suffix
  // K, M or G ("512M"). 0 disables the process-wide pool.
  static constexpr char kCapacityEnvVar[] = "RANKD_HOST_POOL_BYTES";

  struct Stats {
    size_t capacity_bytes = 0;
    size_t idle_bytes = 0;  // sum of the idle blocks' capacities
    size_t idle_blocks = 0;
    uint64_t hits = 0;       // pooled-size requests served by an idle block
    uint64_t misses = 0;     // pooled-size requests served by the system
    uint64_t evictions = 0;  // blocks returned to the system for the cap
    // Every Allocate call of any size: every HostTensor buffer made (a
    // steady loop on caller-owned outputs makes none).
    uint64_t requests = 0;
  };

  // The process-wide pool that HostTensor uses. Its capacity comes from
  // CapacityFromEnvironment() at the first call.
  static HostBufferPool& Default();

  // kCapacityEnvVar parsed now, or kDefaultCapacityBytes when it is unset.
  // A malformed value is reported on stderr and the default is used.
  static size_t CapacityFromEnvironment();

  explicit HostBufferPool(size_t capacity_bytes = kDefaultCapacityBytes);
  HostBufferPool(const HostBufferPool&) = delete;
  HostBufferPool& operator=(const HostBufferPool&) = delete;
  // Frees the idle blocks and disables pooling for buffers still out.
  ~HostBufferPool();

  // A block of at least `bytes` bytes (see the promises above). Never fails
  // except by throwing std::bad_alloc, like operator new.
  HostBuffer Allocate(size_t bytes);

  // Changes the cap on idle bytes, evicting least recently freed blocks at
  // once if the idle ones exceed it. 0 disables pooling and frees them all.
  void SetCapacityBytes(size_t capacity_bytes);
  size_t capacity_bytes() const;

  // Returns every idle block to the system. Returns the bytes freed.
  size_t Trim();

  Stats GetStats() const;

 private:
  std::shared_ptr<host_buffer_internal::PoolState> state_;
};

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_HOST_BUFFER_POOL_H_
