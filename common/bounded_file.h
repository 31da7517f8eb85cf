// ReadBoundedFile: reads a small file named by a person (a credential, a
// TLS certificate or key) without trusting what the name points at: a
// regular file only, so a device (/dev/zero) or a pipe is refused before
// any read, and never more than a bound, however the file grows meanwhile.
// Shared by common/credentials, the daemon's TLS setup and the client's.
// Depends on absl only.
#ifndef RANKD_COMMON_BOUNDED_FILE_H_
#define RANKD_COMMON_BOUNDED_FILE_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace rankd {

// The whole contents of the regular file at `path` (symbolic links
// followed, as Kubernetes Secret mounts need), at most `max_bytes` of them.
// NotFound when nothing is at `path`; PermissionDenied when it cannot be
// opened or read (naming errno's words); InvalidArgument when it is not a
// regular file or holds more than `max_bytes`. Messages name the path and
// never the contents.
absl::StatusOr<std::string> ReadBoundedFile(const std::string& path,
                                            size_t max_bytes);

}  // namespace rankd

#endif  // RANKD_COMMON_BOUNDED_FILE_H_
