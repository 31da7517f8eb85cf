// Unit test of the C ABI's exception guard (capi/internal/handles.h,
// Guarded): an entry point that runs out of memory returns
// RESOURCE_EXHAUSTED instead of unwinding std::bad_alloc into its C caller,
// whose process would end (std::terminate) or worse. The test replaces the
// global operator new to fail on demand, on this thread only.
#include <cstdlib>
#include <new>
#include <string>

#include "gtest/gtest.h"
#include "rankd/rankd.h"

namespace {

// Allocations on this thread to let through before failing; -1: never fail.
thread_local int allocations_before_failure = -1;
// When set, only one allocation fails, then they succeed again.
thread_local bool fail_once = false;

}  // namespace

void* operator new(std::size_t size) {
  if (allocations_before_failure == 0) {
    if (fail_once) allocations_before_failure = -1;
    throw std::bad_alloc();
  }
  if (allocations_before_failure > 0) --allocations_before_failure;
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}

void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace {

rankd_status* JoinWithFailingAllocation(bool once) {
  rankd_join_options options;
  rankd_join_options_init(&options);
  options.target = "unix:///nonexistent/rankd.sock";
  options.job_id = "guard";
  rankd_rank* rank = nullptr;
  fail_once = once;
  allocations_before_failure = 0;
  rankd_status* status = rankd_join(&options, &rank);
  allocations_before_failure = -1;
  EXPECT_EQ(rank, nullptr);
  return status;
}

TEST(CApiGuardTest, AnEntryPointOutOfMemoryReturnsResourceExhausted) {
  rankd_status* status = JoinWithFailingAllocation(/*once=*/true);
  ASSERT_NE(status, nullptr);
  EXPECT_EQ(rankd_status_code(status), RANKD_RESOURCE_EXHAUSTED);
  EXPECT_EQ(std::string(rankd_status_message(status)),
            "rankd_join: out of memory");
  rankd_status_free(status);
}

TEST(CApiGuardTest, WithNoMemoryEvenForTheStatusTheLoadTimeOneIsReturned) {
  rankd_status* status = JoinWithFailingAllocation(/*once=*/false);
  ASSERT_NE(status, nullptr);
  EXPECT_EQ(rankd_status_code(status), RANKD_RESOURCE_EXHAUSTED);
  EXPECT_EQ(std::string(rankd_status_message(status)), "rankd: out of memory");
  rankd_status_free(status);  // left alone: a second free must not crash
  rankd_status* again = JoinWithFailingAllocation(/*once=*/false);
  EXPECT_EQ(again, status);
  rankd_status_free(again);
}

}  // namespace
