// client/internal/rank_connection.cc: see rank_connection.h.

#include "client/internal/rank_connection.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/error_reason.h"
#include "common/incarnation.h"
#include "common/monotonic_clock.h"
#include "grpcpp/channel.h"

namespace rankd::internal {
namespace {

std::string KindName(v1::EventKind kind) {
  std::string name = v1::EventKind_Name(kind);
  if (absl::StartsWith(name, "EVENT_KIND_")) {
    name = name.substr(strlen("EVENT_KIND_"));
  }
  return name.empty() ? absl::StrCat("EVENT_KIND(", kind, ")") : name;
}

// The failure an event announces, or OK for events that are not failures.
// With recovery by domain (`domain` set: this rank's) a loss is a failure
// only through its own domain's DOMAIN_RECOVERING; other domains' losses
// leave this rank serving. A loss the job recovers from in place
// (JobEvent.ends_epoch) ended its epoch, not the job, and the words say so
// (client.h, JobHealth).
absl::Status FailureOf(const v1::JobEvent& event, absl::string_view job_id,
                       std::optional<uint32_t> domain) {
  switch (event.kind()) {
    case v1::EVENT_KIND_JOB_FAILED:
      break;
    case v1::EVENT_KIND_MEMBER_LOST:
    case v1::EVENT_KIND_NODE_LOST:
      if (domain.has_value()) return absl::OkStatus();
      break;
    case v1::EVENT_KIND_DOMAIN_RECOVERING:
      if (!domain.has_value() || !event.has_domain() ||
          event.domain() != *domain) {
        return absl::OkStatus();
      }
      break;
    default:
      return absl::OkStatus();
  }
  std::string what = KindName(event.kind());
  if (event.has_node_index()) {
    absl::StrAppend(&what, ", node ", event.node_index());
  }
  if (event.ranks_size() > 0) {
    absl::StrAppend(&what, event.ranks_size() == 1 ? ", rank " : ", ranks ",
                    absl::StrJoin(event.ranks(), ","));
  }
  absl::StrAppend(&what, ", event ", event.sequence());
  std::string outcome = " failed";
  if (event.kind() == v1::EVENT_KIND_DOMAIN_RECOVERING) {
    outcome = "";  // its own message says which epoch ended
  } else if (event.ends_epoch()) {
    outcome = absl::StrCat(" epoch ", event.epoch(), " ended");
  }
  absl::Status failure = absl::AbortedError(absl::StrCat(
      "job ", job_id, outcome, " (", what,
      "): ", event.message().empty() ? "no cause given" : event.message()));
  if (event.kind() == v1::EVENT_KIND_DOMAIN_RECOVERING || event.ends_epoch()) {
    return WithReason(std::move(failure), ErrorReason::kEpochEnded);
  }
  return failure;
}

// ClientOptions::round_spin, resolved for a node of `local_ranks` ranks.
absl::Duration RoundSpin(const ClientOptions& options, uint32_t local_ranks) {
  if (options.round_spin.has_value()) return *options.round_spin;
  return DefaultRoundSpin(local_ranks);
}

}  // namespace

RankConnection::RankConnection(std::shared_ptr<const Connection> connection)
    : conn(std::move(connection)),
      stub(v1::Rank::NewStub(conn->channel())),
      incarnation(NewIncarnation()) {
  absl::MutexLock lock(&mu);
  InstallDescriptor(v1::SessionDescriptor());
}

void RankConnection::InstallDescriptor(v1::SessionDescriptor session) {
  descriptors.push_back(
      std::make_unique<const v1::SessionDescriptor>(std::move(session)));
  descriptor.store(descriptors.back().get(), std::memory_order_release);
}

absl::Status RankConnection::HealthForEpochLocked() const {
  if (!terminal.ok()) return terminal;
  if (!newest_loss.ok() &&
      (newest_loss_epoch == 0 || epoch == 0 || newest_loss_epoch >= epoch)) {
    return newest_loss;
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::MemberRef> RankConnection::CheckJoined(
    absl::string_view method) {
  absl::MutexLock lock(&mu);
  return CheckJoinedLocked(method);
}

absl::StatusOr<v1::MemberRef> RankConnection::CheckJoinedLocked(
    absl::string_view method) {
  switch (state) {
    case State::kNotJoined:
    case State::kJoining:
      return absl::FailedPreconditionError(
          absl::StrCat(conn->Context(method), ": not joined; call Join first"));
    case State::kLeft:
      return absl::FailedPreconditionError(absl::StrCat(
          conn->Context(method),
          ": this client left the job; create a new Client to join again"));
    case State::kJoined:
      break;
  }
  if (!health.ok()) {
    return absl::Status(health.code(), absl::StrCat(conn->Context(method), ": ",
                                                    health.message()));
  }
  return member;
}

std::vector<std::shared_ptr<const Client::FailureCallback>>
RankConnection::FailureCallbacksLocked() const {
  std::vector<std::shared_ptr<const Client::FailureCallback>> all;
  all.reserve(failure_callbacks.size());
  for (const auto& [id, callback] : failure_callbacks) all.push_back(callback);
  return all;
}

void RankConnection::Fail(absl::Status failure,
                          std::optional<uint64_t> loss_epoch) {
  std::vector<std::shared_ptr<const Client::FailureCallback>> callbacks;
  std::shared_ptr<RoundSlotClient> slots;
  {
    absl::MutexLock lock(&mu);
    if (!loss_epoch.has_value()) {
      if (terminal.ok()) terminal = failure;
    } else {
      if (newest_loss.ok() || *loss_epoch >= newest_loss_epoch) {
        newest_loss = failure;
        newest_loss_epoch = *loss_epoch;
      }
      // The loss ended an epoch this client already left (a replacement
      // replaying the events before its join, or a survivor that joined
      // again): it is not this client's failure.
      if (*loss_epoch != 0 && epoch != 0 && *loss_epoch < epoch) return;
    }
    if (!health.ok()) return;
    health = failure;
    callbacks = FailureCallbacksLocked();
    slots = round_slots;
  }
  // Rounds waiting on the slots end now, as gRPC rounds would on the
  // daemon's answer.
  if (slots != nullptr) slots->Break(failure);
  for (const auto& callback : callbacks) {
    if (*callback) (*callback)(failure);
  }
}

void RankConnection::InstallDomainLocked(const v1::SessionDescriptor& session,
                                         bool recovery_by_domain,
                                         uint64_t first_world_round) {
  by_domain = recovery_by_domain;
  awaiting_first_round = false;
  if (!by_domain) return;
  const v1::ParallelTopology& t = session.topology();
  domain_size = std::max<uint32_t>(1, std::max<uint32_t>(1, t.tensor()) *
                                          std::max<uint32_t>(1, t.pipeline()) *
                                          std::max<uint32_t>(1, t.expert()));
  domain = session.rank() / domain_size;
  // The daemon numbers this rank's next world round: its domain's entry
  // round (unknown while the domain recovers).
  awaiting_first_round = first_world_round == 0;
  if (!awaiting_first_round) last_round = first_world_round - 1;
}

void RankConnection::PoisonRounds(uint64_t round_generation, uint64_t round,
                                  const absl::Status& cause) {
  absl::MutexLock lock(&mu);
  if (round_generation != generation || !rounds_failed.ok()) return;
  // Recovery by domain: a round that failed at a loss failed on every one
  // of its contributors alike (the coordinator remembers it for late
  // ones), so the numbering still matches; a loss of this rank's own
  // domain fails its health, and Rejoin renumbers.
  if (by_domain && cause.code() == absl::StatusCode::kAborted) return;
  rounds_failed = absl::FailedPreconditionError(absl::StrCat(
      "all_gather_words round ", round, " failed (", cause.message(),
      "); round numbers can no longer be matched with the other ranks', so "
      "this client runs no further rounds"));
}

void RankConnection::WatchLoop(grpc::ClientContext* context,
                               v1::WatchRequest request) {
  std::unique_ptr<grpc::ClientReader<v1::JobEvent>> reader =
      stub->Watch(context, request);
  v1::JobEvent event;
  bool completed = false;
  while (reader->Read(&event)) {
    std::optional<uint32_t> own_domain;
    {
      // Wakes a Rejoin waiting for the job to move past an epoch.
      absl::MutexLock lock(&mu);
      job_epoch = std::max(job_epoch, event.epoch());
      if (by_domain) own_domain = domain;
      // Joined before its domain was whole: the domain's DOMAIN_READY at
      // this client's epoch names its next round.
      if (by_domain && awaiting_first_round &&
          event.kind() == v1::EVENT_KIND_DOMAIN_READY && event.has_domain() &&
          event.domain() == domain && event.epoch() == epoch &&
          event.first_world_round() != 0) {
        last_round = event.first_world_round() - 1;
        awaiting_first_round = false;
      }
    }
    absl::Status failure =
        FailureOf(event, request.member().job_id(), own_domain);
    if (!failure.ok()) {
      // JOB_FAILED is terminal whatever its epoch; a loss belongs to the
      // epoch it ended (docs/architecture.md, "Epochs and recovery"). A
      // DOMAIN_RECOVERING names the domain's new epoch: it ended every
      // epoch of the domain before it (none, for a malformed epoch 0,
      // which must not wrap to the last epoch there is and end them all).
      const uint64_t ended = event.kind() == v1::EVENT_KIND_DOMAIN_RECOVERING
                                 ? std::max<uint64_t>(event.epoch(), 1) - 1
                                 : event.epoch();
      Fail(failure, event.kind() == v1::EVENT_KIND_JOB_FAILED
                        ? std::nullopt
                        : std::optional<uint64_t>(ended));
    }
    if (event.kind() == v1::EVENT_KIND_JOB_COMPLETED) completed = true;
    std::shared_ptr<const Client::EventCallback> callback;
    {
      absl::MutexLock lock(&mu);
      callback = event_callback;
    }
    if (callback != nullptr && *callback) (*callback)(event);
  }
  grpc::Status status = reader->Finish();
  {
    absl::MutexLock lock(&mu);
    if (leaving) return;
  }
  if (completed) return;
  std::string cause =
      status.ok()
          ? "the daemon closed the watch stream"
          : absl::StrCat("watch stream ended: ",
                         absl::StatusCodeToString(static_cast<absl::StatusCode>(
                             status.error_code())),
                         ": ", status.error_message());
  Fail(absl::UnavailableError(absl::StrCat(
           conn->Context("Watch"), ": connection to local rankd daemon lost (",
           cause, "); the job will treat rank ", request.member().rank(),
           " as lost")),
       std::nullopt);
}

std::pair<std::shared_ptr<RoundSlotClient>, std::string> OpenRoundSlots(
    const Connection& conn, v1::Rank::Stub& stub, const v1::MemberRef& member,
    const v1::SessionDescriptor& session) {
  const uint32_t world_size = session.world_size();
  if (!conn.options().shared_memory_rounds) {
    return {nullptr, "grpc (ClientOptions.shared_memory_rounds is off)"};
  }
  if (conn.target().kind != Target::Kind::kUnix) {
    return {nullptr, "grpc (the daemon is reached over TCP)"};
  }
  v1::OpenRoundSlotsRequest request;
  *request.mutable_member() = member;
  grpc::ClientContext rpc;
  const absl::Duration timeout = conn.options().call_timeout;
  conn.PrepareContext(&rpc, timeout);
  v1::OpenRoundSlotsResponse response;
  grpc::Status status = stub.OpenRoundSlots(&rpc, request, &response);
  if (!status.ok()) {
    return {
        nullptr,
        absl::StrCat("grpc (",
                     FromGrpcStatus(status, "daemon", timeout).message(), ")")};
  }
  RoundSlotsGeometry geometry;
  geometry.slots = response.slots();
  geometry.frame_words = response.frame_words();
  geometry.result_words = response.result_words();
  if (geometry.slots == 0 || geometry.slots > 1024 ||
      geometry.frame_words > kMaxFrameWords ||
      uint64_t{geometry.frame_words} * world_size != geometry.result_words) {
    return {nullptr, absl::StrCat("grpc (the daemon offered round slots of "
                                  "an unusable geometry: ",
                                  response.ShortDebugString(), ")")};
  }
  absl::StatusOr<std::unique_ptr<RoundSlotClient>> slots =
      RoundSlotClient::Open(
          response.path(), geometry,
          RoundSpin(conn.options(), session.nproc_per_node()));
  if (!slots.ok()) {
    return {nullptr, absl::StrCat("grpc (", slots.status().message(), ")")};
  }
  return {std::shared_ptr<RoundSlotClient>(*std::move(slots)), "shared-memory"};
}

std::shared_ptr<KvChannel> KvChannelForCall(RankConnection& core) {
  absl::MutexLock lock(&core.mu);
  if (core.kv_channel != nullptr && core.kv_channel->broken()) {
    core.kv_channel = nullptr;
    core.kv_path = "grpc (the key-value channel broke)";
  }
  return core.kv_channel;
}

std::pair<std::shared_ptr<KvChannel>, std::string> OpenKvChannel(
    const Connection& conn, v1::Rank::Stub& stub, const v1::MemberRef& member) {
  if (!conn.options().kv_channel) {
    return {nullptr, "grpc (ClientOptions.kv_channel is off)"};
  }
  if (const char* env = std::getenv("RANKD_KV_CHANNEL");
      env != nullptr && std::string(env) == "0") {
    return {nullptr, "grpc (RANKD_KV_CHANNEL=0)"};
  }
  if (conn.target().kind != Target::Kind::kUnix) {
    return {nullptr, "grpc (the daemon is reached over TCP)"};
  }
  v1::OpenKvChannelRequest request;
  *request.mutable_member() = member;
  request.set_error_reasons(true);  // KvChannel decodes them
  grpc::ClientContext rpc;
  const absl::Duration timeout = conn.options().call_timeout;
  conn.PrepareContext(&rpc, timeout);
  v1::OpenKvChannelResponse response;
  grpc::Status status = stub.OpenKvChannel(&rpc, request, &response);
  if (!status.ok()) {
    return {
        nullptr,
        absl::StrCat("grpc (",
                     FromGrpcStatus(status, "daemon", timeout).message(), ")")};
  }
  absl::StatusOr<std::unique_ptr<KvChannel>> channel = KvChannel::Connect(
      response.path(), response.ticket(), MonotonicNow() + timeout);
  if (!channel.ok()) {
    return {nullptr, absl::StrCat("grpc (", channel.status().message(), ")")};
  }
  return {std::shared_ptr<KvChannel>(*std::move(channel)), "kv-channel"};
}

}  // namespace rankd::internal
