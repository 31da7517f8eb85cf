// SocketInode: which socket a descriptor number names right now. The daemon's
// own listeners (LocalSocket, TcpGate) remember a connection by number and
// inode, because gRPC may close a number and the kernel may hand it to
// another socket before the listener looks again. Depends on POSIX only.
#ifndef RANKD_DAEMON_TRANSPORT_SOCKET_INODE_H_
#define RANKD_DAEMON_TRANSPORT_SOCKET_INODE_H_

#include <sys/types.h>

namespace rankd {

// The inode of the socket `fd` refers to. Returns 0 when `fd` is not open or
// is not a socket (0 is never a socket's inode). Never blocks; thread-safe.
ino_t SocketInode(int fd);

}  // namespace rankd

#endif  // RANKD_DAEMON_TRANSPORT_SOCKET_INODE_H_
