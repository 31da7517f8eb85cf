// What operators' tools need from a real rankd daemon: gRPC server
// reflection (what `grpcurl -plaintext HOST:PORT list` and
// `grpcurl -plaintext -d '{}' HOST:PORT rankd.v1.Admin/GetTopology` use) and
// the standard grpc.health.v1 service (Kubernetes' gRPC probe).
//
// Like grpcurl, the test knows nothing of rankd's protos up front: it speaks
// grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo with
// hand-encoded protobuf (the reflection proto is not installed here), builds
// a DescriptorPool from the file descriptors the daemon sends, calls Admin
// methods with DynamicMessages through grpc::GenericStub and prints the
// replies as JSON. A second, third-party client (npm's
// grpc-js-reflection-client, tools/grpc-reflection-check) checks the same.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "client/admin_client.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"
#include "google/protobuf/dynamic_message.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/wire_format_lite.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "rankd/v1/admin.pb.h"
#include "tests/harness/cluster.h"

namespace rankd::testing {
namespace {

using ::google::protobuf::internal::WireFormatLite;
using ::google::protobuf::io::CodedInputStream;
using ::google::protobuf::io::CodedOutputStream;
using ::testing::Contains;
using ::testing::HasSubstr;

constexpr char kReflectionMethod[] =
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo";

// ServerReflectionRequest fields.
constexpr int kFileByFilename = 3;
constexpr int kFileContainingSymbol = 4;
constexpr int kListServices = 7;
// ServerReflectionResponse fields.
constexpr int kFileDescriptorResponse = 4;
constexpr int kListServicesResponse = 6;
constexpr int kErrorResponse = 7;

// ServerReflectionRequest{host: "", <field>: value}. The oneof field is
// written even when `value` is empty (oneof members have presence).
std::string EncodeRequest(int field, const std::string& value) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream raw(&out);
    CodedOutputStream coded(&raw);
    coded.WriteTag(WireFormatLite::MakeTag(
        field, WireFormatLite::WIRETYPE_LENGTH_DELIMITED));
    coded.WriteVarint32(static_cast<uint32_t>(value.size()));
    coded.WriteString(value);
  }
  return out;
}

// Walks the top-level fields of a serialized message: `on_bytes` for each
// length-delimited field, `on_varint` for each varint; skips the rest.
// False when `bytes` is not a valid message.
bool Walk(const std::string& bytes,
          const std::function<void(int, const std::string&)>& on_bytes,
          const std::function<void(int, uint64_t)>& on_varint = nullptr) {
  CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                      static_cast<int>(bytes.size()));
  while (true) {
    uint32_t tag = in.ReadTag();
    if (tag == 0) return in.ConsumedEntireMessage();
    const int field = WireFormatLite::GetTagFieldNumber(tag);
    switch (WireFormatLite::GetTagWireType(tag)) {
      case WireFormatLite::WIRETYPE_LENGTH_DELIMITED: {
        uint32_t length = 0;
        std::string payload;
        if (!in.ReadVarint32(&length) ||
            !in.ReadString(&payload, static_cast<int>(length))) {
          return false;
        }
        on_bytes(field, payload);
        break;
      }
      case WireFormatLite::WIRETYPE_VARINT: {
        uint64_t value = 0;
        if (!in.ReadVarint64(&value)) return false;
        if (on_varint) on_varint(field, value);
        break;
      }
      default:
        if (!WireFormatLite::SkipField(&in, tag)) return false;
    }
  }
}

struct ReflectionResponse {
  int kind = 0;                               // the oneof field that was set
  std::vector<std::string> services;          // list_services_response
  std::vector<std::string> file_descriptors;  // file_descriptor_response
  int error_code = 0;                         // error_response
  std::string error_message;
};

