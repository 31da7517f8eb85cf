// The NCCL backend without a usable GPU: fail-closed capabilities, errors
// that name "nccl" and the capability before any native work, validation
// rules, the completion/quarantine logic, and the contract's static shape.
// Runs on every machine; the few cases that need "no device" skip where a
// device exists (nccl_gpu_test covers those machines).
#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "dataplane/nccl/cuda_device.h"
#include "dataplane/nccl/cuda_event.h"
#include "dataplane/nccl/cuda_stream.h"
#include "dataplane/nccl/device_buffer.h"
#include "dataplane/nccl/device_tensor.h"
#include "dataplane/nccl/internal/event_operation.h"
#include "dataplane/nccl/internal/op_owner.h"
#include "dataplane/nccl/internal/session_impl.h"
#include "dataplane/nccl/nccl_backend.h"
#include "dataplane/nccl/nccl_completion.h"
#include "dataplane/nccl/nccl_session.h"
#include "dataplane/nccl/testing/nccl_session_peer.h"
#include "dataplane/testing/in_process_control_plane.h"
#include "gtest/gtest.h"

namespace rankd::dataplane::nccl {
using internal::BundleEnd;
using internal::CommEntry;
using internal::EventOperation;
using internal::kNcclAbortEffect;
using internal::MakeNcclCompletion;
using internal::NcclOpOwner;
using internal::ScopedComm;
using internal::SessionImpl;

namespace {

using ::rankd::dataplane::testing::InProcessJob;

// The contract's shape, checked at compile time.
static_assert(CommunicationBackend<NcclBackend>);
static_assert(AllReduceSumBackend<NcclBackend>);
static_assert(AllGatherEvenBackend<NcclBackend>);
static_assert(AllGatherUnevenBackend<NcclBackend>);
static_assert(VariableAllToAllBackend<NcclBackend>);
static_assert(BroadcastBackend<NcclBackend>);
static_assert(BarrierBackend<NcclBackend>);
static_assert(AgreeSuccessBackend<NcclBackend>);
static_assert(SendReceiveBackend<NcclBackend>);
static_assert(std::is_base_of_v<DistributedSession<DeviceTensor>, NcclSession>);

bool HasDevice() { return ProbeDevices().device_count > 0; }

ValueDescriptor Desc(std::vector<size_t> shape,
                     TensorDtype dtype = TensorDtype::kF32) {
  return *ValueDescriptor::Create(std::move(shape), dtype);
}

// A tensor whose memory is never touched: a fake device address. Any
// native call on it would fail or crash, so an error that comes back
// cleanly proves no native work happened.
DeviceTensor Fake(const ValueDescriptor& desc, int device = 0) {
  static char sentinel;
  return *DeviceTensor::Wrap(
      DeviceBuffer::External(&sentinel, desc.byte_size(), device), desc);
}

// world 4, this rank 1, tp=2 (groups: 1 world, 2..3 tensor, 4..5 pipeline
// singletons, ...).
DistributedSessionDescriptor Descriptor(uint32_t rank = 1) {
  ParallelTopology topology;
  topology.tensor = 2;
  topology.data = 2;
  return *DistributedSessionDescriptor::FromTopology(topology, 4, rank);
}

void ExpectFailClosed(const absl::Status& status, const char* capability,
                      const char* why) {
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "nccl")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), capability)) << status;
  if (why != nullptr) {
    EXPECT_TRUE(absl::StrContains(status.message(), why)) << status;
  }
}

