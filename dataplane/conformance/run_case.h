// RunCase<Backend>: runs one conformance case (conformance_cases.h) on a
// backend, one thread per rank, and checks every rank's outcome with
// gtest expectations. A backend is a struct with
//
//   using Value = ...;                        // HostTensor, DeviceTensor
//   using Session = DistributedSession<Value>;
//   static constexpr char kName[] = "gloo";   // as in the messages
//   // Opens `world` sessions of one job (all before any body runs), runs
//   // body(rank, session) on one thread per rank, joins them, and only
//   // then closes the sessions: a member that submits nothing stays
//   // connected until every other member is done.
//   static void Run(uint32_t world, const SessionSetup& setup,
//                   const std::function<void(uint32_t, Session&)>& body);
//   // A value of `descriptor` holding `bytes`, usable by `session`.
//   static absl::StatusOr<Value> Make(Session& session,
//                                     const ValueDescriptor& descriptor,
//                                     const std::vector<uint8_t>& bytes);
//   // The bytes of a completed output.
//   static absl::StatusOr<std::vector<uint8_t>> Read(const Value& value);
//   // The session's failure vocabulary (docs/contract.md, "Failures: one
//   // vocabulary"): Poison only latches `cause`; Abort latches it and
//   // tears every native context down; PoisonCause is poison().
//   static void Poison(Session& session, const absl::Status& cause);
//   static void Abort(Session& session, const absl::Status& cause);
//   static absl::Status PoisonCause(Session& session);
//
// Testonly. Depends on conformance_cases.h, dataplane/session.h,
// dataplane/capabilities.h, gtest.
#ifndef RANKD_DATAPLANE_CONFORMANCE_RUN_CASE_H_
#define RANKD_DATAPLANE_CONFORMANCE_RUN_CASE_H_

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "dataplane/capabilities.h"
#include "dataplane/conformance/conformance_cases.h"
#include "dataplane/peer_transfer.h"
#include "dataplane/session.h"
#include "dataplane/value_descriptor.h"
#include "gtest/gtest.h"

namespace rankd::dataplane::conformance {

// The outcome `backend` must show on `rank`: the table's, or the case's
// declared difference for that backend.
inline RankOutcome ExpectedOutcome(const ConformanceCase& c,
                                   const std::string& backend, uint32_t rank) {
  auto it = c.differences.find(backend);
  return it != c.differences.end() ? it->second.outcome(rank) : c.outcome(rank);
}

template <typename Backend>
class CaseRunner {
 public:
  using Value = typename Backend::Value;
  using Session = typename Backend::Session;

  static void Run(const ConformanceCase& c) {
    Backend::Run(c.world, c.setup, [&](uint32_t rank, Session& session) {
      SCOPED_TRACE(testing::Message() << Backend::kName << " rank " << rank);
      OnRank(c.call(rank), ExpectedOutcome(c, Backend::kName, rank), session);
    });
  }

 private:
  static std::vector<uint8_t> Bytes(const RankCall& call, size_t byte_size) {
    std::vector<uint8_t> bytes(byte_size, 0);
    if (call.dtype == TensorDtype::kF32 &&
        call.values.size() * sizeof(float) == byte_size && byte_size > 0) {
      std::memcpy(bytes.data(), call.values.data(), byte_size);
    }
    return bytes;
  }

  // A descriptor of `shape`; a zero leading extent is a value of no rows.
  static absl::StatusOr<ValueDescriptor> Describe(
      const std::vector<size_t>& shape, TensorDtype dtype) {
    return ValueDescriptor::Create(shape, dtype);
  }

  static std::string Expected(const std::string& message) {
    return ForBackend(message, Backend::kName);
  }

  // Submits `call`; the output of a batch is its only receive.
  static absl::StatusOr<typename Session::ValueSubmission> Submit(
      const RankCall& call, Session& session) {
    auto descriptor = Describe(call.shape, call.dtype);
    if (!descriptor.ok()) return descriptor.status();
    auto input = Backend::Make(session, *descriptor,
                               Bytes(call, descriptor->byte_size()));
    if (!input.ok()) return input.status();
    std::optional<Value> output;
    if (call.output_is_input) {
      output = *input;
    } else if (!call.output_shape.empty()) {
      auto out_descriptor = Describe(call.output_shape, call.dtype);
      if (!out_descriptor.ok()) return out_descriptor.status();
      auto made =
          Backend::Make(session, *out_descriptor,
                        std::vector<uint8_t>(out_descriptor->byte_size(), 0));
      if (!made.ok()) return made.status();
      output = *std::move(made);
    }
    switch (call.operation) {
      case Operation::kAllReduceSum:
        return session.AllReduceSum(call.scope, *input);
      case Operation::kAllReduceSumInto:
        return session.AllReduceSumInto(call.scope, *input, *output);
      case Operation::kAllGather:
        return session.AllGather(call.scope, *input);
      case Operation::kAllGatherInto:
        return session.AllGatherInto(call.scope, *input, *output);
      case Operation::kAllToAllV:
        return session.AllToAllV(call.scope, *input, call.send_counts,
                                 call.receive_counts);
      case Operation::kAllToAllVInto:
        return session.AllToAllVInto(call.scope, *input, call.send_counts,
                                     call.receive_counts, *output);
      case Operation::kSend:
        return session.Send(call.scope, call.peer, *input);
      case Operation::kReceive:
        return session.Receive(call.scope, call.peer, *descriptor);
      case Operation::kReceiveInto:
        return session.ReceiveInto(call.scope, call.peer, *output);
      case Operation::kBatchSendReceive: {
        auto received =
            Backend::Make(session, *descriptor,
                          std::vector<uint8_t>(descriptor->byte_size(), 0));
        if (!received.ok()) return received.status();
        const std::vector<PeerValue<Value>> sends = {{call.peer, *input}};
        const std::vector<PeerValue<Value>> receives = {
            {call.source, *received}};
        auto batch = session.BatchSendReceive(call.scope, sends, receives);
        if (!batch.ok()) return batch.status();
        return typename Session::ValueSubmission{batch->output.front(),
                                                 batch->completion};
      }
      case Operation::kNone:
        break;
    }
    return absl::InternalError("no call");
  }

