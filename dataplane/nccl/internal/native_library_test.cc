// The run-time loader of the CUDA runtime and NCCL: what it says when a
// library is missing or is not the library it claims to be. Each case runs
// in a child process (a death-test fork), because a process loads each
// library once.
#include "dataplane/nccl/internal/native_library.h"

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "dataplane/nccl/cuda_device.h"
#include "dataplane/nccl/internal/nccl_version.h"
#include "dataplane/nccl/native_runtime.h"
#include "dataplane/nccl/nccl_comm.h"
#include "dataplane/nccl/nccl_unique_id.h"
#include "gtest/gtest.h"

namespace rankd::dataplane::nccl::internal {
namespace {

// Runs `check` in a child; it returns "" on success or what went wrong.
void ExpectInChild(const std::function<std::string()>& check) {
  EXPECT_EXIT(
      {
        const std::string problem = check();
        if (!problem.empty()) {
          std::fprintf(stderr, "%s\n", problem.c_str());
          std::fflush(stderr);
          std::_Exit(1);
        }
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

std::string Expect(bool ok, const std::string& what) { return ok ? "" : what; }

TEST(NativeLibraryTest, AnExplicitFileIsUsedOrIsTheError) {
  ExpectInChild([] {
    ::setenv("RANKD_CUDART_LIBRARY", "/nonexistent/libcudart.so.13", 1);
    auto runtime = LoadCudaRuntime();
    if (runtime.ok()) return std::string("loaded something else");
    const std::string m(runtime.status().message());
    return Expect(
        runtime.status().code() == absl::StatusCode::kUnavailable &&
            absl::StrContains(m, "CUDA runtime not loaded") &&
            absl::StrContains(
                m, "$RANKD_CUDART_LIBRARY names /nonexistent/libcudart.so.13:"),
        m);
  });
}

// Where the machine has no CUDA runtime (the kit test also runs this in a
// sandbox that hides every CUDA folder).
TEST(NativeLibraryTest, MissingCudaRuntimeNamesWhereItLooked) {
  ExpectInChild([] {
    ::unsetenv("RANKD_CUDART_LIBRARY");
    auto runtime = LoadCudaRuntime();
    if (runtime.ok()) return std::string();  // this machine has one
    const std::string m(runtime.status().message());
    return Expect(
        runtime.status().code() == absl::StatusCode::kUnavailable &&
            absl::StrContains(m, "CUDA runtime not found") &&
            absl::StrContains(m, "libcudart.so.13 or libcudart.so.12") &&
            absl::StrContains(m, "$RANKD_CUDART_LIBRARY (unset)") &&
            absl::StrContains(m, "/usr/local/cuda/lib64") &&
            absl::StrContains(m, "LD_LIBRARY_PATH") &&
            absl::StrContains(m, "site-packages"),
        m);
  });
}

TEST(NativeLibraryTest, ALibraryWithoutNcclFunctionsIsRejectedByName) {
  ExpectInChild([] {
    // libm is on every machine (glibc's) and is certainly not NCCL.
    ::setenv("RANKD_NCCL_LIBRARY", "libm.so.6", 1);
    auto nccl = LoadNccl();
    if (nccl.ok()) return std::string("libm.so.6 was accepted as NCCL");
    const std::string m(nccl.status().message());
    return Expect(absl::StrContains(m, "lacks ncclGetVersion") &&
                      absl::StrContains(m, "libm.so.6"),
                  m);
  });
}

TEST(NativeLibraryTest, NoRuntimeMeansNoDeviceWithTheReason) {
  ExpectInChild([] {
    ::setenv("RANKD_CUDART_LIBRARY", "/nonexistent/libcudart.so.13", 1);
    if (LoadCudaRuntime().ok()) return std::string("loaded something else");
    DeviceProbe probe = ProbeDevices();
    NativeRuntimeReport report = DescribeNativeRuntime();
    const std::string summary = report.Summary();
    return Expect(probe.device_count == 0 &&
                      absl::StrContains(probe.reason, "no GPU usable") &&
                      absl::StrContains(probe.reason, "libcudart.so.13") &&
                      !report.cuda_loaded() && report.gpus.empty() &&
                      absl::StrContains(summary, "CUDA runtime not loaded") &&
                      absl::StrContains(summary, "no GPU"),
                  absl::StrCat(probe.reason, " | ", summary));
  });
}

// Where a machine has the real libraries (some CPU images carry them, and
// every GPU host does), they load, report their versions and answer calls
// that need no GPU.
TEST(NativeLibraryTest, RealLibrariesLoadWithTheirVersions) {
  auto cuda = LoadCudaRuntime();
  auto nccl = LoadNccl();
  if (!cuda.ok() && !nccl.ok()) {
    GTEST_SKIP() << "no CUDA runtime or NCCL on this machine: "
                 << cuda.status().message();
  }
  NativeRuntimeReport report = DescribeNativeRuntime();
  std::cout << "native runtime: " << report.Summary() << "\n";
  if (cuda.ok()) {
    EXPECT_GE((*cuda)->runtime_version, 12000);
    EXPECT_TRUE(absl::StrContains((*cuda)->path, "libcudart.so.1"))
        << (*cuda)->path;
    EXPECT_STREQ((*cuda)->GetErrorName(kCudaErrorNotReady),
                 "cudaErrorNotReady");
    EXPECT_TRUE(report.cuda_loaded());
    EXPECT_TRUE(absl::StrContains(
        report.Summary(),
        absl::StrCat("CUDA runtime ",
                     CudaVersionString((*cuda)->runtime_version))));
  }
  if (nccl.ok()) {
    EXPECT_GE((*nccl)->version, 21400);
    EXPECT_TRUE(absl::StrContains((*nccl)->path, "libnccl.so.2"))
        << (*nccl)->path;
    EXPECT_EQ((*nccl)->CommInitRankScalable != nullptr,
              (*nccl)->version >= kNcclScalableInitVersion);
    EXPECT_NE((*nccl)->GetErrorString(kNcclInProgress), nullptr);
    EXPECT_EQ(NcclRuntimeVersion(), (*nccl)->version);
    EXPECT_TRUE(absl::StrContains(
        report.Summary(),
        absl::StrCat("NCCL ", NcclVersionString((*nccl)->version))));
    // Without a GPU this may fail, but as a status naming the call.
    auto id = NewNcclUniqueId();
    if (id.ok()) {
      EXPECT_EQ(id->size(), kNcclUniqueIdBytes);
    } else {
      EXPECT_TRUE(absl::StrContains(id.status().message(), "ncclGetUniqueId"))
          << id.status();
    }
  }
}

TEST(NativeRuntimeTest, VersionStrings) {
  EXPECT_EQ(CudaVersionString(13000), "13.0");
  EXPECT_EQ(CudaVersionString(12080), "12.8");
  EXPECT_EQ(NcclVersionString(22803), "2.28.3");
  EXPECT_EQ(NcclVersionString(21405), "2.14.5");
  EXPECT_EQ(NcclVersionString(2804), "2.8.4");
}

}  // namespace
}  // namespace rankd::dataplane::nccl::internal
