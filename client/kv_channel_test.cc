// The key-value channel's writes (client/internal/kv_channel.h): one frame
// at a time, but a caller waiting for another's write still ends at its own
// deadline. The daemon's end is a stand-in socket that welcomes the rank
// and then stops reading.
#include "client/internal/kv_channel.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/kv_frame.h"
#include "common/monotonic_clock.h"
#include "gtest/gtest.h"

namespace rankd::internal {
namespace {

// A Unix socket that accepts one connection, answers its hello with a
// welcome and then reads nothing more until released.
class StalledDaemon {
 public:
  StalledDaemon() {
    // Under /tmp: a socket path must be short, and TEST_TMPDIR's is long.
    char folder[] = "/tmp/rankd-kv-test-XXXXXX";
    EXPECT_NE(::mkdtemp(folder), nullptr);
    folder_ = folder;
    path_ = folder_ + "/kv.sock";
    listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path_.data(), path_.size());
    EXPECT_EQ(
        ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)),
        0);
    EXPECT_EQ(::listen(listen_fd_, 1), 0);
    thread_ = std::thread([this] {
      const int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) return;
      char hello[4096];
      if (::recv(fd, hello, sizeof(hello), 0) > 0) {
        const std::string welcome = EncodeKvFrame(
            KvFrameKind::kReply, 0, EncodeKvReply(absl::OkStatus(), ""));
        (void)!::send(fd, welcome.data(), welcome.size(), MSG_NOSIGNAL);
      }
      release_.WaitForNotificationWithTimeout(absl::Seconds(60));
      ::close(fd);
    });
  }
  ~StalledDaemon() {
    Release();
    thread_.join();
    ::close(listen_fd_);
    ::unlink(path_.c_str());
    ::rmdir(folder_.c_str());
  }
  const std::string& path() const { return path_; }
  void Release() {
    if (!release_.HasBeenNotified()) release_.Notify();
  }

 private:
  std::string folder_;
  std::string path_;
  int listen_fd_ = -1;
  absl::Notification release_;
  std::thread thread_;
};

TEST(KvChannelTest, ACallWaitingForAStalledWriteEndsAtItsOwnDeadline) {
  StalledDaemon daemon;
  auto channel = KvChannel::Connect(daemon.path(), "ticket",
                                    MonotonicNow() + absl::Seconds(10));
  ASSERT_TRUE(channel.ok()) << channel.status();
  // A write larger than the socket holds, with a long deadline: it waits
  // for room the stalled daemon never makes.
  std::thread big([&] {
    v1::KvSetRequest request;
    request.set_key("big");
    request.set_value(std::string(1 << 20, 'x'));
    v1::KvSetResponse response;
    (*channel)->Set(request, &response, MonotonicNow() + absl::Seconds(20));
  });
  absl::SleepFor(absl::Milliseconds(500));  // the big write waits by now
  v1::KvSetRequest request;
  request.set_key("small");
  request.set_value("v");
  v1::KvSetResponse response;
  const absl::Time start = absl::Now();
  grpc::Status status = (*channel)->Set(
      request, &response, MonotonicNow() + absl::Milliseconds(300));
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
      << status.error_message();
  EXPECT_LT(took, absl::Seconds(5));
  daemon.Release();  // the big write fails as the socket closes
  big.join();
}

}  // namespace
}  // namespace rankd::internal
