// LocalSocket in process, in front of a real gRPC server (serving only the
// health service): the bounds on connections at once and from one process
// close a connection beyond them as it arrives, while a connection that
// ended makes room.
#include "daemon/transport/local_socket.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/transport/testing/closed_within.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace rankd {
namespace {

using ::rankd::testing::ClosedWithin;

// A connected socket to `path` (-1 on failure).
int Connect(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

class LocalSocketTest : public ::testing::Test {
 protected:
  void Start(LocalSocket::Options options) {
    path_ = absl::StrCat("/tmp/rankd-local-socket-test-", ::getpid(), ".sock");
    ::unlink(path_.c_str());
    auto socket = LocalSocket::Listen(path_, options);
    ASSERT_TRUE(socket.ok()) << socket.status();
    socket_ = *std::move(socket);
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    builder.RegisterCallbackGenericService(&generic_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    socket_->Serve(server_.get());
  }
  void TearDown() override {
    for (int fd : fds_) ::close(fd);
    if (socket_ != nullptr) socket_->Stop();
    if (server_ != nullptr) server_->Shutdown();
    ::unlink(path_.c_str());
  }
  int Open() {
    const int fd = Connect(path_);
    if (fd >= 0) fds_.push_back(fd);
    return fd;
  }

  std::string path_;
  std::unique_ptr<LocalSocket> socket_;
  grpc::CallbackGenericService generic_;
  std::unique_ptr<grpc::Server> server_;
  std::vector<int> fds_;
};

TEST_F(LocalSocketTest, AProcessHoldsAtMostItsShareAndAnEndedOneMakesRoom) {
  LocalSocket::Options options;
  options.max_connections = 8;
  options.max_per_process = 2;
  ASSERT_NO_FATAL_FAILURE(Start(options));
  const int first = Open();
  const int second = Open();
  ASSERT_GE(first, 0);
  ASSERT_GE(second, 0);
  // A third from this process is closed as it arrives; the two stay.
  const int third = Open();
  ASSERT_GE(third, 0);
  EXPECT_TRUE(ClosedWithin(third, absl::Seconds(5)));
  EXPECT_FALSE(ClosedWithin(first, absl::Milliseconds(200)));
  EXPECT_FALSE(ClosedWithin(second, absl::Milliseconds(50)));
  EXPECT_EQ(socket_->refused(), 1u);
  // One of them ends: gRPC closes its descriptor, and a new one fits.
  ::close(first);
  fds_.erase(fds_.begin());
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  bool admitted = false;
  while (!admitted && absl::Now() < deadline) {
    const int next = Open();
    ASSERT_GE(next, 0);
    admitted = !ClosedWithin(next, absl::Milliseconds(200));
  }
  EXPECT_TRUE(admitted) << socket_->refused() << " refused";
}

TEST_F(LocalSocketTest, TheSocketHoldsAtMostItsConnectionsInAll) {
  LocalSocket::Options options;
  options.max_connections = 3;
  options.max_per_process = 64;
  ASSERT_NO_FATAL_FAILURE(Start(options));
  for (int i = 0; i < 3; ++i) ASSERT_GE(Open(), 0);
  const int over = Open();
  ASSERT_GE(over, 0);
  EXPECT_TRUE(ClosedWithin(over, absl::Seconds(5)));
  for (size_t i = 0; i + 1 < fds_.size(); ++i) {
    EXPECT_FALSE(ClosedWithin(fds_[i], absl::Milliseconds(100))) << i;
  }
  EXPECT_EQ(socket_->refused(), 1u);
}

}  // namespace
}  // namespace rankd
