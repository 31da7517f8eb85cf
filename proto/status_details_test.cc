// Unit tests for proto/status_details.h: a reason survives the trip through
// a status's details, the details read as a google.rpc.Status (code,
// message, one typed detail), and details that are absent, malformed or
// name an unknown reason leave the status as it was.
#include "proto/status_details.h"

#include "common/error_reason.h"
#include "gtest/gtest.h"
#include "rankd/v1/common.pb.h"

namespace rankd {
namespace {

TEST(StatusDetailsTest, AReasonSurvivesTheTrip) {
  const absl::Status fenced =
      WithReason(absl::FailedPreconditionError("rank 3 joined into epoch 1"),
                 ErrorReason::kEpochFenced);
  const std::string details = StatusDetailsOf(fenced);
  ASSERT_FALSE(details.empty());
  v1::StatusDetails parsed;
  ASSERT_TRUE(parsed.ParseFromString(details));
  EXPECT_EQ(parsed.code(), 9);
  EXPECT_EQ(parsed.message(), "rank 3 joined into epoch 1");
  ASSERT_EQ(parsed.details_size(), 1);
  EXPECT_EQ(parsed.details(0).type_url(),
            "type.googleapis.com/rankd.v1.ErrorInfo");

  const absl::Status received = WithDetails(
      absl::FailedPreconditionError("KvSet: rank 3 joined ..."), details);
  EXPECT_EQ(ReasonOf(received), ErrorReason::kEpochFenced);
  EXPECT_EQ(received.message(), "KvSet: rank 3 joined ...");
}

TEST(StatusDetailsTest, NoReasonNoDetails) {
  EXPECT_EQ(StatusDetailsOf(absl::OkStatus()), "");
  EXPECT_EQ(StatusDetailsOf(absl::FailedPreconditionError("x")), "");
}

TEST(StatusDetailsTest, AnythingElseLeavesTheStatusAsItWas) {
  const absl::Status plain = absl::FailedPreconditionError("x");
  EXPECT_EQ(WithDetails(plain, ""), plain);
  EXPECT_EQ(WithDetails(plain, "\xff\xff not a proto"), plain);
  v1::StatusDetails other;
  v1::TypedDetail* d = other.add_details();
  d->set_type_url("type.googleapis.com/google.rpc.DebugInfo");
  d->set_value("whatever");
  EXPECT_EQ(ReasonOf(WithDetails(plain, other.SerializeAsString())),
            ErrorReason::kUnspecified);
  // A reason from a newer daemon.
  v1::ErrorInfo newer;
  newer.set_reason(static_cast<v1::ErrorReason>(57));
  v1::StatusDetails from_newer;
  v1::TypedDetail* n = from_newer.add_details();
  n->set_type_url("type.googleapis.com/rankd.v1.ErrorInfo");
  n->set_value(newer.SerializeAsString());
  EXPECT_EQ(ReasonOf(WithDetails(plain, from_newer.SerializeAsString())),
            ErrorReason::kUnspecified);
  // An OK status never gains one.
  EXPECT_TRUE(
      WithDetails(absl::OkStatus(),
                  StatusDetailsOf(WithReason(plain, ErrorReason::kEpochFenced)))
          .ok());
}

}  // namespace
}  // namespace rankd
