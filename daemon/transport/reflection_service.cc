#include "daemon/transport/reflection_service.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <climits>
#include <deque>
#include <functional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "google/protobuf/descriptor.pb.h"

namespace rankd {

using google::protobuf::Descriptor;
using google::protobuf::DescriptorPool;
using google::protobuf::FieldDescriptor;
using google::protobuf::FileDescriptor;

// One ServerReflectionInfo call: reads a request, writes its answer, and
// again, one at a time (the client's reading paces the stream). Owned by
// gRPC; deletes itself in OnDone.
class ReflectionService::Stream final
    : public grpc::ServerBidiReactor<Request, Response> {
 public:
  // `refused_by` names the limit that refused the stream (nullptr: admitted).
  Stream(ReflectionService* service, std::string peer, const char* refused_by)
      : service_(service), peer_(std::move(peer)), admitted_(!refused_by) {
    if (!admitted_) {
      const bool per_peer =
          absl::string_view(refused_by) == "max_reflection_streams_per_peer";
      Finish(grpc::Status(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          absl::StrCat("this daemon serves at most ",
                       per_peer ? service_->limits_.max_streams_per_peer
                                : service_->limits_.max_streams,
                       " reflection streams at once",
                       per_peer ? " from one peer" : " on this listener",
                       " (--", refused_by, "); try again later")));
      return;
    }
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client half-closed, or went away
      Finish(grpc::Status::OK);
      return;
    }
    if (++requests_ > service_->limits_.max_requests_per_stream) {
      Finish(grpc::Status(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          absl::StrCat("at most ", service_->limits_.max_requests_per_stream,
                       " requests on one reflection stream "
                       "(--max_reflection_requests_per_stream); open another "
                       "stream")));
      return;
    }
    // Built afresh: an answer holds what this request asked, nothing of the
    // requests before it.
    service_->Answer(request_, &response_, &sent_);
    StartWrite(&response_);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "client went away"));
      return;
    }
    StartRead(&request_);
  }

  void OnDone() override {
    if (admitted_) service_->Release(peer_);
    delete this;
  }

 private:
  ReflectionService* const service_;
  const std::string peer_;
  const bool admitted_;
  uint64_t requests_ = 0;
  // What this stream has sent: imports are sent once a stream.
  SentFiles sent_;
  Request request_;
  Response response_;
};

namespace {

std::vector<std::string> WithOwnName(std::vector<std::string> services) {
  services.push_back(
      grpc::reflection::v1alpha::ServerReflection::service_full_name());
  std::sort(services.begin(), services.end());
  services.erase(std::unique(services.begin(), services.end()), services.end());
  return services;
}

void SetError(grpc::StatusCode code, std::string message,
              ReflectionService::Response* response) {
  auto* error = response->mutable_error_response();
  error->set_error_code(static_cast<int32_t>(code));
  error->set_error_message(std::move(message));
}

}  // namespace

ReflectionService::ReflectionService(std::vector<std::string> services,
                                     Limits limits, const DescriptorPool* pool,
                                     PeerKey peer_key)
    : services_(WithOwnName(std::move(services))),
      limits_{std::max<uint32_t>(limits.max_streams, 1),
              std::max<uint32_t>(limits.max_requests_per_stream, 1),
              std::max<uint32_t>(limits.max_streams_per_peer, 1)},
      pool_(pool != nullptr ? pool : DescriptorPool::generated_pool()),
      peer_key_(peer_key != nullptr ? std::move(peer_key) : PeerAddress) {
  // The served files, then what they import; the names looked up here are
  // the daemon's own, so the pool's failed-lookup sets stay bounded.
  std::deque<const FileDescriptor*> next;
  for (const std::string& name : services_) {
    const google::protobuf::ServiceDescriptor* service =
        pool_->FindServiceByName(name);
    if (service != nullptr) next.push_back(service->file());
  }
  while (!next.empty()) {
    const FileDescriptor* file = next.front();
    next.pop_front();
    if (!files_.emplace(file->name(), file).second) continue;
    IndexFile(file);
    for (int i = 0; i < file->dependency_count(); ++i) {
      next.push_back(file->dependency(i));
    }
  }
}

