// client/fake_services.cc: see fake_services.h.

#include "client/fake_services.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>

#include "absl/memory/memory.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/server_context.h"

namespace rankd::testing {
namespace {

// How often blocked handlers look at their call's cancellation flag.
constexpr absl::Duration kPoll = absl::Milliseconds(5);

}  // namespace

// ---------------------------------------------------------------------------
// FakeRankService

void FakeRankService::SetWorldSize(uint32_t world_size) {
  absl::MutexLock lock(&mu_);
  world_size_ = world_size;
}

void FakeRankService::SetJoinError(grpc::Status status) {
  absl::MutexLock lock(&mu_);
  join_error_ = std::move(status);
}

void FakeRankService::HoldRounds(bool hold) {
  absl::MutexLock lock(&mu_);
  hold_rounds_ = hold;
}

void FakeRankService::PushEvent(const v1::JobEvent& event) {
  absl::MutexLock lock(&mu_);
  events_.push_back(event);
}

void FakeRankService::CloseWatchStreams() {
  absl::MutexLock lock(&mu_);
  ++watch_generation_;
}

void FakeRankService::SetEpoch(uint64_t epoch) {
  absl::MutexLock lock(&mu_);
  epoch_ = epoch;
}

int FakeRankService::joins() const {
  absl::MutexLock lock(&mu_);
  return joins_;
}

v1::JoinRequest FakeRankService::last_join() const {
  absl::MutexLock lock(&mu_);
  return last_join_;
}

std::vector<v1::AllGatherWordsRequest> FakeRankService::rounds() const {
  absl::MutexLock lock(&mu_);
  return rounds_;
}

int FakeRankService::cancelled_rounds() const {
  absl::MutexLock lock(&mu_);
  return cancelled_rounds_;
}

int FakeRankService::leaves() const {
  absl::MutexLock lock(&mu_);
  return leaves_;
}

int FakeRankService::open_watch_streams() const {
  absl::MutexLock lock(&mu_);
  return open_watch_streams_;
}

int FakeRankService::kv_calls() const {
  absl::MutexLock lock(&mu_);
  return kv_calls_;
}

std::string FakeRankService::last_authorization() const {
  absl::MutexLock lock(&mu_);
  return last_authorization_;
}

bool FakeRankService::WaitForRounds(size_t n, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return rounds_.size() >= n;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
}

bool FakeRankService::WaitForOpenWatchStreams(int n,
                                              absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto reached = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return open_watch_streams_ == n;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&reached), timeout);
}

std::optional<bool> FakeRankService::watch_open_at_fast_path_opens() const {
  absl::MutexLock lock(&mu_);
  return watch_open_at_fast_path_opens_;
}

void FakeRankService::NoteFastPathOpen() {
  auto open = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return open_watch_streams_ > 0;
  };
  const bool watching =
      mu_.AwaitWithTimeout(absl::Condition(&open), absl::Seconds(5));
  watch_open_at_fast_path_opens_ =
      watch_open_at_fast_path_opens_.value_or(true) && watching;
}

grpc::Status FakeRankService::OpenRoundSlots(grpc::ServerContext* context,
                                             const v1::OpenRoundSlotsRequest*,
                                             v1::OpenRoundSlotsResponse*) {
  absl::MutexLock lock(&mu_);
  Record(context);
  NoteFastPathOpen();
  return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                      "the fake serves no round slots");
}

grpc::Status FakeRankService::OpenKvChannel(grpc::ServerContext* context,
                                            const v1::OpenKvChannelRequest*,
                                            v1::OpenKvChannelResponse*) {
  absl::MutexLock lock(&mu_);
  Record(context);
  NoteFastPathOpen();
  return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                      "the fake serves no key-value channel");
}

void FakeRankService::Record(grpc::ServerContext* context) {
  last_authorization_.clear();
  auto it = context->client_metadata().find("authorization");
  if (it != context->client_metadata().end()) {
    last_authorization_.assign(it->second.data(), it->second.size());
  }
}

