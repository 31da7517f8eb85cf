// Unit tests for the C ABI's status marks (capi/status.cc): an epoch's
// fence and an ended epoch are read from the status's mark
// (common/error_reason.h), never from its words, and NULL has none. (The ranks'
// tests reach the mark only through a race, since a client that heard of the
// loss answers with it first; tests/recovery_test checks that the daemons mark
// the fence.)
#include "capi/internal/handles.h"
#include "common/error_reason.h"
#include "gtest/gtest.h"
#include "rankd/rankd.h"

namespace rankd::capi::internal {
namespace {

TEST(CApiStatusTest, AnEpochsFenceIsTheMarkNotTheWords) {
  EXPECT_EQ(rankd_status_is_epoch_fence(nullptr), 0);
  rankd_status* fenced = ToC(WithReason(
      absl::FailedPreconditionError("rankd KvSet: rank 0 joined into epoch 1 "
                                    "but the job is at epoch 2"),
      ErrorReason::kEpochFenced));
  ASSERT_NE(fenced, nullptr);
  EXPECT_EQ(rankd_status_is_epoch_fence(fenced), 1);
  EXPECT_EQ(rankd_status_code(fenced), RANKD_FAILED_PRECONDITION);
  EXPECT_EQ(rankd_status_is_wait_timeout(fenced), 0);
  rankd_status_free(fenced);
  rankd_status* words = ToC(absl::FailedPreconditionError(
      "rank 0 joined into epoch 1 but the job is at epoch 2"));
  EXPECT_EQ(rankd_status_is_epoch_fence(words), 0);
  rankd_status_free(words);
}

TEST(CApiStatusTest, AnEndedEpochIsTheMarkNotTheWords) {
  EXPECT_EQ(rankd_status_ends_an_epoch(nullptr), 0);
  rankd_status* ended = ToC(WithReason(
      absl::AbortedError("job j epoch 1 ended (MEMBER_LOST, rank 1): lost"),
      ErrorReason::kEpochEnded));
  ASSERT_NE(ended, nullptr);
  EXPECT_EQ(rankd_status_ends_an_epoch(ended), 1);
  EXPECT_EQ(rankd_status_is_epoch_fence(ended), 0);
  EXPECT_EQ(rankd_status_code(ended), RANKD_ABORTED);
  rankd_status_free(ended);
  rankd_status* words = ToC(
      absl::AbortedError("job j epoch 1 ended (MEMBER_LOST, rank 1): lost"));
  EXPECT_EQ(rankd_status_ends_an_epoch(words), 0);
  rankd_status_free(words);
}

}  // namespace
}  // namespace rankd::capi::internal