void ReflectionService::IndexFile(const FileDescriptor* file) {
  auto add = [&](const std::string& name) { symbols_.emplace(name, file); };
  auto add_extension = [&](const FieldDescriptor* e) {
    add(e->full_name());
    extensions_.emplace(
        std::make_pair(e->containing_type()->full_name(), e->number()), e);
  };
  auto add_enum = [&](const google::protobuf::EnumDescriptor* e) {
    add(e->full_name());
    for (int i = 0; i < e->value_count(); ++i) add(e->value(i)->full_name());
  };
  std::function<void(const Descriptor*)> add_message =
      [&](const Descriptor* m) {
        add(m->full_name());
        for (int i = 0; i < m->field_count(); ++i) {
          add(m->field(i)->full_name());
        }
        for (int i = 0; i < m->oneof_decl_count(); ++i) {
          add(m->oneof_decl(i)->full_name());
        }
        for (int i = 0; i < m->nested_type_count(); ++i) {
          add_message(m->nested_type(i));
        }
        for (int i = 0; i < m->enum_type_count(); ++i) {
          add_enum(m->enum_type(i));
        }
        for (int i = 0; i < m->extension_count(); ++i) {
          add_extension(m->extension(i));
        }
      };
  for (int i = 0; i < file->message_type_count(); ++i) {
    add_message(file->message_type(i));
  }
  for (int i = 0; i < file->enum_type_count(); ++i)
    add_enum(file->enum_type(i));
  for (int i = 0; i < file->extension_count(); ++i) {
    add_extension(file->extension(i));
  }
  for (int i = 0; i < file->service_count(); ++i) {
    const google::protobuf::ServiceDescriptor* service = file->service(i);
    add(service->full_name());
    for (int m = 0; m < service->method_count(); ++m) {
      add(service->method(m)->full_name());
    }
  }
}

ReflectionService::~ReflectionService() = default;

grpc::ServerBidiReactor<ReflectionService::Request,
                        ReflectionService::Response>*
ReflectionService::ServerReflectionInfo(grpc::CallbackServerContext* context) {
  std::string peer = peer_key_(context->peer());
  const char* refused_by = nullptr;
  if (!Admit(peer, &refused_by)) return new Stream(this, "", refused_by);
  return new Stream(this, std::move(peer), nullptr);
}

bool ReflectionService::Admit(const std::string& peer, const char** limit) {
  absl::MutexLock lock(&streams_mu_);
  if (open_streams_.load() >= limits_.max_streams) {
    *limit = "max_reflection_streams";
    return false;
  }
  uint32_t& mine = streams_by_peer_[peer];
  if (mine >= limits_.max_streams_per_peer) {
    *limit = "max_reflection_streams_per_peer";
    return false;
  }
  ++mine;
  open_streams_.fetch_add(1);
  return true;
}

void ReflectionService::Release(const std::string& peer) {
  absl::MutexLock lock(&streams_mu_);
  auto it = streams_by_peer_.find(peer);
  if (it != streams_by_peer_.end() && --it->second == 0) {
    streams_by_peer_.erase(it);
  }
  open_streams_.fetch_sub(1);
}

std::string ReflectionService::PeerAddress(const std::string& grpc_peer) {
  absl::string_view rest = grpc_peer;
  if (absl::ConsumePrefix(&rest, "ipv4:")) {
    return absl::StrCat("ipv4:", rest.substr(0, rest.rfind(':')));
  }
  if (!absl::ConsumePrefix(&rest, "ipv6:")) return grpc_peer;
  // "[addr]:port", or URI-encoded "%5Baddr%5D:port".
  std::string host = absl::StrReplaceAll(
      rest,
      {{"%5B", "["}, {"%5D", "]"}, {"%5b", "["}, {"%5d", "]"}, {"%25", "%"}});
  if (!host.empty() && host[0] == '[') {
    host = host.substr(1, host.find(']') - 1);
  }
  host = host.substr(0, host.find('%'));  // no zone
  in6_addr a{};
  if (::inet_pton(AF_INET6, host.c_str(), &a) != 1) return grpc_peer;
  if (IN6_IS_ADDR_V4MAPPED(&a)) {
    char v4[INET_ADDRSTRLEN];
    ::inet_ntop(AF_INET, &a.s6_addr[12], v4, sizeof(v4));
    return absl::StrCat("ipv4:", v4);
  }
  std::fill(a.s6_addr + 8, a.s6_addr + 16, 0);  // the /64
  char v6[INET6_ADDRSTRLEN];
  ::inet_ntop(AF_INET6, &a, v6, sizeof(v6));
  return absl::StrCat("ipv6:", v6, "/64");
}