grpc::Status FakeRankService::CheckMember(const v1::MemberRef& member) const {
  if (!joined_) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "not joined");
  }
  if (member.job_id() != last_join_.job_id() ||
      member.incarnation() != last_join_.incarnation() ||
      member.rank() != (last_join_.has_rank() ? last_join_.rank() : 0)) {
    return grpc::Status(
        grpc::StatusCode::FAILED_PRECONDITION,
        absl::StrCat("fenced: unknown member ", member.ShortDebugString()));
  }
  return grpc::Status::OK;
}

grpc::Status FakeRankService::Join(grpc::ServerContext* context,
                                   const v1::JoinRequest* request,
                                   v1::JoinResponse* response) {
  absl::MutexLock lock(&mu_);
  Record(context);
  last_join_ = *request;
  ++joins_;
  if (!join_error_.ok()) return join_error_;
  joined_ = true;
  v1::SessionDescriptor* s = response->mutable_session();
  s->set_job_id(request->job_id());
  s->set_job_incarnation(42);
  s->set_world_size(world_size_);
  s->set_rank(request->has_rank() ? request->rank() : 0);
  s->set_local_rank(request->local_rank());
  s->set_nnodes(1);
  s->set_nproc_per_node(world_size_);
  s->set_epoch(epoch_);
  v1::MemberRef* m = response->mutable_member();
  m->set_job_id(request->job_id());
  m->set_rank(s->rank());
  m->set_incarnation(request->incarnation());
  return grpc::Status::OK;
}

grpc::Status FakeRankService::AllGatherWords(
    grpc::ServerContext* context, const v1::AllGatherWordsRequest* request,
    v1::AllGatherWordsResponse* response) {
  {
    absl::MutexLock lock(&mu_);
    Record(context);
    if (grpc::Status s = CheckMember(request->member()); !s.ok()) return s;
    rounds_.push_back(*request);
  }
  const absl::Time deadline =
      absl::Now() + absl::Milliseconds(request->timeout_ms());
  // IsCancelled() may block in the sync server; never call it under mu_.
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (!hold_rounds_) break;
    }
    if (context->IsCancelled()) {
      absl::MutexLock lock(&mu_);
      ++cancelled_rounds_;
      return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
    }
    if (absl::Now() >= deadline) {
      return grpc::Status(
          grpc::StatusCode::DEADLINE_EXCEEDED,
          absl::StrCat("round ", request->round(), " timed out after ",
                       request->timeout_ms(), " ms; missing ranks: 1"));
    }
    absl::SleepFor(kPoll);
  }
  absl::MutexLock lock(&mu_);
  response->set_round(request->round());
  response->set_words_per_rank(request->words_size());
  for (uint32_t r = 0; r < world_size_; ++r) {
    response->mutable_words()->Add(request->words().begin(),
                                   request->words().end());
  }
  return grpc::Status::OK;
}

grpc::Status FakeRankService::KvSet(grpc::ServerContext* context,
                                    const v1::KvSetRequest* request,
                                    v1::KvSetResponse*) {
  absl::MutexLock lock(&mu_);
  Record(context);
  ++kv_calls_;
  if (grpc::Status s = CheckMember(request->member()); !s.ok()) return s;
  kv_[request->key()] = request->value();
  return grpc::Status::OK;
}

grpc::Status FakeRankService::KvGet(grpc::ServerContext* context,
                                    const v1::KvGetRequest* request,
                                    v1::KvGetResponse* response) {
  {
    absl::MutexLock lock(&mu_);
    Record(context);
    ++kv_calls_;
    if (grpc::Status s = CheckMember(request->member()); !s.ok()) return s;
  }
  const absl::Time deadline =
      absl::Now() + absl::Milliseconds(request->timeout_ms());
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto it = kv_.find(request->key());
      if (it != kv_.end()) {
        response->set_value(it->second);
        return grpc::Status::OK;
      }
    }
    if (absl::Now() >= deadline) {
      if (request->timeout_ms() == 0) {
        return grpc::Status(grpc::StatusCode::NOT_FOUND,
                            absl::StrCat("key ", request->key(), " not set"));
      }
      return grpc::Status(
          grpc::StatusCode::DEADLINE_EXCEEDED,
          absl::StrCat("key ", request->key(), " not set after ",
                       request->timeout_ms(), " ms"));
    }
    if (context->IsCancelled()) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
    }
    absl::SleepFor(kPoll);
  }
}

