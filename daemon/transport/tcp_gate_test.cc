// TcpGate in process, in front of a real gRPC server (serving only the
// standard health service: the gate's bounds do not depend on what is
// served): connection limits in all, per address and before
// authentication, making room by shutting the oldest unauthenticated
// connection down, the unauthenticated byte and time budgets, health
// connections, MarkAuthenticated, listening on localhost. With a stand-in
// acceptor in gRPC's place: the gate acts on the socket it accepted, never
// on a number gRPC closed, and sweeps read the sockets with no lock held.
#include "daemon/transport/tcp_gate.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "daemon/transport/testing/closed_within.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace rankd {
namespace {

using ::rankd::testing::ClosedWithin;

// Connects to 127.0.0.1:`port` (blocking) from 127.0.0.`source` (Linux
// lets a client take any 127/8 address as its own); -1 on failure.
int Connect(int port, int source = 1) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in from{};
  from.sin_family = AF_INET;
  from.sin_addr.s_addr = htonl((127u << 24) | static_cast<uint32_t>(source));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0) {
    ::close(fd);
    return -1;
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// The local address of `fd` as gRPC names the connection's peer.
std::string PeerName(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &addr.sin_addr, text, sizeof(text));
  return absl::StrCat("ipv4:", text, ":", ntohs(addr.sin_port));
}

