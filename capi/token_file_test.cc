// rankd_join's token file (options.token_file, RANKD_TOKEN_FILE): a
// regular file of one bounded line. A device or a pipe named by mistake is
// refused at once, not read without end (/dev/zero) or waited on (a FIFO).
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rankd/rankd.h"

namespace {

// rankd_join's status with `token_file`, against a daemon that is not there
// (the token is read before connecting).
std::string JoinWithTokenFile(const std::string& token_file, rankd_code* code) {
  rankd_join_options options;
  rankd_join_options_init(&options);
  options.target = "unix:///nonexistent/rankd.sock";
  options.job_id = "token";
  options.token_file = token_file.c_str();
  options.connect_timeout_seconds = 1;
  rankd_rank* rank = nullptr;
  rankd_status* status = rankd_join(&options, &rank);
  EXPECT_EQ(rank, nullptr);
  if (status == nullptr) return "OK";
  *code = rankd_status_code(status);
  std::string message = rankd_status_message(status);
  rankd_status_free(status);
  return message;
}

TEST(CApiTokenFileTest, ADeviceOrAPipeIsRefusedWithoutReadingIt) {
  const std::string fifo = absl::StrCat(getenv("TEST_TMPDIR"), "/token.fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& path : {std::string("/dev/zero"), fifo}) {
    rankd_code code = RANKD_OK;
    const std::string message = JoinWithTokenFile(path, &code);
    EXPECT_EQ(code, RANKD_INVALID_ARGUMENT) << message;
    EXPECT_TRUE(absl::StrContains(
        message, absl::StrCat("rankd_join: the token file: ", path,
                              " is not a credential file")))
        << message;
  }
  rankd_code code = RANKD_OK;
  const std::string missing =
      JoinWithTokenFile(absl::StrCat(getenv("TEST_TMPDIR"), "/none"), &code);
  EXPECT_EQ(code, RANKD_INVALID_ARGUMENT) << missing;
  EXPECT_TRUE(absl::StrContains(missing, "does not exist")) << missing;
}

// A good file gets past the token: the join fails only at connecting.
TEST(CApiTokenFileTest, AGoodFileIsReadAndTheJoinGoesOn) {
  const std::string path = absl::StrCat(getenv("TEST_TMPDIR"), "/rank.token");
  std::ofstream(path) << "  rank-token-value\n";
  rankd_code code = RANKD_OK;
  const std::string message = JoinWithTokenFile(path, &code);
  EXPECT_NE(code, RANKD_INVALID_ARGUMENT) << message;
  EXPECT_FALSE(absl::StrContains(message, "token file")) << message;
}

}  // namespace