// Every DistributedSession operation and the backend's group/route
// factories fail closed, naming the capability.
void ExpectEveryOperationFailsClosed(NcclSession& session, const char* why) {
  const DeviceTensor x = Fake(Desc({4, 2}));
  const std::vector<size_t> counts = {1, 1, 1, 1};
  ExpectFailClosed(session.AllReduceSum(CollectiveScope::World(), x).status(),
                   "world_collectives", why);
  ExpectFailClosed(session.AllGather(CollectiveScope::World(), x).status(),
                   "world_collectives", why);
  ExpectFailClosed(
      session.AllToAllV(CollectiveScope::World(), x, counts, counts).status(),
      "variable_all_to_all", why);
  ExpectFailClosed(session.Send(CollectiveScope::World(), 0, x).status(),
                   "point_to_point", why);
  ExpectFailClosed(
      session.Receive(CollectiveScope::World(), 0, x.descriptor()).status(),
      "point_to_point", why);
  // A group this rank is in: collective_groups.
  const CollectiveGroupId tensor_group = session.descriptor().groups()[1].id();
  ExpectFailClosed(
      session.AllReduceSum(CollectiveScope::Group(tensor_group), x).status(),
      "collective_groups", why);
  NcclBackend backend(session);
  ExpectFailClosed(backend.Group(CollectiveScope::World()).status(),
                   "world_collectives", why);
  ExpectFailClosed(backend.Route(CollectiveScope::World(), 0, 1).status(),
                   "point_to_point", why);
}

TEST(NcclFailClosed, NothingIsAdvertisedBeforeInitialize) {
  auto job = InProcessJob::Create(4);
  auto cp = job->ForRank(1);
  auto session = testing::NcclSessionPeer::Create(Descriptor(), cp.get());
  ASSERT_TRUE(session.ok()) << session.status();
  DistributedCapabilities caps = (*session)->capabilities();
  EXPECT_FALSE(caps.world_collectives);
  EXPECT_TRUE(caps.collective_groups.empty());
  EXPECT_FALSE(caps.point_to_point);
  EXPECT_FALSE(caps.variable_all_to_all);
  EXPECT_FALSE(caps.exact_completion);
  EXPECT_FALSE((*session)->ready());
  ExpectEveryOperationFailsClosed(**session, "not initialized");
  EXPECT_EQ(job->kv_sets(), 0);
  EXPECT_EQ(job->kv_gets(), 0);
  EXPECT_EQ((*session)->quarantined(), 0u);
  EXPECT_TRUE((*session)->poison().ok());
}

TEST(NcclFailClosed, WithoutADeviceInitializeIsUnavailableAndNothingRuns) {
  if (HasDevice())
    GTEST_SKIP() << "a CUDA device is present; nccl_gpu_test covers it";
  auto job = InProcessJob::Create(4);
  auto cp = job->ForRank(1);
  auto session = testing::NcclSessionPeer::Create(Descriptor(), cp.get());
  ASSERT_TRUE(session.ok()) << session.status();
  absl::Status init = testing::NcclSessionPeer::Initialize(**session);
  EXPECT_EQ(init.code(), absl::StatusCode::kUnavailable) << init;
  EXPECT_TRUE(absl::StrContains(init.message(), "nccl")) << init;
  const std::string reason = (*session)->unavailable_reason();
  EXPECT_FALSE(reason.empty());
  EXPECT_TRUE(absl::StrContains(reason, "no GPU")) << reason;
  // Not poisoned: the session is simply unavailable.
  EXPECT_TRUE((*session)->poison().ok());
  EXPECT_FALSE((*session)->ready());
  EXPECT_EQ((*session)->capabilities().world_collectives, false);
  ExpectEveryOperationFailsClosed(**session, reason.c_str());
  // No unique id was brokered or waited for, nothing quarantined.
  EXPECT_EQ(job->kv_sets(), 0);
  EXPECT_EQ(job->kv_gets(), 0);
  EXPECT_EQ((*session)->quarantined(), 0u);
  // Once only.
  EXPECT_EQ(testing::NcclSessionPeer::Initialize(**session).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(NcclFailClosed, OpenFailsWithoutADevice) {
  if (HasDevice()) GTEST_SKIP() << "a CUDA device is present";
  auto job = InProcessJob::Create(4);
  auto cp = job->ForRank(1);
  auto session = NcclSession::Open(Descriptor(), cp.get());
  EXPECT_EQ(session.status().code(), absl::StatusCode::kUnavailable);
}

TEST(NcclFailClosed, DeviceProbeReportsNoDeviceWithAReason) {
  if (HasDevice()) GTEST_SKIP() << "a CUDA device is present";
  DeviceProbe probe = ProbeDevices();
  EXPECT_EQ(probe.device_count, 0);
  EXPECT_FALSE(probe.reason.empty());
  EXPECT_FALSE(CudaStream::Create(0).ok());
  EXPECT_FALSE(CudaEvent::Create(0).ok());
}

TEST(NcclFailClosed, MembershipIsCheckedBeforeCapabilities) {
  auto job = InProcessJob::Create(4);
  auto cp = job->ForRank(1);
  auto session = testing::NcclSessionPeer::Create(Descriptor(), cp.get());
  ASSERT_TRUE(session.ok());
  auto r =
      (*session)->AllReduceSum(CollectiveScope::Group(999), Fake(Desc({2})));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound) << r.status();
}

TEST(NcclFailClosed, PoisonWinsAndKeepsTheOriginalCause) {
  auto job = InProcessJob::Create(4);
  auto cp = job->ForRank(1);
  auto session = testing::NcclSessionPeer::Create(Descriptor(), cp.get());
  ASSERT_TRUE(session.ok());
  (*session)->Abort(absl::AbortedError("rank 3 lost"));
  (*session)->Abort(absl::InternalError("second cause is ignored"));
  const DeviceTensor x = Fake(Desc({4}));
  for (absl::Status s :
       {(*session)->AllReduceSum(CollectiveScope::World(), x).status(),
        (*session)->AllGather(CollectiveScope::World(), x).status(),
        (*session)->Send(CollectiveScope::World(), 0, x).status(),
        (*session)
            ->Receive(CollectiveScope::World(), 0, x.descriptor())
            .status()}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "rank 3 lost")) << s;
  }
  EXPECT_FALSE((*session)->capabilities().world_collectives);
}

