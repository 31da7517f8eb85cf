// client/client.cc: see client.h.
//
// Layout: a Client owns a shared internal::RankConnection
// (internal/rank_connection.h: connection, stub, join state, job health,
// callbacks, the watch thread); each all_gather_words round is an
// internal::RoundCall (internal/round_call.h).

#include "client/client.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <thread>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/memory/memory.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/internal/rank_connection.h"
#include "client/internal/round_call.h"
#include "client/internal/round_slot_client.h"
#include "common/error_reason.h"
#include "common/lock_order_checks.h"
#include "common/monotonic_clock.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/status.h"
#include "rankd/v1/rank.grpc.pb.h"

namespace rankd {
namespace internal {
namespace {

absl::Status CheckKey(absl::string_view context, absl::string_view key) {
  if (key.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(context, ": empty key"));
  }
  if (key.size() > kMaxKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, ": key is ", key.size(), " bytes; at most ",
                     kMaxKeyBytes, " allowed"));
  }
  return absl::OkStatus();
}

// Recovery by domain: a round that did not span every replica is refused
// by the calls that promise the whole world, naming what it spanned.
absl::Status PartialRound(const internal::RoundCall& call) {
  std::vector<std::string> spans;
  for (const Client::DomainEpoch& d : call.domains()) {
    spans.push_back(absl::StrCat(d.domain, " (epoch ", d.epoch, ")"));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      call.Context(), ": the round spanned data-parallel domain",
      spans.size() == 1 ? " " : "s ", absl::StrJoin(spans, ", "),
      " only, not the whole world (a domain is recovering; docs/contract.md, "
      "\"Data-parallel domains\"); read it with AllGatherWordsWithView"));
}

}  // namespace
}  // namespace internal

// ---------------------------------------------------------------------------
// Client::PendingWords

Client::PendingWords::PendingWords(std::shared_ptr<internal::RoundCall> call)
    : call_(std::move(call)) {}

Client::PendingWords::~PendingWords() { call_->Cancel(); }

uint64_t Client::PendingWords::round() const { return call_->round(); }

bool Client::PendingWords::IsReady() const { return call_->IsDone(); }

absl::StatusOr<std::vector<uint32_t>> Client::PendingWords::Wait(
    absl::Duration timeout) const {
  if (timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat(call_->Context(), ": Wait timeout must be positive (got ",
                     absl::FormatDuration(timeout), ")"));
  }
  if (!call_->WaitFor(timeout)) {
    return absl::DeadlineExceededError(absl::StrCat(
        call_->Context(), ": still pending after ",
        absl::FormatDuration(timeout),
        "; the round stays in flight until its round timeout (Wait again, or "
        "Cancel)"));
  }
  if (call_->result().ok() && call_->partial())
    return internal::PartialRound(*call_);
  return call_->result();
}

void Client::PendingWords::Cancel() { call_->Cancel(); }

// ---------------------------------------------------------------------------
// Client

Client::Client(std::shared_ptr<internal::RankConnection> core)
    : core_(std::move(core)) {}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(
    const ClientOptions& given) {
  // Before the rank's first operation (common/lock_order_checks.h).
  UseReleaseLockOrderChecks();
  ClientOptions options = given;
  if (options.bearer_token.empty()) {
    // The token the launcher minted for this rank alone.
    const char* token = std::getenv(kRankTokenEnvVar);
    if (token != nullptr) {
      options.bearer_token = std::string(absl::StripAsciiWhitespace(token));
    }
  }
  absl::StatusOr<std::shared_ptr<const Connection>> conn =
      Connection::Open(options);
  if (!conn.ok()) return conn.status();
  return absl::WrapUnique(
      new Client(std::make_shared<internal::RankConnection>(*std::move(conn))));
}

Client::~Client() {
  Leave().IgnoreError();
  // Leave() takes the watch thread; this covers a Join that is in progress
  // elsewhere, which the header forbids but which must not crash.
  std::thread thread;
  {
    absl::MutexLock lock(&core_->mu);
    thread = std::move(core_->watch_thread);
  }
  if (thread.joinable()) {
    if (thread.get_id() == std::this_thread::get_id()) {
      thread.detach();
    } else {
      thread.join();
    }
  }
}