absl::StatusOr<ReflectionResponse> DecodeResponse(const std::string& bytes) {
  ReflectionResponse out;
  bool inner_ok = true;
  bool ok = Walk(bytes, [&](int field, const std::string& payload) {
    if (field == kListServicesResponse) {
      out.kind = field;
      inner_ok &= Walk(payload, [&](int f, const std::string& service) {
        if (f != 1) return;  // ServiceResponse service = 1
        Walk(service, [&](int g, const std::string& name) {
          if (g == 1) out.services.push_back(name);  // string name = 1
        });
      });
    } else if (field == kFileDescriptorResponse) {
      out.kind = field;
      Walk(payload, [&](int f, const std::string& file) {
        if (f == 1) out.file_descriptors.push_back(file);
      });
    } else if (field == kErrorResponse) {
      out.kind = field;
      Walk(
          payload,
          [&](int f, const std::string& message) {
            if (f == 2) out.error_message = message;
          },
          [&](int f, uint64_t code) {
            if (f == 1) out.error_code = static_cast<int>(code);
          });
    }
  });
  if (!ok || !inner_ok) {
    return absl::InvalidArgumentError("malformed ServerReflectionResponse");
  }
  return out;
}

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  (void)buffer.Dump(&slices);
  std::string out;
  for (const grpc::Slice& s : slices) {
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return out;
}

grpc::ByteBuffer ToBuffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

// One ServerReflectionInfo stream, used request by request like grpcurl.
class ReflectionStream {
 public:
  explicit ReflectionStream(const std::shared_ptr<grpc::Channel>& channel)
      : stub_(channel) {
    deadline_ = std::chrono::system_clock::now() + std::chrono::seconds(10);
    context_.set_deadline(deadline_);
    call_ = stub_.PrepareCall(&context_, kReflectionMethod, &cq_);
    call_->StartCall(Tag(kStart));
    started_ = Wait(kStart);
  }

  ~ReflectionStream() {
    if (!finished_) {
      context_.TryCancel();
      grpc::Status ignored;
      call_->Finish(&ignored, Tag(kFinish));
      Wait(kFinish);
    }
    cq_.Shutdown();
    void* tag;
    bool ok;
    while (cq_.Next(&tag, &ok)) {
    }
  }

  absl::StatusOr<ReflectionResponse> Ask(int field, const std::string& value) {
    if (!started_) return absl::UnavailableError("stream did not start");
    call_->Write(ToBuffer(EncodeRequest(field, value)), Tag(kWrite));
    if (!Wait(kWrite)) return absl::UnavailableError("write failed");
    grpc::ByteBuffer reply;
    call_->Read(&reply, Tag(kRead));
    if (!Wait(kRead)) return absl::UnavailableError("read failed");
    return DecodeResponse(Flatten(reply));
  }

  grpc::Status Close() {
    call_->WritesDone(Tag(kWritesDone));
    Wait(kWritesDone);
    grpc::Status status;
    call_->Finish(&status, Tag(kFinish));
    Wait(kFinish);
    finished_ = true;
    return status;
  }

 private:
  enum Op : intptr_t { kStart = 1, kWrite, kRead, kWritesDone, kFinish };
  static void* Tag(Op op) { return reinterpret_cast<void*>(op); }

  // Waits for `op`'s completion; returns its ok bit (false on timeout).
  bool Wait(Op op) {
    while (true) {
      void* tag = nullptr;
      bool ok = false;
      auto r = cq_.AsyncNext(&tag, &ok, deadline_ + std::chrono::seconds(1));
      if (r != grpc::CompletionQueue::GOT_EVENT) return false;
      if (tag == Tag(op)) return ok;
    }
  }

  grpc::GenericStub stub_;
  grpc::CompletionQueue cq_;
  grpc::ClientContext context_;
  std::chrono::system_clock::time_point deadline_;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call_;
  bool started_ = false;
  bool finished_ = false;
};

// A DescriptorPool filled from the daemon, grpcurl-style: the files for a
// symbol, then every missing dependency by file name.
class RemoteDescriptors {
 public:
  explicit RemoteDescriptors(ReflectionStream* stream) : stream_(stream) {}

