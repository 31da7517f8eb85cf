// Tests of common/mapping_guard.h on real shared file mappings: a guarded
// mapping whose file is truncated reads zeros and reports itself broken;
// an unguarded one (or one released) still faults; handles are reused.
#include "common/mapping_guard.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace rankd {
namespace {

// A shared mapping of a fresh `bytes`-byte file holding 0x5a bytes; the
// file's descriptor stays open so the test can truncate it.
struct SharedFile {
  explicit SharedFile(size_t n) : bytes(n) {
    char name[] = "/tmp/rankd-guard-XXXXXX";
    fd = ::mkstemp(name);
    ::unlink(name);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::ftruncate(fd, static_cast<off_t>(bytes)), 0);
    base = static_cast<volatile uint8_t*>(
        ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    EXPECT_NE(base, MAP_FAILED);
    for (size_t i = 0; i < bytes; ++i) base[i] = 0x5a;
  }
  ~SharedFile() {
    ::munmap(const_cast<uint8_t*>(base), bytes);
    ::close(fd);
  }
  void Truncate() { EXPECT_EQ(::ftruncate(fd, 0), 0); }

  size_t bytes;
  int fd = -1;
  volatile uint8_t* base = nullptr;
};

TEST(MappingGuardTest, ATruncatedGuardedMappingReadsZerosAndIsBroken) {
  SharedFile file(3 * 4096);
  const int handle =
      MappingGuard::Guard(const_cast<uint8_t*>(file.base), file.bytes);
  ASSERT_GE(handle, 0);
  EXPECT_EQ(file.base[5000], 0x5a);
  EXPECT_FALSE(MappingGuard::Broken(handle));
  file.Truncate();
  EXPECT_EQ(file.base[5000], 0);  // would be SIGBUS unguarded
  EXPECT_TRUE(MappingGuard::Broken(handle));
  file.base[100] = 7;  // writes land in the replacement
  EXPECT_EQ(file.base[100], 7);
  MappingGuard::Release(handle);
}

TEST(MappingGuardTest, AnUnguardedOrReleasedMappingStillFaults) {
  EXPECT_DEATH(
      {
        SharedFile file(4096);
        MappingGuard::Release(
            MappingGuard::Guard(const_cast<uint8_t*>(file.base), file.bytes));
        file.Truncate();
        std::exit(file.base[10] == 0 ? 2 : 3);
      },
      "");
}

TEST(MappingGuardTest, HandlesAreReusedAndBoundedAndMinusOneIsInert) {
  SharedFile file(4096);
  void* base = const_cast<uint8_t*>(file.base);
  const int first = MappingGuard::Guard(base, file.bytes);
  ASSERT_GE(first, 0);
  MappingGuard::Release(first);
  const int again = MappingGuard::Guard(base, file.bytes);
  EXPECT_EQ(again, first);
  EXPECT_FALSE(MappingGuard::Broken(again));
  MappingGuard::Release(again);
  EXPECT_FALSE(MappingGuard::Broken(-1));
  MappingGuard::Release(-1);
}

}  // namespace
}  // namespace rankd
