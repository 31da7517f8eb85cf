// common/bounded_file.cc: see bounded_file.h.
#include "common/bounded_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace rankd {

absl::StatusOr<std::string> ReadBoundedFile(const std::string& path,
                                            size_t max_bytes) {
  // Opened first, then checked through the descriptor: a file swapped for
  // a pipe or a device after a check by path is refused all the same
  // (O_NONBLOCK: opening a pipe does not wait for a writer).
  const int fd =
      ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat(path, " does not exist"));
    }
    return absl::PermissionDeniedError(
        absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is not a regular file"));
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, " holds ", st.st_size,
                                                   " bytes; at most ",
                                                   max_bytes, " are read"));
  }
  // At most one byte past the bound is read, however the file grows.
  std::string raw(max_bytes + 1, '\0');
  size_t got = 0;
  while (got < raw.size()) {
    const ssize_t n = ::read(fd, raw.data() + got, raw.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (got > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " holds more than ", max_bytes, " bytes; at most ",
                     max_bytes, " are read"));
  }
  raw.resize(got);
  return raw;
}

}  // namespace rankd