// Waits up to `timeout` for `done`.
template <typename Done>
bool Eventually(Done done, absl::Duration timeout = absl::Seconds(3)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

class TcpGateTest : public ::testing::Test {
 protected:
  void Start(TcpGate::Options options) {
    auto gate = TcpGate::Listen("127.0.0.1:0", options);
    ASSERT_TRUE(gate.ok()) << gate.status();
    gate_ = *std::move(gate);
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    auto acceptor = builder.experimental().AddExternalConnectionAcceptor(
        grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD,
        grpc::InsecureServerCredentials());
    // Besides health, any method is unknown here.
    builder.RegisterCallbackGenericService(&generic_);
    std::vector<
        std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
        interceptors;
    interceptors.push_back(gate_->MakeInterceptorFactory());
    builder.experimental().SetInterceptorCreators(std::move(interceptors));
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    gate_->Serve(std::move(acceptor));
  }
  void TearDown() override {
    for (int fd : fds_) ::close(fd);
    if (gate_ != nullptr) gate_->Stop();
    if (server_ != nullptr) server_->Shutdown();
  }
  int Open(int source = 1) {
    int fd = Connect(gate_->port(), source);
    if (fd >= 0) fds_.push_back(fd);
    return fd;
  }

  std::unique_ptr<TcpGate> gate_;
  grpc::CallbackGenericService generic_;
  std::unique_ptr<grpc::Server> server_;
  std::vector<int> fds_;
};

TEST_F(TcpGateTest, AnAddressHoldsAtMostItsUnauthenticatedConnections) {
  TcpGate::Options options;
  options.max_unauthenticated_per_peer = 3;
  ASSERT_NO_FATAL_FAILURE(Start(options));
  std::vector<int> first;
  for (int i = 0; i < 3; ++i) {
    first.push_back(Open());
    absl::SleepFor(absl::Milliseconds(20));  // accepted in this order
  }
  absl::SleepFor(absl::Milliseconds(100));
  // A fourth from the address: the oldest unauthenticated one gives way,
  // so that a flood cannot lock out an honest caller sharing the address.
  const int fourth = Open();
  EXPECT_TRUE(ClosedWithin(first[0], absl::Seconds(2)));
  EXPECT_FALSE(ClosedWithin(fourth, absl::Milliseconds(300)));
  for (int i = 1; i < 3; ++i) {
    EXPECT_FALSE(ClosedWithin(first[i], absl::Milliseconds(100)));
  }
  EXPECT_EQ(gate_->stats().shut_evicted, 1u);
  EXPECT_EQ(gate_->stats().accepted, 4u);

  // An authenticated connection no longer counts (and never gives way):
  // with first[1] authenticated, a fifth fits beside first[2] and fourth.
  gate_->MarkAuthenticated(PeerName(first[1]));
  const int fifth = Open();
  EXPECT_FALSE(ClosedWithin(fifth, absl::Milliseconds(300)));
  EXPECT_FALSE(ClosedWithin(first[1], absl::Milliseconds(100)));
  EXPECT_EQ(gate_->stats().accepted, 5u);
  EXPECT_EQ(gate_->stats().shut_evicted, 1u);
}

TEST_F(TcpGateTest, AnUnauthenticatedConnectionHasABytesBudget) {
  TcpGate::Options options;
  options.unauthenticated_bytes = 64 << 10;
  ASSERT_NO_FATAL_FAILURE(Start(options));
  const int quiet = Open();
  const int authenticated = Open();
  const int talker = Open();
  absl::SleepFor(absl::Milliseconds(100));
  gate_->MarkAuthenticated(PeerName(authenticated));
  // Valid HTTP/2 that gRPC takes without complaint: the preface, empty
  // SETTINGS, then connection WINDOW_UPDATEs of 1, 13 bytes each, 256 KiB.
  std::string bytes = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  bytes += std::string("\0\0\0\x04\0\0\0\0\0", 9);
  const std::string update("\0\0\x04\x08\0\0\0\0\0\0\0\0\x01", 13);
  while (bytes.size() < (256u << 10)) bytes += update;
  (void)!::send(talker, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  EXPECT_TRUE(ClosedWithin(talker, absl::Seconds(2)));
  EXPECT_FALSE(ClosedWithin(quiet, absl::Milliseconds(200)));
  EXPECT_FALSE(ClosedWithin(authenticated, absl::Milliseconds(200)));
  EXPECT_EQ(gate_->stats().shut_bytes, 1u);
}

TEST_F(TcpGateTest, AnUnauthenticatedConnectionHasATimeBudget) {
  TcpGate::Options options;
  options.unauthenticated_time = absl::Milliseconds(300);
  ASSERT_NO_FATAL_FAILURE(Start(options));
  const int waiting = Open();
  const int authenticated = Open();
  absl::SleepFor(absl::Milliseconds(50));
  gate_->MarkAuthenticated(PeerName(authenticated));
  // gRPC's own handshake timeout is longer (120 s by default).
  EXPECT_TRUE(ClosedWithin(waiting, absl::Seconds(3)));
  EXPECT_FALSE(ClosedWithin(authenticated, absl::Milliseconds(500)));
  EXPECT_EQ(gate_->stats().shut_time, 1u);
}

TEST_F(TcpGateTest, TheListenerHoldsAtMostItsConnections) {
  TcpGate::Options options;
  options.max_connections = 2;
  options.require_authentication = false;  // --allow_unauthenticated
  ASSERT_NO_FATAL_FAILURE(Start(options));
  const int a = Open();
  const int b = Open();
  absl::SleepFor(absl::Milliseconds(100));
  const int c = Open();
  EXPECT_TRUE(ClosedWithin(c, absl::Seconds(2)));
  EXPECT_EQ(gate_->stats().refused_full, 1u);
  // A closed connection makes room.
  ::shutdown(a, SHUT_RDWR);
  absl::SleepFor(absl::Milliseconds(300));
  const int d = Open();
  EXPECT_FALSE(ClosedWithin(d, absl::Milliseconds(300)));
  EXPECT_FALSE(ClosedWithin(b, absl::Milliseconds(100)));
}

// Silent connections from many addresses (127.0.0.2 on) cannot fill the
// listener: past --max_tcp_unauthenticated the oldest of any address
// gives way, and a new connection that authenticates stays.
TEST_F(TcpGateTest, ManyAddressesCannotHoldMoreThanTheUnauthenticatedCap) {
  TcpGate::Options options;
  options.max_connections = 8;
  options.max_unauthenticated = 4;
  ASSERT_NO_FATAL_FAILURE(Start(options));
  std::vector<int> flood;
  for (int i = 0; i < 6; ++i) {
    flood.push_back(Open(2 + i));
    ASSERT_GE(flood.back(), 0);
    absl::SleepFor(absl::Milliseconds(20));  // accepted in this order
  }
  EXPECT_TRUE(ClosedWithin(flood[0], absl::Seconds(2)));
  EXPECT_TRUE(ClosedWithin(flood[1], absl::Seconds(2)));
  for (int i = 2; i < 6; ++i) {
    EXPECT_FALSE(ClosedWithin(flood[i], absl::Milliseconds(50))) << i;
  }
  EXPECT_EQ(gate_->stats().shut_evicted, 2u);
  // A node: gets in (the oldest silent one gives way), authenticates, and
  // is never the one to give way after.
  const int node = Open(1);
  ASSERT_TRUE(Eventually([&] { return gate_->stats().accepted == 7; }));
  gate_->MarkAuthenticated(PeerName(node));
  EXPECT_TRUE(ClosedWithin(flood[2], absl::Seconds(2)));
  for (int i = 0; i < 8; ++i) Open(20 + i);
  EXPECT_FALSE(ClosedWithin(node, absl::Milliseconds(300)));
  EXPECT_EQ(gate_->stats().refused_full, 0u);
}

// Making room, a connection that has sent nothing goes before an older
// one that has: an honest caller sends as it connects, and must not lose
// its connection to a burst of idle ones before its first call is through.
TEST_F(TcpGateTest, ASilentConnectionGivesWayBeforeOneThatSpoke) {
  TcpGate::Options options;
  options.max_unauthenticated = 2;
  ASSERT_NO_FATAL_FAILURE(Start(options));
  const int speaker = Open(2);
  const std::string preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  ASSERT_EQ(::send(speaker, preface.data(), preface.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(preface.size()));
  absl::SleepFor(absl::Milliseconds(20));  // accepted in this order
  const int silent = Open(3);
  ASSERT_TRUE(Eventually([&] { return gate_->stats().accepted == 2; }));
  const int newer = Open(4);
  EXPECT_TRUE(ClosedWithin(silent, absl::Seconds(2)));
  EXPECT_FALSE(ClosedWithin(speaker, absl::Milliseconds(200)));
  EXPECT_FALSE(ClosedWithin(newer, absl::Milliseconds(50)));
  EXPECT_EQ(gate_->stats().shut_evicted, 1u);
}

// A full listener (connections of nodes and silent ones, under the
// unauthenticated cap) makes room for a new connection by shutting the
// oldest unauthenticated one down, of any address; with none left to shut
// down, the new one is refused.
TEST_F(TcpGateTest, AFullListenerMakesRoomFromUnauthenticatedConnections) {
  TcpGate::Options options;
  options.max_connections = 4;
  options.max_unauthenticated = 3;
  ASSERT_NO_FATAL_FAILURE(Start(options));
  const int node_a = Open(1);
  const int node_b = Open(1);
  ASSERT_TRUE(Eventually([&] { return gate_->stats().accepted == 2; }));
  gate_->MarkAuthenticated(PeerName(node_a));
  gate_->MarkAuthenticated(PeerName(node_b));
  const int silent_old = Open(2);
  absl::SleepFor(absl::Milliseconds(20));
  const int silent_new = Open(3);
  ASSERT_TRUE(Eventually([&] { return gate_->stats().accepted == 4; }));
  // Full, 2 unauthenticated (under 3): a node's reconnection gets in.
  const int node_c = Open(1);
  EXPECT_TRUE(ClosedWithin(silent_old, absl::Seconds(2)));
  EXPECT_FALSE(ClosedWithin(silent_new, absl::Milliseconds(100)));
  EXPECT_FALSE(ClosedWithin(node_c, absl::Milliseconds(100)));
  gate_->MarkAuthenticated(PeerName(node_c));
  gate_->MarkAuthenticated(PeerName(silent_new));
  // Every connection authenticated: one more is refused.
  const int extra = Open(4);
  EXPECT_TRUE(ClosedWithin(extra, absl::Seconds(2)));
  EXPECT_EQ(gate_->stats().refused_full, 1u);
  for (int fd : {node_a, node_b, node_c, silent_new}) {
    EXPECT_FALSE(ClosedWithin(fd, absl::Milliseconds(50)));
  }
}

// Past the listener-wide unauthenticated cap, the connection that gives
// way comes from the address group holding the most: a flood whose
// connections speak (so silence does not mark them) still makes room from
// its own connections, and a node's connection, older than all of them and
// not yet authenticated, stays.
TEST_F(TcpGateTest, AFloodMakesRoomFromItsOwnAddressesNotANodes) {
  TcpGate::Options options;
  options.max_connections = 32;
  options.max_unauthenticated = 4;
  ASSERT_NO_FATAL_FAILURE(Start(options));
  const std::string preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  const int node = Open(1);
  ASSERT_EQ(::send(node, preface.data(), preface.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(preface.size()));
  ASSERT_TRUE(Eventually([&] { return gate_->stats().accepted == 1; }));
  absl::SleepFor(absl::Milliseconds(20));  // the node's bytes arrived
  for (int i = 0; i < 12; ++i) {
    const int fd = Open(2 + i % 2);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::send(fd, preface.data(), preface.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(preface.size()));
    ASSERT_TRUE(Eventually([&] { return gate_->stats().accepted == 2u + i; }));
  }
  ASSERT_TRUE(Eventually([&] { return gate_->stats().shut_evicted == 9u; }));
  EXPECT_FALSE(ClosedWithin(node, absl::Milliseconds(200)));
  EXPECT_EQ(gate_->stats().refused_full, 0u);
}

// A full health budget makes room by group: connections from the groups
// holding the most health connections give one up to a newcomer whose
// group holds fewer, so a few addresses that took the whole budget first
// cannot keep another checker's Watch out; a newcomer from one of those
// groups gets none. (Calls noted directly, as the interceptor would.)
TEST_F(TcpGateTest, AFullHealthBudgetMakesRoomForAnotherAddress) {
  TcpGate::Options options;
  options.max_health = 4;
  options.max_health_per_peer = 2;
  ASSERT_NO_FATAL_FAILURE(Start(options));
  constexpr absl::string_view kWatch = "/grpc.health.v1.Health/Watch";
  std::vector<int> squatters;
  for (int source : {2, 2, 3, 3}) {
    squatters.push_back(Open(source));
    ASSERT_GE(squatters.back(), 0);
    absl::SleepFor(absl::Milliseconds(20));  // accepted in this order
  }
  ASSERT_TRUE(Eventually([&] { return gate_->stats().accepted == 4; }));
  for (int fd : squatters) gate_->NoteCall(PeerName(fd), kWatch);
  ASSERT_TRUE(Eventually([&] { return gate_->stats().health == 4; }));
  // Another address: the oldest of the largest groups gives way.
  const int checker = Open(4);
  ASSERT_TRUE(Eventually([&] { return gate_->stats().accepted == 5; }));
  gate_->NoteCall(PeerName(checker), kWatch);
  EXPECT_TRUE(ClosedWithin(squatters[0], absl::Seconds(2)));
  EXPECT_EQ(gate_->stats().shut_evicted, 1u);
  ASSERT_TRUE(Eventually([&] { return gate_->stats().health == 4; }));
  // A squatter's group (1 held, 2 with one more; the largest holds 2):
  // no room for it.
  const int again = Open(2);
  ASSERT_TRUE(Eventually([&] { return gate_->stats().accepted == 6; }));
  gate_->NoteCall(PeerName(again), kWatch);
  EXPECT_FALSE(ClosedWithin(checker, absl::Milliseconds(200)));
  EXPECT_EQ(gate_->stats().shut_evicted, 1u);
  EXPECT_EQ(gate_->stats().health, 4u);
}

// A health Watch without a credential (a load balancer's) outlives the
// unauthenticated time; a connection that calls anything else, or one
// beyond the health budget, does not.
TEST_F(TcpGateTest, AHealthWatchOutlivesTheUnauthenticatedTime) {
  TcpGate::Options options;
  options.unauthenticated_time = absl::Milliseconds(500);
  options.max_health = 2;
  options.max_health_per_peer = 2;
  ASSERT_NO_FATAL_FAILURE(Start(options));
  server_->GetHealthCheckService()->SetServingStatus("", true);
  const std::string target = absl::StrCat("127.0.0.1:", gate_->port());
  struct Watcher {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<grpc::health::v1::Health::Stub> stub;
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReader<grpc::health::v1::HealthCheckResponse>>
        reader;
  };
  // Three watchers, each on a channel of its own (a connection each).
  std::vector<std::unique_ptr<Watcher>> watchers;
  for (int i = 0; i < 3; ++i) {
    auto w = std::make_unique<Watcher>();
    grpc::ChannelArguments args;
    args.SetInt("grpc.channel_id", i);  // no shared subchannel
    w->channel = grpc::CreateCustomChannel(
        target, grpc::InsecureChannelCredentials(), args);
    w->stub = grpc::health::v1::Health::NewStub(w->channel);
    w->reader = w->stub->Watch(&w->context, {});
    grpc::health::v1::HealthCheckResponse first;
    ASSERT_TRUE(w->reader->Read(&first)) << i;
    EXPECT_EQ(first.status(), grpc::health::v1::HealthCheckResponse::SERVING);
    watchers.push_back(std::move(w));
  }
  ASSERT_TRUE(Eventually([&] { return gate_->stats().health == 2; }));
  // Past the unauthenticated time: the two within the budget still get
  // the update; the third was closed.
  ASSERT_TRUE(Eventually([&] { return gate_->stats().shut_time == 1; },
                         absl::Seconds(5)));
  server_->GetHealthCheckService()->SetServingStatus("", false);
  int updated = 0;
  for (auto& w : watchers) {
    grpc::health::v1::HealthCheckResponse next;
    if (w->reader->Read(&next) &&
        next.status() == grpc::health::v1::HealthCheckResponse::NOT_SERVING) {
      ++updated;
    }
  }
  EXPECT_EQ(updated, 2);
  EXPECT_EQ(gate_->stats().health, 2u);

  // A health connection that calls another method is one no more: it gets
  // the unauthenticated time from then on.
  grpc::GenericStub generic(watchers[0]->channel);
  grpc::ClientContext other;
  other.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(5));
  grpc::Slice empty("");
  grpc::ByteBuffer request(&empty, 1), response;
  grpc::Status status;
  std::atomic<bool> done{false};
  generic.UnaryCall(&other, "/some.Service/Other", grpc::StubOptions(),
                    &request, &response, [&](grpc::Status s) {
                      status = s;
                      done.store(true);
                    });
  ASSERT_TRUE(Eventually([&] { return gate_->stats().health == 1; }));
  EXPECT_TRUE(Eventually([&] { return gate_->stats().shut_time == 2; },
                         absl::Seconds(5)));
  EXPECT_TRUE(Eventually([&] { return done.load(); }, absl::Seconds(5)));
  for (auto& w : watchers) w->context.TryCancel();
}

// A connection with more health calls at once than a checker makes (they
// could be calls that never send their message, held forever) is no
// health connection: it is closed at the unauthenticated time.
TEST_F(TcpGateTest, ManyHealthCallsAtOnceAreNoHealthConnection) {
  TcpGate::Options options;
  options.unauthenticated_time = absl::Milliseconds(500);
  ASSERT_NO_FATAL_FAILURE(Start(options));
  server_->GetHealthCheckService()->SetServingStatus("", true);
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", gate_->port()),
                                     grpc::InsecureChannelCredentials());
  auto stub = grpc::health::v1::Health::NewStub(channel);
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<
      grpc::ClientReader<grpc::health::v1::HealthCheckResponse>>>
      readers;
  for (int i = 0; i < 3; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    readers.push_back(stub->Watch(contexts.back().get(), {}));
    grpc::health::v1::HealthCheckResponse first;
    ASSERT_TRUE(readers.back()->Read(&first)) << i;
  }
  EXPECT_TRUE(Eventually([&] { return gate_->stats().shut_time == 1; },
                         absl::Seconds(5)));
  EXPECT_EQ(gate_->stats().health, 0u);
  for (auto& context : contexts) context->TryCancel();
}

// On a dual-stack listener an IPv4 caller arrives IPv4-mapped; gRPC names it
// by its IPv4 address, and so does the gate (authentication marks it, and
// per-address limits count it as that address).
TEST_F(TcpGateTest, AnIpv4MappedPeerIsItsIpv4Address) {
  TcpGate::Options options;
  options.max_unauthenticated_per_peer = 2;
  // Not Start(): that listens on 127.0.0.1; this one on every address.
  auto dual = TcpGate::Listen("[::]:0", options);
  if (!dual.ok()) GTEST_SKIP() << "no IPv6: " << dual.status();
  gate_ = *std::move(dual);
  grpc::ServerBuilder builder;
  auto acceptor = builder.experimental().AddExternalConnectionAcceptor(
      grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD,
      grpc::InsecureServerCredentials());
  builder.RegisterCallbackGenericService(&generic_);
  server_ = builder.BuildAndStart();
  ASSERT_NE(server_, nullptr);
  gate_->Serve(std::move(acceptor));
  const int a = Open(5);
  const int b = Open(5);
  ASSERT_TRUE(Eventually([&] { return gate_->stats().accepted == 2; }));
  gate_->MarkAuthenticated(PeerName(a));
  ASSERT_TRUE(Eventually([&] { return gate_->stats().unauthenticated == 1; }));
  // 127.0.0.5 holds one unauthenticated connection of its 2: one more fits
  // without shutting b down.
  const int c = Open(5);
  ASSERT_TRUE(Eventually([&] { return gate_->stats().accepted == 3; }));
  EXPECT_FALSE(ClosedWithin(b, absl::Milliseconds(200)));
  EXPECT_FALSE(ClosedWithin(c, absl::Milliseconds(50)));
  EXPECT_EQ(gate_->stats().shut_evicted, 0u);
}

// Plays gRPC's part for the tests below: takes each connection's
// descriptor and keeps it, so that a test decides when "gRPC" closes it.
class KeepingAcceptor : public grpc::experimental::ExternalConnectionAcceptor {
 public:
  void HandleNewConnection(NewConnectionParameters* p) override {
    absl::MutexLock lock(&mu_);
    fds_.push_back(p->fd);
    if (fds_.size() == 1) first_ = absl::Now();
  }
  // The descriptor of the connection accepted `i`-th; -1 before.
  int fd(size_t i) {
    absl::MutexLock lock(&mu_);
    return i < fds_.size() ? fds_[i] : -1;
  }
  // Whether the first connection was handed over more than `age` ago: it
  // is then at least that old for the gate, which timed it before.
  bool FirstOlderThan(absl::Duration age) {
    absl::MutexLock lock(&mu_);
    return !fds_.empty() && absl::Now() - first_ > age;
  }
  ~KeepingAcceptor() override {
    for (int fd : fds_) ::close(fd);
  }

 private:
  absl::Mutex mu_;
  std::vector<int> fds_;
  absl::Time first_;
};

// The descriptors this process holds.
int OpenDescriptors() {
  int n = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator("/proc/self/fd")) {
    (void)entry;
    ++n;
  }
  return n;
}

// Serves `gate` to a KeepingAcceptor (set in `*acceptor` before the gate's
// thread starts) and connects one client to it; the client's descriptor.
int ServeAndConnect(TcpGate& gate, KeepingAcceptor** acceptor) {
  auto keeping = std::make_unique<KeepingAcceptor>();
  *acceptor = keeping.get();
  gate.Serve(std::move(keeping));
  return Connect(gate.port());
}

// The gate acts on the connection it accepted, never on the number gRPC
// held: here "gRPC" closes its descriptor between a sweep's read and its
// action, and the number at once names another socket (the kernel reuses
// the lowest free number; dup2 forces it). The sweep shuts the accepted
// connection down, past its time, and the other socket stays whole.
TEST(TcpGateOwnDescriptorTest, ASweepNeverShutsDownANumberGrpcClosed) {
  TcpGate::Options options;
  options.unauthenticated_time = absl::Milliseconds(200);
  std::atomic<int> reused{-1};
  int other[2] = {-1, -1};
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, other), 0);
  KeepingAcceptor* acceptor = nullptr;
  options.after_reading_sockets = [&] {
    const int fd = acceptor == nullptr ? -1 : acceptor->fd(0);
    // In a sweep that finds it too old (the sweep reads its clock later).
    if (fd < 0 || reused.load() >= 0 ||
        !acceptor->FirstOlderThan(options.unauthenticated_time)) {
      return;
    }
    // gRPC closes it; the number names the other socket from now on.
    ASSERT_EQ(::dup2(other[0], fd), fd);
    reused.store(fd);
  };
  auto gate = TcpGate::Listen("127.0.0.1:0", options);
  ASSERT_TRUE(gate.ok()) << gate.status();
  const int before = OpenDescriptors();
  const int client = ServeAndConnect(**gate, &acceptor);
  ASSERT_GE(client, 0);
  EXPECT_TRUE(ClosedWithin(client, absl::Seconds(3)));
  ASSERT_TRUE(Eventually([&] { return reused.load() >= 0; }));
  EXPECT_EQ((*gate)->stats().shut_time, 1u);
  // The socket now under gRPC's old number still carries bytes both ways.
  const char ping = 'p';
  ASSERT_EQ(::send(reused.load(), &ping, 1, MSG_NOSIGNAL), 1);
  char got = 0;
  ASSERT_EQ(::recv(other[1], &got, 1, 0), 1);
  EXPECT_EQ(got, 'p');
  ASSERT_EQ(::send(other[1], &ping, 1, MSG_NOSIGNAL), 1);
  ASSERT_EQ(::recv(reused.load(), &got, 1, 0), 1);
  // A later sweep forgets the connection (its number names another socket).
  EXPECT_TRUE(Eventually([&] { return (*gate)->stats().open == 0; }));
  // The gate let its own descriptor go: the client's and the number gRPC
  // had (another socket now) are all that the connection left open.
  EXPECT_EQ(OpenDescriptors(), before + 2);
  (*gate)->Stop();
  ::close(client);
  ::close(other[0]);
  ::close(other[1]);
}

