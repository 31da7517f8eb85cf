// Gloo's TCP endpoints and the shutdown of this process's sockets at them
// (c10d_store/internal/gloo_sockets.h).
#include "c10d_store/internal/gloo_sockets.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace rankd::c10d_store::internal {
namespace {

// Gloo's Address stores the sockaddr_storage in the publishing process's
// byte order; ranks of one job share an architecture, as Gloo assumes too.
static_assert(sizeof(sockaddr_storage) + sizeof(int64_t) == kGlooAddressBytes);

}  // namespace

std::string Endpoint::ToString() const {
  char text[INET6_ADDRSTRLEN] = {};
  if (family == AF_INET) {
    inet_ntop(AF_INET, address.data(), text, sizeof(text));
    return absl::StrCat(text, ":", port);
  }
  if (family == AF_INET6) {
    inet_ntop(AF_INET6, address.data(), text, sizeof(text));
    return absl::StrCat("[", text, "]:", port);
  }
  return absl::StrCat("(family ", family, ")");
}

Endpoint EndpointOf(const void* sockaddr, size_t length) {
  Endpoint endpoint;
  sa_family_t family = 0;
  if (length < sizeof(family)) return endpoint;
  std::memcpy(&family, sockaddr, sizeof(family));
  if (family == AF_INET && length >= sizeof(sockaddr_in)) {
    sockaddr_in in;
    std::memcpy(&in, sockaddr, sizeof(in));
    endpoint.family = AF_INET;
    std::memcpy(endpoint.address.data(), &in.sin_addr, 4);
    endpoint.port = ntohs(in.sin_port);
  } else if (family == AF_INET6 && length >= sizeof(sockaddr_in6)) {
    sockaddr_in6 in6;
    std::memcpy(&in6, sockaddr, sizeof(in6));
    endpoint.family = AF_INET6;
    std::memcpy(endpoint.address.data(), &in6.sin6_addr, 16);
    endpoint.port = ntohs(in6.sin6_port);
  }
  return endpoint;
}

std::vector<Endpoint> GlooEndpoints(absl::Span<const uint8_t> value) {
  std::vector<Endpoint> found;
  if (value.empty() || value.size() % kGlooAddressBytes != 0) return found;
  for (size_t i = 0; i < value.size(); i += kGlooAddressBytes) {
    Endpoint endpoint = EndpointOf(value.data() + i, sizeof(sockaddr_storage));
    if (endpoint.family == 0) return {};
    found.push_back(endpoint);
  }
  return found;
}

int ShutDownSocketsAt(const std::set<Endpoint>& endpoints) {
  if (endpoints.empty()) return 0;
  DIR* fds = opendir("/proc/self/fd");
  if (fds == nullptr) return 0;
  // The descriptors first: shutting sockets down while reading the folder
  // would be fine, but the folder's own descriptor must be skipped.
  std::vector<int> candidates;
  const int own = dirfd(fds);
  while (dirent* entry = readdir(fds)) {
    int fd = -1;
    if (!absl::SimpleAtoi(entry->d_name, &fd) || fd == own) continue;
    candidates.push_back(fd);
  }
  closedir(fds);

  int count = 0;
  for (int fd : candidates) {
    struct stat info;
    if (fstat(fd, &info) != 0 || !S_ISSOCK(info.st_mode)) continue;
    int type = 0;
    socklen_t type_length = sizeof(type);
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &type_length) != 0 ||
        type != SOCK_STREAM) {
      continue;
    }
    bool ours = false;
    for (auto end : {&getsockname, &getpeername}) {
      sockaddr_storage address;
      socklen_t length = sizeof(address);
      if (end(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
        continue;
      }
      Endpoint endpoint = EndpointOf(&address, length);
      if (endpoint.family != 0 && endpoints.count(endpoint) > 0) ours = true;
    }
    if (ours && shutdown(fd, SHUT_RDWR) == 0) ++count;
  }
  return count;
}

}  // namespace rankd::c10d_store::internal