  absl::Status AddSymbol(const std::string& symbol) {
    auto response = stream_->Ask(kFileContainingSymbol, symbol);
    if (!response.ok()) return response.status();
    if (response->kind != kFileDescriptorResponse) {
      return absl::NotFoundError(absl::StrCat(
          symbol, ": ", response->error_code, " ", response->error_message));
    }
    std::vector<std::string> names = Store(*response);
    if (names.empty()) return absl::NotFoundError("no file descriptors");
    for (const std::string& name : names) {
      if (auto s = Build(name); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  const google::protobuf::DescriptorPool& pool() const { return pool_; }
  // File names fetched with file_by_filename (missing dependencies).
  const std::vector<std::string>& fetched_by_name() const { return by_name_; }
  const std::map<std::string, google::protobuf::FileDescriptorProto>& files()
      const {
    return files_;
  }

 private:
  std::vector<std::string> Store(const ReflectionResponse& response) {
    std::vector<std::string> names;
    for (const std::string& bytes : response.file_descriptors) {
      google::protobuf::FileDescriptorProto file;
      if (!file.ParseFromString(bytes)) continue;
      names.push_back(file.name());
      files_.emplace(file.name(), file);
    }
    return names;
  }

  absl::Status Build(const std::string& name) {
    if (pool_.FindFileByName(name) != nullptr) return absl::OkStatus();
    if (files_.count(name) == 0) {
      by_name_.push_back(name);
      auto response = stream_->Ask(kFileByFilename, name);
      if (!response.ok()) return response.status();
      if (response->kind != kFileDescriptorResponse) {
        return absl::NotFoundError(
            absl::StrCat(name, ": ", response->error_message));
      }
      Store(*response);
      if (files_.count(name) == 0) {
        return absl::NotFoundError(absl::StrCat("daemon did not send ", name));
      }
    }
    const google::protobuf::FileDescriptorProto file = files_.at(name);
    for (const std::string& dependency : file.dependency()) {
      if (auto s = Build(dependency); !s.ok()) return s;
    }
    if (pool_.BuildFile(file) == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("cannot build ", name));
    }
    return absl::OkStatus();
  }

  ReflectionStream* const stream_;
  google::protobuf::DescriptorPool pool_;
  std::map<std::string, google::protobuf::FileDescriptorProto> files_;
  std::vector<std::string> by_name_;
};

// grpcurl -H "authorization: Bearer $TOKEN" -d '{}' ADDR <method>: a
// request built from JSON with the fetched descriptors, the reply printed
// as JSON.
absl::StatusOr<std::string> CallWithJson(
    const std::shared_ptr<grpc::Channel>& channel,
    const google::protobuf::DescriptorPool& pool, const std::string& service,
    const std::string& method, const std::string& json_request,
    const std::string& token) {
  const google::protobuf::ServiceDescriptor* s =
      pool.FindServiceByName(service);
  if (s == nullptr) return absl::NotFoundError(service);
  const google::protobuf::MethodDescriptor* m = s->FindMethodByName(method);
  if (m == nullptr) return absl::NotFoundError(method);
  google::protobuf::DynamicMessageFactory factory(&pool);
  std::unique_ptr<google::protobuf::Message> request(
      factory.GetPrototype(m->input_type())->New());
  auto parsed =
      google::protobuf::util::JsonStringToMessage(json_request, request.get());
  if (!parsed.ok())
    return absl::InvalidArgumentError(std::string(parsed.message()));
  std::string bytes;
  if (!request->SerializeToString(&bytes))
    return absl::InternalError("serialize");

  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(5));
  if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
  grpc::ByteBuffer request_buffer = ToBuffer(bytes);
  grpc::ByteBuffer response_buffer;
  absl::Notification done;
  grpc::Status status;
  stub.UnaryCall(&context, absl::StrCat("/", service, "/", method),
                 grpc::StubOptions(), &request_buffer, &response_buffer,
                 [&](grpc::Status st) {
                   status = std::move(st);
                   done.Notify();
                 });
  done.WaitForNotification();
  if (!status.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                        status.error_message());
  }
  std::unique_ptr<google::protobuf::Message> reply(
      factory.GetPrototype(m->output_type())->New());
  if (!reply->ParseFromString(Flatten(response_buffer))) {
    return absl::InternalError("cannot parse the reply");
  }
  std::string json;
  auto printed = google::protobuf::util::MessageToJsonString(*reply, &json);
  if (!printed.ok()) return absl::InternalError(std::string(printed.message()));
  return json;
}

class ReflectionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ClusterOptions options;
    options.job_id = "reflect";
    options.nnodes = 2;
    options.nproc_per_node = 2;
    options.tensor_parallel = 2;
    options.heartbeat_timeout_ms = 5000;  // up for the whole suite
    options.extra_flags = {"--admin_kv_read=true"};
    cluster_ = new LocalCluster(options);
    start_ = new absl::Status(cluster_->Start());
  }
  static void TearDownTestSuite() {
    delete cluster_;
    delete start_;
    cluster_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(start_->ok()) << *start_; }

  std::shared_ptr<grpc::Channel> Channel(uint32_t node) {
    return grpc::CreateChannel(cluster_->tcp_address(node),
                               grpc::InsecureChannelCredentials());
  }

  static LocalCluster* cluster_;
  static absl::Status* start_;
};

LocalCluster* ReflectionTest::cluster_ = nullptr;
absl::Status* ReflectionTest::start_ = nullptr;

TEST_F(ReflectionTest, ListServicesNamesEveryService) {
  for (uint32_t node = 0; node < 2; ++node) {
    SCOPED_TRACE(absl::StrCat("node ", node));
    ReflectionStream stream(Channel(node));
    auto response = stream.Ask(kListServices, "");
    ASSERT_TRUE(response.ok()) << response.status();
    ASSERT_EQ(response->kind, kListServicesResponse) << response->error_message;
    const std::set<std::string> services(response->services.begin(),
                                         response->services.end());
    EXPECT_THAT(services, Contains("rankd.v1.Rank"));
    EXPECT_THAT(services, Contains("rankd.v1.Peer"));
    EXPECT_THAT(services, Contains("rankd.v1.Admin"));
    EXPECT_THAT(services, Contains("grpc.health.v1.Health"));
    EXPECT_THAT(services, Contains("grpc.reflection.v1alpha.ServerReflection"));
    EXPECT_EQ(services.size(), response->services.size()) << "duplicates";
    // A second request on the same stream works too (grpcurl reuses it).
    // gRPC 1.51's reflection service keeps one response object for the
    // whole stream, so the names come again, appended to the first list;
    // grpcurl de-duplicates, so compare as sets.
    auto again = stream.Ask(kListServices, "*");
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(
        std::set<std::string>(again->services.begin(), again->services.end()),
        services);
    grpc::Status closed = stream.Close();
    EXPECT_TRUE(closed.ok()) << closed.error_message();
  }
}

// Every service the daemon lists can be described, grpc.health.v1.Health
// included (gRPC serves it without a descriptor; rankd links one), and
// `grpcurl -plaintext -d '{"service": "readiness"}' ADDR
// grpc.health.v1.Health/Check` works from the fetched descriptors.
TEST_F(ReflectionTest, EveryListedServiceIsDescribedAndHealthIsCallable) {
  auto channel = Channel(0);
  ReflectionStream stream(channel);
  auto listed = stream.Ask(kListServices, "");
  ASSERT_TRUE(listed.ok()) << listed.status();
  RemoteDescriptors remote(&stream);
  for (const std::string& service : std::set<std::string>(
           listed->services.begin(), listed->services.end())) {
    SCOPED_TRACE(service);
    absl::Status added = remote.AddSymbol(service);
    EXPECT_TRUE(added.ok()) << added;
    EXPECT_NE(remote.pool().FindServiceByName(service), nullptr);
  }
  EXPECT_TRUE(stream.Close().ok());
  auto health = CallWithJson(channel, remote.pool(), "grpc.health.v1.Health",
                             "Check", R"({"service": "readiness"})", "");
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, R"({"status":"SERVING"})");
  auto unknown = CallWithJson(channel, remote.pool(), "grpc.health.v1.Health",
                              "Check", R"({"service": "no.such"})", "");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
}

