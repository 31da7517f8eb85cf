// Tests of daemon/transport/event_stream_reactor.h over a real gRPC server and
// client on a Unix socket: events reach the client in order, a server-side
// close ends the stream with its status, a failed precheck ends the call before
// anything subscribes, and the sinks a subscriber kept stay safe to call
// after the stream ended and gRPC deleted the reactor (the shutdown race of
// issue 11: closers copied by NodeAgent::Shutdown and
// Coordinator::BeginShutdown, called after a client went away). The suite
// runs under AddressSanitizer (tools/test.sh), where a call into a deleted
// reactor is reported.
#include "daemon/transport/event_stream_reactor.h"

#include <unistd.h>

#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/monotonic_clock.h"
#include "daemon/deadline_timer.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "gtest/gtest.h"
#include "rankd/v1/admin.grpc.pb.h"
#include "rankd/v1/peer.grpc.pb.h"

namespace rankd {
namespace {

// Admin.WatchEvents served by an EventStreamReactor whose sinks the test
// keeps, as a subscriber does.
class StreamService final : public v1::Admin::CallbackService {
 public:
  explicit StreamService(absl::Status precheck = absl::OkStatus())
      : precheck_(std::move(precheck)) {}

  grpc::ServerWriteReactor<v1::JobEvent>* WatchEvents(
      grpc::CallbackServerContext*,
      const v1::WatchEventsRequest* request) override {
    const uint64_t after = request->after_sequence();
    return EventStreamReactor::Start(
        precheck_,
        [this, after](EventStreamReactor::Sinks sinks) {
          // Kept before the first event goes out, so a client that read it
          // finds these sinks in sinks().
          {
            absl::MutexLock lock(&mu_);
            sinks_ = sinks;
            ++opened_;
          }
          v1::JobEvent first;
          first.set_sequence(after + 1);
          sinks.deliver(first);
          return absl::StatusOr<uint64_t>(7);
        },
        [this](uint64_t id, bool client_gone, const std::string& reason) {
          absl::MutexLock lock(&mu_);
          ended_id_ = id;
          ++ended_count_;
          client_gone_ = client_gone;
          reason_ = reason;
          if (!ended_.HasBeenNotified()) ended_.Notify();
        });
  }

  EventStreamReactor::Sinks sinks() {
    absl::MutexLock lock(&mu_);
    return sinks_;
  }
  int opened() {
    absl::MutexLock lock(&mu_);
    return opened_;
  }
  bool WaitEnded() {
    return ended_.WaitForNotificationWithTimeout(absl::Seconds(10));
  }
  bool client_gone() {
    absl::MutexLock lock(&mu_);
    return client_gone_;
  }
  // Waits until `n` streams ended in all.
  bool WaitEndedCount(int n) {
    absl::MutexLock lock(&mu_);
    auto ended = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return ended_count_ >= n;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&ended), absl::Seconds(30));
  }
  uint64_t ended_id() {
    absl::MutexLock lock(&mu_);
    return ended_id_;
  }

 private:
  const absl::Status precheck_;
  absl::Mutex mu_;
  EventStreamReactor::Sinks sinks_;
  int opened_ = 0;
  uint64_t ended_id_ = 0;
  int ended_count_ = 0;
  bool client_gone_ = false;
  std::string reason_;
  absl::Notification ended_;
};

class EventStreamReactorTest : public ::testing::Test {
 protected:
  // A short path: Unix socket paths are limited to 107 characters, which
  // Bazel's TEST_TMPDIR may exceed.
  // With `small_window`, the client's channel advertises a small HTTP/2
  // window and never grows it, so a client that does not read holds the
  // server's writes back.
  // The service outlives the server (it is destroyed after TearDown), so no
  // callback of a call still ending reaches a destroyed service.
  StreamService& Serve(bool small_window = false,
                       absl::Status precheck = absl::OkStatus()) {
    service_ = std::make_unique<StreamService>(std::move(precheck));
    static int next = 0;
    address_ = "unix:/tmp/rankd-esr-" + std::to_string(::getpid()) + "-" +
               std::to_string(next++) + ".sock";
    grpc::ServerBuilder builder;
    builder.AddListeningPort(address_, grpc::InsecureServerCredentials());
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    EXPECT_NE(server_, nullptr) << address_;
    grpc::ChannelArguments args;
    if (small_window) {
      args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
      args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 1024);
    }
    stub_ = v1::Admin::NewStub(grpc::CreateCustomChannel(
        address_, grpc::InsecureChannelCredentials(), args));
    return *service_;
  }
  void TearDown() override {
    if (server_ != nullptr) {
      server_->Shutdown(absl::ToChronoTime(MonotonicNow()));
      server_->Wait();
    }
    if (!address_.empty()) ::unlink(address_.substr(5).c_str());
  }

  std::unique_ptr<StreamService> service_;
  std::string address_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Admin::Stub> stub_;
};