absl::StatusOr<v1::SessionDescriptor> Client::Join(const JoinOptions& options) {
  const std::string context = core_->conn->Context("Join");
  if (options.job_id.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, ": JoinOptions.job_id is empty"));
  }
  absl::StatusOr<uint32_t> wait_ms =
      ToMillis32(options.wait_for_world, "JoinOptions.wait_for_world");
  if (!wait_ms.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, ": ", wait_ms.status().message()));
  }
  {
    absl::MutexLock lock(&core_->mu);
    switch (core_->state) {
      case internal::RankConnection::State::kNotJoined:
        break;
      case internal::RankConnection::State::kJoining:
        return absl::FailedPreconditionError(
            absl::StrCat(context, ": another Join is in progress"));
      case internal::RankConnection::State::kJoined:
        return absl::FailedPreconditionError(absl::StrCat(
            context, ": already joined job ", core_->member.job_id(),
            " as rank ", core_->member.rank(),
            "; after a loss, enter the next epoch with Rejoin"));
      case internal::RankConnection::State::kLeft:
        return absl::FailedPreconditionError(absl::StrCat(
            context,
            ": this client left the job; create a new Client to join again"));
    }
    core_->state = internal::RankConnection::State::kJoining;
  }

  bool by_domain = false;

  uint64_t first_world_round = 0;
  const absl::Time wait_until = MonotonicNow() + options.wait_for_world;
  absl::StatusOr<v1::SessionDescriptor> session =
      SendJoin(context, options, *wait_ms, &by_domain, &first_world_round);
  // A join into a recovering job (a replacement) that waited for the world
  // while another loss ended that epoch: the coordinator gave it the slot,
  // and a join always enters the job's current epoch, so it joins again
  // (this process's own incarnation keeps the slot) with the time left.
  while (!session.ok() && EndsAnEpoch(session.status())) {
    const absl::Duration left = wait_until - MonotonicNow();
    if (left < absl::Milliseconds(1)) break;
    absl::SleepFor(std::min(left, absl::Milliseconds(20)));
    const uint32_t wait_left = static_cast<uint32_t>(std::clamp<int64_t>(
        absl::ToInt64Milliseconds(wait_until - MonotonicNow()), 1,
        std::numeric_limits<uint32_t>::max()));
    session =
        SendJoin(context, options, wait_left, &by_domain, &first_world_round);
  }
  v1::MemberRef member;
  uint64_t generation = 0;
  {
    absl::MutexLock lock(&core_->mu);
    if (!session.ok()) {
      core_->state = internal::RankConnection::State::kNotJoined;
      return session.status();
    }
    core_->join_options = options;
    core_->epoch = session->epoch();
    core_->job_epoch = std::max(core_->job_epoch, session->epoch());
    generation = ++core_->generation;
    core_->InstallDomainLocked(*session, by_domain, first_world_round);
    core_->InstallDescriptor(*session);
    core_->member.set_job_id(session->job_id());
    core_->member.set_rank(session->rank());
    core_->member.set_incarnation(core_->incarnation);
    core_->state = internal::RankConnection::State::kJoined;
    member = core_->member;

    // The watch stream: job events, and this rank's liveness lease, which
    // the daemon started as it answered the join (the heartbeat timeout,
    // 2 s by default): so it opens first, before the fast paths below,
    // which a loaded daemon may take longer than that to open. It has no
    // deadline on purpose; keepalive (TCP) or the socket closing (Unix)
    // bounds how long a dead daemon goes unnoticed.
    core_->watch_context = std::make_unique<grpc::ClientContext>();
    core_->conn->PrepareContext(core_->watch_context.get(),
                                absl::InfiniteDuration());
    v1::WatchRequest watch;
    *watch.mutable_member() = member;
    watch.set_after_sequence(0);
    core_->watch_thread =
        std::thread([core = core_, context = core_->watch_context.get(),
                     watch = std::move(watch)]() mutable {
          core->WatchLoop(context, std::move(watch));
        });
  }
  // The fast paths, without the lock (calls made meanwhile -- none before
  // Join returns but a failure callback's -- take gRPC).
  // Recovery by domain: rounds over gRPC, whose answers carry the view.
  std::pair<std::shared_ptr<internal::RoundSlotClient>, std::string> slots =
      by_domain
          ? std::pair<std::shared_ptr<internal::RoundSlotClient>, std::string>(
                nullptr, std::string("grpc (recovery by domain: the round "
                                     "slots carry no view)"))
          : internal::OpenRoundSlots(*core_->conn, *core_->stub, member,
                                     *session);
  std::pair<std::shared_ptr<internal::KvChannel>, std::string> kv =
      internal::OpenKvChannel(*core_->conn, *core_->stub, member);
  absl::Status health;
  bool installed = false;
  {
    absl::MutexLock submit_lock(&core_->submit_mu);
    absl::MutexLock lock(&core_->mu);
    // A failure callback may have left meanwhile (or a loss failed the
    // job): the fast paths go only to the join that opened them, and
    // rounds on them end with a failure seen meanwhile, as Fail ends them.
    if (core_->state == internal::RankConnection::State::kJoined &&
        core_->generation == generation) {
      core_->round_slots = slots.first;
      core_->round_path = std::move(slots.second);
      core_->kv_channel = std::move(kv.first);
      core_->kv_path = std::move(kv.second);
      health = core_->health;
      installed = true;
    }
  }
  if (slots.first != nullptr && (!installed || !health.ok())) {
    slots.first->Break(installed ? health
                                 : absl::FailedPreconditionError(
                                       "the client left the job as it joined"));
  }
  return *std::move(session);
}

