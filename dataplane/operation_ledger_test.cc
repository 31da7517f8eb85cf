// Unit tests for dataplane/operation_ledger.h: deadlines (first unfinished
// operation past its deadline, with its recorded sequence number), the abort
// latch (FailAll fails registered and later operations, first cause wins),
// the description of what is unfinished, and pruning of finished and destroyed
// operations.
#include "dataplane/operation_ledger.h"

#include <memory>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "common/monotonic_clock.h"
#include "gtest/gtest.h"

namespace rankd::dataplane {
namespace {

std::shared_ptr<Operation> Running(const char* name) {
  return std::make_shared<Operation>(
      name, std::vector<std::shared_ptr<const void>>{});
}

SubmittedOperation What(const char* canonical) {
  SubmittedOperation what;
  what.scope_key = "world";
  what.scope_name = "world";
  what.canonical = canonical;
  what.members = {0, 1};
  return what;
}

TEST(OperationLedgerTest, FirstExpiredIsTheFirstUnfinishedPastItsDeadline) {
  OperationLedger ledger;
  const absl::Time now = MonotonicNow();
  auto finished = Running("barrier on world");
  auto late = Running("all_reduce_sum on world");
  auto due_later = Running("all_gather on world");
  ledger.Add(finished, now - absl::Seconds(2), What("barrier"));
  OperationLedger::SequenceCell cell =
      ledger.Add(late, now - absl::Seconds(1), What("all_reduce_sum f32[4]"));
  ledger.Add(due_later, now + absl::Hours(1), What("all_gather"));
  finished->Finish(absl::OkStatus());

  std::optional<OperationLedger::Expired> expired = ledger.FirstExpired(now);
  ASSERT_TRUE(expired.has_value());
  EXPECT_EQ(expired->op, late);
  EXPECT_EQ(expired->what.canonical, "all_reduce_sum f32[4]");
  EXPECT_FALSE(expired->ordered);  // never ordered: nothing to compare
  EXPECT_EQ(expired->what.sequence, 0u);

  cell->store(41);
  expired = ledger.FirstExpired(now);
  ASSERT_TRUE(expired.has_value());
  EXPECT_TRUE(expired->ordered);
  EXPECT_EQ(expired->what.sequence, 41u);

  late->Finish(absl::OkStatus());
  EXPECT_FALSE(ledger.FirstExpired(now).has_value());
  EXPECT_TRUE(ledger.FirstExpired(now + absl::Hours(2)).has_value());
  due_later->Finish(absl::OkStatus());
}

TEST(OperationLedgerTest, AnOperationWithoutASequenceCellIsNeverOrdered) {
  OperationLedger ledger;
  const absl::Time now = MonotonicNow();
  auto late = Running("all_reduce_sum on world");
  EXPECT_EQ(
      ledger.Add(late, now - absl::Seconds(1), What("all_reduce_sum f32[4]"),
                 /*records_sequence=*/false),
      nullptr);
  std::optional<OperationLedger::Expired> expired = ledger.FirstExpired(now);
  ASSERT_TRUE(expired.has_value());
  EXPECT_EQ(expired->op, late);
  EXPECT_FALSE(expired->ordered);
  EXPECT_EQ(expired->what.sequence, 0u);
  EXPECT_EQ(ledger.DescribeUnfinished(2), "on world: all_reduce_sum f32[4]");
  late->Finish(absl::OkStatus());
  EXPECT_FALSE(ledger.FirstExpired(now).has_value());
}

TEST(OperationLedgerTest, DescribeUnfinishedNamesTheOldestOnes) {
  OperationLedger ledger;
  EXPECT_EQ(ledger.DescribeUnfinished(2), "no operation outstanding");
  const absl::Time later = MonotonicNow() + absl::Hours(1);
  auto done = Running("barrier on world");
  auto sum = Running("all_reduce_sum on world");
  auto gather = Running("all_gather on world");
  auto a2a = Running("all_to_all_v on world");
  ledger.Add(done, later, What("barrier"));
  ledger.Add(sum, later, What("all_reduce_sum f32[4]"))->store(3);
  ledger.Add(gather, later, What("all_gather f32[2]"));
  ledger.Add(a2a, later, What("all_to_all_v f32[2]"));
  done->Finish(absl::OkStatus());
  EXPECT_EQ(ledger.DescribeUnfinished(2),
            "#3 on world: all_reduce_sum f32[4], on world: all_gather f32[2] "
            "and 1 more");
  for (auto* op : {&sum, &gather, &a2a}) (*op)->Finish(absl::OkStatus());
}

TEST(OperationLedgerTest, FailAllFailsRegisteredAndLaterOperations) {
  OperationLedger ledger;
  auto before = Running("send to 1");
  auto done = Running("barrier on world");
  ledger.Add(before, absl::InfiniteFuture(), What("send"));
  ledger.Add(done, absl::InfiniteFuture(), What("barrier"));
  done->Finish(absl::OkStatus());

  ledger.FailAll(absl::AbortedError("job failed: rank 3 lost"));
  ledger.FailAll(absl::InternalError("later"));
  EXPECT_EQ(ledger.failed().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(before->status().code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(done->status().ok());  // finished work keeps its outcome

  // Work registered after the abort started is failed at once, so it never
  // reports success.
  auto after = Running("receive from 1");
  ledger.Add(after, absl::InfiniteFuture(), What("receive"));
  EXPECT_EQ(after->status().code(), absl::StatusCode::kAborted);
  EXPECT_NE(after->status().message().find("rank 3 lost"), std::string::npos);
  before->Finish(absl::OkStatus());
  after->Finish(absl::OkStatus());
  EXPECT_EQ(after->status().code(), absl::StatusCode::kAborted);
}

TEST(OperationLedgerTest, AnAbortRacingSubmissionsMissesNone) {
  for (int round = 0; round < 20; ++round) {
    OperationLedger ledger;
    std::vector<std::shared_ptr<Operation>> ops;
    for (int i = 0; i < 200; ++i) ops.push_back(Running("op"));
    std::thread submitter([&] {
      for (const auto& op : ops) {
        ledger.Add(op, absl::InfiniteFuture(), What("op"));
      }
    });
    ledger.FailAll(absl::CancelledError("aborted"));
    submitter.join();
    for (const auto& op : ops) {
      EXPECT_EQ(op->status().code(), absl::StatusCode::kCancelled);
    }
  }
}

TEST(OperationLedgerTest, PruneDropsFinishedAndDestroyedOperations) {
  OperationLedger ledger(/*prune_at=*/4);
  auto kept = Running("all_reduce_sum on world");
  ledger.Add(kept, absl::InfiniteFuture(), What("kept"));
  {
    auto gone = Running("gone");
    ledger.Add(gone, absl::InfiniteFuture(), What("gone"));
  }
  auto finished = Running("finished");
  ledger.Add(finished, absl::InfiniteFuture(), What("finished"));
  finished->Finish(absl::OkStatus());
  EXPECT_EQ(ledger.size(), 3u);
  ledger.Prune();
  EXPECT_EQ(ledger.size(), 1u);

  // Add drops destroyed operations by itself once it holds prune_at
  // entries; finished ones that still live wait for Prune.
  for (int i = 0; i < 10; ++i) {
    auto op = Running("short");
    ledger.Add(op, absl::InfiniteFuture(), What("short"));
  }
  EXPECT_LE(ledger.size(), 4u);
  std::vector<std::shared_ptr<Operation>> held;
  for (int i = 0; i < 5; ++i) {
    held.push_back(Running("held"));
    ledger.Add(held.back(), absl::InfiniteFuture(), What("held"));
    held.back()->Finish(absl::OkStatus());
  }
  EXPECT_GE(ledger.size(), 5u);
  ledger.Prune();
  EXPECT_EQ(ledger.size(), 1u);
  kept->Finish(absl::OkStatus());
}

}  // namespace
}  // namespace rankd::dataplane