TEST_F(EventStreamReactorTest, EventsArriveInOrderAndACloseEndsTheStream) {
  StreamService& service = Serve();
  ASSERT_NE(server_, nullptr);
  grpc::ClientContext context;
  v1::WatchEventsRequest request;
  request.set_after_sequence(10);
  auto reader = stub_->WatchEvents(&context, request);
  v1::JobEvent event;
  ASSERT_TRUE(reader->Read(&event));
  EXPECT_EQ(event.sequence(), 11u);
  EventStreamReactor::Sinks sinks = service.sinks();
  for (uint64_t s = 12; s < 15; ++s) {
    v1::JobEvent next;
    next.set_sequence(s);
    sinks.deliver(next);
  }
  sinks.close(absl::UnavailableError("the daemon is shutting down"));
  for (uint64_t s = 12; s < 15; ++s) {
    ASSERT_TRUE(reader->Read(&event));
    EXPECT_EQ(event.sequence(), s);
  }
  EXPECT_FALSE(reader->Read(&event));
  grpc::Status status = reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(status.error_message(), "the daemon is shutting down");
  ASSERT_TRUE(service.WaitEnded());
  EXPECT_FALSE(service.client_gone());
  EXPECT_EQ(service.ended_id(), 7u);
}

TEST_F(EventStreamReactorTest, AClientThatDoesNotReadIsCutOffNotBuffered) {
  StreamService& service = Serve(/*small_window=*/true);
  ASSERT_NE(server_, nullptr);
  grpc::ClientContext context;
  auto reader = stub_->WatchEvents(&context, v1::WatchEventsRequest());
  v1::JobEvent event;
  ASSERT_TRUE(reader->Read(&event));
  // The client stops reading; 1 KiB events soon fill the transport's
  // window, and the stream's queue after it.
  EventStreamReactor::Sinks sinks = service.sinks();
  const size_t sent = EventStreamReactor::kMaxQueuedEvents * 2;
  for (size_t i = 0; i < sent; ++i) {
    v1::JobEvent big;
    big.set_sequence(i + 2);
    big.set_message(std::string(1024, 'x'));
    sinks.deliver(big);
  }
  // Ends the stream in any case (a no-op once it was cut off).
  sinks.close(absl::UnavailableError("not cut off"));
  size_t received = 0;
  while (reader->Read(&event)) ++received;
  EXPECT_LT(received, sent);
  grpc::Status status = reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(status.error_message().find("resume from the last sequence"),
            std::string::npos)
      << status.error_message();
}

TEST_F(EventStreamReactorTest, AFullHistoryReplayFitsTheQueue) {
  // A new subscription replays up to EventLog::kDefaultCapacity events of
  // history at once, and the job goes on publishing meanwhile: none of it
  // ends the stream.
  StreamService& service = Serve();
  ASSERT_NE(server_, nullptr);
  grpc::ClientContext context;
  auto reader = stub_->WatchEvents(&context, v1::WatchEventsRequest());
  v1::JobEvent event;
  ASSERT_TRUE(reader->Read(&event));
  EventStreamReactor::Sinks sinks = service.sinks();
  constexpr uint64_t kEvents = EventLog::kDefaultCapacity + 500;
  for (uint64_t s = 2; s < 2 + kEvents; ++s) {
    v1::JobEvent next;
    next.set_sequence(s);
    next.set_message("rank 5 lost: its connection to the daemon closed");
    sinks.deliver(next);
  }
  sinks.close(absl::UnavailableError("done"));
  uint64_t expected = 2;
  while (reader->Read(&event)) {
    ASSERT_EQ(event.sequence(), expected);
    ++expected;
  }
  EXPECT_EQ(expected, 2 + kEvents);
  grpc::Status status = reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(status.error_message(), "done");
}

TEST_F(EventStreamReactorTest, AFailedPrecheckEndsTheCallBeforeSubscribing) {
  StreamService& service =
      Serve(false, absl::UnauthenticatedError("missing bearer token"));
  ASSERT_NE(server_, nullptr);
  grpc::ClientContext context;
  auto reader = stub_->WatchEvents(&context, v1::WatchEventsRequest());
  v1::JobEvent event;
  EXPECT_FALSE(reader->Read(&event));
  grpc::Status status = reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(service.opened(), 0);
}