absl::StatusOr<v1::SessionDescriptor> Client::SendJoin(
    const std::string& context, const JoinOptions& options, uint32_t wait_ms,
    bool* by_domain, uint64_t* first_world_round) {
  v1::JoinRequest request;
  request.set_job_id(options.job_id);
  if (options.local_rank.has_value()) {
    request.set_local_rank(*options.local_rank);
  }
  if (options.rank.has_value()) request.set_rank(*options.rank);
  request.set_world_size(options.world_size);
  *request.mutable_device() = options.device;
  request.set_incarnation(core_->incarnation);
  request.set_pid(static_cast<uint32_t>(::getpid()));
  request.set_wait_for_world_ms(wait_ms);

  const absl::Duration rpc_timeout =
      absl::Milliseconds(wait_ms) + core_->conn->options().call_timeout;
  grpc::ClientContext rpc;
  core_->conn->PrepareContext(&rpc, rpc_timeout);
  v1::JoinResponse response;
  grpc::Status status = core_->stub->Join(&rpc, request, &response);
  if (!status.ok()) return FromGrpcStatus(status, context, rpc_timeout);
  const v1::SessionDescriptor& s = response.session();
  if (s.world_size() == 0 || s.rank() >= s.world_size() ||
      s.job_id() != options.job_id ||
      (response.has_member() &&
       (response.member().incarnation() != core_->incarnation ||
        response.member().rank() != s.rank()))) {
    return absl::InternalError(
        absl::StrCat(context, ": inconsistent answer from the daemon: ",
                     response.ShortDebugString()));
  }
  *first_world_round = response.first_world_round();
  *by_domain = response.recovery_by_domain() || *first_world_round != 0;
  // The descriptor says so too: the data plane opens its sessions from it.
  response.mutable_session()->set_recovery_by_domain(*by_domain);
  return std::move(*response.mutable_session());
}

