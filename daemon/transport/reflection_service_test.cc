// ReflectionService in process, through gRPC's generated reflection stub:
// what each request is answered with, that answers on one stream stay the
// size of what was asked, and the bounds on streams and requests.
#include "daemon/transport/reflection_service.h"

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "google/protobuf/descriptor.pb.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "rankd/v1/admin.grpc.pb.h"

namespace rankd {
namespace {

using grpc::reflection::v1alpha::ServerReflection;
using grpc::reflection::v1alpha::ServerReflectionRequest;
using grpc::reflection::v1alpha::ServerReflectionResponse;
using ::testing::ElementsAre;

using Stream =
    grpc::ClientReaderWriter<ServerReflectionRequest, ServerReflectionResponse>;

class ReflectionServiceTest : public ::testing::Test {
 protected:
  void Serve(ReflectionService::Limits limits,
             ReflectionService::PeerKey peer_key = nullptr) {
    (void)v1::JobStatus::descriptor();  // links rankd's protos in
    service_ = std::make_unique<ReflectionService>(
        std::vector<std::string>{"rankd.v1.Admin", "grpc.health.v1.Health"},
        limits, nullptr, std::move(peer_key));
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    target_ = "127.0.0.1:" + std::to_string(port);
    stub_ = NewStub();
  }
  // A stub on a connection of its own.
  std::unique_ptr<ServerReflection::Stub> NewStub() {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    return ServerReflection::NewStub(grpc::CreateCustomChannel(
        target_, grpc::InsecureChannelCredentials(), args));
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
  }

  struct Open {
    std::unique_ptr<grpc::ClientContext> context =
        std::make_unique<grpc::ClientContext>();
    std::unique_ptr<Stream> stream;
  };
  Open OpenStream(ServerReflection::Stub* stub = nullptr) {
    Open open;
    open.stream = (stub != nullptr ? stub : stub_.get())
                      ->ServerReflectionInfo(open.context.get());
    return open;
  }