TEST_F(EventStreamReactorTest, KeptSinksAreHarmlessAfterTheStreamEnded) {
  StreamService& service = Serve();
  ASSERT_NE(server_, nullptr);
  {
    grpc::ClientContext context;
    auto reader = stub_->WatchEvents(&context, v1::WatchEventsRequest());
    v1::JobEvent event;
    ASSERT_TRUE(reader->Read(&event));
    context.TryCancel();  // the client goes away
    while (reader->Read(&event)) {
    }
    reader->Finish().IgnoreError();
  }
  ASSERT_TRUE(service.WaitEnded());
  EXPECT_TRUE(service.client_gone());
  // on_end runs just before gRPC deletes the reactor: give it time to.
  absl::SleepFor(absl::Milliseconds(200));
  EventStreamReactor::Sinks kept = service.sinks();
  v1::JobEvent late;
  late.set_sequence(99);
  kept.deliver(late);
  kept.close(absl::UnavailableError("the daemon is shutting down"));
  kept.close(absl::UnavailableError("again"));
}

// The shutdown race itself, many times: the daemon closes (and publishes
// to) a stream while its client goes away, so the close lands before,
// during or after the reactor's end. Under AddressSanitizer any touch of a
// deleted reactor fails the run.
TEST_F(EventStreamReactorTest, ClosesRacingClientsGoingAwayAreSafe) {
  StreamService& service = Serve();
  ASSERT_NE(server_, nullptr);
  constexpr int kStreams = 100;
  for (int i = 0; i < kStreams; ++i) {
    grpc::ClientContext context;
    auto reader = stub_->WatchEvents(&context, v1::WatchEventsRequest());
    v1::JobEvent event;
    ASSERT_TRUE(reader->Read(&event)) << i;
    EventStreamReactor::Sinks sinks = service.sinks();
    std::thread client([&] { context.TryCancel(); });
    std::thread daemon([&] {
      for (int e = 0; e < 3; ++e) sinks.deliver(event);
      sinks.close(absl::UnavailableError("the daemon is shutting down"));
    });
    client.join();
    daemon.join();
    while (reader->Read(&event)) {
    }
    reader->Finish().IgnoreError();
    // And again once the stream is surely over.
    if (i % 10 == 0) {
      ASSERT_TRUE(service.WaitEndedCount(i + 1));
      absl::SleepFor(absl::Milliseconds(20));
      sinks.close(absl::UnavailableError("late"));
      sinks.deliver(event);
    }
  }
  EXPECT_TRUE(service.WaitEndedCount(kStreams));
}

// Peer.Subscribe's batching reactor: a burst of events delivered while a
// write is in flight goes out in few messages, each at most
// kMaxBatchEvents, every event once and in order.
class BatchService final
    : public v1::Peer::WithRawCallbackMethod_Subscribe<v1::Peer::Service> {
 public:
  static constexpr int kEvents = 3000;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Subscribe(
      grpc::CallbackServerContext*, const grpc::ByteBuffer*) override {
    return EventBatchStreamReactor::Start(
        absl::OkStatus(),
        [](EventBatchStreamReactor::Sinks sinks) {
          for (int i = 1; i <= kEvents; ++i) {
            v1::JobEvent event;
            event.set_sequence(i);
            sinks.deliver(event);
          }
          sinks.close(absl::OkStatus());
          return absl::StatusOr<uint64_t>(1);
        },
        [](uint64_t, bool, const std::string&) {}, nullptr, &encoder_);
  }

 private:
  EventEncoder encoder_;
};

// Serves `service` on a fresh Unix socket and reads its Subscribe stream
// until `events` events arrived or it ended; returns the messages' sizes.
std::vector<int> ReadBatches(v1::Peer::Service* service, int events) {
  static int next = 0;
  const std::string address = "unix:/tmp/rankd-esr-form-" +
                              std::to_string(::getpid()) + "-" +
                              std::to_string(next++) + ".sock";
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials());
  builder.RegisterService(service);
  auto server = builder.BuildAndStart();
  EXPECT_NE(server, nullptr);
  std::vector<int> sizes;
  {
    auto stub = v1::Peer::NewStub(
        grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.set_deadline(
        absl::ToChronoTime(MonotonicNow() + absl::Seconds(20)));
    auto reader = stub->Subscribe(&context, v1::SubscribeRequest());
    v1::JobEventBatch batch;
    uint64_t next_sequence = 1;
    int seen = 0;
    while (seen < events && reader->Read(&batch)) {
      sizes.push_back(batch.events_size());
      for (const auto& event : batch.events()) {
        EXPECT_EQ(event.sequence(), next_sequence++);
        ++seen;
      }
    }
    context.TryCancel();
  }
  server->Shutdown(absl::ToChronoTime(MonotonicNow()));
  server->Wait();
  ::unlink(address.substr(5).c_str());
  return sizes;
}

