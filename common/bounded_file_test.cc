#include "common/bounded_file.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace rankd {
namespace {

std::string TempPath(const std::string& name) {
  return absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
}

TEST(BoundedFileTest, ARegularFileIsReadWhole) {
  const std::string path = TempPath("cert.pem");
  std::ofstream(path) << "-----BEGIN-----\nabc\n";
  absl::StatusOr<std::string> got = ReadBoundedFile(path, 64);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "-----BEGIN-----\nabc\n");
  std::ofstream(TempPath("empty"));
  EXPECT_EQ(*ReadBoundedFile(TempPath("empty"), 64), "");
}

// /dev/zero would be read until memory ran out, a FIFO would wait for a
// writer: both are refused before any read, as is a file over the bound.
TEST(BoundedFileTest, DevicesPipesAndLargeFilesAreRefusedNamingThePath) {
  const std::string fifo = TempPath("key.fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& path : {std::string("/dev/zero"), fifo}) {
    absl::StatusOr<std::string> got = ReadBoundedFile(path, 64);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument)
        << got.status();
    EXPECT_TRUE(absl::StrContains(got.status().message(),
                                  path + " is not a regular file"))
        << got.status();
  }
  const std::string large = TempPath("large");
  std::ofstream(large) << std::string(65, 'x');
  absl::StatusOr<std::string> got = ReadBoundedFile(large, 64);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(got.status().message(), "at most 64"))
      << got.status();
  EXPECT_EQ(ReadBoundedFile(TempPath("missing"), 64).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace rankd