  static void ExpectStatus(const absl::Status& status,
                           const RankOutcome& want) {
    EXPECT_EQ(status.code(), want.code) << status;
    if (want.message_is_suffix) {
      EXPECT_TRUE(absl::EndsWith(status.message(), Expected(want.message)))
          << status << "\n  does not end with: " << Expected(want.message);
      return;
    }
    EXPECT_EQ(std::string(status.message()), Expected(want.message));
  }

  static void Act(const SessionAction& action, Session& session) {
    switch (action.kind) {
      case SessionAction::Kind::kPoison:
        Backend::Poison(session, action.cause);
        return;
      case SessionAction::Kind::kAbort:
        Backend::Abort(session, action.cause);
        return;
    }
  }

  static void OnRank(const RankCall& call, const RankOutcome& want,
                     Session& session) {
    OnCall(call, want, session);
    if (want.advertises.has_value()) {
      const DistributedCapabilities caps = session.capabilities();
      EXPECT_EQ(caps.world_collectives, want.advertises->world_collectives);
      EXPECT_EQ(caps.collective_groups, want.advertises->collective_groups);
      EXPECT_EQ(caps.point_to_point, want.advertises->point_to_point);
      EXPECT_EQ(caps.variable_all_to_all, want.advertises->variable_all_to_all);
      EXPECT_EQ(caps.exact_completion, want.advertises->exact_completion);
    }
    if (!want.poison.has_value()) return;
    const absl::Status poison = Backend::PoisonCause(session);
    EXPECT_EQ(poison.code(), want.poison->code()) << poison;
    EXPECT_EQ(poison.message(), want.poison->message()) << poison;
    const DistributedCapabilities caps = session.capabilities();
    const bool advertises_any =
        caps.world_collectives || !caps.collective_groups.empty() ||
        caps.point_to_point || caps.variable_all_to_all ||
        caps.exact_completion;
    if (want.poison->ok()) {
      EXPECT_TRUE(advertises_any) << "a healthy session advertises nothing";
      return;
    }
    // A poisoned session advertises nothing (docs/contract.md).
    EXPECT_FALSE(advertises_any) << "a poisoned session advertises something";
  }

  static void OnCall(const RankCall& call, const RankOutcome& want,
                     Session& session) {
    // A member that submits nothing still makes its earlier calls: a peer
    // that warmed up with it and then stopped showing up.
    for (const RankCall& earlier : call.first) {
      auto done = Submit(earlier, session);
      ASSERT_TRUE(done.ok()) << "an earlier call: " << done.status();
      absl::Status waited = done->completion->Wait();
      ASSERT_TRUE(waited.ok()) << "an earlier call: " << waited;
    }
    if (call.operation == Operation::kNone) return;
    for (const SessionAction& action : call.before) Act(action, session);
    auto submitted = Submit(call, session);
    using When = RankOutcome::When;
    if (want.when == When::kIgnored) {
      if (submitted.ok() && call.after_submit.has_value()) {
        Act(*call.after_submit, session);
      }
      if (submitted.ok()) submitted->completion->Wait().IgnoreError();
      return;
    }
    if (want.when == When::kRefused) {
      ASSERT_FALSE(submitted.ok()) << "the call was accepted";
      ExpectStatus(submitted.status(), want);
      return;
    }
    ASSERT_TRUE(submitted.ok()) << submitted.status();
    if (call.after_submit.has_value()) Act(*call.after_submit, session);
    if (want.when == When::kMissesDeadline) {
      auto waited =
          submitted->completion->WaitBounded(*call.bounded_wait, call.mode);
      ASSERT_TRUE(waited.ok()) << waited.status();
      EXPECT_FALSE(waited->completed());
      EXPECT_EQ(waited->mode(), call.mode);
      // The session is poisoned: the next call is refused with the cause.
      auto one = ValueDescriptor::Create({1}, TensorDtype::kF32);
      auto x = Backend::Make(session, *one, std::vector<uint8_t>(4, 0));
      ASSERT_TRUE(x.ok()) << x.status();
      auto next = session.AllReduceSum(CollectiveScope::World(), *x);
      ASSERT_FALSE(next.ok()) << "a poisoned session accepted work";
      EXPECT_EQ(next.status().code(), want.next_code) << next.status();
      EXPECT_EQ(std::string(next.status().message().substr(
                    0, Expected(want.next_message_prefix).size())),
                Expected(want.next_message_prefix))
          << next.status();
      return;
    }
    absl::Status done = submitted->completion->Wait();
    if (want.when == When::kFails) {
      ExpectStatus(done, want);
      return;
    }
    ASSERT_TRUE(done.ok()) << done;
    const Value& output = submitted->output;
    EXPECT_EQ(output.descriptor().shape(), want.shape);
    if (call.dtype != TensorDtype::kF32) return;
    auto bytes = Backend::Read(output);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    std::vector<float> values(bytes->size() / sizeof(float));
    if (!values.empty()) {
      std::memcpy(values.data(), bytes->data(), values.size() * sizeof(float));
    }
    EXPECT_EQ(values, want.values);
  }
};

}  // namespace rankd::dataplane::conformance

#endif  // RANKD_DATAPLANE_CONFORMANCE_RUN_CASE_H_