absl::StatusOr<v1::SessionDescriptor> Client::Rejoin(uint64_t ended_epoch,
                                                     absl::Duration timeout) {
  const std::string context = core_->conn->Context("Rejoin");
  if (timeout <= absl::ZeroDuration() || timeout == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, ": timeout must be positive and finite (got ",
                     absl::FormatDuration(timeout), ")"));
  }
  {
    // The watch thread reads the events that move the job on: waiting for
    // them on it (an event or failure callback calling Rejoin) could only
    // time out, with no later event (a JOB_FAILED) seen meanwhile.
    absl::MutexLock lock(&core_->mu);
    if (core_->watch_thread.get_id() == std::this_thread::get_id()) {
      return absl::FailedPreconditionError(absl::StrCat(
          context,
          ": called on the watch thread (from an event or failure "
          "callback), which reads the events Rejoin waits for; call it from "
          "another thread"));
    }
  }
  const absl::Time deadline = MonotonicNow() + timeout;
  {
    absl::MutexLock lock(&core_->mu);
    auto free = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_->mu) {
      return !core_->rejoining;
    };
    if (!core_->mu.AwaitWithTimeout(absl::Condition(&free),
                                    deadline - MonotonicNow())) {
      return absl::DeadlineExceededError(
          absl::StrCat(context, ": waited ", absl::FormatDuration(timeout),
                       " for another Rejoin on this client to finish"));
    }
    core_->rejoining = true;
  }
  absl::Cleanup done = [this] {
    absl::MutexLock lock(&core_->mu);
    core_->rejoining = false;
  };
  JoinOptions options;
  uint32_t rank = 0;
  // The epoch the job must reach before a join is worth sending.
  const uint64_t want = ended_epoch + 1;
  while (true) {
    uint64_t job_epoch = 0;
    {
      absl::MutexLock lock(&core_->mu);
      auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_->mu) {
        return core_->state != internal::RankConnection::State::kJoined ||
               core_->epoch > ended_epoch || !core_->terminal.ok() ||
               core_->job_epoch >= want;
      };
      core_->mu.AwaitWithTimeout(absl::Condition(&ready),
                                 deadline - MonotonicNow());
      if (core_->state != internal::RankConnection::State::kJoined) {
        absl::StatusOr<v1::MemberRef> member =
            core_->CheckJoinedLocked("Rejoin");
        if (!member.ok()) return member.status();
      }
      if (core_->epoch > ended_epoch) return core_->current_descriptor();
      if (!core_->terminal.ok()) {
        return absl::Status(
            core_->terminal.code(),
            absl::StrCat(context, ": no epoch follows epoch ", ended_epoch,
                         ": ", core_->terminal.message()));
      }
      if (core_->job_epoch < want) {
        return absl::DeadlineExceededError(absl::StrCat(
            context, ": rank ", core_->member.rank(), " waited ",
            absl::FormatDuration(timeout), " for the job to reach epoch ", want,
            "; it is still at epoch ", core_->job_epoch,
            " as far as this rank's events tell (is recovery on, and was a "
            "rank lost?)"));
      }
      options = core_->join_options;
      rank = core_->member.rank();
      job_epoch = core_->job_epoch;
    }
    // The join waits for the world at the new epoch with the time left.
    const absl::Duration left = deadline - MonotonicNow();
    if (left < absl::Milliseconds(1)) {
      return absl::DeadlineExceededError(absl::StrCat(
          context, ": rank ", rank, " had no time left within ",
          absl::FormatDuration(timeout), " to join epoch ", job_epoch));
    }
    const uint32_t wait_ms = static_cast<uint32_t>(std::min<int64_t>(
        absl::ToInt64Milliseconds(left), std::numeric_limits<uint32_t>::max()));
    bool by_domain = false;
    uint64_t first_world_round = 0;
    absl::StatusOr<v1::SessionDescriptor> session =
        SendJoin(context, options, wait_ms, &by_domain, &first_world_round);
    if (!session.ok()) {
      bool terminal = false;
      {
        absl::MutexLock lock(&core_->mu);
        terminal = !core_->terminal.ok();
      }
      if (session.status().code() == absl::StatusCode::kAborted && !terminal &&
          MonotonicNow() < deadline) {
        // The epoch it joined into ended too (another loss). A join
        // always enters the job's current epoch, so join again, after a
        // moment, until the deadline.
        absl::SleepFor(absl::Milliseconds(20));
        continue;
      }
      if (session.status().code() == absl::StatusCode::kDeadlineExceeded) {
        return absl::DeadlineExceededError(absl::StrCat(
            context, ": rank ", rank, " joined epoch ", job_epoch,
            " but its world was not whole within ",
            absl::FormatDuration(timeout), ": ", session.status().message()));
      }
      return session.status();
    }
    if (session->epoch() <= ended_epoch) {
      return absl::FailedPreconditionError(absl::StrCat(
          context, ": the daemon joined rank ", rank, " into epoch ",
          session->epoch(), ", not one after epoch ", ended_epoch,
          " (does it run with --recovery=on?)"));
    }
    v1::MemberRef member;
    member.set_job_id(session->job_id());
    member.set_rank(session->rank());
    member.set_incarnation(core_->incarnation);
    // The daemon closes this rank's earlier round-slots file and opens a
    // fresh one; the earlier slots broke with the loss anyway.
    std::pair<std::shared_ptr<internal::RoundSlotClient>, std::string> slots =
        by_domain
            ? std::pair<std::shared_ptr<internal::RoundSlotClient>,
                        std::string>(
                  nullptr, std::string("grpc (recovery by domain: the round "
                                       "slots carry no view)"))
            : internal::OpenRoundSlots(*core_->conn, *core_->stub, member,
                                       *session);
    std::shared_ptr<internal::RoundSlotClient> old_slots;
    absl::Status health;
    std::vector<std::shared_ptr<const FailureCallback>> callbacks;
    std::shared_ptr<internal::RoundSlotClient> new_slots;
    {
      absl::MutexLock submit_lock(&core_->submit_mu);
      absl::MutexLock lock(&core_->mu);
      if (core_->state != internal::RankConnection::State::kJoined) {
        absl::StatusOr<v1::MemberRef> joined =
            core_->CheckJoinedLocked("Rejoin");
        if (!joined.ok()) return joined.status();
      }
      old_slots = std::move(core_->round_slots);
      core_->round_slots = std::move(slots.first);
      core_->round_path = std::move(slots.second);
      core_->epoch = session->epoch();
      core_->job_epoch = std::max(core_->job_epoch, session->epoch());
      ++core_->generation;
      core_->last_round = 0;
      core_->InstallDomainLocked(*session, by_domain, first_world_round);
      core_->rounds_failed = absl::OkStatus();
      core_->health = core_->HealthForEpochLocked();
      core_->InstallDescriptor(*session);
      health = core_->health;
      callbacks = core_->FailureCallbacksLocked();
      new_slots = core_->round_slots;
    }
    // Rounds of the ended epoch still waiting on the old slots end now.
    if (old_slots != nullptr) {
      old_slots->Break(absl::AbortedError(
          absl::StrCat("epoch ", ended_epoch, " ended; this rank joined epoch ",
                       session->epoch())));
    }
    if (!health.ok()) {
      // The new epoch ended already (its loss arrived before this join's
      // answer): this epoch's failure is told as any other.
      if (new_slots != nullptr) new_slots->Break(health);
      for (const auto& callback : callbacks) {
        if (*callback) (*callback)(health);
      }
    }
    return *std::move(session);
  }
}

