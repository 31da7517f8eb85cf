#include "dataplane/agreement.h"

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace rankd::dataplane {
namespace {

constexpr char kWhere[] = "gloo all_reduce_sum on world";

TEST(OperationFingerprintTest, StableAndDistinct) {
  // FNV-1a of the empty string: the same in every process and build.
  EXPECT_EQ(OperationFingerprint(""), 0xcbf29ce484222325ull);
  EXPECT_NE(OperationFingerprint("all_reduce_sum f32[4]"),
            OperationFingerprint("all_reduce_sum f32[5]"));
  EXPECT_TRUE(IsRefusal(OperationFingerprint(kRefusedCanonical)));
  EXPECT_FALSE(IsRefusal(OperationFingerprint("all_reduce_sum f32[4]")));
}

TEST(CollectiveVerdictTest, AgreementIsOk) {
  const uint64_t f = OperationFingerprint("x");
  EXPECT_TRUE(CollectiveVerdict(kWhere, "x", {0, 1, 2}, 1, {f, f, f},
                                VerdictPoint::kBeforePayload)
                  .ok());
}

TEST(CollectiveVerdictTest, NamesWhoSubmittedSomethingElse) {
  const uint64_t x = OperationFingerprint("x"), y = OperationFingerprint("y");
  absl::Status s = CollectiveVerdict(kWhere, "x", {4, 5, 6, 7}, 0, {x, y, x, y},
                                     VerdictPoint::kBeforePayload);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "gloo all_reduce_sum on world: members disagree on the "
            "operation, dtype or shape: ranks 4, 6 submitted `x`; ranks 5, 7 "
            "submitted another one; nothing moved");
  s = CollectiveVerdict(kWhere, "y", {4, 5, 6, 7}, 1, {x, y, x, y},
                        VerdictPoint::kAfterPayload);
  EXPECT_EQ(s.message(),
            "gloo all_reduce_sum on world: members disagree on the "
            "operation, dtype or shape: ranks 5, 7 submitted `y`; ranks 4, 6 "
            "submitted another one; the output is not valid");
}

TEST(CollectiveVerdictTest, RefusalsComeFirst) {
  const uint64_t x = OperationFingerprint("x"), y = OperationFingerprint("y");
  const uint64_t r = OperationFingerprint(kRefusedCanonical);
  absl::Status s = CollectiveVerdict(kWhere, "x", {0, 1, 2, 3}, 0, {x, r, r, y},
                                     VerdictPoint::kBeforePayload);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "gloo all_reduce_sum on world: ranks 1-2 refused it on its own "
            "arguments (its error says why); rank 3 submitted another "
            "operation; nothing moved");
}

TEST(CollectiveVerdictTest, MalformedRecordsAreInternal) {
  EXPECT_EQ(CollectiveVerdict(kWhere, "x", {0, 1}, 0, {1},
                              VerdictPoint::kBeforePayload)
                .code(),
            absl::StatusCode::kInternal);
  EXPECT_EQ(CollectiveVerdict(kWhere, "x", {0, 1}, 2, {1, 1},
                              VerdictPoint::kBeforePayload)
                .code(),
            absl::StatusCode::kInternal);
}

TEST(CountMatrixVerdictTest, NamesTheFirstPairSourceMajor) {
  // Member 0 sends 1 to member 1, which expects 2; member 1 sends 3 to
  // member 0, which expects 4: the first (source-major) pair is named.
  const std::vector<uint64_t> sends = {5, 1, 3, 6};
  const std::vector<uint64_t> receives = {5, 4, 2, 6};
  absl::Status s = CountMatrixVerdict(kWhere, {10, 11}, sends, receives,
                                      VerdictPoint::kBeforePayload);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "gloo all_reduce_sum on world: members disagree on the counts: "
            "member 0 (rank 10) sends 1 rows to member 1 (rank 11), which "
            "expects 2 from it; nothing moved");
  EXPECT_TRUE(CountMatrixVerdict(kWhere, {10, 11}, {5, 1, 3, 6}, {5, 3, 1, 6},
                                 VerdictPoint::kBeforePayload)
                  .ok());
  EXPECT_EQ(CountMatrixVerdict(kWhere, {10, 11}, {5, 1, 3}, {5, 3, 1, 6},
                               VerdictPoint::kBeforePayload)
                .code(),
            absl::StatusCode::kInternal);
}

TEST(TransfersVerdictTest, FlagsOnlyTheDisagreeingTransfers) {
  const uint64_t x = OperationFingerprint("x"), y = OperationFingerprint("y");
  const uint64_t r = OperationFingerprint(kRefusedCanonical);
  std::vector<TransferRecord> transfers = {
      {1, 11, true, "x", x, x},
      {2, 12, false, "x", x, y},
      {3, 13, true, "x", x, r},
  };
  std::vector<bool> disagreeing;
  absl::Status s = TransfersVerdict("batch", transfers,
                                    VerdictPoint::kAfterPayload, &disagreeing);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(disagreeing, (std::vector<bool>{false, true, true}));
  EXPECT_EQ(s.message(),
            "batch: the ends disagree: the receive from member 2 (rank 12): "
            "this end has `x`, the other end submitted another transfer; the "
            "send to member 3 (rank 13): this end has `x`, the other end "
            "refused it on its own arguments (its error says why); the "
            "outputs of those transfers are not valid");
  transfers.resize(1);
  EXPECT_TRUE(TransfersVerdict("send", transfers, VerdictPoint::kBeforePayload,
                               &disagreeing)
                  .ok());
  EXPECT_EQ(disagreeing, std::vector<bool>{false});
}

TEST(PeersAwaitRecordTest, OnlyWhenPeersCheckFirst) {
  EXPECT_FALSE(PeersAwaitRecord(1, true, true));
  EXPECT_FALSE(PeersAwaitRecord(2, false, false));
  EXPECT_TRUE(PeersAwaitRecord(2, true, false));
  EXPECT_TRUE(PeersAwaitRecord(2, false, true));
}

TEST(RefusalAfterTellingTest, KeepsTheCodeAndSaysWhatHappened) {
  const absl::Status refusal = absl::InvalidArgumentError("bad shape");
  absl::Status s =
      RefusalAfterTelling(refusal, "group 3", false, absl::OkStatus());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "bad shape (the other members of group 3 are told and refuse it "
            "too)");
  s = RefusalAfterTelling(refusal, "world", false,
                          absl::CancelledError("shut down"));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "bad shape; telling the other members of world failed: shut down");
  s = RefusalAfterTelling(refusal, "route 0->1 in world", true,
                          absl::OkStatus());
  EXPECT_EQ(s.message(),
            "bad shape (the other end of route 0->1 in world is told and "
            "refuses it too)");
}

}  // namespace
}  // namespace rankd::dataplane
