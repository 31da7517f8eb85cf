// Unit tests of HostBufferPool: reuse, size classes, the cap and its
// eviction order, disabling, Trim, ownership and concurrent use.
#include "dataplane/host_buffer_pool.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace rankd::dataplane {
namespace {

constexpr size_t kKiB = size_t{1} << 10;
constexpr size_t kMiB = size_t{1} << 20;

bool Aligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % HostBufferPool::kAlignment == 0;
}

TEST(HostBufferPoolTest, SameSizeGetsTheSameBlockBack) {
  HostBufferPool pool(16 * kMiB);
  HostBuffer a = pool.Allocate(kMiB);
  uint8_t* block = a.data();
  a = HostBuffer();  // released to the pool
  EXPECT_EQ(pool.GetStats().idle_bytes, kMiB);
  HostBuffer b = pool.Allocate(kMiB);
  EXPECT_EQ(b.data(), block);
  HostBufferPool::Stats stats = pool.GetStats();
  EXPECT_EQ(stats.hits, 1u);
  EXPECT_EQ(stats.misses, 1u);
  EXPECT_EQ(stats.idle_bytes, 0u);
  EXPECT_EQ(stats.idle_blocks, 0u);
}

TEST(HostBufferPoolTest, ZeroBytesHaveAnAlignedNonNullBlock) {
  HostBufferPool pool;
  HostBuffer a = pool.Allocate(0);
  HostBuffer b = pool.Allocate(0);
  ASSERT_NE(a.data(), nullptr);
  EXPECT_NE(a.data(), b.data());
  EXPECT_TRUE(Aligned(a.data()));
  EXPECT_EQ(a.size(), 0u);
  EXPECT_GE(a.capacity(), 1u);
}

TEST(HostBufferPoolTest, EveryBlockIsAligned) {
  HostBufferPool pool;
  for (size_t bytes :
       {size_t{1}, size_t{3}, size_t{63}, size_t{65}, size_t{4097},
        HostBufferPool::kMinPooledBytes - 1, HostBufferPool::kMinPooledBytes,
        HostBufferPool::kMinPooledBytes + 1, 3 * kMiB + 7}) {
    HostBuffer b = pool.Allocate(bytes);
    EXPECT_TRUE(Aligned(b.data())) << bytes;
    EXPECT_EQ(b.size(), bytes);
    EXPECT_GE(b.capacity(), bytes);
    std::memset(b.data(), 0xa5, b.capacity());  // all of it is writable
  }
}

TEST(HostBufferPoolTest, SmallBlocksAreNotPooled) {
  HostBufferPool pool;
  { HostBuffer b = pool.Allocate(HostBufferPool::kMinPooledBytes - 1); }
  HostBufferPool::Stats stats = pool.GetStats();
  EXPECT_EQ(stats.idle_bytes, 0u);
  EXPECT_EQ(stats.hits + stats.misses, 0u);
}

TEST(HostBufferPoolTest, PooledBlocksArePageRounded) {
  HostBufferPool pool;
  HostBuffer b = pool.Allocate(HostBufferPool::kMinPooledBytes + 1);
  EXPECT_EQ(b.capacity(), HostBufferPool::kMinPooledBytes + 4 * kKiB);
  b = HostBuffer();
  EXPECT_EQ(pool.GetStats().idle_bytes,
            HostBufferPool::kMinPooledBytes + 4 * kKiB);
}

TEST(HostBufferPoolTest, ReuseIsBestFitWithinAQuarter) {
  HostBufferPool pool(64 * kMiB);
  HostBuffer one = pool.Allocate(kMiB);
  HostBuffer more = pool.Allocate(kMiB + 100 * kKiB);
  uint8_t* one_block = one.data();
  uint8_t* more_block = more.data();
  more = HostBuffer();
  one = HostBuffer();
  // 900 KiB fits both; the smaller (1 MiB, at most 25% over) wins.
  HostBuffer a = pool.Allocate(900 * kKiB);
  EXPECT_EQ(a.data(), one_block);
  EXPECT_EQ(a.size(), 900 * kKiB);
  EXPECT_EQ(a.capacity(), kMiB);
  // 700 KiB would waste more than a quarter of 1.1 MiB: a fresh block.
  HostBuffer b = pool.Allocate(700 * kKiB);
  EXPECT_NE(b.data(), more_block);
  EXPECT_EQ(b.capacity(), 700 * kKiB);
  // A request larger than every idle block is a miss too.
  HostBuffer c = pool.Allocate(2 * kMiB);
  EXPECT_NE(c.data(), more_block);
  HostBufferPool::Stats stats = pool.GetStats();
  EXPECT_EQ(stats.hits, 1u);
  EXPECT_EQ(stats.misses, 4u);
  EXPECT_EQ(stats.idle_blocks, 1u);
}

