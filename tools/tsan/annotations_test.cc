// Tests of tools/tsan/absl_mutex_annotations.cc under --config=tsan: a real
// race is still reported, and each way abseil hands data between threads
// (Mutex, reader locks, Notification, CondVar, Await and LockWhen with
// conditions, timeouts) is seen as synchronization, so none is reported.
// In other builds the same code runs and the race check is skipped.
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RANKD_TSAN 1
#endif
#endif

namespace {

#ifdef RANKD_TSAN
// Two threads bump one counter, each under a mutex of its own.
void CountUnderDifferentMutexes() {
  absl::Mutex a;
  absl::Mutex b;
  int counter = 0;
  std::thread other([&] {
    absl::MutexLock lock(&a);
    ++counter;
  });
  {
    absl::MutexLock lock(&b);
    ++counter;
  }
  other.join();
}
#endif

TEST(TsanAnnotationsDeathTest, AnUnguardedCounterIsReportedAsARace) {
#ifndef RANKD_TSAN
  GTEST_SKIP() << "not a ThreadSanitizer build";
#else
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        int counter = 0;
        std::thread other([&] { ++counter; });
        ++counter;
        other.join();
      },
      "ThreadSanitizer: data race");
#endif
}

// The annotations must not order what the locks do not: a counter each
// thread guards with a different mutex is still a race.
TEST(TsanAnnotationsDeathTest, DifferentMutexesDoNotGuardEachOther) {
#ifndef RANKD_TSAN
  GTEST_SKIP() << "not a ThreadSanitizer build";
#else
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(CountUnderDifferentMutexes(), "ThreadSanitizer: data race");
#endif
}

TEST(TsanAnnotationsTest, MutexAndReaderLocksGuard) {
  absl::Mutex mu;
  int counter = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) {
        {
          absl::MutexLock lock(&mu);
          ++counter;
        }
        absl::ReaderMutexLock lock(&mu);
        EXPECT_GT(counter, 0);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(counter, 4000);
  EXPECT_TRUE(mu.TryLock());
  ++counter;
  mu.Unlock();
}

// A reader try-lock that fails leaves nothing held: a later exclusive hold
// of the same mutex waits (CondVar, Await) in exclusive mode.
TEST(TsanAnnotationsTest, AFailedReaderTryLockHoldsNothing) {
  absl::Mutex mu;
  absl::CondVar cv;
  int value = 0;
  absl::Notification held, tried;
  std::thread writer([&] {
    absl::MutexLock lock(&mu);
    held.Notify();
    tried.WaitForNotification();
  });
  held.WaitForNotification();
  EXPECT_FALSE(mu.ReaderTryLock());
  tried.Notify();
  writer.join();
  absl::MutexLock lock(&mu);
  value = 1;
  cv.WaitWithTimeout(&mu, absl::Milliseconds(1));
  mu.AwaitWithTimeout(absl::Condition(
                          +[](int* v) { return *v == 1; }, &value),
                      absl::Seconds(1));
  EXPECT_EQ(value, 1);
}

TEST(TsanAnnotationsTest, NotificationPublishes) {
  int value = 0;
  absl::Notification ready;
  std::thread writer([&] {
    value = 42;
    ready.Notify();
  });
  ready.WaitForNotification();
  EXPECT_EQ(value, 42);
  writer.join();
  // HasBeenNotified publishes too: the read comes before the join.
  int second = 0;
  absl::Notification done;
  std::thread late([&] {
    second = 7;
    done.Notify();
  });
  while (!done.HasBeenNotified()) std::this_thread::yield();
  EXPECT_EQ(second, 7);
  late.join();
  EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(1)));
}

TEST(TsanAnnotationsTest, CondVarAwaitAndLockWhenPublish) {
  absl::Mutex mu;
  absl::CondVar changed;
  std::vector<int> items;  // guarded by mu
  bool closed = false;     // guarded by mu
  std::thread producer([&] {
    for (int i = 0; i < 100; ++i) {
      absl::MutexLock lock(&mu);
      items.push_back(i);
      changed.Signal();
    }
    absl::MutexLock lock(&mu);
    closed = true;
    changed.SignalAll();
  });
  // CondVar::Wait, then Await and LockWhen whose conditions read the
  // guarded data while the library holds the lock.
  {
    absl::MutexLock lock(&mu);
    while (items.size() < 10) changed.Wait(&mu);
    EXPECT_GE(items.size(), 10u);
    changed.WaitWithTimeout(&mu, absl::Milliseconds(1));
    mu.Await(absl::Condition(
        +[](std::vector<int>* v) { return v->size() >= 50; }, &items));
    EXPECT_GE(items.size(), 50u);
  }
  mu.LockWhen(absl::Condition(&closed));
  EXPECT_EQ(items.size(), 100u);
  mu.Unlock();
  EXPECT_TRUE(
      mu.LockWhenWithTimeout(absl::Condition(&closed), absl::Seconds(1)));
  EXPECT_TRUE(mu.AwaitWithTimeout(absl::Condition(&closed), absl::Seconds(1)));
  mu.Unlock();
  mu.ReaderLockWhen(absl::Condition(&closed));
  EXPECT_EQ(items.back(), 99);
  mu.ReaderUnlock();
  producer.join();
}

}  // namespace