// The same with a reflection client that is not rankd's code: npm's
// grpc-js-reflection-client over @grpc/grpc-js (tools/grpc-reflection-check,
// installed by tools/setup.sh), the way a grpcurl user relies on it.
TEST_F(ReflectionTest, AThirdPartyReflectionClientDescribesAndCallsTheDaemon) {
  // The script's own folder in the source tree holds its node_modules.
  char* real = ::realpath(
      Runfile("tools/grpc-reflection-check/check.mjs").c_str(), nullptr);
  ASSERT_NE(real, nullptr);
  const std::string script(real);
  std::free(real);
  const std::string modules =
      script.substr(0, script.rfind('/')) + "/node_modules";
  ASSERT_EQ(::access(modules.c_str(), R_OK), 0)
      << modules << " is missing: run tools/setup.sh (it runs npm ci there)";
  const std::string log = cluster_->dir() + "/reflection-check.log";
  auto node = ChildProcess::Spawn(
      {"/usr/bin/env", "node", script, cluster_->tcp_address(0),
       cluster_->credentials_dir() + "/operator.token"},
      {}, log);
  ASSERT_TRUE(node.ok()) << node.status();
  std::optional<int> status = node->Wait(absl::Seconds(60));
  ASSERT_TRUE(status.has_value()) << node->ReadLog();
  const std::string out = node->ReadLog();
  ASSERT_EQ(ExitCode(*status), 0) << out;
  EXPECT_THAT(out, HasSubstr("SERVICES grpc.health.v1.Health,"
                             "grpc.reflection.v1alpha.ServerReflection,"
                             "rankd.v1.Admin,rankd.v1.Peer,rankd.v1.Rank\n"));
  EXPECT_THAT(out, HasSubstr("DESCRIBED grpc.health.v1.Health Check,Watch\n"));
  EXPECT_THAT(out, HasSubstr("DESCRIBED rankd.v1.Admin GetJob,GetTopology,"
                             "KvGet,ListMembers,WatchEvents\n"));
  EXPECT_THAT(out, HasSubstr("HEALTH readiness SERVING\n"));
  EXPECT_THAT(out, HasSubstr("GETJOB reflect JOB_STATE_FORMING\n"));
  EXPECT_THAT(out, HasSubstr(absl::StrCat(
                       "GETJOB_WITHOUT_TOKEN ",
                       static_cast<int>(grpc::StatusCode::UNAUTHENTICATED))));
}

TEST_F(ReflectionTest, UnknownSymbolAndFileAreNotFound) {
  ReflectionStream stream(Channel(0));
  auto symbol = stream.Ask(kFileContainingSymbol, "rankd.v1.NoSuchService");
  ASSERT_TRUE(symbol.ok()) << symbol.status();
  EXPECT_EQ(symbol->kind, kErrorResponse);
  EXPECT_EQ(symbol->error_code, static_cast<int>(grpc::StatusCode::NOT_FOUND));
  auto file = stream.Ask(kFileByFilename, "rankd/v1/nope.proto");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->kind, kErrorResponse);
  EXPECT_EQ(file->error_code, static_cast<int>(grpc::StatusCode::NOT_FOUND));
  EXPECT_TRUE(stream.Close().ok());
}