TEST(HostBufferPoolTest, CapEvictsTheLeastRecentlyFreed) {
  HostBufferPool pool(2 * kMiB + kMiB / 2);
  HostBuffer a = pool.Allocate(kMiB);
  HostBuffer b = pool.Allocate(kMiB);
  HostBuffer c = pool.Allocate(kMiB);
  uint8_t* b_block = b.data();
  uint8_t* c_block = c.data();
  a = HostBuffer();
  b = HostBuffer();
  EXPECT_EQ(pool.GetStats().evictions, 0u);
  c = HostBuffer();  // 3 MiB idle would exceed the cap: `a` goes
  HostBufferPool::Stats stats = pool.GetStats();
  EXPECT_EQ(stats.idle_bytes, 2 * kMiB);
  EXPECT_EQ(stats.idle_blocks, 2u);
  EXPECT_EQ(stats.evictions, 1u);
  EXPECT_LE(stats.idle_bytes, stats.capacity_bytes);
  // Most recently freed first; the third request is a miss.
  HostBuffer x = pool.Allocate(kMiB);
  HostBuffer y = pool.Allocate(kMiB);
  HostBuffer z = pool.Allocate(kMiB);
  EXPECT_EQ(x.data(), c_block);
  EXPECT_EQ(y.data(), b_block);
  stats = pool.GetStats();
  EXPECT_EQ(stats.hits, 2u);
  EXPECT_EQ(stats.misses, 4u);
}

TEST(HostBufferPoolTest, BlockLargerThanTheCapIsNotKept) {
  HostBufferPool pool(kMiB);
  { HostBuffer small = pool.Allocate(kMiB / 2); }
  { HostBuffer big = pool.Allocate(2 * kMiB); }
  HostBufferPool::Stats stats = pool.GetStats();
  EXPECT_EQ(stats.idle_bytes, kMiB / 2);  // the big one did not evict it
  EXPECT_EQ(stats.evictions, 0u);
}

TEST(HostBufferPoolTest, ShrinkingTheCapEvictsAtOnce) {
  HostBufferPool pool(8 * kMiB);
  {
    HostBuffer a = pool.Allocate(kMiB);
    HostBuffer b = pool.Allocate(kMiB);
    HostBuffer c = pool.Allocate(kMiB);
  }
  EXPECT_EQ(pool.GetStats().idle_bytes, 3 * kMiB);
  pool.SetCapacityBytes(kMiB);
  HostBufferPool::Stats stats = pool.GetStats();
  EXPECT_EQ(stats.capacity_bytes, kMiB);
  EXPECT_EQ(stats.idle_bytes, kMiB);
  EXPECT_EQ(stats.evictions, 2u);
  EXPECT_EQ(pool.capacity_bytes(), kMiB);
}

TEST(HostBufferPoolTest, ZeroCapacityDisablesPooling) {
  HostBufferPool pool(0);
  for (int i = 0; i < 3; ++i) {
    HostBuffer b = pool.Allocate(kMiB);
    ASSERT_NE(b.data(), nullptr);
  }
  HostBufferPool::Stats stats = pool.GetStats();
  EXPECT_EQ(stats.idle_bytes, 0u);
  EXPECT_EQ(stats.hits, 0u);
  EXPECT_EQ(stats.misses, 3u);

  HostBufferPool enabled(8 * kMiB);
  { HostBuffer b = enabled.Allocate(kMiB); }
  enabled.SetCapacityBytes(0);  // frees what it held, keeps nothing after
  EXPECT_EQ(enabled.GetStats().idle_bytes, 0u);
  { HostBuffer b = enabled.Allocate(kMiB); }
  EXPECT_EQ(enabled.GetStats().idle_bytes, 0u);
  EXPECT_EQ(enabled.GetStats().hits, 0u);
}

TEST(HostBufferPoolTest, TrimReleasesEveryIdleBlock) {
  HostBufferPool pool(8 * kMiB);
  {
    HostBuffer a = pool.Allocate(kMiB);
    HostBuffer b = pool.Allocate(2 * kMiB);
  }
  EXPECT_EQ(pool.Trim(), 3 * kMiB);
  HostBufferPool::Stats stats = pool.GetStats();
  EXPECT_EQ(stats.idle_bytes, 0u);
  EXPECT_EQ(stats.idle_blocks, 0u);
  EXPECT_EQ(stats.capacity_bytes, 8 * kMiB);  // still enabled
  EXPECT_EQ(pool.Trim(), 0u);
  { HostBuffer c = pool.Allocate(kMiB); }
  EXPECT_EQ(pool.GetStats().idle_bytes, kMiB);
}

