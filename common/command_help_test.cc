#include "common/command_help.h"

#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

ABSL_FLAG(int, command_help_test_port, 7421,
          "The port to listen on. This help text is long enough to be "
          "wrapped onto a second line by the help printer.");
ABSL_FLAG(std::string, command_help_test_name, "", "A name.");

namespace rankd {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(FlagsHelpTest, ListsTheCommandsOwnFlagsSortedWithDefaults) {
  const std::string help =
      FlagsHelp("usage: tool [flags]", {"common/command_help_test.cc"});
  EXPECT_THAT(help, HasSubstr("usage: tool [flags]\n\nFlags:\n"));
  EXPECT_THAT(help, HasSubstr("  --command_help_test_name\n      A name.\n"));
  EXPECT_THAT(help, HasSubstr("  --command_help_test_port=7421\n"
                              "      The port to listen on."));
  EXPECT_LT(help.find("command_help_test_name"),
            help.find("command_help_test_port"));
  // Wrapped: no line is longer than 76 columns.
  for (absl::string_view line : absl::StrSplit(help, '\n')) {
    EXPECT_LE(line.size(), 76u) << line;
  }
  // absl's own flags (e.g. --flagfile) are not the command's.
  EXPECT_THAT(help, Not(HasSubstr("--flagfile")));
}

TEST(FlagsHelpTest, UnknownFileListsNoFlags) {
  const std::string help = FlagsHelp("u", {"no/such/file.cc"});
  EXPECT_THAT(help, Not(HasSubstr("command_help_test")));
  EXPECT_THAT(help, HasSubstr("--help"));
}

bool Handle(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return HandleHelpOrVersion(static_cast<int>(argv.size()), argv.data(), "tool",
                             "u", {"common/command_help_test.cc"});
}

TEST(HandleHelpOrVersionTest, RecognizesHelpAndVersionBeforeDoubleDash) {
  testing::internal::CaptureStdout();
  EXPECT_TRUE(Handle({"tool", "--x=1", "--help"}));
  EXPECT_THAT(testing::internal::GetCapturedStdout(),
              HasSubstr("command_help_test_port"));
  testing::internal::CaptureStdout();
  EXPECT_TRUE(Handle({"tool", "-h"}));
  EXPECT_FALSE(testing::internal::GetCapturedStdout().empty());
  testing::internal::CaptureStdout();
  EXPECT_TRUE(Handle({"tool", "--version"}));
  EXPECT_EQ(testing::internal::GetCapturedStdout(),
            std::string("tool ") + kRankdVersion + "\n");
  testing::internal::CaptureStdout();
  EXPECT_FALSE(Handle({"tool", "--port=1"}));
  EXPECT_FALSE(Handle({"tool", "--", "--help"}));
  EXPECT_EQ(testing::internal::GetCapturedStdout(), "");
}

}  // namespace
}  // namespace rankd