grpc::Status FakeRankService::KvAdd(grpc::ServerContext* context,
                                    const v1::KvAddRequest* request,
                                    v1::KvAddResponse* response) {
  absl::MutexLock lock(&mu_);
  Record(context);
  ++kv_calls_;
  if (grpc::Status s = CheckMember(request->member()); !s.ok()) return s;
  int64_t value = 0;
  auto it = kv_.find(request->key());
  if (it != kv_.end() && !absl::SimpleAtoi(it->second, &value)) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "key holds a non-counter value");
  }
  value += request->delta();
  kv_[request->key()] = absl::StrCat(value);
  response->set_value(value);
  return grpc::Status::OK;
}

grpc::Status FakeRankService::KvDelete(grpc::ServerContext* context,
                                       const v1::KvDeleteRequest* request,
                                       v1::KvDeleteResponse* response) {
  absl::MutexLock lock(&mu_);
  Record(context);
  ++kv_calls_;
  if (grpc::Status s = CheckMember(request->member()); !s.ok()) return s;
  response->set_existed(kv_.erase(request->key()) > 0);
  return grpc::Status::OK;
}

grpc::Status FakeRankService::KvCount(grpc::ServerContext* context,
                                      const v1::KvCountRequest* request,
                                      v1::KvCountResponse* response) {
  absl::MutexLock lock(&mu_);
  Record(context);
  ++kv_calls_;
  if (grpc::Status s = CheckMember(request->member()); !s.ok()) return s;
  uint64_t keys = 0;
  for (const auto& [key, value] : kv_) {
    if (absl::StartsWith(key, request->prefix())) ++keys;
  }
  response->set_keys(keys);
  return grpc::Status::OK;
}

grpc::Status FakeRankService::Watch(grpc::ServerContext* context,
                                    const v1::WatchRequest* request,
                                    grpc::ServerWriter<v1::JobEvent>* writer) {
  int generation;
  {
    absl::MutexLock lock(&mu_);
    Record(context);
    if (grpc::Status s = CheckMember(request->member()); !s.ok()) return s;
    ++open_watch_streams_;
    generation = watch_generation_;
  }
  size_t sent = 0;
  grpc::Status result = grpc::Status::OK;
  while (true) {
    std::vector<v1::JobEvent> batch;
    bool closed;
    {
      absl::MutexLock lock(&mu_);
      batch.assign(events_.begin() + sent, events_.end());
      sent = events_.size();
      closed = watch_generation_ != generation;
    }
    bool write_failed = false;
    for (const v1::JobEvent& event : batch) {
      if (event.sequence() <= request->after_sequence()) continue;
      if (!writer->Write(event)) {
        write_failed = true;
        break;
      }
    }
    if (closed || write_failed) break;
    if (context->IsCancelled()) {
      result = grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
      break;
    }
    absl::SleepFor(kPoll);
  }
  absl::MutexLock lock(&mu_);
  --open_watch_streams_;
  return result;
}

grpc::Status FakeRankService::Leave(grpc::ServerContext* context,
                                    const v1::LeaveRequest* request,
                                    v1::LeaveResponse*) {
  absl::MutexLock lock(&mu_);
  Record(context);
  if (grpc::Status s = CheckMember(request->member()); !s.ok()) return s;
  ++leaves_;
  return grpc::Status::OK;
}

// ---------------------------------------------------------------------------
// FakeAdminService

void FakeAdminService::SetJob(const v1::JobStatus& job) {
  absl::MutexLock lock(&mu_);
  job_ = job;
}

void FakeAdminService::SetTopology(const v1::Topology& topology) {
  absl::MutexLock lock(&mu_);
  topology_ = topology;
}