// A sweep reads the sockets with no lock held: a call authenticating a
// connection then (here from inside the sweep, on its own thread) does not
// wait for it, and the sweep does not shut down the connection it read as
// too old once it is authenticated.
TEST(TcpGateOwnDescriptorTest, ASweepReadsTheSocketsWithNoLockHeld) {
  TcpGate::Options options;
  options.unauthenticated_time = absl::Milliseconds(200);
  absl::Mutex peer_mu;
  std::atomic<int> marked{0};
  std::string peer;
  TcpGate* gate_seen = nullptr;
  KeepingAcceptor* acceptor = nullptr;
  options.after_reading_sockets = [&] {
    // In a sweep that finds it too old (the sweep reads its clock later).
    if (acceptor == nullptr || marked.load() > 0 ||
        !acceptor->FirstOlderThan(options.unauthenticated_time)) {
      return;
    }
    // Takes the gate's lock: were the sweep holding it, this would never
    // return.
    std::string name;
    {
      absl::MutexLock lock(&peer_mu);
      name = peer;
    }
    if (name.empty()) return;
    gate_seen->MarkAuthenticated(name);
    EXPECT_EQ(gate_seen->stats().accepted, 1u);
    marked.store(1);
  };
  auto gate = TcpGate::Listen("127.0.0.1:0", options);
  ASSERT_TRUE(gate.ok()) << gate.status();
  gate_seen = gate->get();
  const int before = OpenDescriptors();
  const int client = ServeAndConnect(**gate, &acceptor);
  ASSERT_GE(client, 0);
  {
    absl::MutexLock lock(&peer_mu);
    peer = PeerName(client);
  }
  ASSERT_TRUE(Eventually([&] { return acceptor->fd(0) >= 0; }));
  ASSERT_TRUE(Eventually([&] { return marked.load() > 0; }));
  EXPECT_FALSE(ClosedWithin(client, absl::Milliseconds(300)));
  EXPECT_EQ((*gate)->stats().shut_time, 0u);
  EXPECT_EQ((*gate)->stats().unauthenticated, 0u);
  // Authenticated, the connection no longer holds the gate's descriptor:
  // the client's and gRPC's remain.
  EXPECT_TRUE(Eventually([&] { return OpenDescriptors() == before + 2; }))
      << OpenDescriptors() << " open, " << before << " before";
  (*gate)->Stop();
  ::close(client);
}