const v1::SessionDescriptor& Client::descriptor() const {
  return core_->current_descriptor();
}

uint64_t Client::epoch() const {
  absl::MutexLock lock(&core_->mu);
  return core_->epoch;
}

v1::MemberRef Client::member() const {
  absl::MutexLock lock(&core_->mu);
  return core_->member;
}

uint64_t Client::incarnation() const { return core_->incarnation; }

std::string Client::round_path() const {
  absl::MutexLock lock(&core_->mu);
  return core_->round_path;
}

std::string Client::kv_path() const {
  absl::MutexLock lock(&core_->mu);
  return core_->kv_path;
}

const std::string& Client::target() const {
  return core_->conn->options().target;
}

absl::StatusOr<std::vector<uint32_t>> Client::AllGatherWords(
    absl::Span<const uint32_t> words, absl::Duration timeout) {
  absl::StatusOr<std::shared_ptr<internal::RoundCall>> call =
      internal::SubmitRound(core_, words, timeout);
  if (!call.ok()) return call.status();
  // Bounded by the RPC deadline (timeout + grace).
  (*call)->WaitDone();
  if ((*call)->result().ok() && (*call)->partial()) {
    return internal::PartialRound(**call);
  }
  return (*call)->TakeResult();
}

absl::StatusOr<Client::WorldWords> Client::AllGatherWordsWithView(
    absl::Span<const uint32_t> words, absl::Duration timeout) {
  absl::StatusOr<std::shared_ptr<internal::RoundCall>> call =
      internal::SubmitRound(core_, words, timeout);
  if (!call.ok()) return call.status();
  (*call)->WaitDone();
  absl::StatusOr<std::vector<uint32_t>> result = (*call)->TakeResult();
  if (!result.ok()) return result.status();
  WorldWords world;
  world.words = *std::move(result);
  world.partial = (*call)->partial();
  world.domains = (*call)->domains();
  return world;
}

