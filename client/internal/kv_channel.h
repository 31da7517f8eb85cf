// client/internal/kv_channel.h: a rank's end of the key-value channel, the
// second Unix socket to its node's daemon that carries its key-value calls
// as frames (common/kv_frame.h) instead of gRPC unary calls (private to
// client/; the daemon's end is daemon/transport/kv_socket.h).
//
// Any number of threads may call at once: each sends its request and
// waits for its own reply, whichever thread is reading the socket handing
// the others theirs, so a blocked get does not hold up a set behind it and
// a lone caller is never woken by another thread.
//
// Depends on common/kv_frame, the generated rankd.v1 messages,
// proto/status_details, gRPC's Status type, absl and POSIX sockets.
#ifndef RANKD_CLIENT_INTERNAL_KV_CHANNEL_H_
#define RANKD_CLIENT_INTERNAL_KV_CHANNEL_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/kv_frame.h"
#include "grpcpp/support/status.h"
#include "rankd/v1/rank.pb.h"

namespace rankd::internal {

class KvChannel {
 public:
  // Connects to the daemon's key-value socket `path` and presents
  // `ticket` (Rank.OpenKvChannel's answer), waiting for the daemon's
  // welcome until `deadline` (MonotonicNow's clock). Errors: Unavailable
  // when the socket cannot be reached or closes, DeadlineExceeded, or the
  // daemon's refusal as it gave it.
  static absl::StatusOr<std::unique_ptr<KvChannel>> Connect(
      const std::string& path, absl::string_view ticket, absl::Time deadline);
  ~KvChannel();
  KvChannel(const KvChannel&) = delete;
  KvChannel& operator=(const KvChannel&) = delete;

  // One call each, answered as the Rank service's method of the same name
  // would be: the daemon's status (code and message) or, on OK, its
  // response in `response`. When no reply comes by `deadline`:
  // DEADLINE_EXCEEDED "Deadline Exceeded", as gRPC says it. When the
  // channel breaks (the daemon went away, or sent something that is not a
  // frame): UNAVAILABLE saying why, and broken() turns true; whether the
  // daemon ran the call is then unknown, as with a gRPC call that fails
  // so.
  grpc::Status Set(const v1::KvSetRequest& request, v1::KvSetResponse* response,
                   absl::Time deadline);
  grpc::Status Get(const v1::KvGetRequest& request, v1::KvGetResponse* response,
                   absl::Time deadline);
  grpc::Status Add(const v1::KvAddRequest& request, v1::KvAddResponse* response,
                   absl::Time deadline);
  grpc::Status Delete(const v1::KvDeleteRequest& request,
                      v1::KvDeleteResponse* response, absl::Time deadline);
  grpc::Status Count(const v1::KvCountRequest& request,
                     v1::KvCountResponse* response, absl::Time deadline);

  // True once the channel broke: later calls fail at once, and the client
  // goes back to gRPC.
  bool broken() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Waiter {
    bool done = false;
    std::string reply;  // the reply frame's payload
  };

  explicit KvChannel(int fd);
  // Sends a frame of `kind` with `payload` and waits for its reply.
  grpc::Status Call(KvFrameKind kind, const std::string& payload,
                    absl::Time deadline, std::string* response);
  // Writes all of `frame`, waiting for room until `deadline`. Only the
  // caller that set writing_ calls it.
  absl::Status WriteFrame(const std::string& frame, absl::Time deadline);
  // Reads what the socket has (waiting until `deadline`) and hands every
  // whole reply to its waiter. Called by the one reading thread, without
  // mu_ held.
  absl::Status ReadSome(absl::Time deadline);
  void BreakLocked(absl::Status why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int fd_;
  mutable absl::Mutex mu_;
  absl::CondVar replied_;
  // One frame is written at a time: a caller sets writing_ for its write
  // and the others wait, each until its own deadline (a flag, not a mutex
  // held across a write that may wait for room until its caller's
  // deadline), woken by written_.
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  absl::CondVar written_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  bool reading_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Waiter*> waiters_ ABSL_GUARDED_BY(mu_);
  // Only the reading thread touches it (reading_ says which).
  const std::unique_ptr<KvFrameReader> reader_;
};

}  // namespace rankd::internal

#endif  // RANKD_CLIENT_INTERNAL_KV_CHANNEL_H_
