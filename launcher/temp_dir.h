// temp_dir.h: TempDir, rankrun's private folder for the socket and the
// credentials of a daemon it starts; removed with everything in it when
// rankrun is done. Depends only on abseil and the C++ standard library.
#ifndef RANKD_LAUNCHER_TEMP_DIR_H_
#define RANKD_LAUNCHER_TEMP_DIR_H_

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace rankd::launcher {

// A private folder (mode 0700) removed with everything in it at the end.
class TempDir {
 public:
  // Makes /tmp/rankrun-XXXXXX (mode 0700). Returns FailedPrecondition
  // with the reason when /tmp refuses.
  static absl::StatusOr<TempDir> Make() {
    std::string path = "/tmp/rankrun-XXXXXX";
    if (::mkdtemp(path.data()) == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot make a temporary folder under /tmp: ", strerror(errno)));
    }
    TempDir dir;
    dir.path_ = path;
    return dir;
  }
  TempDir() = default;
  TempDir(TempDir&& other) noexcept : path_(std::exchange(other.path_, "")) {}
  TempDir& operator=(TempDir&& other) noexcept {
    if (this != &other) {
      Remove();
      path_ = std::exchange(other.path_, "");
    }
    return *this;
  }
  ~TempDir() { Remove(); }
  const std::string& path() const { return path_; }

 private:
  void Remove() {
    if (path_.empty()) return;
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
    path_.clear();
  }
  std::string path_;
};

}  // namespace rankd::launcher

#endif  // RANKD_LAUNCHER_TEMP_DIR_H_
