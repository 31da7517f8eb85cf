// ReflectionService in process, through gRPC's generated reflection stub:
// what each request is answered with, that answers on one stream stay the
// size of what was asked, and the bounds on streams and requests.
#include "daemon/reflection_service.h"

#include <chrono>
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
  void Serve(ReflectionService::Limits limits) {
    (void)v1::JobStatus::descriptor();  // links rankd's protos in
    service_ = std::make_unique<ReflectionService>(
        std::vector<std::string>{"rankd.v1.Admin", "grpc.health.v1.Health"},
        limits);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = ServerReflection::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                            grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
  }

  struct Open {
    std::unique_ptr<grpc::ClientContext> context =
        std::make_unique<grpc::ClientContext>();
    std::unique_ptr<Stream> stream;
  };
  Open OpenStream() {
    Open open;
    open.stream = stub_->ServerReflectionInfo(open.context.get());
    return open;
  }

  std::unique_ptr<ReflectionService> service_;
  std::unique_ptr<grpc::Server> server_;
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
  // Methods and nested names are symbols too (grpcurl asks for them).
  ASSERT_TRUE(s.stream->Write(Symbol("rankd.v1.Admin.GetJob")));
  ASSERT_TRUE(s.stream->Read(&response));
  EXPECT_THAT(FileNames(response),
              ElementsAre("rankd/v1/admin.proto", "rankd/v1/common.proto"));

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
TEST_F(ReflectionServiceTest, AnswersOnOneStreamStayTheSizeOfWhatWasAsked) {
  Serve({});
  Open s = OpenStream();
  ServerReflectionResponse response;
  size_t list_size = 0;
  size_t symbol_size = 0;
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(s.stream->Write(i % 2 == 0 ? ListServices()
                                           : Symbol("rankd.v1.Admin")));
    ASSERT_TRUE(s.stream->Read(&response)) << i;
    size_t& first = i % 2 == 0 ? list_size : symbol_size;
    if (first == 0) first = response.ByteSizeLong();
    ASSERT_EQ(response.ByteSizeLong(), first) << "request " << i;
  }
  s.stream->WritesDone();
  EXPECT_TRUE(s.stream->Finish().ok());
}

TEST_F(ReflectionServiceTest, AStreamCarriesAtMostItsRequests) {
  Serve({.max_streams = 4, .max_requests_per_stream = 5});
  Open s = OpenStream();
  ServerReflectionResponse response;
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(s.stream->Write(ListServices()));
    ASSERT_TRUE(s.stream->Read(&response)) << i;
  }
  s.stream->Write(ListServices());
  EXPECT_FALSE(s.stream->Read(&response));
  grpc::Status status = s.stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(status.error_message(),
              ::testing::HasSubstr("--max_reflection_requests_per_stream"));
}

TEST_F(ReflectionServiceTest, AtMostMaxStreamsAtOnceThenAPlaceIsFreed) {
  Serve({.max_streams = 2, .max_requests_per_stream = 100});
  ServerReflectionResponse response;
  std::vector<Open> open;
  for (int i = 0; i < 2; ++i) {
    open.push_back(OpenStream());
    ASSERT_TRUE(open.back().stream->Write(ListServices()));
    ASSERT_TRUE(open.back().stream->Read(&response));
  }
  EXPECT_EQ(service_->open_streams(), 2u);
  Open refused = OpenStream();
  refused.stream->Write(ListServices());
  EXPECT_FALSE(refused.stream->Read(&response));
  grpc::Status status = refused.stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(status.error_message(),
              ::testing::HasSubstr("--max_reflection_streams"));

  open[0].stream->WritesDone();
  EXPECT_TRUE(open[0].stream->Finish().ok());
  // OnDone runs shortly after the client sees the status.
  for (int i = 0; i < 200 && service_->open_streams() != 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(service_->open_streams(), 1u);
  Open again = OpenStream();
  ASSERT_TRUE(again.stream->Write(ListServices()));
  EXPECT_TRUE(again.stream->Read(&response));
  again.stream->WritesDone();
  EXPECT_TRUE(again.stream->Finish().ok());
  open[1].stream->WritesDone();
  EXPECT_TRUE(open[1].stream->Finish().ok());
}

}  // namespace
}  // namespace rankd
