#include "gtest/gtest.h"
#include "rankd/v1/rank.grpc.pb.h"
#include "absl/status/status.h"
TEST(Proto, Builds) { rankd::v1::JoinRequest r; r.set_local_rank(3); EXPECT_EQ(r.local_rank(), 3u); EXPECT_TRUE(absl::OkStatus().ok()); }
