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
//     service names, or one file and the files it imports (transitively);
//     nothing accumulates on a stream;
//   - at most `max_streams` streams at once on the daemon; more are ended
//     at once with RESOURCE_EXHAUSTED;
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
// Depends on gRPC, protobuf and the reflection proto (proto/grpc/
// reflection/v1alpha/reflection.proto); nothing else of rankd.
#ifndef RANKD_DAEMON_REFLECTION_SERVICE_H_
#define RANKD_DAEMON_REFLECTION_SERVICE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
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
  };

  // Lists `services` (full names) and itself; describes the files of
  // `pool` (protobuf's generated pool when null; it must outlive the
  // service) that declare them, and what those import, and nothing else.
  // The services' descriptors need not be in the pool (gRPC's health
  // service has none unless the binary links one); one that is not is
  // listed but not described.
  ReflectionService(std::vector<std::string> services, Limits limits,
                    const google::protobuf::DescriptorPool* pool = nullptr);
  ~ReflectionService() override;
  ReflectionService(const ReflectionService&) = delete;
  ReflectionService& operator=(const ReflectionService&) = delete;

  grpc::ServerBidiReactor<Request, Response>* ServerReflectionInfo(
      grpc::CallbackServerContext* context) override;

  // Streams being served now (admitted and not yet done). For tests.
  size_t open_streams() const { return open_streams_.load(); }

  // The answer to one request, built afresh into `response` (cleared
  // first). Thread-safe; also for tests.
  void Answer(const Request& request, Response* response);

 private:
  class Stream;

  // Serialized FileDescriptorProto of `file`, made once and kept (the pool
  // is immutable, so its files are too).
  const std::string& Serialized(const google::protobuf::FileDescriptor* file);
  // Adds `file`'s symbols and extensions to the index (construction only).
  void IndexFile(const google::protobuf::FileDescriptor* file);
  // `file` first, then every file it imports, transitively, each once.
  void AddFileWithImports(const google::protobuf::FileDescriptor* file,
                          Response* response);

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
  std::atomic<size_t> open_streams_{0};

  absl::Mutex mu_;
  std::map<const google::protobuf::FileDescriptor*, std::string> serialized_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace rankd

#endif  // RANKD_DAEMON_REFLECTION_SERVICE_H_
