// The examples of docs/client-api.md: the document shows
// examples/client_api/client_api_example.cc and the hello program in each
// language verbatim (checked here), and the client API example builds and
// runs against real daemons (2 nodes x 2 ranks).
#include <sys/wait.h>

#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/harness/cluster.h"

namespace rankd::testing {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(ClientApiExampleTest, DocumentShowsTheExampleVerbatim) {
  const std::string doc = ReadFile(Runfile("docs/client-api.md"));
  const std::string code =
      ReadFile(Runfile("examples/client_api/client_api_example.cc"));
  ASSERT_FALSE(doc.empty());
  ASSERT_FALSE(code.empty());
  EXPECT_TRUE(absl::StrContains(doc, absl::StrCat("```cpp\n", code, "```\n")))
      << "docs/client-api.md must contain examples/client_api/"
         "client_api_example.cc verbatim in a ```cpp block; update the "
         "document after changing the example";
}

// The hello programs, one per language, shown verbatim in "One program in
// four languages" (built and run by //install:install_test and
// //rust:cargo_test).
class HelloInEachLanguageTest
    : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};

TEST_P(HelloInEachLanguageTest, DocumentShowsTheProgramVerbatim) {
  const auto [path, fence] = GetParam();
  const std::string doc = ReadFile(Runfile("docs/client-api.md"));
  const std::string code = ReadFile(Runfile(path));
  ASSERT_FALSE(code.empty()) << path;
  EXPECT_TRUE(
      absl::StrContains(doc, absl::StrCat("```", fence, "\n", code, "```\n")))
      << "docs/client-api.md must contain " << path << " verbatim in a ```"
      << fence << " block; update the document after changing the program";
}

INSTANTIATE_TEST_SUITE_P(
    Languages, HelloInEachLanguageTest,
    ::testing::Values(std::make_pair("examples/hello/hello.cc", "cpp"),
                      std::make_pair("examples/hello/hello.c", "c"),
                      std::make_pair("examples/hello/hello.py", "python"),
                      std::make_pair("rust/examples/hello.rs", "rust")));

TEST(ClientApiExampleTest, RunsOnEveryRankOfARealJob) {
  ClusterOptions options;
  options.job_id = "llama";
  options.nnodes = 2;
  options.nproc_per_node = 2;
  LocalCluster cluster(options);
  ASSERT_TRUE(cluster.Start().ok());
  std::vector<ChildProcess> ranks;
  for (uint32_t n = 0; n < 2; ++n) {
    for (uint32_t l = 0; l < 2; ++l) {
      auto child = ChildProcess::Spawn(
          {Runfile("examples/client_api_example"),
           absl::StrCat("--target=", cluster.socket_target(n)),
           "--job_id=llama", absl::StrCat("--local_rank=", l)},
          cluster.RankEnv(n, n * 2 + l),
          absl::StrCat(cluster.dir(), "/rank", n * 2 + l, ".log"));
      ASSERT_TRUE(child.ok()) << child.status();
      ranks.push_back(*std::move(child));
    }
  }
  const std::vector<int> statuses = WaitAll(ranks, absl::Seconds(90));
  for (size_t r = 0; r < ranks.size(); ++r) {
    const std::string log = ranks[r].ReadLog();
    EXPECT_TRUE(WIFEXITED(statuses[r]) && WEXITSTATUS(statuses[r]) == 0)
        << "rank " << r << ": " << log;
    // 4 ranks with 10 + rank tokens; sum of ranks 0+1+2+3 = 6.
    EXPECT_TRUE(absl::StrContains(
        log, absl::StrCat("rank ", r,
                          " of 4: 46 tokens in the step, blob "
                          "'hello', sum 6")))
        << log;
  }
}

}  // namespace
}  // namespace rankd::testing