TEST(HostBufferPoolTest, MovesTransferOwnership) {
  HostBufferPool pool(8 * kMiB);
  HostBuffer a = pool.Allocate(kMiB);
  uint8_t* block = a.data();
  HostBuffer b = std::move(a);
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(a.size(), 0u);       // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(b.data(), block);
  EXPECT_EQ(pool.GetStats().idle_bytes, 0u);
  HostBuffer c = pool.Allocate(2 * kMiB);
  c = std::move(b);  // c's 2 MiB block goes back to the pool
  EXPECT_EQ(c.data(), block);
  EXPECT_EQ(pool.GetStats().idle_bytes, 2 * kMiB);
}

TEST(HostBufferPoolTest, BuffersMayOutliveTheirPool) {
  HostBuffer survivor;
  {
    HostBufferPool pool(8 * kMiB);
    { HostBuffer idle = pool.Allocate(kMiB); }
    survivor = pool.Allocate(2 * kMiB);
  }
  std::memset(survivor.data(), 1, survivor.size());
  survivor = HostBuffer();  // freed; the pool's state went with it
}

TEST(HostBufferPoolTest, ConcurrentAllocateAndRelease) {
  HostBufferPool pool(6 * kMiB);
  constexpr int kThreads = 8;
  constexpr int kRounds = 200;
  const size_t sizes[] = {64 * kKiB, 256 * kKiB, kMiB, 100};
  std::atomic<uint64_t> pooled_requests{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&pool, &sizes, &pooled_requests, t] {
      const auto mark = static_cast<uint8_t>(t + 1);
      for (int i = 0; i < kRounds; ++i) {
        HostBuffer x = pool.Allocate(sizes[(t + i) % 4]);
        HostBuffer y = pool.Allocate(sizes[(t + 2 * i) % 4]);
        for (const HostBuffer* b : {&x, &y}) {
          if (b->size() >= HostBufferPool::kMinPooledBytes) ++pooled_requests;
        }
        std::memset(x.data(), mark, x.size());
        std::memset(y.data(), mark, y.size());
        std::this_thread::yield();
        // No other thread may hold either block meanwhile.
        for (HostBuffer* b : {&x, &y}) {
          for (size_t k = 0; k < b->size(); k += 509) {
            ASSERT_EQ(b->data()[k], mark);
          }
          ASSERT_EQ(b->data()[b->size() - 1], mark);
        }
        if (i % 50 == 0) pool.GetStats();
        if (t == 0 && i % 64 == 0) pool.Trim();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  HostBufferPool::Stats stats = pool.GetStats();
  EXPECT_LE(stats.idle_bytes, stats.capacity_bytes);
  EXPECT_GT(stats.hits, 0u);
  EXPECT_EQ(stats.hits + stats.misses, pooled_requests.load());
}

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (value == nullptr) {
      unsetenv(name);
    } else {
      setenv(name, value, 1);
    }
  }
  ~ScopedEnv() { unsetenv(name_); }

 private:
  const char* name_;
};

TEST(HostBufferPoolTest, CapacityFromEnvironment) {
  const char* var = HostBufferPool::kCapacityEnvVar;
  {
    ScopedEnv env(var, nullptr);
    EXPECT_EQ(HostBufferPool::CapacityFromEnvironment(),
              HostBufferPool::kDefaultCapacityBytes);
  }
  struct Case {
    const char* value;
    size_t want;
  };
  for (const Case& c :
       {Case{"0", 0}, Case{"1048576", kMiB}, Case{"64K", 64 * kKiB},
        Case{"512m", 512 * kMiB}, Case{" 2G ", 2048 * kMiB}, Case{"", 0}}) {
    ScopedEnv env(var, c.value);
    size_t want =
        *c.value == '\0' ? HostBufferPool::kDefaultCapacityBytes : c.want;
    EXPECT_EQ(HostBufferPool::CapacityFromEnvironment(), want) << c.value;
  }
  for (const char* bad : {"abc", "-1", "1.5G", "12T", "M",
                          "99999999999999999999", "17179869184G"}) {
    ScopedEnv env(var, bad);
    EXPECT_EQ(HostBufferPool::CapacityFromEnvironment(),
              HostBufferPool::kDefaultCapacityBytes)
        << bad;
  }
}

}  // namespace
}  // namespace rankd::dataplane
