#include "fuzz/internal/service_driver.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/credentials.h"
#include "daemon/config.h"
#include "daemon/log.h"
#include "google/protobuf/message.h"
#include "grpcpp/generic/generic_stub.h"
#include "rankd/v1/admin.grpc.pb.h"

namespace rankd::fuzz::internal {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

constexpr char kJobId[] = "fuzz";

[[noreturn]] void Die(const std::string& why) {
  std::fprintf(stderr, "service fuzzer: %s\n", why.c_str());
  std::abort();
}

// A TCP port nobody listens on right now (the daemon needs a real port to
// advertise; the tiny race with other processes is harmless here).
int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  if (fd < 0 ||
      bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    Die("cannot pick a free port");
  }
  close(fd);
  return ntohs(address.sin_port);
}

// Drivers to stop when the process exits (libFuzzer ends with exit(), and
// static destructors must not run under a live daemon's threads).
std::vector<ServiceDriver*>& LiveDrivers() {
  static std::vector<ServiceDriver*>* const drivers =
      std::make_unique<std::vector<ServiceDriver*>>().release();
  return *drivers;
}

bool IsWait(const FieldDescriptor& field) {
  return field.cpp_type() == FieldDescriptor::CPPTYPE_UINT32 &&
         (field.name() == "timeout_ms" || field.name() == "wait_for_world_ms");
}

bool IsIncarnation(const FieldDescriptor& field) {
  return field.cpp_type() == FieldDescriptor::CPPTYPE_UINT64 &&
         (field.name() == "incarnation" ||
          field.name() == "daemon_incarnation" ||
          field.name() == "job_incarnation");
}

// Calls `visit(message, field)` for every singular scalar field of
// `message` and of every message inside it.
template <typename Visit>
void VisitScalars(Message* message, const Visit& visit) {
  const google::protobuf::Reflection* reflection = message->GetReflection();
  std::vector<const FieldDescriptor*> fields;
  reflection->ListFields(*message, &fields);
  for (const FieldDescriptor* field : fields) {
    if (field->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) {
      if (!field->is_repeated()) visit(message, *field);
    } else if (field->is_repeated()) {
      for (int i = 0; i < reflection->FieldSize(*message, field); ++i) {
        VisitScalars(reflection->MutableRepeatedMessage(message, field, i),
                     visit);
      }
    } else {
      VisitScalars(reflection->MutableMessage(message, field), visit);
    }
  }
}

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string out;
  if (!buffer.Dump(&slices).ok()) return out;
  for (const grpc::Slice& slice : slices) {
    out.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return out;
}

}  // namespace

ServiceDriver::ServiceDriver(DriverOptions options)
    : options_(std::move(options)) {
  service_ =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
          options_.service);
  if (service_ == nullptr || service_->method_count() == 0) {
    Die(absl::StrCat("no service named ", options_.service));
  }
  // Sockets under /tmp, not TEST_TMPDIR: their paths must fit 107 bytes.
  // The credentials go to TEST_TMPDIR when there is one, which Bazel
  // removes even when the fuzzer aborts.
  std::string pattern = "/tmp/rankd_fuzz_XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) Die("cannot create a temp folder");
  folder_ = pattern;
  const char* test_tmp = std::getenv("TEST_TMPDIR");
  credentials_dir_ =
      absl::StrCat(test_tmp != nullptr ? test_tmp : folder_.c_str(),
                   "/rankd_fuzz_credentials_", getpid());
  if (LiveDrivers().empty()) {
    std::atexit([] {
      for (ServiceDriver* driver : LiveDrivers()) driver->CleanUp();
    });
  }
  LiveDrivers().push_back(this);
  if (absl::Status s = CreateCredentials(credentials_dir_); !s.ok()) {
    Die(s.ToString());
  }
  SetLogEnabled(false);  // a daemon per input would drown libFuzzer's output
  LoadTokens();
  StartDaemon();
}

ServiceDriver::~ServiceDriver() {
  CleanUp();
  auto& live = LiveDrivers();
  live.erase(std::remove(live.begin(), live.end(), this), live.end());
}

void ServiceDriver::CleanUp() {
  StopDaemon();
  std::error_code ignored;
  std::filesystem::remove_all(folder_, ignored);
  std::filesystem::remove_all(credentials_dir_, ignored);
}

void ServiceDriver::StartDaemon() {
  absl::StatusOr<DaemonConfig> config;
  absl::StatusOr<std::unique_ptr<Daemon>> daemon;
  // A few tries: another process may take the free port before the daemon
  // binds it.
  for (int attempt = 0; attempt < 5; ++attempt) {
    RawConfig raw;
    raw.job_id = kJobId;
    raw.nnodes = absl::StrCat(options_.nnodes);
    raw.node_index = "0";
    raw.world_size = absl::StrCat(options_.world_size);
    raw.listen = absl::StrCat("127.0.0.1:", FreePort());
    // A new socket per daemon: the old one's path may still be draining.
    raw.socket = absl::StrCat(folder_, "/rankd-", ++generation_, ".sock");
    raw.credentials_dir = credentials_dir_;
    raw.admin_kv_read = options_.admin_kv_read ? "true" : "false";
    config = ResolveConfig(
        raw, [](std::string_view) { return std::optional<std::string>(); });
    if (!config.ok()) Die(config.status().ToString());
    daemon = Daemon::Start(*config);
    if (daemon.ok()) break;
  }
  if (!daemon.ok()) Die(daemon.status().ToString());
  daemon_ = *std::move(daemon);
  if (absl::Status s = daemon_->WaitRegistered(absl::Seconds(5)); !s.ok()) {
    Die(s.ToString());
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  unix_channel_ =
      grpc::CreateCustomChannel(absl::StrCat("unix:", config->socket_path),
                                grpc::InsecureChannelCredentials(), args);
  tcp_channel_ =
      grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", daemon_->tcp_port()),
                                grpc::InsecureChannelCredentials(), args);
  incarnations_.clear();
}