  std::unique_ptr<ReflectionService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string target_;
  std::unique_ptr<ServerReflection::Stub> stub_;
};

ServerReflectionRequest ListServices() {
  ServerReflectionRequest r;
  r.set_list_services("");
  return r;
}

ServerReflectionRequest Symbol(const std::string& name) {
  ServerReflectionRequest r;
  r.set_file_containing_symbol(name);
  return r;
}

std::vector<std::string> FileNames(const ServerReflectionResponse& response) {
  std::vector<std::string> names;
  for (const std::string& bytes :
       response.file_descriptor_response().file_descriptor_proto()) {
    google::protobuf::FileDescriptorProto file;
    EXPECT_TRUE(file.ParseFromString(bytes));
    names.push_back(file.name());
  }
  return names;
}

TEST_F(ReflectionServiceTest, AnswersEachKindOfRequest) {
  Serve({});
  Open s = OpenStream();
  ServerReflectionResponse response;
  ASSERT_TRUE(s.stream->Write(ListServices()));
  ASSERT_TRUE(s.stream->Read(&response));
  std::vector<std::string> services;
  for (const auto& service : response.list_services_response().service()) {
    services.push_back(service.name());
  }
  EXPECT_THAT(services, ElementsAre("grpc.health.v1.Health",
                                    "grpc.reflection.v1alpha.ServerReflection",
                                    "rankd.v1.Admin"));
  EXPECT_TRUE(response.original_request().has_list_services());

  // The file declaring a symbol first, then what it imports.
  ASSERT_TRUE(s.stream->Write(Symbol("rankd.v1.Admin")));
  ASSERT_TRUE(s.stream->Read(&response));
  EXPECT_THAT(FileNames(response),
              ElementsAre("rankd/v1/admin.proto", "rankd/v1/common.proto"));
  // Methods and nested names are symbols too (grpcurl asks for them). The
  // file is sent again, what it imports is not: this stream has it.
  ASSERT_TRUE(s.stream->Write(Symbol("rankd.v1.Admin.GetJob")));
  ASSERT_TRUE(s.stream->Read(&response));
  EXPECT_THAT(FileNames(response), ElementsAre("rankd/v1/admin.proto"));

  ServerReflectionRequest by_name;
  by_name.set_file_by_filename("rankd/v1/common.proto");
  ASSERT_TRUE(s.stream->Write(by_name));
  ASSERT_TRUE(s.stream->Read(&response));
  EXPECT_THAT(FileNames(response), ElementsAre("rankd/v1/common.proto"));

  ASSERT_TRUE(s.stream->Write(Symbol("rankd.v1.NoSuch")));
  ASSERT_TRUE(s.stream->Read(&response));
  EXPECT_EQ(response.error_response().error_code(),
            static_cast<int>(grpc::StatusCode::NOT_FOUND));

  ServerReflectionRequest extensions;
  extensions.set_all_extension_numbers_of_type("rankd.v1.JobStatus");
  ASSERT_TRUE(s.stream->Write(extensions));
  ASSERT_TRUE(s.stream->Read(&response));
  EXPECT_EQ(response.all_extension_numbers_response().base_type_name(),
            "rankd.v1.JobStatus");
  EXPECT_EQ(response.all_extension_numbers_response().extension_number_size(),
            0);

  ServerReflectionRequest empty;  // names nothing
  ASSERT_TRUE(s.stream->Write(empty));
  ASSERT_TRUE(s.stream->Read(&response));
  EXPECT_EQ(response.error_response().error_code(),
            static_cast<int>(grpc::StatusCode::UNIMPLEMENTED));

  ServerReflectionRequest huge;
  huge.set_file_containing_symbol(std::string(kMaxReflectionRequestBytes, 'x'));
  ASSERT_TRUE(s.stream->Write(huge));
  ASSERT_TRUE(s.stream->Read(&response));
  EXPECT_EQ(response.error_response().error_code(),
            static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  EXPECT_FALSE(response.has_original_request());

  s.stream->WritesDone();
  EXPECT_TRUE(s.stream->Finish().ok());
}

// Only the served API is described: a proto linked into the binary but not
// imported by a served service is not found (names are looked up in the
// service's own index, never in the generated pool, whose failed lookups of
// made-up names it would remember for good).
TEST_F(ReflectionServiceTest, DescribesOnlyTheServedFiles) {
  Serve({});
  (void)google::protobuf::FileDescriptorProto::descriptor();  // linked in
  Open s = OpenStream();
  ServerReflectionResponse response;
  ASSERT_TRUE(s.stream->Write(Symbol("google.protobuf.FileDescriptorProto")));
  ASSERT_TRUE(s.stream->Read(&response));
  EXPECT_EQ(response.error_response().error_code(),
            static_cast<int>(grpc::StatusCode::NOT_FOUND));
  ServerReflectionRequest by_name;
  by_name.set_file_by_filename("google/protobuf/descriptor.proto");
  ASSERT_TRUE(s.stream->Write(by_name));
  ASSERT_TRUE(s.stream->Read(&response));
  EXPECT_EQ(response.error_response().error_code(),
            static_cast<int>(grpc::StatusCode::NOT_FOUND));
  // Names inside the served files are symbols: a field, an enum value.
  ASSERT_TRUE(s.stream->Write(Symbol("rankd.v1.SessionDescriptor.job_id")));
  ASSERT_TRUE(s.stream->Read(&response));
  EXPECT_THAT(FileNames(response), ElementsAre("rankd/v1/common.proto"));
  s.stream->WritesDone();
  EXPECT_TRUE(s.stream->Finish().ok());
}

// gRPC 1.51's service answered request N with N requests' worth of answers.
// Here the first answer of each kind is the largest (it carries the
// imports), and every later one is the same size.
TEST_F(ReflectionServiceTest, AnswersOnOneStreamStayTheSizeOfWhatWasAsked) {
  Serve({});
  Open s = OpenStream();
  ServerReflectionResponse response;
  size_t list_size = 0;
  size_t first_symbol_size = 0;
  size_t symbol_size = 0;
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(s.stream->Write(i % 2 == 0 ? ListServices()
                                           : Symbol("rankd.v1.Admin")));
    ASSERT_TRUE(s.stream->Read(&response)) << i;
    const size_t size = response.ByteSizeLong();
    if (i == 0) list_size = size;
    if (i == 1) first_symbol_size = size;
    if (i == 3) symbol_size = size;
    if (i % 2 == 0) {
      ASSERT_EQ(size, list_size) << "request " << i;
    } else if (i > 1) {
      ASSERT_EQ(size, symbol_size) << "request " << i;
    }
  }
  EXPECT_LT(symbol_size, first_symbol_size);
  s.stream->WritesDone();
  EXPECT_TRUE(s.stream->Finish().ok());
}

// What the imports cost when resent with every answer (the answer as a
// stream's first request gets it, what this service sent before) and
// when sent once a stream, as now: a client describing the Admin service
// method by method (as grpcurl does for `describe`) gets each import once.
TEST_F(ReflectionServiceTest, ImportsAreSentOnceAStream) {
  Serve({});
  const google::protobuf::ServiceDescriptor* admin =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
          "rankd.v1.Admin");
  ASSERT_NE(admin, nullptr);
  Open s = OpenStream();
  ServerReflectionResponse response;
  size_t resent_bytes = 0;  // every answer with all its imports
  size_t sent_bytes = 0;    // as answered on the stream
  for (int m = 0; m < admin->method_count(); ++m) {
    const ServerReflectionRequest request =
        Symbol(admin->method(m)->full_name());
    ServerReflectionResponse alone;
    service_->Answer(request, &alone);  // no stream: every import
    EXPECT_THAT(FileNames(alone),
                ElementsAre("rankd/v1/admin.proto", "rankd/v1/common.proto"));
    resent_bytes += alone.ByteSizeLong();
    ASSERT_TRUE(s.stream->Write(request));
    ASSERT_TRUE(s.stream->Read(&response));
    sent_bytes += response.ByteSizeLong();
    if (m == 0) {
      EXPECT_THAT(FileNames(response),
                  ElementsAre("rankd/v1/admin.proto", "rankd/v1/common.proto"));
    } else {
      EXPECT_THAT(FileNames(response), ElementsAre("rankd/v1/admin.proto"));
    }
  }
  // The file a request names is sent even when the stream had it: the
  // client asked for it.
  ServerReflectionRequest by_name;
  by_name.set_file_by_filename("rankd/v1/common.proto");
  ASSERT_TRUE(s.stream->Write(by_name));
  ASSERT_TRUE(s.stream->Read(&response));
  EXPECT_THAT(FileNames(response), ElementsAre("rankd/v1/common.proto"));
  s.stream->WritesDone();
  EXPECT_TRUE(s.stream->Finish().ok());
  std::printf(
      "REFLECTION %d Admin methods described on one stream: %zu bytes "
      "with every import resent, %zu bytes with imports sent once\n",
      admin->method_count(), resent_bytes, sent_bytes);
  ASSERT_GT(admin->method_count(), 2);
  EXPECT_LT(sent_bytes, resent_bytes);
}

TEST(ReflectionPeerAddressTest, GroupsCallsByAddress) {
  EXPECT_EQ(ReflectionService::PeerAddress("ipv4:10.1.2.3:5000"),
            "ipv4:10.1.2.3");
  EXPECT_EQ(ReflectionService::PeerAddress("ipv6:[2001:db8:1:2:3:4:5:6]:80"),
            "ipv6:2001:db8:1:2::/64");
  EXPECT_EQ(ReflectionService::PeerAddress("ipv6:%5B2001:db8:1:2:ff::1%5D:80"),
            "ipv6:2001:db8:1:2::/64");
  EXPECT_EQ(ReflectionService::PeerAddress("ipv6:[::ffff:10.0.0.7]:9"),
            "ipv4:10.0.0.7");
  EXPECT_EQ(ReflectionService::PeerAddress("fd:17"), "fd:17");
  EXPECT_EQ(ReflectionService::PeerAddress("ipv6:[garbage]:1"),
            "ipv6:[garbage]:1");
}

// One peer holds at most max_streams_per_peer streams; another peer still
// gets its own. (Before, the only bound was max_streams, shared by all.)
TEST_F(ReflectionServiceTest, OnePeerCannotTakeAnothersStreams) {
  // Here every connection is a peer of its own (its port is kept).
  Serve({.max_streams = 8,
         .max_requests_per_stream = 100,
         .max_streams_per_peer = 2},
        [](const std::string& grpc_peer) { return grpc_peer; });
  auto greedy = NewStub();
  ServerReflectionResponse response;
  std::vector<Open> open;
  for (int i = 0; i < 2; ++i) {
    open.push_back(OpenStream(greedy.get()));
    ASSERT_TRUE(open.back().stream->Write(ListServices()));
    ASSERT_TRUE(open.back().stream->Read(&response));
  }
  Open refused = OpenStream(greedy.get());
  refused.stream->Write(ListServices());
  EXPECT_FALSE(refused.stream->Read(&response));
  grpc::Status status = refused.stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(status.error_message(),
              ::testing::HasSubstr("--max_reflection_streams_per_peer"));
  EXPECT_EQ(service_->open_streams(), 2u);

  auto other = NewStub();
  Open served = OpenStream(other.get());
  ASSERT_TRUE(served.stream->Write(ListServices()));
  EXPECT_TRUE(served.stream->Read(&response));
  served.stream->WritesDone();
  EXPECT_TRUE(served.stream->Finish().ok());
  for (Open& o : open) {
    o.stream->WritesDone();
    EXPECT_TRUE(o.stream->Finish().ok());
  }
}

}  // namespace
}  // namespace rankd