const std::string& ReflectionService::Serialized(const FileDescriptor* file) {
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = serialized_.try_emplace(file);
  if (inserted) {
    google::protobuf::FileDescriptorProto proto;
    file->CopyTo(&proto);
    proto.SerializeToString(&it->second);
  }
  return it->second;  // map nodes do not move; entries are never erased
}

void ReflectionService::AddFileWithImports(const FileDescriptor* file,
                                           Response* response,
                                           SentFiles* sent) {
  auto* files = response->mutable_file_descriptor_response();
  // The file asked for always (a client may ask again for what it lost);
  // an import already sent on the stream is not, nor what it imports (it
  // was sent with it).
  std::set<const FileDescriptor*> added = {file};
  std::deque<const FileDescriptor*> next = {file};
  while (!next.empty()) {
    const FileDescriptor* f = next.front();
    next.pop_front();
    files->add_file_descriptor_proto(Serialized(f));
    if (sent != nullptr) sent->insert(f);
    for (int i = 0; i < f->dependency_count(); ++i) {
      const FileDescriptor* dependency = f->dependency(i);
      if (sent != nullptr && sent->count(dependency) != 0) continue;
      if (added.insert(dependency).second) next.push_back(dependency);
    }
  }
}

void ReflectionService::Answer(const Request& request, Response* response,
                               SentFiles* sent) {
  response->Clear();
  if (request.ByteSizeLong() > kMaxReflectionRequestBytes) {
    SetError(grpc::StatusCode::INVALID_ARGUMENT,
             absl::StrCat("a reflection request of at most ",
                          kMaxReflectionRequestBytes, " bytes"),
             response);
    return;
  }
  response->set_valid_host(request.host());
  *response->mutable_original_request() = request;
  switch (request.message_request_case()) {
    case Request::kListServices: {
      auto* list = response->mutable_list_services_response();
      for (const std::string& name : services_) {
        list->add_service()->set_name(name);
      }
      return;
    }
    case Request::kFileByFilename: {
      auto it = files_.find(request.file_by_filename());
      const FileDescriptor* file = it == files_.end() ? nullptr : it->second;
      if (file == nullptr) {
        SetError(grpc::StatusCode::NOT_FOUND,
                 absl::StrCat("File not found: ", request.file_by_filename()),
                 response);
        return;
      }
      AddFileWithImports(file, response, sent);
      return;
    }
    case Request::kFileContainingSymbol: {
      auto it = symbols_.find(request.file_containing_symbol());
      const FileDescriptor* file = it == symbols_.end() ? nullptr : it->second;
      if (file == nullptr) {
        SetError(grpc::StatusCode::NOT_FOUND,
                 absl::StrCat("Symbol not found: ",
                              request.file_containing_symbol()),
                 response);
        return;
      }
      AddFileWithImports(file, response, sent);
      return;
    }
    case Request::kFileContainingExtension: {
      const auto& wanted = request.file_containing_extension();
      if (symbols_.count(wanted.containing_type()) == 0) {
        SetError(grpc::StatusCode::NOT_FOUND,
                 absl::StrCat("Type not found: ", wanted.containing_type()),
                 response);
        return;
      }
      auto it = extensions_.find(
          std::make_pair(wanted.containing_type(), wanted.extension_number()));
      if (it == extensions_.end()) {
        SetError(grpc::StatusCode::NOT_FOUND,
                 absl::StrCat("Extension not found: ", wanted.containing_type(),
                              " ", wanted.extension_number()),
                 response);
        return;
      }
      AddFileWithImports(it->second->file(), response, sent);
      return;
    }
    case Request::kAllExtensionNumbersOfType: {
      const std::string& type = request.all_extension_numbers_of_type();
      if (symbols_.count(type) == 0) {
        SetError(grpc::StatusCode::NOT_FOUND,
                 absl::StrCat("Type not found: ",
                              request.all_extension_numbers_of_type()),
                 response);
        return;
      }
      auto* numbers = response->mutable_all_extension_numbers_response();
      numbers->set_base_type_name(type);
      for (auto it = extensions_.lower_bound(std::make_pair(type, INT_MIN));
           it != extensions_.end() && it->first.first == type; ++it) {
        numbers->add_extension_number(it->first.second);
      }
      return;
    }
    case Request::MESSAGE_REQUEST_NOT_SET:
      break;
  }
  SetError(grpc::StatusCode::UNIMPLEMENTED,
           "the request names nothing to describe", response);
}

}  // namespace rankd
