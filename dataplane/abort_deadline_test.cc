// Unit tests for abort_deadline.h: an abort that returns in time ends
// nothing; one that does not ends the process with kExitNativeAbortHung,
// after saying what was stuck.
#include "dataplane/abort_deadline.h"

#include "absl/synchronization/notification.h"
#include "common/exit_codes.h"
#include "gtest/gtest.h"

namespace rankd::dataplane {
namespace {

TEST(AbortDeadlineTest, AnAbortThatReturnsInTimeEndsNothing) {
  bool described = false;
  {
    AbortDeadline deadline("nccl", absl::Seconds(10), [&] {
      described = true;
      return std::string("never asked");
    });
  }
  EXPECT_FALSE(described);
}

TEST(AbortDeadlineTest, AnInfiniteBoundArmsNothing) {
  AbortDeadline deadline("nccl", absl::InfiniteDuration(),
                         [] { return std::string("never asked"); });
}

TEST(AbortDeadlineDeathTest, AnAbortThatHangsEndsTheProcessNamingWhatIsStuck) {
  EXPECT_EXIT(
      {
        AbortDeadline deadline("nccl", absl::Milliseconds(50), [] {
          return std::string("communicator world (ranks 0-1) is stuck");
        });
        absl::Notification never;
        never.WaitForNotificationWithTimeout(absl::Seconds(30));
      },
      ::testing::ExitedWithCode(kExitNativeAbortHung),
      "rankd: nccl abort did not return within 50ms: communicator world "
      "\\(ranks 0-1\\) is stuck; ending the process \\(exit status 86, the "
      "native abort hung\\)");
}

}  // namespace
}  // namespace rankd::dataplane
