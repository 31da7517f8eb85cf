#include "daemon/transport/socket_inode.h"

#include <sys/stat.h>

namespace rankd {

ino_t SocketInode(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return 0;
  return st.st_ino;
}

}  // namespace rankd