TEST_F(ReflectionTest, DescriptorsFromTheDaemonDescribeEveryRankdService) {
  ReflectionStream stream(Channel(1));
  RemoteDescriptors remote(&stream);
  for (const char* service :
       {"rankd.v1.Admin", "rankd.v1.Rank", "rankd.v1.Peer"}) {
    absl::Status added = remote.AddSymbol(service);
    ASSERT_TRUE(added.ok()) << service << ": " << added;
  }
  EXPECT_TRUE(stream.Close().ok());
  const google::protobuf::DescriptorPool& pool = remote.pool();
  ASSERT_NE(pool.FindFileByName("rankd/v1/common.proto"), nullptr);
  const auto* admin = pool.FindServiceByName("rankd.v1.Admin");
  ASSERT_NE(admin, nullptr);
  // Built from the daemon's bytes, not this binary's generated code.
  EXPECT_NE(admin,
            v1::JobStatus::descriptor()->file()->pool()->FindServiceByName(
                "rankd.v1.Admin"));
  std::vector<std::string> methods;
  for (int i = 0; i < admin->method_count(); ++i) {
    methods.push_back(admin->method(i)->name());
  }
  EXPECT_THAT(methods,
              ::testing::ElementsAre("GetJob", "GetTopology", "ListMembers",
                                     "KvGet", "WatchEvents"));
  EXPECT_TRUE(admin->FindMethodByName("WatchEvents")->server_streaming());
  const auto* rank = pool.FindServiceByName("rankd.v1.Rank");
  ASSERT_NE(rank, nullptr);
  EXPECT_NE(rank->FindMethodByName("AllGatherWords"), nullptr);
  const auto* topology = pool.FindMessageTypeByName("rankd.v1.Topology");
  ASSERT_NE(topology, nullptr);
  EXPECT_EQ(topology->FindFieldByName("groups")->message_type()->full_name(),
            "rankd.v1.CollectiveGroup");
  ASSERT_NE(pool.FindServiceByName("rankd.v1.Peer"), nullptr);

  // A dependency asked for by file name, as grpcurl does for imports the
  // symbol's answer did not include.
  ReflectionStream by_name(Channel(0));
  auto common = by_name.Ask(kFileByFilename, "rankd/v1/common.proto");
  ASSERT_TRUE(common.ok()) << common.status();
  ASSERT_EQ(common->kind, kFileDescriptorResponse) << common->error_message;
  ASSERT_FALSE(common->file_descriptors.empty());
  google::protobuf::FileDescriptorProto file;
  ASSERT_TRUE(file.ParseFromString(common->file_descriptors[0]));
  EXPECT_EQ(file.name(), "rankd/v1/common.proto");
  EXPECT_EQ(file.package(), "rankd.v1");
  std::set<std::string> messages;
  for (const auto& m : file.message_type()) messages.insert(m.name());
  EXPECT_THAT(messages, Contains("SessionDescriptor"));
  EXPECT_THAT(messages, Contains("JobEvent"));
  auto admin_file = by_name.Ask(kFileByFilename, "rankd/v1/admin.proto");
  ASSERT_TRUE(admin_file.ok()) << admin_file.status();
  ASSERT_EQ(admin_file->kind, kFileDescriptorResponse);
  bool found_admin = false;
  for (const std::string& bytes : admin_file->file_descriptors) {
    ASSERT_TRUE(file.ParseFromString(bytes));
    if (file.name() != "rankd/v1/admin.proto") continue;
    found_admin = true;
    EXPECT_THAT(file.dependency(),
                ::testing::ElementsAre("rankd/v1/common.proto"));
    EXPECT_EQ(file.service(0).name(), "Admin");
  }
  EXPECT_TRUE(found_admin);
  EXPECT_TRUE(by_name.Close().ok());
}

