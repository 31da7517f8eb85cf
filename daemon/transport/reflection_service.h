// ReflectionService: rankd's own gRPC server reflection
// (grpc.reflection.v1alpha.ServerReflection, what grpcurl and other
// reflection clients speak), served on gRPC's callback API from the
// descriptors generated into the binary (protobuf's generated pool).
//
// It replaces Debian's libgrpc++_reflection (gRPC 1.51), which ran each
// stream on a thread of the synchronous server (2,000 open streams made
// 2,000 threads) and reused one answer across a stream's requests, so that
// answers grew with every request (127 bytes for the first, 726,008 at
// request 6,000: gigabytes back for kilobytes sent). Here:
//   - no thread per stream: a stream is a reactor, driven by gRPC's own
//     callback threads;
//   - every answer is built afresh and holds only what was asked: the
//     service names, or one file and the files it imports (transitively),
//     less the imports already sent on the same stream (the protocol lets
//     a server omit those, and gRPC-Go's server does: a client keeps what
//     it was sent); nothing accumulates in an answer;
//   - at most `max_streams` streams at once on this service, and at most
//     `max_streams_per_peer` of them from one peer; more are ended at once
//     with RESOURCE_EXHAUSTED. The daemon makes one service per gRPC
//     server (TCP, Unix socket), so each has its own budget: nothing on
//     the TCP port can use up the local operator's reflection, and one
//     peer alone cannot use up a listener's (it takes a quarter, by
//     default: 8 of 32);
//   - at most `max_requests_per_stream` requests on one stream; the next
//     ends the stream with RESOURCE_EXHAUSTED (a client opens another);
//   - a request larger than kMaxReflectionRequestBytes gets an
//     INVALID_ARGUMENT error answer and is not echoed back;
//   - names a client sends are looked up in an index of the served files
//     made at construction, never in the descriptor pool: the generated
//     pool remembers every name it failed to find (its fallback database's
//     "known bad" sets, never emptied), so lookups of made-up names would
//     grow the daemon for good; and only the API is described, not every
//     other proto linked into the binary.
// Reflection needs no credential (docs/operations.md, "Threat model"): it
// describes the API, which is public, and holds no job state.
//
// Depends on gRPC, protobuf, the reflection proto (proto/grpc/
// reflection/v1alpha/reflection.proto) and POSIX's address parsing;
// nothing else of rankd.
#ifndef RANKD_DAEMON_REFLECTION_SERVICE_H_
#define RANKD_DAEMON_REFLECTION_SERVICE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "google/protobuf/descriptor.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace rankd {

// The largest reflection request answered (names of files and symbols are
// far shorter).
inline constexpr size_t kMaxReflectionRequestBytes = 4096;

class ReflectionService final
    : public grpc::reflection::v1alpha::ServerReflection::CallbackService {
 public:
  using Request = grpc::reflection::v1alpha::ServerReflectionRequest;
  using Response = grpc::reflection::v1alpha::ServerReflectionResponse;

  struct Limits {
    uint32_t max_streams = 32;                // >= 1
    uint32_t max_requests_per_stream = 1024;  // >= 1
    uint32_t max_streams_per_peer = 8;        // >= 1
  };

  // Who a call's peer is, for max_streams_per_peer: given
  // grpc::ServerContext::peer(), a key shared by every call of one peer.
  // Must be thread-safe.
  using PeerKey = std::function<std::string(const std::string& grpc_peer)>;

  // Lists `services` (full names) and itself; describes the files of
  // `pool` (protobuf's generated pool when null; it must outlive the
  // service) that declare them, and what those import, and nothing else.
  // The services' descriptors need not be in the pool (gRPC's health
  // service has none unless the binary links one); one that is not is
  // listed but not described. Peers are told apart by `peer_key`
  // (PeerAddress when null).
  ReflectionService(std::vector<std::string> services, Limits limits,
                    const google::protobuf::DescriptorPool* pool = nullptr,
                    PeerKey peer_key = nullptr);
  ~ReflectionService() override;
  ReflectionService(const ReflectionService&) = delete;
  ReflectionService& operator=(const ReflectionService&) = delete;

  grpc::ServerBidiReactor<Request, Response>* ServerReflectionInfo(
      grpc::CallbackServerContext* context) override;

  // Streams being served now (admitted and not yet done). For tests.
  size_t open_streams() const { return open_streams_.load(); }

  // Files already sent on one stream (bounded by the served files).
  using SentFiles = std::set<const google::protobuf::FileDescriptor*>;

  // The answer to one request, built afresh into `response` (cleared
  // first). With `sent`, a file the request names is always sent, but an
  // import in `sent` is left out; every file sent is added to `sent`.
  // Thread-safe (`sent` is the caller's); also for tests.
  void Answer(const Request& request, Response* response,
              SentFiles* sent = nullptr);

  // The default PeerKey: the address of a TCP peer without its port
  // ("ipv4:10.0.0.1:5000" -> "ipv4:10.0.0.1"), an IPv6 address grouped
  // by its /64 (one host usually holds a whole /64); anything else as it
  // is.
  static std::string PeerAddress(const std::string& grpc_peer);

 private:
  class Stream;

  // Serialized FileDescriptorProto of `file`, made once and kept (the pool
  // is immutable, so its files are too).
  const std::string& Serialized(const google::protobuf::FileDescriptor* file);
  // Adds `file`'s symbols and extensions to the index (construction only).
  void IndexFile(const google::protobuf::FileDescriptor* file);
  // `file` first, then every file it imports, transitively, each once,
  // less the imports in `sent` (when given).
  void AddFileWithImports(const google::protobuf::FileDescriptor* file,
                          Response* response, SentFiles* sent);
  // Admits a stream of `peer` when both budgets allow; false otherwise,
  // with the flag that refused it in `*limit`.
  bool Admit(const std::string& peer, const char** limit);
  void Release(const std::string& peer);

  const std::vector<std::string> services_;  // sorted, with this service
  const Limits limits_;
  const google::protobuf::DescriptorPool* const pool_;
  // The served files and what they import, by name; every symbol they
  // declare, by full name; their extensions, by extended type and number.
  // Made at construction, then read only.
  std::map<std::string, const google::protobuf::FileDescriptor*> files_;
  std::map<std::string, const google::protobuf::FileDescriptor*> symbols_;
  std::map<std::pair<std::string, int>,
           const google::protobuf::FieldDescriptor*>
      extensions_;
  const PeerKey peer_key_;
  std::atomic<size_t> open_streams_{0};
  // Admitted streams by peer key: at most max_streams entries.
  absl::Mutex streams_mu_;
  std::map<std::string, uint32_t> streams_by_peer_ ABSL_GUARDED_BY(streams_mu_);

  absl::Mutex mu_;
  std::map<const google::protobuf::FileDescriptor*, std::string> serialized_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace rankd

#endif  // RANKD_DAEMON_REFLECTION_SERVICE_H_
