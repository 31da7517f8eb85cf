// UniqueFd: owns one file descriptor and closes it on destruction.
//
// Header-only; depends on POSIX.
#ifndef RANKD_LAUNCHER_UNIQUE_FD_H_
#define RANKD_LAUNCHER_UNIQUE_FD_H_

#include <unistd.h>

#include <utility>

namespace rankd::launcher {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) Reset(std::exchange(other.fd_, -1));
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Closes the fd held (if any) and holds `fd` instead.
  void Reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

}  // namespace rankd::launcher

#endif  // RANKD_LAUNCHER_UNIQUE_FD_H_