TEST_F(ReflectionTest, AdminCallsWithFetchedDescriptorsPrintAsJson) {
  auto channel = Channel(0);
  ReflectionStream stream(channel);
  RemoteDescriptors remote(&stream);
  absl::Status added = remote.AddSymbol("rankd.v1.Admin");
  ASSERT_TRUE(added.ok()) << added;
  EXPECT_TRUE(stream.Close().ok());

  // grpcurl -plaintext -d '{}' ADDR rankd.v1.Admin/GetTopology
  auto topology_json =
      CallWithJson(channel, remote.pool(), "rankd.v1.Admin", "GetTopology",
                   "{}", cluster_->operator_token());
  ASSERT_TRUE(topology_json.ok()) << topology_json.status();
  EXPECT_THAT(*topology_json, HasSubstr("\"jobId\":\"reflect\""));
  EXPECT_THAT(*topology_json, HasSubstr("\"worldSize\":4"));
  EXPECT_THAT(*topology_json, HasSubstr("\"kind\":\"GROUP_KIND_TENSOR\""));
  // Exactly what the generated types say.
  v1::Topology topology;
  auto parsed =
      google::protobuf::util::JsonStringToMessage(*topology_json, &topology);
  ASSERT_TRUE(parsed.ok()) << parsed.message() << "\n" << *topology_json;
  EXPECT_EQ(topology.world_size(), 4u);
  EXPECT_EQ(topology.nnodes(), 2u);
  EXPECT_EQ(topology.nproc_per_node(), 2u);
  EXPECT_EQ(topology.topology().tensor(), 2u);
  EXPECT_EQ(topology.topology().data(), 2u);
  ASSERT_EQ(topology.nodes_size(), 2);
  EXPECT_EQ(topology.nodes(1).address(), cluster_->tcp_address(1));
  int tensor_groups = 0;
  for (const auto& g : topology.groups()) {
    if (g.kind() == v1::GROUP_KIND_TENSOR) {
      ++tensor_groups;
      EXPECT_EQ(g.members_size(), 2);
    }
    if (g.kind() == v1::GROUP_KIND_WORLD) {
      EXPECT_THAT(g.members(), ::testing::ElementsAre(0, 1, 2, 3));
    }
  }
  EXPECT_EQ(tensor_groups, 2);
  ClientOptions options = cluster_->AdminOptions(0);
  auto admin = AdminClient::Connect(options);
  ASSERT_TRUE(admin.ok()) << admin.status();
  auto generated = (*admin)->GetTopology();
  ASSERT_TRUE(generated.ok()) << generated.status();
  std::string generated_json;
  ASSERT_TRUE(
      google::protobuf::util::MessageToJsonString(*generated, &generated_json)
          .ok());
  EXPECT_EQ(*topology_json, generated_json);

  // grpcurl -plaintext -d '{}' ADDR rankd.v1.Admin/GetJob
  auto job_json = CallWithJson(channel, remote.pool(), "rankd.v1.Admin",
                               "GetJob", "{}", cluster_->operator_token());
  ASSERT_TRUE(job_json.ok()) << job_json.status();
  EXPECT_THAT(*job_json, HasSubstr("\"state\":\"JOB_STATE_FORMING\""));
  v1::JobStatus job;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(*job_json, &job).ok())
      << *job_json;
  EXPECT_EQ(job.job_id(), "reflect");
  EXPECT_EQ(job.world_size(), 4u);
  EXPECT_EQ(job.nnodes(), 2u);
  EXPECT_EQ(job.registered_nodes(), 2u);
  EXPECT_TRUE(job.served_by_coordinator());
  EXPECT_EQ(job.coordinator_address(), cluster_->tcp_address(0));

  // A request field set from JSON reaches the daemon (AdminKvGet.key).
  auto missing =
      CallWithJson(channel, remote.pool(), "rankd.v1.Admin", "KvGet",
                   R"({"key": "no-such-key"})", cluster_->operator_token());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("key 'no-such-key' is not set"));
  // And malformed JSON is caught before anything is sent.
  auto bad = CallWithJson(channel, remote.pool(), "rankd.v1.Admin", "KvGet",
                          R"({"nope": 1})", cluster_->operator_token());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ReflectionTest, HealthServesLivenessAndReadiness) {
  for (uint32_t node = 0; node < 2; ++node) {
    SCOPED_TRACE(absl::StrCat("node ", node));
    ClientOptions options;
    options.target = cluster_->tcp_address(node);
    auto admin = AdminClient::Connect(options);
    ASSERT_TRUE(admin.ok()) << admin.status();
    auto liveness = (*admin)->Health("");
    ASSERT_TRUE(liveness.ok()) << liveness.status();
    EXPECT_EQ(*liveness, "SERVING");
    auto readiness = (*admin)->Health("readiness");
    ASSERT_TRUE(readiness.ok()) << readiness.status();
    EXPECT_EQ(*readiness, "SERVING");
    auto unknown = (*admin)->Health("no.such.Service");
    EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound)
        << unknown.status();
    // The same answers over the node's Unix socket.
    options.target = cluster_->socket_target(node);
    auto local = AdminClient::Connect(options);
    ASSERT_TRUE(local.ok()) << local.status();
    auto local_readiness = (*local)->Health("readiness");
    ASSERT_TRUE(local_readiness.ok()) << local_readiness.status();
    EXPECT_EQ(*local_readiness, "SERVING");
  }
}

}  // namespace
}  // namespace rankd::testing
