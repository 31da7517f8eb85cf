#include "common/credentials.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rankd {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string TempDir() {
  std::string templ = absl::StrCat(::testing::TempDir(), "/credsXXXXXX");
  char* made = ::mkdtemp(templ.data());
  EXPECT_NE(made, nullptr);
  return templ;
}

TEST(CredentialsTest, NewSecretsAre64HexDigitsAndDiffer) {
  auto a = NewSecret();
  auto b = NewSecret();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->size(), 64u);
  EXPECT_EQ(a->find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(*a, *b);
}

TEST(CredentialsTest, ANodeTokenNamesItsNodeAndOnlyVerifiesUnderItsKeyAndJob) {
  const std::string key = "k3y";
  std::string token = NodeToken(key, "job-a", 7);
  EXPECT_TRUE(absl::StartsWith(token, "node-7.")) << token;
  EXPECT_EQ(token.size(), std::string("node-7.").size() + 64);

  auto node = VerifyNodeToken(key, "job-a", token);
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_EQ(*node, 7u);

  // Another key, another job, or the MAC of node 7 relabelled as node 8.
  EXPECT_EQ(VerifyNodeToken("other", "job-a", token).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(VerifyNodeToken(key, "job-b", token).status().code(),
            absl::StatusCode::kUnauthenticated);
  std::string relabelled = "node-8." + token.substr(7);
  EXPECT_EQ(VerifyNodeToken(key, "job-a", relabelled).status().code(),
            absl::StatusCode::kUnauthenticated);
  // Non-canonical spellings of the index are refused, so one node has one
  // token.
  EXPECT_FALSE(
      VerifyNodeToken(key, "job-a", "node-07." + token.substr(7)).ok());
  EXPECT_FALSE(
      VerifyNodeToken(key, "job-a", "node-+7." + token.substr(7)).ok());
  // Truncated, empty, garbage: refused without echoing what was sent.
  for (std::string bad : {token.substr(0, token.size() - 1), std::string(),
                          std::string("node-"), std::string("node-1"),
                          std::string("node-1."), std::string("bogus-token")}) {
    auto verdict = VerifyNodeToken(key, "job-a", bad);
    EXPECT_EQ(verdict.status().code(), absl::StatusCode::kUnauthenticated)
        << bad;
    if (!bad.empty()) {
      EXPECT_THAT(verdict.status().message(), Not(HasSubstr(bad)));
    }
  }
}

TEST(CredentialsTest, ATokenProofIsHmacSha256AndDependsOnTokenAndTranscript) {
  // RFC 4231 test case 2: key "Jefe".
  EXPECT_EQ(absl::BytesToHexString(
                TokenProof("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(TokenProof("a", "x").size(), 32u);
  EXPECT_NE(TokenProof("a", "x"), TokenProof("b", "x"));
  EXPECT_NE(TokenProof("a", "x"), TokenProof("a", "y"));
}

TEST(CredentialsTest, RankTokensNameOneRankOfOneNodeAndJob) {
  const std::string node1 = NodeToken("key", "job", 1);
  const std::string token = RankToken(node1, "job", 5);
  EXPECT_TRUE(absl::StartsWith(token, "rank-5.")) << token;
  auto rank = VerifyRankToken(node1, "job", token);
  ASSERT_TRUE(rank.ok()) << rank.status();
  EXPECT_EQ(*rank, 5u);
  // Another node's daemon, another job, a forged index or MAC: refused.
  EXPECT_FALSE(VerifyRankToken(NodeToken("key", "job", 2), "job", token).ok());
  EXPECT_FALSE(VerifyRankToken(node1, "other", token).ok());
  std::string forged = token;
  forged.replace(0, 6, "rank-4");
  EXPECT_FALSE(VerifyRankToken(node1, "job", forged).ok());
  EXPECT_FALSE(VerifyRankToken(node1, "job", "rank-05" + token.substr(6)).ok());
  // A node token is no rank token, and a rank token no node token.
  EXPECT_FALSE(VerifyRankToken(node1, "job", node1).ok());
  EXPECT_FALSE(VerifyNodeToken("key", "job", token).ok());
  auto refused = VerifyRankToken(node1, "job", "rank-5.secretvalue");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(refused.status().message(), Not(HasSubstr("secretvalue")));
}

TEST(CredentialsTest, SecretsEqualComparesWholeValues) {
  EXPECT_TRUE(SecretsEqual("", ""));
  EXPECT_TRUE(SecretsEqual("abc", "abc"));
  EXPECT_FALSE(SecretsEqual("abc", "abd"));
  EXPECT_FALSE(SecretsEqual("abc", "abcd"));
  EXPECT_FALSE(SecretsEqual("", "a"));
}

TEST(CredentialsTest, CreateWritesPrivateFilesOnceAndReadsThemBack) {
  std::string dir = TempDir() + "/job";
  ASSERT_TRUE(CreateCredentials(dir).ok());
  struct stat st {};
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  for (const char* name : {kNodeKeyFile, kOperatorTokenFile}) {
    std::string path = absl::StrCat(dir, "/", name);
    ASSERT_EQ(::stat(path.c_str(), &st), 0) << path;
    EXPECT_EQ(st.st_mode & 0777, 0600u) << path;
    auto value = ReadCredentialFile(dir, name);
    ASSERT_TRUE(value.ok()) << value.status();
    EXPECT_EQ(value->size(), 64u);
  }
  EXPECT_NE(*ReadCredentialFile(dir, kNodeKeyFile),
            *ReadCredentialFile(dir, kOperatorTokenFile));
  // Ranks get tokens of their own (RankToken), not a job-wide file.
  EXPECT_EQ(ReadCredentialFile(dir, kRankTokenFile).status().code(),
            absl::StatusCode::kNotFound);

  std::string before = *ReadCredentialFile(dir, kNodeKeyFile);
  absl::Status again = CreateCredentials(dir);
  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists) << again;
  EXPECT_EQ(*ReadCredentialFile(dir, kNodeKeyFile), before);
}

// A folder that exists already must be this user's and writable by no one
// else: its owner, or anyone who may write to it, could swap the key in.
TEST(CredentialsTest, AnExistingFolderOthersMayWriteToIsRefused) {
  const std::string open_dir = TempDir() + "/shared-creds";
  ASSERT_EQ(::mkdir(open_dir.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(open_dir.c_str(), 0777), 0);
  absl::Status refused = CreateCredentials(open_dir);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), open_dir)) << refused;
  EXPECT_EQ(ReadCredentialFile(open_dir, kNodeKeyFile).status().code(),
            absl::StatusCode::kNotFound);
  const std::string link = TempDir() + "/creds-link";
  ASSERT_EQ(::symlink(open_dir.c_str(), link.c_str()), 0);
  ASSERT_EQ(::chmod(open_dir.c_str(), 0700), 0);
  EXPECT_EQ(CreateCredentials(link).code(),
            absl::StatusCode::kFailedPrecondition);
  // A private folder made beforehand is fine.
  EXPECT_TRUE(CreateCredentials(open_dir).ok());
}

TEST(CredentialsTest, RemoveTakesWhatCreateMadeAndTheFolder) {
  const std::string dir = TempDir() + "/to-remove";
  ASSERT_TRUE(CreateCredentials(dir).ok());
  ASSERT_TRUE(RemoveCredentials(dir).ok());
  struct stat st {};
  EXPECT_NE(::stat(dir.c_str(), &st), 0);
  EXPECT_TRUE(RemoveCredentials(dir).ok());  // already gone
}

TEST(CredentialsTest, ReadingRefusesMissingEmptyOversizedAndBinaryFiles) {
  std::string dir = TempDir();
  auto write = [&](const char* name, const std::string& contents) {
    std::ofstream(absl::StrCat(dir, "/", name), std::ios::binary) << contents;
  };
  EXPECT_EQ(ReadCredentialFile(dir, "absent").status().code(),
            absl::StatusCode::kNotFound);
  write("empty", "  \n");
  EXPECT_EQ(ReadCredentialFile(dir, "empty").status().code(),
            absl::StatusCode::kInvalidArgument);
  write("huge", std::string(kMaxCredentialBytes + 1, 'a'));
  EXPECT_EQ(ReadCredentialFile(dir, "huge").status().code(),
            absl::StatusCode::kInvalidArgument);
  write("binary", std::string("ab\x01secret", 9));
  auto binary = ReadCredentialFile(dir, "binary");
  EXPECT_EQ(binary.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(binary.status().message(), Not(HasSubstr("secret")));
  write("spaced", "two words\n");
  EXPECT_FALSE(ReadCredentialFile(dir, "spaced").ok());
  write("good", "  tok3n-value\n");
  EXPECT_EQ(*ReadCredentialFile(dir, "good"), "tok3n-value");
  EXPECT_EQ(*ReadCredentialPath(dir + "/good"), "tok3n-value");
}

TEST(CredentialsTest, APipeOrADeviceIsRefusedWithoutReadingIt) {
  // A pipe with no writer: opening or reading it would wait for good.
  const std::string fifo = TempDir() + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto piped = ReadCredentialPath(fifo);
  EXPECT_EQ(piped.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(piped.status().message(), HasSubstr("not a credential file"));
  // A device that never ends.
  EXPECT_EQ(ReadCredentialPath("/dev/zero").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadCredentialPath(TempDir()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace rankd