absl::StatusOr<std::unique_ptr<Client::PendingWords>>
Client::SubmitAllGatherWords(absl::Span<const uint32_t> words,
                             absl::Duration round_timeout) {
  absl::StatusOr<std::shared_ptr<internal::RoundCall>> call =
      internal::SubmitRound(core_, words, round_timeout);
  if (!call.ok()) return call.status();
  return absl::WrapUnique(new PendingWords(*std::move(call)));
}

absl::Status Client::KvSet(absl::string_view key, absl::string_view value) {
  return KvWrite("KvSet", key, value, std::nullopt, false).status();
}

absl::StatusOr<bool> Client::KvCompareAndSet(
    absl::string_view key, std::optional<absl::string_view> expected,
    absl::string_view value) {
  return KvWrite("KvCompareAndSet", key, value, expected,
                 !expected.has_value());
}

absl::StatusOr<bool> Client::KvWrite(absl::string_view method,
                                     absl::string_view key,
                                     absl::string_view value,
                                     std::optional<absl::string_view> expected,
                                     bool if_absent) {
  const std::string context = core_->conn->Context(method);
  if (absl::Status s = internal::CheckKey(context, key); !s.ok()) return s;
  if (value.size() > kMaxValueBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, ": value is ", value.size(), " bytes; at most ",
                     kMaxValueBytes, " allowed"));
  }
  absl::StatusOr<v1::MemberRef> member = core_->CheckJoined(method);
  if (!member.ok()) return member.status();
  v1::KvSetRequest request;
  *request.mutable_member() = *std::move(member);
  request.set_key(std::string(key));
  request.set_value(std::string(value));
  if (expected.has_value()) request.set_expected(std::string(*expected));
  request.set_if_absent(if_absent);
  const absl::Duration timeout = core_->conn->options().call_timeout;
  v1::KvSetResponse response;
  grpc::Status status;
  if (auto kv = internal::KvChannelForCall(*core_)) {
    status = kv->Set(request, &response, MonotonicNow() + timeout);
  } else {
    grpc::ClientContext rpc;
    core_->conn->PrepareContext(&rpc, timeout);
    status = core_->stub->KvSet(&rpc, request, &response);
  }
  if (!status.ok()) return FromGrpcStatus(status, context, timeout);
  return response.stored();
}

absl::StatusOr<std::string> Client::KvGet(absl::string_view key,
                                          absl::Duration timeout) {
  const std::string context = core_->conn->Context("KvGet");
  if (absl::Status s = internal::CheckKey(context, key); !s.ok()) return s;
  absl::StatusOr<uint32_t> timeout_ms = ToMillis32(timeout, "KvGet timeout");
  if (!timeout_ms.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, ": ", timeout_ms.status().message()));
  }
  absl::StatusOr<v1::MemberRef> member = core_->CheckJoined("KvGet");
  if (!member.ok()) return member.status();
  v1::KvGetRequest request;
  *request.mutable_member() = *std::move(member);
  request.set_key(std::string(key));
  request.set_timeout_ms(*timeout_ms);
  const absl::Duration rpc_timeout =
      absl::Milliseconds(*timeout_ms) + core_->conn->options().call_timeout;
  v1::KvGetResponse response;
  grpc::Status status;
  if (auto kv = internal::KvChannelForCall(*core_)) {
    status = kv->Get(request, &response, MonotonicNow() + rpc_timeout);
  } else {
    grpc::ClientContext rpc;
    core_->conn->PrepareContext(&rpc, rpc_timeout);
    status = core_->stub->KvGet(&rpc, request, &response);
  }
  if (!status.ok()) return FromGrpcStatus(status, context, rpc_timeout);
  return std::move(*response.mutable_value());
}

