// Unit tests for launcher/program.h: the environment map, and finding
// PROGRAM (a binary or a .py script) and rankd.

#include "launcher/program.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rankd::launcher {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A file under the test's private temporary folder, executable or not.
std::string MakeFile(const std::string& name, bool executable) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  std::ofstream(path) << "#!/bin/sh\n";
  chmod(path.c_str(), executable ? 0755 : 0644);
  return path;
}

TEST(EnvMapTest, LaterEntriesWinAndTheListIsSorted) {
  std::map<std::string, std::string> env =
      EnvMap({"B=1", "A=2", "noequals", "B=3", "C="});
  EXPECT_EQ(env.at("B"), "3");
  EXPECT_EQ(env.count("noequals"), 0u);
  EXPECT_THAT(EnvList(env), ElementsAre("A=2", "B=3", "C="));
}

TEST(FindExecutableTest, SearchesThePathAndRefusesPlainFiles) {
  const std::string tool = MakeFile("tool", true);
  const std::string dir = tool.substr(0, tool.rfind('/'));
  absl::StatusOr<std::string> found =
      FindExecutable("tool", "/nonexistent:" + dir, "PROGRAM");
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(*found, tool);
  EXPECT_THAT(FindExecutable("absent-tool", dir, "PROGRAM").status().message(),
              HasSubstr("PROGRAM absent-tool is not on PATH"));
  const std::string plain = MakeFile("plain", false);
  EXPECT_THAT(FindExecutable(plain, dir, "PROGRAM").status().message(),
              HasSubstr("is not an executable file"));
}

TEST(ResolveCommandTest, RunsAScriptUnderTheChosenInterpreter) {
  const std::string script = MakeFile("train.py", false);
  const std::string python = MakeFile("python", true);
  absl::StatusOr<std::vector<std::string>> argv = ResolveCommand(
      {script, "--steps=3"}, {{"RANKD_PYTHON", python}, {"PATH", "/none"}});
  ASSERT_TRUE(argv.ok()) << argv.status();
  EXPECT_THAT(*argv, ElementsAre(python, script, "--steps=3"));
  EXPECT_THAT(ResolveCommand({"missing.py"}, {}).status().message(),
              HasSubstr("PROGRAM missing.py is not a file"));
}

TEST(FindRankdTest, PrefersTheGivenPathThenBesideRankrun) {
  const std::string rankd = MakeFile("rankd", true);
  const std::string dir = rankd.substr(0, rankd.rfind('/'));
  EXPECT_EQ(*FindRankd(rankd, "", "/none"), rankd);
  EXPECT_EQ(*FindRankd("", dir + "/rankrun", "/none"), rankd);
  EXPECT_THAT(FindRankd("/none/rankd", "", "/none").status().message(),
              HasSubstr("--rankd /none/rankd is not an executable file"));
}

}  // namespace
}  // namespace rankd::launcher
