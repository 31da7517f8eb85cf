// client/admin_client.cc: see admin_client.h.

#include "client/admin_client.h"

#include <utility>
#include <vector>

#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "client/health_codec.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "grpcpp/support/status.h"
#include "rankd/v1/admin.grpc.pb.h"

namespace rankd {
namespace internal {

// The stubs of one connection. Both are thread-safe.
class AdminStub {
 public:
  explicit AdminStub(const std::shared_ptr<grpc::Channel>& channel)
      : admin(v1::Admin::NewStub(channel)), generic(channel) {}

  const std::unique_ptr<v1::Admin::Stub> admin;
  grpc::GenericStub generic;
};

}  // namespace internal

namespace {

// Runs one unary Admin RPC with the connection's call_timeout.
template <typename Request, typename Response, typename Method>
absl::StatusOr<Response> Unary(const Connection& conn, absl::string_view name,
                               Method method, const Request& request) {
  const absl::Duration timeout = conn.options().call_timeout;
  grpc::ClientContext context;
  conn.PrepareContext(&context, timeout);
  Response response;
  grpc::Status status = method(&context, request, &response);
  if (!status.ok()) {
    return FromGrpcStatus(status, conn.Context(name), timeout);
  }
  return response;
}

}  // namespace

AdminClient::AdminClient(std::shared_ptr<const Connection> connection,
                         std::unique_ptr<internal::AdminStub> stub)
    : conn_(std::move(connection)), stub_(std::move(stub)) {}

AdminClient::~AdminClient() = default;

absl::StatusOr<std::unique_ptr<AdminClient>> AdminClient::Connect(
    const ClientOptions& options) {
  absl::StatusOr<std::shared_ptr<const Connection>> conn =
      Connection::Open(options);
  if (!conn.ok()) return conn.status();
  auto stub = std::make_unique<internal::AdminStub>((*conn)->channel());
  return absl::WrapUnique(new AdminClient(*std::move(conn), std::move(stub)));
}

const std::string& AdminClient::target() const {
  return conn_->options().target;
}

absl::StatusOr<v1::JobStatus> AdminClient::GetJob() const {
  return Unary<v1::GetJobRequest, v1::JobStatus>(
      *conn_, "GetJob",
      [this](grpc::ClientContext* c, const v1::GetJobRequest& req,
             v1::JobStatus* resp) {
        return stub_->admin->GetJob(c, req, resp);
      },
      v1::GetJobRequest());
}

absl::StatusOr<v1::Topology> AdminClient::GetTopology() const {
  return Unary<v1::GetTopologyRequest, v1::Topology>(
      *conn_, "GetTopology",
      [this](grpc::ClientContext* c, const v1::GetTopologyRequest& req,
             v1::Topology* resp) {
        return stub_->admin->GetTopology(c, req, resp);
      },
      v1::GetTopologyRequest());
}

absl::StatusOr<v1::MemberList> AdminClient::ListMembers() const {
  return Unary<v1::ListMembersRequest, v1::MemberList>(
      *conn_, "ListMembers",
      [this](grpc::ClientContext* c, const v1::ListMembersRequest& req,
             v1::MemberList* resp) {
        return stub_->admin->ListMembers(c, req, resp);
      },
      v1::ListMembersRequest());
}

absl::StatusOr<std::string> AdminClient::KvGet(absl::string_view key) const {
  if (key.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(conn_->Context("KvGet"), ": empty key"));
  }
  v1::AdminKvGetRequest request;
  request.set_key(std::string(key));
  absl::StatusOr<v1::AdminKvGetResponse> response =
      Unary<v1::AdminKvGetRequest, v1::AdminKvGetResponse>(
          *conn_, "KvGet",
          [this](grpc::ClientContext* c, const v1::AdminKvGetRequest& req,
                 v1::AdminKvGetResponse* resp) {
            return stub_->admin->KvGet(c, req, resp);
          },
          request);
  if (!response.ok()) return response.status();
  return std::move(*response->mutable_value());
}

absl::Status AdminClient::WatchEvents(
    uint64_t after_sequence,
    const std::function<bool(const v1::JobEvent&)>& on_event,
    absl::Duration timeout) const {
  const std::string context_text = conn_->Context("WatchEvents");
  if (timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat(context_text,
                     ": timeout must be positive (absl::InfiniteDuration() "
                     "to watch until stopped)"));
  }
  grpc::ClientContext context;
  conn_->PrepareContext(&context, timeout);
  v1::WatchEventsRequest request;
  request.set_after_sequence(after_sequence);
  std::unique_ptr<grpc::ClientReader<v1::JobEvent>> reader =
      stub_->admin->WatchEvents(&context, request);
  v1::JobEvent event;
  bool stopped = false;
  while (reader->Read(&event)) {
    if (!on_event(event)) {
      stopped = true;
      context.TryCancel();
      break;
    }
  }
  grpc::Status status = reader->Finish();
  if (stopped || status.ok()) return absl::OkStatus();
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED &&
      timeout != absl::InfiniteDuration()) {
    return absl::OkStatus();  // Watched for as long as asked.
  }
  return FromGrpcStatus(status, context_text);
}

absl::StatusOr<std::string> AdminClient::Health(
    absl::string_view service) const {
  const std::string context_text =
      absl::StrCat(conn_->Context("Health"), " (service \"", service, "\")");
  const absl::Duration timeout = conn_->options().call_timeout;
  grpc::ClientContext context;
  conn_->PrepareContext(&context, timeout);
  std::string encoded = EncodeHealthCheckRequest(service);
  grpc::Slice slice(encoded);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::Status status;
  absl::Notification done;
  stub_->generic.UnaryCall(&context, kHealthCheckMethod, grpc::StubOptions(),
                           &request, &response, [&](grpc::Status s) {
                             status = std::move(s);
                             done.Notify();
                           });
  done.WaitForNotification();  // Bounded by the call's deadline.
  if (!status.ok()) return FromGrpcStatus(status, context_text, timeout);
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) {
    return absl::InternalError(
        absl::StrCat(context_text, ": unreadable response buffer"));
  }
  std::string bytes;
  for (const grpc::Slice& s : slices) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  absl::StatusOr<std::string> name = DecodeHealthCheckResponse(bytes);
  if (!name.ok()) {
    return absl::InternalError(
        absl::StrCat(context_text, ": ", name.status().message()));
  }
  return name;
}

}  // namespace rankd
