// Tests for c10d_store/internal/gloo_sockets.h: Gloo address records parse
// into endpoints, and the shutdown ends exactly the connections with an
// end at one of them (real loopback sockets).
#include "c10d_store/internal/gloo_sockets.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace rankd::c10d_store::internal {
namespace {

// A Gloo tcp Address record for `address` (sequence number `seq`).
std::vector<uint8_t> Record(const sockaddr_storage& address, int64_t seq) {
  std::vector<uint8_t> bytes(kGlooAddressBytes, 0);
  std::memcpy(bytes.data(), &address, sizeof(address));
  std::memcpy(bytes.data() + sizeof(address), &seq, sizeof(seq));
  return bytes;
}

sockaddr_storage Ipv4(const char* host, uint16_t port) {
  sockaddr_storage storage{};
  auto* in = reinterpret_cast<sockaddr_in*>(&storage);
  in->sin_family = AF_INET;
  in->sin_port = htons(port);
  inet_pton(AF_INET, host, &in->sin_addr);
  return storage;
}

// An owned descriptor (RAII).
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// A listener on 127.0.0.1 (ephemeral port) and its address.
struct Listener {
  Fd fd{socket(AF_INET, SOCK_STREAM, 0)};
  sockaddr_storage address{};
  Listener() {
    sockaddr_storage bind_to = Ipv4("127.0.0.1", 0);
    EXPECT_EQ(bind(fd.get(), reinterpret_cast<sockaddr*>(&bind_to),
                   sizeof(sockaddr_in)),
              0);
    EXPECT_EQ(listen(fd.get(), 4), 0);
    socklen_t length = sizeof(address);
    getsockname(fd.get(), reinterpret_cast<sockaddr*>(&address), &length);
  }
};

int Connect(const sockaddr_storage& to) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_EQ(
      connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof(sockaddr_in)),
      0);
  return fd;
}

// Whether a read on `fd` sees the end of the stream (or an error) within
// `ms`, rather than blocking.
bool ReadEnds(int fd, int ms) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, ms) != 1) return false;
  char byte;
  return recv(fd, &byte, 1, MSG_DONTWAIT) <= 0;
}

TEST(GlooEndpointsTest, ParsesEveryRecordOfAValue) {
  std::vector<uint8_t> value = Record(Ipv4("10.1.2.3", 4711), 0);
  std::vector<uint8_t> second = Record(Ipv4("127.0.0.1", 80), 1);
  value.insert(value.end(), second.begin(), second.end());
  std::vector<Endpoint> found = GlooEndpoints(value);
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[0].ToString(), "10.1.2.3:4711");
  EXPECT_EQ(found[1].ToString(), "127.0.0.1:80");
}

TEST(GlooEndpointsTest, ParsesIpv6) {
  sockaddr_storage storage{};
  auto* in6 = reinterpret_cast<sockaddr_in6*>(&storage);
  in6->sin6_family = AF_INET6;
  in6->sin6_port = htons(29500);
  inet_pton(AF_INET6, "::1", &in6->sin6_addr);
  std::vector<Endpoint> found = GlooEndpoints(Record(storage, 7));
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].ToString(), "[::1]:29500");
}

TEST(GlooEndpointsTest, OtherValuesAreNoAddresses) {
  EXPECT_TRUE(GlooEndpoints({}).empty());
  std::vector<uint8_t> text = {'1', '2'};
  EXPECT_TRUE(GlooEndpoints(text).empty());
  std::vector<uint8_t> short_record = Record(Ipv4("127.0.0.1", 1), 0);
  short_record.pop_back();
  EXPECT_TRUE(GlooEndpoints(short_record).empty());
  // A record of another family spoils the whole value.
  std::vector<uint8_t> value = Record(Ipv4("127.0.0.1", 1), 0);
  std::vector<uint8_t> unix_family(kGlooAddressBytes, 0);
  sa_family_t family = AF_UNIX;
  std::memcpy(unix_family.data(), &family, sizeof(family));
  value.insert(value.end(), unix_family.begin(), unix_family.end());
  EXPECT_TRUE(GlooEndpoints(value).empty());
}

TEST(ShutDownSocketsAtTest, EndsOnlyConnectionsWithAnEndThere) {
  Listener gloo;   // a Gloo pair's listening address
  Listener other;  // someone else's
  Fd dialed(Connect(gloo.address));
  Fd accepted(accept(gloo.fd.get(), nullptr, nullptr));
  Fd unrelated(Connect(other.address));
  Fd unrelated_peer(accept(other.fd.get(), nullptr, nullptr));
  ASSERT_GE(accepted.get(), 0);
  ASSERT_GE(unrelated_peer.get(), 0);
  ASSERT_FALSE(ReadEnds(dialed.get(), 0));

  std::vector<Endpoint> endpoints = GlooEndpoints(Record(gloo.address, 0));
  ASSERT_EQ(endpoints.size(), 1u);
  // The listener (local end), the accepted end (local end) and the dialing
  // end (peer end).
  EXPECT_EQ(ShutDownSocketsAt({endpoints.begin(), endpoints.end()}), 3);
  EXPECT_TRUE(ReadEnds(dialed.get(), 1000));
  EXPECT_TRUE(ReadEnds(accepted.get(), 1000));
  EXPECT_FALSE(ReadEnds(unrelated.get(), 100));
  EXPECT_FALSE(ReadEnds(unrelated_peer.get(), 0));
  // A write on an ended connection fails too (Gloo's sends).
  char byte = 1;
  EXPECT_LT(send(dialed.get(), &byte, 1, MSG_NOSIGNAL), 0);
}

TEST(ShutDownSocketsAtTest, NoEndpointsNothingShut) {
  Listener gloo;
  Fd dialed(Connect(gloo.address));
  EXPECT_EQ(ShutDownSocketsAt({}), 0);
  EXPECT_FALSE(ReadEnds(dialed.get(), 0));
}

}  // namespace
}  // namespace rankd::c10d_store::internal
