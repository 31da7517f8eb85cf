// TcpGate in process, in front of a real gRPC server (an empty one: the
// gate's bounds do not depend on what is served): connection limits per
// address, the unauthenticated byte and time budgets, MarkAuthenticated.
#include "daemon/tcp_gate.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace rankd {
namespace {

// Connects to 127.0.0.1:`port` (blocking); -1 on failure.
int Connect(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
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

// True when the server closed `fd` within `timeout` (EOF or reset).
bool ClosedWithin(int fd, absl::Duration timeout) {
  timeval tv{};
  tv.tv_usec = 50'000;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  const absl::Time deadline = absl::Now() + timeout;
  char buffer[4096];
  while (absl::Now() < deadline) {
    ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n == 0) return true;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return true;
    }
  }
  return false;
}

// The local address of `fd` as gRPC names the connection's peer.
std::string PeerName(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  return absl::StrCat("ipv4:127.0.0.1:", ntohs(addr.sin_port));
}

class TcpGateTest : public ::testing::Test {
 protected:
  void Start(TcpGate::Options options) {
    auto gate = TcpGate::Listen("127.0.0.1:0", options);
    ASSERT_TRUE(gate.ok()) << gate.status();
    gate_ = *std::move(gate);
    grpc::ServerBuilder builder;
    auto acceptor = builder.experimental().AddExternalConnectionAcceptor(
        grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD,
        grpc::InsecureServerCredentials());
    // gRPC serves nothing without a service; any method is unknown here.
    builder.RegisterCallbackGenericService(&generic_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    gate_->Serve(std::move(acceptor));
  }
  void TearDown() override {
    for (int fd : fds_) ::close(fd);
    if (gate_ != nullptr) gate_->Stop();
    if (server_ != nullptr) server_->Shutdown();
  }
  int Open() {
    int fd = Connect(gate_->port());
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

}  // namespace
}  // namespace rankd