void FakeAdminService::SetMembers(const v1::MemberList& members) {
  absl::MutexLock lock(&mu_);
  members_ = members;
}

void FakeAdminService::SetKv(const std::string& key, const std::string& value) {
  absl::MutexLock lock(&mu_);
  kv_[key] = value;
}

void FakeAdminService::PushEvent(const v1::JobEvent& event) {
  absl::MutexLock lock(&mu_);
  events_.push_back(event);
}

grpc::Status FakeAdminService::GetJob(grpc::ServerContext*,
                                      const v1::GetJobRequest*,
                                      v1::JobStatus* response) {
  absl::MutexLock lock(&mu_);
  *response = job_;
  return grpc::Status::OK;
}

grpc::Status FakeAdminService::GetTopology(grpc::ServerContext*,
                                           const v1::GetTopologyRequest*,
                                           v1::Topology* response) {
  absl::MutexLock lock(&mu_);
  *response = topology_;
  return grpc::Status::OK;
}

grpc::Status FakeAdminService::ListMembers(grpc::ServerContext*,
                                           const v1::ListMembersRequest*,
                                           v1::MemberList* response) {
  absl::MutexLock lock(&mu_);
  *response = members_;
  return grpc::Status::OK;
}

grpc::Status FakeAdminService::KvGet(grpc::ServerContext*,
                                     const v1::AdminKvGetRequest* request,
                                     v1::AdminKvGetResponse* response) {
  absl::MutexLock lock(&mu_);
  auto it = kv_.find(request->key());
  if (it == kv_.end()) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat("key ", request->key(), " not set"));
  }
  response->set_value(it->second);
  return grpc::Status::OK;
}

grpc::Status FakeAdminService::WatchEvents(
    grpc::ServerContext* context, const v1::WatchEventsRequest* request,
    grpc::ServerWriter<v1::JobEvent>* writer) {
  size_t sent = 0;
  while (!context->IsCancelled()) {
    std::vector<v1::JobEvent> batch;
    {
      absl::MutexLock lock(&mu_);
      batch.assign(events_.begin() + sent, events_.end());
      sent = events_.size();
    }
    for (const v1::JobEvent& event : batch) {
      if (event.sequence() <= request->after_sequence()) continue;
      if (!writer->Write(event)) return grpc::Status::OK;
    }
    absl::SleepFor(kPoll);
  }
  return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
}

// ---------------------------------------------------------------------------
// FakeDaemon

absl::StatusOr<std::unique_ptr<FakeDaemon>> FakeDaemon::Start(
    Transport transport, bool permit_keepalive) {
  static std::atomic<int> counter{0};
  auto daemon = absl::WrapUnique(new FakeDaemon());
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  if (permit_keepalive) {
    builder.AddChannelArgument(
        GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 500);
    builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  }
  int port = 0;
  if (transport == Transport::kUnix) {
    daemon->socket_path_ = absl::StrCat("/tmp/rankd_client_test_", ::getpid(),
                                        "_", counter++, ".sock");
    std::remove(daemon->socket_path_.c_str());
    daemon->target_ = absl::StrCat("unix://", daemon->socket_path_);
    builder.AddListeningPort(daemon->target_,
                             grpc::InsecureServerCredentials());
  } else {
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
  }
  builder.RegisterService(&daemon->rank_);
  builder.RegisterService(&daemon->admin_);
  daemon->server_ = builder.BuildAndStart();
  if (daemon->server_ == nullptr) {
    return absl::InternalError("fake daemon: cannot start gRPC server");
  }
  if (transport == Transport::kTcp) {
    if (port == 0) return absl::InternalError("fake daemon: no TCP port");
    daemon->target_ = absl::StrCat("127.0.0.1:", port);
  }
  return daemon;
}

void FakeDaemon::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  server_->Shutdown(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(100));
  server_->Wait();
  if (!socket_path_.empty()) std::remove(socket_path_.c_str());
}

FakeDaemon::~FakeDaemon() { Shutdown(); }

}  // namespace rankd::testing