TEST(EventBatchStreamReactorTest, ABurstGoesOutInFewBatchesInOrder) {
  BatchService service;
  const std::vector<int> sizes = ReadBatches(&service, BatchService::kEvents);
  int events = 0;
  for (int n : sizes) {
    EXPECT_LE(n, static_cast<int>(EventBatchStreamReactor::kMaxBatchEvents));
    events += n;
  }
  EXPECT_EQ(events, BatchService::kEvents);
  // The first event goes out alone; the rest wait for it and batch up.
  EXPECT_LT(sizes.size(), BatchService::kEvents / 10u) << sizes.size();
}

// Formation events (joins, registrations) reaching an idle node stream are
// held briefly so that a join storm shares messages; anything else goes out
// at once, after them, and held events go out on the timer alone too.
class FormationService final
    : public v1::Peer::WithRawCallbackMethod_Subscribe<v1::Peer::Service> {
 public:
  FormationService(DeadlineTimer* timer, int joins, bool then_fail)
      : timer_(timer), joins_(joins), then_fail_(then_fail) {}
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Subscribe(
      grpc::CallbackServerContext*, const grpc::ByteBuffer*) override {
    return EventBatchStreamReactor::Start(
        absl::OkStatus(),
        [this](EventBatchStreamReactor::Sinks sinks) {
          for (int i = 1; i <= joins_; ++i) {
            v1::JobEvent event;
            event.set_sequence(i);
            event.set_kind(i % 2 ? v1::EVENT_KIND_MEMBER_JOINED
                                 : v1::EVENT_KIND_NODE_REGISTERED);
            sinks.deliver(event);
          }
          if (then_fail_) {
            v1::JobEvent failed;
            failed.set_sequence(joins_ + 1);
            failed.set_kind(v1::EVENT_KIND_JOB_FAILED);
            sinks.deliver(failed);
            sinks.close(absl::OkStatus());
          }
          return absl::StatusOr<uint64_t>(1);
        },
        [](uint64_t, bool, const std::string&) {}, timer_, &encoder_);
  }

 private:
  EventEncoder encoder_;
  DeadlineTimer* const timer_;
  const int joins_;
  const bool then_fail_;
};

TEST(EventBatchStreamReactorTest, FormationEventsWaitForTheNextFailure) {
  DeadlineTimer timer;
  FormationService service(&timer, 100, /*then_fail=*/true);
  // Without the hold, the first join would go out alone.
  EXPECT_THAT(ReadBatches(&service, 101), ::testing::ElementsAre(101));
}

TEST(EventBatchStreamReactorTest, HeldFormationEventsGoOutOnTheTimer) {
  DeadlineTimer timer;
  FormationService service(&timer, 3, /*then_fail=*/false);
  EXPECT_THAT(ReadBatches(&service, 3), ::testing::ElementsAre(3));
}

TEST(EventEncoderTest, AnEventIsEncodedOnceForEveryStream) {
  EventEncoder encoder;
  v1::JobEvent joined;
  joined.set_sequence(7);
  joined.set_kind(v1::EVENT_KIND_MEMBER_JOINED);
  joined.set_message(std::string(300, 'j'));  // a two-byte length
  v1::JobEvent ready;
  ready.set_sequence(8);
  ready.set_kind(v1::EVENT_KIND_JOB_READY);
  grpc::Slice first = encoder.Encode(joined);
  grpc::Slice again = encoder.Encode(joined);
  EXPECT_EQ(first.begin(), again.begin());  // the same bytes, not a copy
  grpc::Slice parts[] = {first, encoder.Encode(ready), again};
  grpc::ByteBuffer buffer(parts, 3);
  v1::JobEventBatch batch;
  ASSERT_TRUE(
      grpc::SerializationTraits<v1::JobEventBatch>::Deserialize(&buffer, &batch)
          .ok());
  ASSERT_EQ(batch.events_size(), 3);
  EXPECT_EQ(batch.events(0).message(), joined.message());
  EXPECT_EQ(batch.events(1).kind(), v1::EVENT_KIND_JOB_READY);
  EXPECT_EQ(batch.events(2).sequence(), 7u);
}

}  // namespace
}  // namespace rankd
