// MismatchDiagnosis unit tests: what a failed operation reports, given what
// the other members published, over the in-process control plane.
#include "dataplane/mismatch_diagnosis.h"

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/monotonic_clock.h"
#include "dataplane/testing/in_process_control_plane.h"
#include "gtest/gtest.h"

namespace rankd::dataplane {
namespace {

using testing::InProcessJob;

SubmittedOperation Op(uint32_t self, std::string canonical) {
  SubmittedOperation op;
  op.scope_key = "world";
  op.scope_name = "world";
  op.sequence = 7;
  op.canonical = std::move(canonical);
  op.members = {0, 1, 2};
  op.self = self;
  return op;
}

const absl::Status kTimeout =
    absl::DeadlineExceededError("gloo all_reduce_sum on world: Timed out");

class MismatchDiagnosisTest : public ::testing::Test {
 protected:
  MismatchDiagnosisTest() : job_(InProcessJob::Create(3)) {
    for (uint32_t r = 0; r < 3; ++r) planes_.push_back(job_->ForRank(r));
  }
  MismatchDiagnosis For(uint32_t rank, absl::Duration grace) {
    return MismatchDiagnosis(planes_[rank].get(), "gloo/job@1/diagnosis/",
                             grace);
  }
  // Every rank explains its own submission at once; returns their results.
  std::vector<absl::Status> ExplainAll(
      const std::vector<std::string>& canonical, absl::Duration grace) {
    std::vector<absl::Status> out(canonical.size());
    disagree.assign(canonical.size(), 0);
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < canonical.size(); ++r) {
      threads.emplace_back([&, r] {
        Explanation why = For(r, grace).Explain(Op(r, canonical[r]), kTimeout);
        out[r] = why.status;
        disagree[r] = why.members_disagree ? 1 : 0;
      });
    }
    for (auto& t : threads) t.join();
    return out;
  }

  std::shared_ptr<InProcessJob> job_;
  std::vector<std::unique_ptr<ControlPlane>> planes_;
  // Set by ExplainAll: each rank's Explanation::members_disagree (1 or 0).
  // Not vector<bool>: its elements share words, so the ranks' threads
  // writing their own elements would race (ThreadSanitizer found it).
  std::vector<int> disagree;
};

TEST_F(MismatchDiagnosisTest, AgreementKeepsTheOriginalError) {
  for (const absl::Status& s :
       ExplainAll({"all_reduce_sum f32[2]", "all_reduce_sum f32[2]",
                   "all_reduce_sum f32[2]"},
                  absl::Seconds(5))) {
    EXPECT_EQ(s, kTimeout);
  }
  EXPECT_EQ(disagree, std::vector<int>(3, 0));
}

TEST_F(MismatchDiagnosisTest, DisagreementNamesWhoSubmittedWhatOnEveryMember) {
  std::vector<absl::Status> all =
      ExplainAll({"all_reduce_sum f32[2]", "all_gather_even f32[2]",
                  "all_reduce_sum f32[2]"},
                 absl::Seconds(5));
  for (uint32_t r = 0; r < 3; ++r) {
    const absl::Status& s = all[r];
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_TRUE(absl::StrContains(s.message(),
                                  "members disagree on operation #7 on world"))
        << s;
    EXPECT_TRUE(absl::StrContains(
        s.message(), "ranks 0, 2 submitted `all_reduce_sum f32[2]`"))
        << s;
    EXPECT_TRUE(absl::StrContains(s.message(),
                                  "rank 1 submitted `all_gather_even f32[2]`"))
        << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "Timed out")) << s;
  }
  EXPECT_EQ(disagree, std::vector<int>(3, 1));
  // Each member lists its own submission first.
  EXPECT_TRUE(absl::StrContains(all[1].message(),
                                "world: rank 1 submitted `all_gather_even"))
      << all[1];
}

TEST_F(MismatchDiagnosisTest, SilentMembersAreNamedAfterTheGrace) {
  const absl::Time start = MonotonicNow();
  Explanation why =
      For(0, absl::Milliseconds(300)).Explain(Op(0, "barrier"), kTimeout);
  EXPECT_FALSE(why.members_disagree);
  const absl::Status& s = why.status;
  EXPECT_GE(MonotonicNow() - start, absl::Milliseconds(250));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_TRUE(absl::StrContains(
      s.message(), "ranks 1-2 did not report operation #7 on world within"))
      << s;
}

// A member whose peer timed out first sees the connection closed, not a
// timeout; the silent member is still the cause, with the same code.
TEST_F(MismatchDiagnosisTest, APeersTeardownIsReportedAsTheSilentMembersDelay) {
  Explanation why =
      For(0, absl::Milliseconds(100))
          .Explain(Op(0, "barrier"),
                   absl::UnavailableError("Connection closed by peer"));
  EXPECT_FALSE(why.members_disagree);
  EXPECT_EQ(why.status.code(), absl::StatusCode::kDeadlineExceeded)
      << why.status;
  EXPECT_TRUE(absl::StrContains(why.status.message(),
                                "Connection closed by peer; ranks 1-2 did "
                                "not report operation #7 on world"))
      << why.status;
}

TEST_F(MismatchDiagnosisTest, AFailedJobLeavesTheErrorToTheLostRankNotice) {
  job_->Fail(absl::AbortedError("job failed: rank 2 lost"));
  const absl::Time start = MonotonicNow();
  absl::Status s =
      For(0, absl::Seconds(30)).Explain(Op(0, "barrier"), kTimeout).status;
  EXPECT_LT(MonotonicNow() - start, absl::Seconds(5));
  EXPECT_EQ(s, kTimeout);
}

}  // namespace
}  // namespace rankd::dataplane