// Poison only latches (the session refuses every later operation with
// the first cause); Abort latches too, and a later cause changes nothing.
TEST(NcclFailClosed, PoisonLatchesTheFirstCauseAndAbortKeepsIt) {
  auto job = InProcessJob::Create(4);
  auto cp = job->ForRank(1);
  auto session = testing::NcclSessionPeer::Create(Descriptor(), cp.get());
  ASSERT_TRUE(session.ok());
  (*session)->Poison(absl::OkStatus());  // an OK cause does nothing
  EXPECT_TRUE((*session)->poison().ok());
  (*session)->Poison(absl::UnavailableError("scheduler drained rank 1"));
  EXPECT_EQ((*session)->poison().code(), absl::StatusCode::kUnavailable);
  const DeviceTensor x = Fake(Desc({4}));
  absl::Status s =
      (*session)->AllReduceSum(CollectiveScope::World(), x).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "scheduler drained")) << s;
  NcclBackend backend(**session);
  EXPECT_EQ(backend.poison(), (*session)->poison());
  // Abort after Poison keeps the first cause.
  backend.Abort(absl::AbortedError("rank 3 lost"));
  EXPECT_EQ((*session)->poison().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(job->kv_sets(), 0);
}

// The backend latches into the same session.
TEST(NcclFailClosed, BackendPoisonIsTheSessions) {
  auto job = InProcessJob::Create(4);
  auto cp = job->ForRank(1);
  auto session = testing::NcclSessionPeer::Create(Descriptor(), cp.get());
  ASSERT_TRUE(session.ok());
  NcclBackend backend(**session);
  EXPECT_TRUE(backend.poison().ok());
  backend.Poison(absl::AbortedError("rank 2 lost"));
  EXPECT_EQ((*session)->poison().code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(absl::StrContains((*session)->poison().message(), "rank 2"));
}

TEST(NcclFailClosed, AllGatherWordsUsesTheControlPlaneWithoutAGpu) {
  auto job = InProcessJob::Create(1);
  auto cp = job->ForRank(0);
  auto descriptor = DistributedSessionDescriptor::FromTopology({}, 1, 0);
  ASSERT_TRUE(descriptor.ok());
  auto session = testing::NcclSessionPeer::Create(*descriptor, cp.get());
  ASSERT_TRUE(session.ok());
  auto words = (*session)->AllGatherWords(std::vector<uint32_t>{7, 8, 9});
  ASSERT_TRUE(words.ok()) << words.status();
  EXPECT_EQ(*words, (std::vector<uint32_t>{7, 8, 9}));
  auto pending = (*session)->SubmitAllGatherWords(std::vector<uint32_t>{5},
                                                  absl::Seconds(5));
  ASSERT_TRUE(pending.ok()) << pending.status();
  auto result = (*pending)->Result();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(*result, std::vector<uint32_t>{5});
}

TEST(NcclFailClosed, OptionsAreValidated) {
  auto job = InProcessJob::Create(4);
  auto cp = job->ForRank(1);
  EXPECT_EQ(NcclSession::Open(Descriptor(), nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  NcclSessionOptions bad_tag;
  bad_tag.tag = "no/slashes";
  EXPECT_EQ(NcclSession::Open(Descriptor(), cp.get(), bad_tag).status().code(),
            absl::StatusCode::kInvalidArgument);
  NcclSessionOptions bad_timeout;
  bad_timeout.init_timeout = absl::ZeroDuration();
  EXPECT_EQ(
      NcclSession::Open(Descriptor(), cp.get(), bad_timeout).status().code(),
      absl::StatusCode::kInvalidArgument);
  NcclSessionOptions bad_device;
  bad_device.device = -2;
  EXPECT_EQ(
      NcclSession::Open(Descriptor(), cp.get(), bad_device).status().code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(NcclFailClosed, LocalDependenciesNeedAStreamAndValidTensors) {
  NcclExecutor no_stream(nullptr);
  const DeviceTensor x = Fake(Desc({2}));
  const DeviceTensor* values[] = {&x};
  EXPECT_EQ(
      NcclBackend::SubmitLocalDependencies(values, no_stream).status().code(),
      absl::StatusCode::kInvalidArgument);
  if (!HasDevice()) {
    auto executor = NcclExecutor::Create(0);
    EXPECT_FALSE(executor.ok());
  }
}

// --- Validation before native work, on a session that is not initialized:
// the operations' own checks (device -1 tensors match the uninitialized
// session). A failed validation never poisons and never quarantines.

class NcclValidation : public ::testing::Test {
 protected:
  void SetUp() override {
    job_ = InProcessJob::Create(4);
    cp_ = job_->ForRank(1);
    auto session = testing::NcclSessionPeer::Create(Descriptor(), cp_.get());
    ASSERT_TRUE(session.ok());
    session_ = *std::move(session);
    auto entry = std::make_shared<CommEntry>();
    entry->name = "test";
    entry->members = {0, 1, 2};
    entry->local_rank = 1;
    comm_ = {std::move(entry), "group 3"};
  }
  void TearDown() override {
    EXPECT_TRUE(session_->poison().ok()) << session_->poison();
    EXPECT_EQ(session_->quarantined(), 0u);
  }
  SessionImpl& core() { return *session_->impl(); }
  static void ExpectInvalid(const absl::Status& s, const char* needle) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "nccl")) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), needle)) << s;
  }
  std::shared_ptr<InProcessJob> job_;
  std::unique_ptr<ControlPlane> cp_;
  std::unique_ptr<NcclSession> session_;
  ScopedComm comm_;
};

