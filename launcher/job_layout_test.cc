// Unit tests for launcher/job_layout.h: the job from the options alone, and
// a reused daemon's job checked against the options.

#include "launcher/job_layout.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rankd::launcher {
namespace {

using ::testing::HasSubstr;

DaemonJob TwoNodesOfFour() {
  DaemonJob job;
  job.job_id = "serving";
  job.world_size = 8;
  job.nnodes = 2;
  job.nproc_per_node = 4;
  job.node_index = 1;
  job.tensor_parallel = 2;
  return job;
}

TEST(LayoutFromDaemonTest, TakesTheDaemonsSizesWhenNoneAreGiven) {
  absl::StatusOr<Layout> l =
      LayoutFromDaemon(LaunchOptions{}, TwoNodesOfFour(), "unix:///s");
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->job_id, "serving");
  EXPECT_EQ(l->node_rank, 1u);
  EXPECT_EQ(l->world_size, 8u);
  EXPECT_EQ(l->topology.tensor, 2u);
}

TEST(LayoutFromDaemonTest, NamesEveryOptionThatDisagrees) {
  LaunchOptions o;
  o.nproc_per_node = 2;
  o.job_id = "other";
  absl::StatusOr<Layout> l = LayoutFromDaemon(o, TwoNodesOfFour(), "t");
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(l.status().message(),
              HasSubstr("--nproc_per_node=2 (the daemon's 4)"));
  EXPECT_THAT(l.status().message(),
              HasSubstr("--job_id=other (the daemon's serving)"));
  EXPECT_THAT(l.status().message(), HasSubstr("--daemon=start"));
}

TEST(LayoutFromOptionsTest, DefaultsToOneProcessOfTheDefaultJob) {
  absl::StatusOr<Layout> l = LayoutFromOptions(LaunchOptions{});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->job_id, kDefaultJobId);
  EXPECT_EQ(l->world_size, 1u);
}

TEST(LayoutFromOptionsTest, RefusesWhatCannotStartADaemon) {
  LaunchOptions o;
  o.nnodes = 2;
  o.node_rank = 2;
  o.node_rank_source = "--node_rank";
  EXPECT_THAT(LayoutFromOptions(o).status().message(),
              HasSubstr("--node_rank=2 must be below --nnodes(2)"));
  o.node_rank = 1;
  EXPECT_THAT(LayoutFromOptions(o).status().message(),
              HasSubstr("needs --coordinator"));
  o.coordinator = "head:7421";
  EXPECT_THAT(LayoutFromOptions(o).status().message(),
              HasSubstr("needs --credentials_dir"));
  o.credentials_dir = "/c";
  o.nproc_per_node = 3;
  o.tensor_parallel = 4;
  EXPECT_THAT(LayoutFromOptions(o).status().message(),
              HasSubstr("does not divide the world size 6"));
}

}  // namespace
}  // namespace rankd::launcher
