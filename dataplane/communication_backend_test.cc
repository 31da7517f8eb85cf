// Compile-time tests of the CommunicationBackend concepts: a backend
// satisfies an operation's concept only when it declares the operation
// (Declares*) and its member function has the exact signature; the base
// concept requires the associated types and SubmitLocalDependencies.
#include "dataplane/communication_backend.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"

namespace rankd::dataplane {
namespace {

struct FakeTensor {};
struct FakeExecutor {};
struct FakeGroup {};
struct FakeRoute {};
class FakeCompletion final : public BoundedCompletion {
 public:
  bool IsComplete() const override { return true; }
  absl::Status Wait() override { return absl::OkStatus(); }
  bool SupportsCancellation(CancellationMode) const override { return false; }
  absl::StatusOr<WaitOutcome> WaitBounded(absl::Duration,
                                          CancellationMode) override {
    return WaitOutcome::Completed();
  }
};

#define FAKE_BACKEND_BASICS                                                \
  using Tensor = FakeTensor;                                               \
  using Executor = FakeExecutor;                                           \
  using CommunicationGroup = FakeGroup;                                    \
  using CommunicationRoute = FakeRoute;                                    \
  using CommunicationCompletion = FakeCompletion;                          \
  static absl::StatusOr<Submission<Unit, std::shared_ptr<FakeCompletion>>> \
  SubmitLocalDependencies(absl::Span<const FakeTensor* const>,             \
                          FakeExecutor&) {                                 \
    return Submission<Unit, std::shared_ptr<FakeCompletion>>{              \
        Unit{}, std::make_shared<FakeCompletion>()};                       \
  }

using FakeTensorSubmission =
    absl::StatusOr<Submission<FakeTensor, std::shared_ptr<FakeCompletion>>>;

// Implements AllReduceSum with the right signature but does not declare it.
struct UndeclaredBackend {
  FAKE_BACKEND_BASICS
  FakeTensorSubmission AllReduceSum(const FakeTensor&, FakeGroup&,
                                    FakeExecutor&) {
    return absl::UnimplementedError("x");
  }
};

// Declares AllReduceSum and implements it.
struct DeclaredBackend {
  FAKE_BACKEND_BASICS
  FakeTensorSubmission AllReduceSum(const FakeTensor&, FakeGroup&,
                                    FakeExecutor&) {
    return absl::UnimplementedError("x");
  }
};

// Declares AllReduceSum but its signature is wrong (returns a Status).
struct WrongSignatureBackend {
  FAKE_BACKEND_BASICS
  absl::Status AllReduceSum(const FakeTensor&, FakeGroup&, FakeExecutor&) {
    return absl::OkStatus();
  }
};

// Declares AllGatherEven without implementing it.
struct DeclaredOnlyBackend {
  FAKE_BACKEND_BASICS
};

// Lacks SubmitLocalDependencies: not a CommunicationBackend at all.
struct NotABackend {
  using Tensor = FakeTensor;
  using Executor = FakeExecutor;
  using CommunicationGroup = FakeGroup;
  using CommunicationRoute = FakeRoute;
  using CommunicationCompletion = FakeCompletion;
};

// The completion type is not a BoundedCompletion.
struct UnboundedCompletionBackend {
  using Tensor = FakeTensor;
  using Executor = FakeExecutor;
  using CommunicationGroup = FakeGroup;
  using CommunicationRoute = FakeRoute;
  using CommunicationCompletion = FakeTensor;
  static absl::StatusOr<Submission<Unit, std::shared_ptr<FakeTensor>>>
  SubmitLocalDependencies(absl::Span<const FakeTensor* const>, FakeExecutor&);
};

}  // namespace

template <>
struct DeclaresAllReduceSum<DeclaredBackend> : std::true_type {};
template <>
struct DeclaresAllReduceSum<WrongSignatureBackend> : std::true_type {};
template <>
struct DeclaresAllGatherEven<DeclaredOnlyBackend> : std::true_type {};

namespace {

static_assert(CommunicationBackend<UndeclaredBackend>);
static_assert(CommunicationBackend<DeclaredBackend>);
static_assert(!CommunicationBackend<NotABackend>);
static_assert(!CommunicationBackend<UnboundedCompletionBackend>);

// The base contract declares no operation.
static_assert(!AllReduceSumBackend<UndeclaredBackend>);
static_assert(!AllGatherEvenBackend<UndeclaredBackend>);
static_assert(!AllGatherUnevenBackend<UndeclaredBackend>);
static_assert(!VariableAllToAllBackend<UndeclaredBackend>);
static_assert(!BroadcastBackend<UndeclaredBackend>);
static_assert(!BarrierBackend<UndeclaredBackend>);
static_assert(!AgreeSuccessBackend<UndeclaredBackend>);
static_assert(!SendReceiveBackend<UndeclaredBackend>);

static_assert(AllReduceSumBackend<DeclaredBackend>);
static_assert(!AllGatherEvenBackend<DeclaredBackend>);
static_assert(!AllReduceSumBackend<WrongSignatureBackend>);
static_assert(!AllGatherEvenBackend<DeclaredOnlyBackend>);
static_assert(!AllReduceSumBackend<NotABackend>);

// The generic entry point compiles only for a declaring backend.
template <typename B>
concept CanCallAllReduceSum = requires(B& b, const FakeTensor& t, FakeGroup& g,
                                       FakeExecutor& e) {
  AllReduceSum(b, t, g, e);
};
static_assert(CanCallAllReduceSum<DeclaredBackend>);
static_assert(!CanCallAllReduceSum<UndeclaredBackend>);

TEST(CommunicationBackendTest, DeclaredOperationIsCallable) {
  DeclaredBackend backend;
  FakeTensor t;
  FakeGroup g;
  FakeExecutor e;
  auto result = AllReduceSum(backend, t, g, e);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnimplemented);
  auto deps = DeclaredBackend::SubmitLocalDependencies({}, e);
  ASSERT_TRUE(deps.ok());
  EXPECT_TRUE(deps->completion->IsComplete());
}

}  // namespace
}  // namespace rankd::dataplane