TEST_F(NcclValidation, AllReduceSumRejectsUnsummableDtypes) {
  ExpectInvalid(
      SubmitAllReduceSum(core(), comm_, Fake(Desc({4}, TensorDtype::kBool), -1),
                         nullptr, "all_reduce_sum")
          .status(),
      "bool");
  // i16 has a sum that NCCL cannot compute (no 16-bit integer type).
  absl::Status i16 =
      SubmitAllReduceSum(core(), comm_, Fake(Desc({4}, TensorDtype::kI16), -1),
                         nullptr, "all_reduce_sum")
          .status();
  EXPECT_EQ(i16.code(), absl::StatusCode::kUnimplemented) << i16;
  EXPECT_TRUE(absl::StrContains(i16.message(), "i16")) << i16;
}

TEST_F(NcclValidation, TensorsMustBeOnTheSessionDevice) {
  ExpectInvalid(SubmitAllReduceSum(core(), comm_, Fake(Desc({4}), 3), nullptr,
                                   "all_reduce_sum")
                    .status(),
                "device");
  // A buffer smaller than its descriptor cannot even be wrapped.
  static char sentinel;
  auto small =
      DeviceTensor::Wrap(DeviceBuffer::External(&sentinel, 3, -1), Desc({4}));
  EXPECT_EQ(small.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DeviceTensor::Wrap(nullptr, Desc({4})).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(NcclValidation, AllGatherAxisMustExist) {
  ExpectInvalid(SubmitAllGatherEven(core(), comm_, Fake(Desc({2, 3}), -1), 2,
                                    nullptr, "all_gather_even")
                    .status(),
                "axis 2");
  ExpectInvalid(SubmitAllGatherEven(core(), comm_, Fake(Desc({}), -1), 1,
                                    nullptr, "all_gather_even")
                    .status(),
                "scalar");
}

TEST_F(NcclValidation, AllGatherUnevenCounts) {
  const DeviceTensor x = Fake(Desc({2, 3}), -1);
  ExpectInvalid(
      SubmitAllGatherUneven(core(), comm_, x, std::vector<size_t>{2, 2}, 0,
                            nullptr, "all_gather_uneven")
          .status(),
      "it needs one per member (3)");
  // counts[me] must be this member's extent along the axis (3 along axis 1).
  ExpectInvalid(
      SubmitAllGatherUneven(core(), comm_, x, std::vector<size_t>{1, 2, 1}, 1,
                            nullptr, "all_gather_uneven")
          .status(),
      "counts[1]");
}

TEST_F(NcclValidation, AllToAllCounts) {
  const DeviceTensor x = Fake(Desc({5, 2}), -1);
  const std::vector<size_t> two = {2, 3};
  const std::vector<size_t> ok = {2, 1, 2};
  ExpectInvalid(
      SubmitAllToAll(core(), comm_, x, two, ok, 0, nullptr, "a2a").status(),
      "one per member");
  ExpectInvalid(SubmitAllToAll(core(), comm_, x, std::vector<size_t>{1, 1, 1},
                               ok, 0, nullptr, "a2a")
                    .status(),
                "add up to 3");
  ExpectInvalid(SubmitAllToAll(core(), comm_, x, ok,
                               std::vector<size_t>{2, 0, 2}, 0, nullptr, "a2a")
                    .status(),
                "self slot");
  ExpectInvalid(SubmitAllToAll(core(), comm_, Fake(Desc({}), -1),
                               std::vector<size_t>{0, 1, 0},
                               std::vector<size_t>{0, 1, 0}, 0, nullptr, "a2a")
                    .status(),
                "scalar");
  // Along an inner axis the result may not be empty.
  ExpectInvalid(SubmitAllToAll(core(), comm_, Fake(Desc({1, 2}), -1),
                               std::vector<size_t>{2, 0, 0},
                               std::vector<size_t>{0, 0, 0}, 1, nullptr, "a2a")
                    .status(),
                "only the leading axis may be empty");
}

TEST_F(NcclValidation, BroadcastRootInRange) {
  ExpectInvalid(SubmitBroadcast(core(), comm_, Fake(Desc({2}), -1), 3, nullptr,
                                "broadcast")
                    .status(),
                "root member index 3");
}

TEST_F(NcclValidation, BundleRoutes) {
  // The engine's route words (dataplane/route.h), as Gloo's.
  const DeviceTensor x = Fake(Desc({2}), -1);
  std::vector<DeviceTensor> bundle = {x};
  ExpectInvalid(SubmitBundle(core(), comm_, BundleEnd{bundle, {}, {}}, 1, 1,
                             nullptr, "send_receive")
                    .status(),
                "nccl backend: send_receive: route 1 -> 1 on group 3: the "
                "source and the destination are the same member (rank 1)");
  ExpectInvalid(SubmitBundle(core(), comm_, BundleEnd{bundle, {}, {}}, 0, 3,
                             nullptr, "send_receive")
                    .status(),
                "nccl backend: send_receive: route 0 -> 3 on group 3: member "
                "3 is outside the scope's 3 members");
  ExpectInvalid(SubmitBundle(core(), comm_, BundleEnd{bundle, {}, {}}, 0, 2,
                             nullptr, "send_receive")
                    .status(),
                "nccl backend: send_receive: route 0 -> 2 on group 3: this "
                "member (1, rank 1) is neither end");
}

TEST_F(NcclValidation, BundleSizeAndOutputs) {
  // The engine's bundle rules (dataplane/bundle.h), as Gloo's: at most
  // kMaxBundleTensors tensors, and outputs that share no byte (here the
  // second starts inside the first, which a same-start rule would miss).
  const std::vector<ValueDescriptor> many(kMaxBundleTensors + 1, Desc({0}));
  ExpectInvalid(SubmitBundle(core(), comm_, BundleEnd{{}, many, {}}, 0, 1,
                             nullptr, "receive_bundle")
                    .status(),
                "nccl backend: receive_bundle: a bundle holds at most 60000 "
                "tensors; got 60001");
  static char bytes[16];
  const std::vector<ValueDescriptor> two(2, Desc({2}));
  std::vector<DeviceTensor> outputs;
  for (char* at : {bytes, bytes + 4}) {
    outputs.push_back(*DeviceTensor::Wrap(
        DeviceBuffer::External(at, two[0].byte_size(), -1), two[0]));
  }
  ExpectInvalid(SubmitBundle(core(), comm_, BundleEnd{{}, two, outputs}, 0, 1,
                             nullptr, "receive_bundle_into")
                    .status(),
                "nccl backend: receive_bundle_into: output 1 overlaps output 0 "
                "of the bundle");
  ExpectInvalid(
      SubmitBundle(core(), comm_,
                   BundleEnd{{}, two, absl::MakeConstSpan(outputs).subspan(1)},
                   0, 1, nullptr, "receive_bundle_into")
          .status(),
      "nccl backend: receive_bundle_into: 1 outputs for a bundle of 2 values");
}

// --- Completion and quarantine logic, with an operation whose event never
// completes (a null event) and a recording owner.

class RecordingOwner : public NcclOpOwner {
 public:
  explicit RecordingOwner(bool native) : native_(native) {}
  absl::Status poison() const override { return poison_; }
  void Poison(const absl::Status& cause) override {
    if (poison_.ok()) poison_ = cause;
  }
  bool SupportsNativeCancel() const override { return native_; }
  bool SupportsQuarantine() const override { return true; }
  std::string abort_effect() const override { return kNcclAbortEffect; }
  bool CancelNative(const absl::Status& cause) override {
    Poison(cause);
    ++cancels;
    return true;  // ncclCommAbort returns after teardown
  }
  void Quarantine(std::shared_ptr<Operation> op) override {
    op->QuarantineIn(quarantine);
  }
  absl::Duration AbortGrace() const override { return absl::ZeroDuration(); }

  // Its operations never finish: leak them rather than wait forever.
  ~RecordingOwner() override { quarantine.Abandon(); }

  int cancels = 0;
  dataplane::Quarantine quarantine;

 private:
  bool native_;
  absl::Status poison_;
};

std::shared_ptr<Operation> NeverDone(std::shared_ptr<int> resource = nullptr) {
  return EventOperation("all_reduce_sum on world", nullptr,
                        std::vector<std::shared_ptr<const void>>{resource});
}

TEST(NcclCompletionLogic, BoundedWaitArgumentsAreChecked) {
  auto owner = std::make_shared<RecordingOwner>(true);
  auto c = MakeNcclCompletion(NeverDone(), owner);
  EXPECT_EQ(
      c->WaitBounded(absl::ZeroDuration(), CancellationMode::kNativeCancel)
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c->WaitBounded(absl::Seconds(-1),
                           CancellationMode::kQuarantineUntilComplete)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(owner->poison().ok());
  EXPECT_EQ(owner->cancels, 0);
  // Dropping the unfinished completion quarantines its operation.
}

TEST(NcclCompletionLogic, QuarantineModePoisonsAndKeepsResources) {
  auto owner = std::make_shared<RecordingOwner>(true);
  auto resource = std::make_shared<int>(42);
  std::weak_ptr<int> watch = resource;
  {
    auto c = MakeNcclCompletion(NeverDone(resource), owner);
    resource.reset();
    EXPECT_TRUE(
        c->SupportsCancellation(CancellationMode::kQuarantineUntilComplete));
    const absl::Time start = absl::Now();
    auto outcome = c->WaitBounded(absl::Milliseconds(30),
                                  CancellationMode::kQuarantineUntilComplete);
    EXPECT_GE(absl::Now() - start, absl::Milliseconds(30));
    ASSERT_TRUE(outcome.ok()) << outcome.status();
    EXPECT_FALSE(outcome->completed());
    EXPECT_EQ(outcome->mode(), CancellationMode::kQuarantineUntilComplete);
    EXPECT_FALSE(c->IsComplete());
    EXPECT_EQ(owner->poison().code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_TRUE(absl::StrContains(owner->poison().message(),
                                  "all_reduce_sum on world"));
    EXPECT_EQ(owner->cancels, 0);  // the work keeps running
    EXPECT_EQ(owner->quarantine.size(), 1u);
  }
  // The completion is gone but its resources are still held.
  EXPECT_FALSE(watch.expired());
  EXPECT_FALSE(owner->quarantine.WaitUntilEmpty(absl::Milliseconds(20)));
  EXPECT_EQ(owner->quarantine.size(), 1u);
  // Abandoning leaks rather than frees.
  EXPECT_EQ(owner->quarantine.Abandon(), 1u);
  EXPECT_FALSE(watch.expired());
}

// The communicators are torn down but the work has not left its stream
// within the abort grace (say, queued behind other work): the mode is
// applied and what the work retains is quarantined.
TEST(NcclCompletionLogic, NativeCancelAbortsThenQuarantinesWhatStillRuns) {
  auto owner = std::make_shared<RecordingOwner>(true);
  auto op = NeverDone();
  auto c = MakeNcclCompletion(op, owner);
  EXPECT_TRUE(c->SupportsCancellation(CancellationMode::kNativeCancel));
  auto outcome =
      c->WaitBounded(absl::Milliseconds(10), CancellationMode::kNativeCancel);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_FALSE(outcome->completed());
  EXPECT_EQ(outcome->mode(), CancellationMode::kNativeCancel);
  EXPECT_EQ(owner->poison().message(),
            "nccl backend: all_reduce_sum on world missed its WaitBounded "
            "deadline of 10ms; cancelled natively (NativeCancel): every "
            "communicator of the session was aborted");
  EXPECT_EQ(owner->cancels, 1);
  EXPECT_EQ(owner->poison().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(owner->quarantine.size(), 1u);
  EXPECT_EQ(op->status().code(), absl::StatusCode::kDeadlineExceeded);
  owner->quarantine.Abandon();
}

TEST(NcclCompletionLogic, UnsupportedModeIsRefusedBeforeWaiting) {
  auto owner = std::make_shared<RecordingOwner>(false);
  auto c = MakeNcclCompletion(NeverDone(), owner);
  EXPECT_FALSE(c->SupportsCancellation(CancellationMode::kNativeCancel));
  auto outcome =
      c->WaitBounded(absl::Seconds(10), CancellationMode::kNativeCancel);
  EXPECT_EQ(outcome.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(outcome.status().message(), "nccl"));
  EXPECT_TRUE(owner->poison().ok());
}

TEST(NcclCompletionLogic, DroppingAnUnfinishedCompletionQuarantines) {
  auto owner = std::make_shared<RecordingOwner>(true);
  auto resource = std::make_shared<int>(1);
  std::weak_ptr<int> watch = resource;
  { auto c = MakeNcclCompletion(NeverDone(std::move(resource)), owner); }
  EXPECT_EQ(owner->quarantine.size(), 1u);
  EXPECT_FALSE(watch.expired());
  owner->quarantine.Abandon();
}

TEST(NcclCompletionLogic, FailIfRunningRecordsTheFirstCause) {
  auto op = NeverDone();
  op->FailIfRunning(absl::AbortedError("job failed: rank 2 lost"));
  op->FailIfRunning(absl::InternalError("later"));
  EXPECT_EQ(op->status().code(), absl::StatusCode::kAborted);
  EXPECT_FALSE(op->Done());
  op->Abandon();
}

}  // namespace
}  // namespace rankd::dataplane::nccl
