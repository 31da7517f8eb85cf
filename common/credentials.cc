#include "common/credentials.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/bounded_file.h"

namespace rankd {
namespace {

constexpr char kNodeTokenPrefix[] = "node-";
constexpr char kRankTokenPrefix[] = "rank-";

std::string Hex(const unsigned char* bytes, size_t n) {
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(bytes), n));
}

// HMAC-SHA256 under `key` of one role's token message. Domain-separated
// (`domain`) and length-delimited, so no other message this project MACs
// can collide with it.
std::string TokenMac(absl::string_view key, absl::string_view domain,
                     absl::string_view job_id, uint32_t index) {
  std::string message =
      absl::StrCat(domain, "\n", job_id.size(), ":", job_id, "\n", index);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int mac_len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(),
       mac, &mac_len);
  return Hex(mac, mac_len);
}

std::string NodeMac(absl::string_view node_key, absl::string_view job_id,
                    uint32_t node_index) {
  return TokenMac(node_key, "rankd node token v1", job_id, node_index);
}

std::string RankMac(absl::string_view node_token, absl::string_view job_id,
                    uint32_t rank) {
  return TokenMac(node_token, "rankd rank token v1", job_id, rank);
}

// The index a "<prefix><index>.<mac>" token names when its MAC is
// `mac_of(index)`; nullopt otherwise. Canonical digits only, so one index
// has exactly one token.
template <typename MacOf>
std::optional<uint32_t> VerifyIndexedToken(absl::string_view token,
                                           absl::string_view prefix,
                                           MacOf mac_of) {
  absl::string_view rest = token;
  if (!absl::ConsumePrefix(&rest, prefix)) return std::nullopt;
  size_t dot = rest.find('.');
  if (dot == absl::string_view::npos || dot == 0 || dot > 10) {
    return std::nullopt;
  }
  uint32_t index = 0;
  if (!absl::SimpleAtoi(rest.substr(0, dot), &index)) return std::nullopt;
  if (absl::StrCat(index) != rest.substr(0, dot)) return std::nullopt;
  if (!SecretsEqual(rest.substr(dot + 1), mac_of(index))) return std::nullopt;
  return index;
}

absl::Status WriteSecretFile(const std::string& path) {
  auto secret = NewSecret();
  if (!secret.ok()) return secret.status();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (errno == EEXIST) {
      return absl::AlreadyExistsError(absl::StrCat(
          path,
          " already exists; credentials are never overwritten (remove "
          "the folder to issue new ones)"));
    }
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
  }
  std::string line = absl::StrCat(*secret, "\n");
  bool ok = ::write(fd, line.data(), line.size()) ==
            static_cast<ssize_t>(line.size());
  ok = (::close(fd) == 0) && ok;
  if (!ok) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> NewSecret() {
  unsigned char bytes[32];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) {
    return absl::InternalError("the random generator failed (RAND_bytes)");
  }
  return Hex(bytes, sizeof(bytes));
}

std::string NodeToken(absl::string_view node_key, absl::string_view job_id,
                      uint32_t node_index) {
  return absl::StrCat(kNodeTokenPrefix, node_index, ".",
                      NodeMac(node_key, job_id, node_index));
}

absl::StatusOr<uint32_t> VerifyNodeToken(absl::string_view node_key,
                                         absl::string_view job_id,
                                         absl::string_view token) {
  std::optional<uint32_t> node = VerifyIndexedToken(
      token, kNodeTokenPrefix,
      [&](uint32_t index) { return NodeMac(node_key, job_id, index); });
  if (!node.has_value()) {
    return absl::UnauthenticatedError(
        "node token rejected: not issued for a node of this job under its "
        "node key");
  }
  return *node;
}

std::string RankToken(absl::string_view node_token, absl::string_view job_id,
                      uint32_t rank) {
  return absl::StrCat(kRankTokenPrefix, rank, ".",
                      RankMac(node_token, job_id, rank));
}

absl::StatusOr<uint32_t> VerifyRankToken(absl::string_view node_token,
                                         absl::string_view job_id,
                                         absl::string_view token) {
  std::optional<uint32_t> rank = VerifyIndexedToken(
      token, kRankTokenPrefix,
      [&](uint32_t index) { return RankMac(node_token, job_id, index); });
  if (!rank.has_value()) {
    return absl::UnauthenticatedError(
        "rank token rejected: not issued for a rank of this job on this node");
  }
  return *rank;
}

std::string TokenProof(absl::string_view token, absl::string_view transcript) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int mac_len = 0;
  HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()),
       reinterpret_cast<const unsigned char*>(transcript.data()),
       transcript.size(), mac, &mac_len);
  return std::string(reinterpret_cast<const char*>(mac), mac_len);
}

bool SecretsEqual(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  if (a.empty()) return true;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

absl::StatusOr<std::string> ReadCredentialFile(const std::string& dir,
                                               absl::string_view name) {
  return ReadCredentialPath(absl::StrCat(dir, "/", name));
}

absl::StatusOr<std::string> ReadCredentialPath(const std::string& path) {
  absl::StatusOr<std::string> raw =
      ReadBoundedFile(path, 4 * kMaxCredentialBytes);
  if (absl::IsInvalidArgument(raw.status())) {
    return absl::InvalidArgumentError(
        absl::StrCat(path,
                     " is not a credential file (a regular file of one "
                     "line of at most ",
                     kMaxCredentialBytes, " characters)"));
  }
  if (!raw.ok()) return raw.status();
  std::string value(absl::StripAsciiWhitespace(*raw));
  if (value.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is empty"));
  }
  if (value.size() > kMaxCredentialBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " holds more than ", kMaxCredentialBytes, " bytes"));
  }
  for (char c : value) {
    if (c <= ' ' || c > '~') {
      return absl::InvalidArgumentError(absl::StrCat(
          path, " must hold one line of printable ASCII without spaces"));
    }
  }
  return value;
}

absl::Status CreateCredentials(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0700) != 0) {
    if (errno != EEXIST) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot create ", dir, ": ", std::strerror(errno)));
    }
    // A folder made before: whoever may write to it could swap the key in
    // after us, so it must be ours alone.
    struct stat st;
    if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
        st.st_uid != ::geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          dir,
          " exists but is not a folder of this user that only it may write "
          "to; credentials go in a new folder or one of mode 0700"));
    }
  }
  for (const char* name : {kNodeKeyFile, kOperatorTokenFile}) {
    std::string path = absl::StrCat(dir, "/", name);
    if (::access(path.c_str(), F_OK) == 0) {
      return absl::AlreadyExistsError(absl::StrCat(
          path,
          " already exists; credentials are never overwritten (remove "
          "the folder to issue new ones)"));
    }
  }
  for (const char* name : {kNodeKeyFile, kOperatorTokenFile}) {
    if (auto s = WriteSecretFile(absl::StrCat(dir, "/", name)); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status RemoveCredentials(const std::string& dir) {
  for (const char* name : {kNodeKeyFile, kOperatorTokenFile}) {
    const std::string path = absl::StrCat(dir, "/", name);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot remove ", path, ": ", std::strerror(errno)));
    }
  }
  if (::rmdir(dir.c_str()) != 0 && errno != ENOENT) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot remove ", dir, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace rankd