absl::StatusOr<int64_t> Client::KvAdd(absl::string_view key, int64_t delta) {
  const std::string context = core_->conn->Context("KvAdd");
  if (absl::Status s = internal::CheckKey(context, key); !s.ok()) return s;
  absl::StatusOr<v1::MemberRef> member = core_->CheckJoined("KvAdd");
  if (!member.ok()) return member.status();
  v1::KvAddRequest request;
  *request.mutable_member() = *std::move(member);
  request.set_key(std::string(key));
  request.set_delta(delta);
  const absl::Duration timeout = core_->conn->options().call_timeout;
  v1::KvAddResponse response;
  grpc::Status status;
  if (auto kv = internal::KvChannelForCall(*core_)) {
    status = kv->Add(request, &response, MonotonicNow() + timeout);
  } else {
    grpc::ClientContext rpc;
    core_->conn->PrepareContext(&rpc, timeout);
    status = core_->stub->KvAdd(&rpc, request, &response);
  }
  if (!status.ok()) return FromGrpcStatus(status, context, timeout);
  return response.value();
}

absl::StatusOr<bool> Client::KvDelete(absl::string_view key) {
  return KvRemove("KvDelete", key, std::nullopt);
}

absl::StatusOr<bool> Client::KvCompareAndDelete(absl::string_view key,
                                                absl::string_view expected) {
  return KvRemove("KvCompareAndDelete", key, expected);
}

absl::StatusOr<bool> Client::KvRemove(
    absl::string_view method, absl::string_view key,
    std::optional<absl::string_view> expected) {
  const std::string context = core_->conn->Context(method);
  if (absl::Status s = internal::CheckKey(context, key); !s.ok()) return s;
  absl::StatusOr<v1::MemberRef> member = core_->CheckJoined(method);
  if (!member.ok()) return member.status();
  v1::KvDeleteRequest request;
  *request.mutable_member() = *std::move(member);
  request.set_key(std::string(key));
  if (expected.has_value()) request.set_expected(std::string(*expected));
  const absl::Duration timeout = core_->conn->options().call_timeout;
  v1::KvDeleteResponse response;
  grpc::Status status;
  if (auto kv = internal::KvChannelForCall(*core_)) {
    status = kv->Delete(request, &response, MonotonicNow() + timeout);
  } else {
    grpc::ClientContext rpc;
    core_->conn->PrepareContext(&rpc, timeout);
    status = core_->stub->KvDelete(&rpc, request, &response);
  }
  if (!status.ok()) return FromGrpcStatus(status, context, timeout);
  return response.existed();
}

absl::StatusOr<uint64_t> Client::KvCount(absl::string_view prefix) {
  const std::string context = core_->conn->Context("KvCount");
  if (prefix.size() > kMaxKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, ": prefix is ", prefix.size(), " bytes; at most ",
                     kMaxKeyBytes, " allowed"));
  }
  absl::StatusOr<v1::MemberRef> member = core_->CheckJoined("KvCount");
  if (!member.ok()) return member.status();
  v1::KvCountRequest request;
  *request.mutable_member() = *std::move(member);
  request.set_prefix(std::string(prefix));
  const absl::Duration timeout = core_->conn->options().call_timeout;
  v1::KvCountResponse response;
  grpc::Status status;
  if (auto kv = internal::KvChannelForCall(*core_)) {
    status = kv->Count(request, &response, MonotonicNow() + timeout);
  } else {
    grpc::ClientContext rpc;
    core_->conn->PrepareContext(&rpc, timeout);
    status = core_->stub->KvCount(&rpc, request, &response);
  }
  if (!status.ok()) return FromGrpcStatus(status, context, timeout);
  return response.keys();
}

