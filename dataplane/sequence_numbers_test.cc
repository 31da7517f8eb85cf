#include "dataplane/sequence_numbers.h"

#include "gtest/gtest.h"

namespace rankd::dataplane {
namespace {

TEST(SequenceNumbersTest, CollectivesAndEachDirectionCountApart) {
  SequenceNumbers numbers;
  EXPECT_EQ(numbers.NextCollective(), 0u);
  EXPECT_EQ(numbers.NextTransfer(0, 1), 0u);
  EXPECT_EQ(numbers.NextTransfer(0, 1), 1u);
  // The other direction of the same route, and another route, start at 0.
  EXPECT_EQ(numbers.NextTransfer(1, 0), 0u);
  EXPECT_EQ(numbers.NextTransfer(0, 2), 0u);
  EXPECT_EQ(numbers.NextCollective(), 1u);
  EXPECT_EQ(numbers.NextTransfer(0, 1), 2u);
}

}  // namespace
}  // namespace rankd::dataplane
