// See clique_directory.h.
#include "dataplane/nccl/testing/clique_directory.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace rankd::dataplane::nccl::testing {
namespace {

// mkdir -p.
bool MakeDirectories(const std::string& path) {
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i < path.size() && path[i] != '/') continue;
    const std::string prefix = path.substr(0, i);
    if (::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) return false;
  }
  return true;
}

bool WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Writes `bytes` to `path` atomically: a temporary file renamed over it.
bool Publish(const std::string& path, const std::string& bytes) {
  static int counter = 0;  // callers hold the stand-in's lock
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." +
                          std::to_string(++counter);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return false;
  const bool written = WriteAll(fd, bytes.data(), bytes.size());
  const bool closed = ::close(fd) == 0;
  if (!written || !closed || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

// The whole file, or false when it does not exist (yet).
bool ReadWhole(const std::string& path, std::string* out) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return false;
  std::string bytes;
  char buffer[65536];
  while (true) {
    const ssize_t r = ::read(fd, buffer, sizeof(buffer));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    bytes.append(buffer, static_cast<size_t>(r));
  }
  ::close(fd);
  *out = std::move(bytes);
  return true;
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::string Hex(const char* p, size_t n) {
  static const char kDigits[] = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    const auto b = static_cast<unsigned char>(p[i]);
    s += kDigits[b >> 4];
    s += kDigits[b & 15];
  }
  return s;
}

std::string Dotted(std::initializer_list<std::string> parts) {
  std::string s;
  for (const std::string& part : parts) {
    if (!s.empty()) s += '.';
    s += part;
  }
  return s;
}

std::string MessageName(int from, int to, uint64_t n) {
  return Dotted(
      {"msg", std::to_string(from), std::to_string(to), std::to_string(n)});
}

std::string OpName(uint64_t seq, int rank) {
  return Dotted({"op", std::to_string(seq), std::to_string(rank)});
}

}  // namespace

std::unique_ptr<CliqueDirectory> CliqueDirectory::Open(const std::string& root,
                                                       const char* id,
                                                       size_t id_bytes,
                                                       int nranks,
                                                       std::string* error) {
  std::string base = root;
  const char* test_tmpdir = std::getenv("TEST_TMPDIR");
  if (!base.empty() && base[0] != '/' && test_tmpdir != nullptr) {
    base = std::string(test_tmpdir) + "/" + base;
  }
  const std::string path = base + "/" + Hex(id, id_bytes < 16 ? id_bytes : 16);
  if (base.empty() || !MakeDirectories(path)) {
    *error = "stand-in: cannot make the clique directory '" + path +
             "': " + std::strerror(errno);
    return nullptr;
  }
  return std::unique_ptr<CliqueDirectory>(new CliqueDirectory(path, nranks));
}

std::string CliqueDirectory::File(const std::string& name) const {
  return path_ + "/" + name;
}

bool CliqueDirectory::Join(int rank, const std::string& placement) {
  return Publish(File("join." + std::to_string(rank)), placement);
}

std::vector<std::string> CliqueDirectory::JoinedPlacements() const {
  std::vector<std::string> placements;
  for (int r = 0; r < nranks_; ++r) {
    std::string text;
    if (!ReadWhole(File("join." + std::to_string(r)), &text)) return {};
    placements.push_back(std::move(text));
  }
  return placements;
}

bool CliqueDirectory::MarkLaunched(int rank) {
  return Publish(File("launch." + std::to_string(rank)), "");
}

bool CliqueDirectory::AllLaunched() const {
  for (int r = 0; r < nranks_; ++r) {
    if (!Exists(File("launch." + std::to_string(r)))) return false;
  }
  return true;
}

bool CliqueDirectory::Post(uint64_t seq, int rank,
                           const Contribution& contribution) {
  // <signature length>\n<signature><data>
  std::string bytes = std::to_string(contribution.signature.size()) + "\n" +
                      contribution.signature;
  bytes.append(contribution.data.begin(), contribution.data.end());
  return Publish(File(OpName(seq, rank)), bytes);
}

bool CliqueDirectory::AllPosted(uint64_t seq) const {
  for (int r = 0; r < nranks_; ++r) {
    if (!Exists(File(OpName(seq, r)))) return false;
  }
  return true;
}

bool CliqueDirectory::Collect(uint64_t seq,
                              std::vector<Contribution>* out) const {
  std::vector<Contribution> all(nranks_);
  for (int r = 0; r < nranks_; ++r) {
    std::string bytes;
    if (!ReadWhole(File(OpName(seq, r)), &bytes)) return false;
    const size_t newline = bytes.find('\n');
    if (newline == std::string::npos) return false;
    const size_t length = std::strtoull(bytes.c_str(), nullptr, 10);
    if (newline + 1 + length > bytes.size()) return false;
    all[r].signature = bytes.substr(newline + 1, length);
    all[r].data.assign(bytes.begin() + newline + 1 + length, bytes.end());
  }
  *out = std::move(all);
  return true;
}

void CliqueDirectory::Withdraw(uint64_t seq, int rank) {
  ::unlink(File(OpName(seq, rank)).c_str());
}

bool CliqueDirectory::Send(int from, int to, uint64_t n,
                           const std::vector<char>& bytes) {
  return Publish(File(MessageName(from, to, n)),
                 std::string(bytes.begin(), bytes.end()));
}

bool CliqueDirectory::Taken(int from, int to, uint64_t n) const {
  return !Exists(File(MessageName(from, to, n)));
}

bool CliqueDirectory::Receive(int from, int to, uint64_t n,
                              std::vector<char>* bytes) {
  const std::string path = File(MessageName(from, to, n));
  std::string data;
  if (!ReadWhole(path, &data)) return false;
  ::unlink(path.c_str());
  bytes->assign(data.begin(), data.end());
  return true;
}

void CliqueDirectory::Unsend(int from, int to, uint64_t n) {
  ::unlink(File(MessageName(from, to, n)).c_str());
}

}  // namespace rankd::dataplane::nccl::testing