void ServiceDriver::StopDaemon() {
  if (daemon_ == nullptr) return;
  unix_channel_.reset();
  tcp_channel_.reset();
  daemon_->Shutdown("fuzz input finished the job", absl::Milliseconds(100));
  daemon_.reset();
}

std::shared_ptr<grpc::Channel> ServiceDriver::ChannelFor(
    Credential credential) {
  return credential == Credential::kUnixSocket ? unix_channel_ : tcp_channel_;
}

void ServiceDriver::LoadTokens() {
  auto read = [&](const char* file) {
    absl::StatusOr<std::string> token =
        ReadCredentialFile(credentials_dir_, file);
    if (!token.ok()) Die(token.status().ToString());
    return *token;
  };
  auto at = [&](Credential credential) -> std::string& {
    return tokens_[static_cast<size_t>(credential)];
  };
  // Rank 0's own token (every Rank call presents its rank's token, on the
  // socket too), so inputs acting as rank 0 reach past authentication.
  const std::string node_key = read(kNodeKeyFile);
  const std::string rank0 =
      RankToken(NodeToken(node_key, kJobId, 0), kJobId, 0);
  at(Credential::kUnixSocket) = rank0;
  at(Credential::kTcpRankToken) = rank0;
  at(Credential::kTcpOperatorToken) = read(kOperatorTokenFile);
  at(Credential::kTcpNodeToken) = NodeToken(node_key, kJobId, 1);
  at(Credential::kTcpGarbageToken) = "node-1.0123456789abcdef";
}

void ServiceDriver::Rewrite(Message* message) const {
  VisitScalars(message, [this](Message* m, const FieldDescriptor& field) {
    const google::protobuf::Reflection* r = m->GetReflection();
    if (IsWait(field) && r->GetUInt32(*m, &field) > kMaxFuzzWaitMs) {
      r->SetUInt32(m, &field, kMaxFuzzWaitMs);
    } else if (IsIncarnation(field) && r->GetUInt64(*m, &field) == 1) {
      auto live = incarnations_.find(field.name());
      if (live != incarnations_.end()) r->SetUInt64(m, &field, live->second);
    }
  });
}

void ServiceDriver::Remember(const Message& message) {
  std::unique_ptr<Message> copy(message.New());
  copy->CopyFrom(message);
  VisitScalars(copy.get(), [this](Message* m, const FieldDescriptor& field) {
    if (!IsIncarnation(field)) return;
    uint64_t value = m->GetReflection()->GetUInt64(*m, &field);
    if (value > 1) incarnations_[field.name()] = value;
  });
}

int ServiceDriver::Run(const uint8_t* data, size_t size) {
  if (size < 2) return -1;
  const google::protobuf::MethodDescriptor* method =
      service_->method(data[0] % service_->method_count());
  const auto credential = static_cast<Credential>(
      data[1] % static_cast<uint8_t>(Credential::kCount));
  google::protobuf::MessageFactory* factory =
      google::protobuf::MessageFactory::generated_factory();
  std::unique_ptr<Message> request(
      factory->GetPrototype(method->input_type())->New());
  if (!request->ParseFromArray(data + 2, static_cast<int>(size - 2))) {
    return -1;
  }
  Rewrite(request.get());
  std::string serialized = request->SerializeAsString();

  // One generic call serves unary and server-streaming methods alike: write
  // the request, half-close, read until the server ends the call.
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       absl::ToChronoMilliseconds(kCallDeadline));
  if (const std::string& token = tokens_[static_cast<size_t>(credential)];
      !token.empty()) {
    context.AddMetadata("authorization", absl::StrCat("Bearer ", token));
  }
  grpc::CompletionQueue queue;
  grpc::GenericStub stub(ChannelFor(credential));
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call = stub.PrepareCall(
      &context, absl::StrCat("/", service_->full_name(), "/", method->name()),
      &queue);
  auto step = [&queue]() {
    void* tag = nullptr;
    bool ok = false;
    return queue.Next(&tag, &ok) && ok;
  };
  call->StartCall(nullptr);
  bool open = step();
  if (open) {
    grpc::Slice slice(serialized);
    grpc::ByteBuffer buffer(&slice, 1);
    call->Write(buffer, nullptr);
    open = step();
  }
  if (open) {
    call->WritesDone(nullptr);
    open = step();
  }
  std::unique_ptr<Message> response(
      factory->GetPrototype(method->output_type())->New());
  while (open) {
    grpc::ByteBuffer buffer;
    call->Read(&buffer, nullptr);
    open = step();
    if (open && response->ParseFromString(Flatten(buffer))) {
      Remember(*response);
    }
  }
  grpc::Status status;
  call->Finish(&status, nullptr);
  step();
  queue.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (queue.Next(&tag, &ok)) {
  }
  if (status.ok()) Remember(*request);

  if (!JobStillChanges()) {
    StopDaemon();
    StartDaemon();
  }
  return 0;
}

bool ServiceDriver::JobStillChanges() {
  auto admin = v1::Admin::NewStub(unix_channel_);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(5));
  v1::JobStatus job;
  grpc::Status status = admin->GetJob(&context, v1::GetJobRequest(), &job);
  if (!status.ok()) {
    Die(absl::StrCat("the daemon stopped answering Admin.GetJob: ",
                     status.error_message()));
  }
  return job.state() != v1::JOB_STATE_FAILED &&
         job.state() != v1::JOB_STATE_COMPLETED;
}

}  // namespace rankd::fuzz::internal