// localhost is 127.0.0.1 and, where the host has it, ::1.
TEST(TcpGateListenTest, LocalhostListensOnIpv4AndIpv6Loopback) {
  int probe = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in6 loopback6{};
  loopback6.sin6_family = AF_INET6;
  loopback6.sin6_addr = in6addr_loopback;
  const bool has_ipv6 =
      probe >= 0 && ::bind(probe, reinterpret_cast<sockaddr*>(&loopback6),
                           sizeof(loopback6)) == 0;
  if (probe >= 0) ::close(probe);
  auto gate = TcpGate::Listen("localhost:0", TcpGate::Options{});
  ASSERT_TRUE(gate.ok()) << gate.status();
  EXPECT_EQ((*gate)->listening_sockets(), has_ipv6 ? 2u : 1u);
  grpc::ServerBuilder builder;
  auto acceptor = builder.experimental().AddExternalConnectionAcceptor(
      grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD,
      grpc::InsecureServerCredentials());
  grpc::CallbackGenericService generic;
  builder.RegisterCallbackGenericService(&generic);
  auto server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  (*gate)->Serve(std::move(acceptor));
  std::vector<std::string> targets = {
      absl::StrCat("127.0.0.1:", (*gate)->port())};
  if (has_ipv6) targets.push_back(absl::StrCat("[::1]:", (*gate)->port()));
  for (const std::string& target : targets) {
    auto channel =
        grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
    EXPECT_TRUE(channel->WaitForConnected(std::chrono::system_clock::now() +
                                          std::chrono::seconds(5)))
        << target;
  }
  EXPECT_EQ((*gate)->stats().accepted, targets.size());
  (*gate)->Stop();
  server->Shutdown();
}

}  // namespace
}  // namespace rankd