void Client::SetEventCallback(EventCallback callback) {
  auto shared = std::make_shared<const EventCallback>(std::move(callback));
  absl::MutexLock lock(&core_->mu);
  core_->event_callback = std::move(shared);
}

void Client::SetFailureCallback(FailureCallback callback) {
  auto shared = std::make_shared<const FailureCallback>(std::move(callback));
  absl::Status failure;
  {
    absl::MutexLock lock(&core_->mu);
    if (*shared) {
      core_->failure_callbacks[0] = shared;
    } else {
      core_->failure_callbacks.erase(0);
    }
    failure = core_->health;
  }
  // Fail() calls the callbacks it finds only when health was OK, so exactly
  // one of Fail() and this call runs the new callback.
  if (!failure.ok() && *shared) (*shared)(failure);
}

uint64_t Client::AddFailureCallback(FailureCallback callback) {
  auto shared = std::make_shared<const FailureCallback>(std::move(callback));
  absl::Status failure;
  uint64_t id = 0;
  {
    absl::MutexLock lock(&core_->mu);
    id = core_->next_failure_callback++;
    core_->failure_callbacks[id] = shared;
    failure = core_->health;
  }
  // As SetFailureCallback: exactly one of Fail() and this call runs it.
  if (!failure.ok() && *shared) (*shared)(failure);
  return id;
}

void Client::RemoveFailureCallback(uint64_t id) {
  if (id == 0) return;  // SetFailureCallback's: cleared by an empty one
  absl::MutexLock lock(&core_->mu);
  core_->failure_callbacks.erase(id);
}

absl::Status Client::JobHealth() const {
  absl::MutexLock lock(&core_->mu);
  return core_->health;
}

bool Client::EndsAnEpoch(const absl::Status& failure) {
  return ReasonOf(failure) == ErrorReason::kEpochEnded;
}

bool Client::FencedByALaterEpoch(const absl::Status& error) {
  return ReasonOf(error) == ErrorReason::kEpochFenced;
}

absl::Status Client::Leave() {
  v1::LeaveRequest request;
  {
    absl::MutexLock lock(&core_->mu);
    switch (core_->state) {
      case internal::RankConnection::State::kNotJoined:
        core_->state = internal::RankConnection::State::kLeft;
        return absl::OkStatus();
      case internal::RankConnection::State::kJoining:
        return absl::FailedPreconditionError(absl::StrCat(
            core_->conn->Context("Leave"), ": a Join is in progress"));
      case internal::RankConnection::State::kLeft:
        return absl::OkStatus();
      case internal::RankConnection::State::kJoined:
        break;
    }
    core_->state = internal::RankConnection::State::kLeft;
    core_->leaving = true;
    *request.mutable_member() = core_->member;
  }
  // Tell the daemon first, so that closing the watch stream below is not
  // mistaken for the rank's loss.
  const absl::Duration timeout = core_->conn->options().call_timeout;
  grpc::ClientContext rpc;
  core_->conn->PrepareContext(&rpc, timeout);
  v1::LeaveResponse response;
  absl::Status status =
      FromGrpcStatus(core_->stub->Leave(&rpc, request, &response),
                     core_->conn->Context("Leave"), timeout);

  std::thread thread;
  {
    absl::MutexLock lock(&core_->mu);
    if (core_->watch_context != nullptr) core_->watch_context->TryCancel();
    thread = std::move(core_->watch_thread);
  }
  if (thread.joinable()) {
    // From a callback, the watch thread cannot join itself; it holds its own
    // reference to the core and finishes on its own.
    if (thread.get_id() == std::this_thread::get_id()) {
      thread.detach();
    } else {
      thread.join();
    }
  }
  return status;
}

}  // namespace rankd
