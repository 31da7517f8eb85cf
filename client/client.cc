// client/client.cc: see client.h.
//
// Layout: a Client owns a shared ClientCore (connection, stub, join state,
// job health, callbacks, the watch thread). The watch thread and every
// in-flight all_gather_words round (RoundCall) hold their own reference to
// the core, so none of them depends on the Client object staying alive.

#include "client/client.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <utility>

#include "absl/memory/memory.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/internal/round_slot_client.h"
#include "common/monotonic_clock.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/status.h"
#include "rankd/v1/rank.grpc.pb.h"

namespace rankd {
namespace internal {
namespace {

// Time granted to the daemon beyond a round's own timeout, so that its
// answer (which names the missing ranks) arrives before the client-side
// deadline would cut it off with a bare DEADLINE_EXCEEDED.
constexpr absl::Duration kRoundGrace = absl::Seconds(5);
// How long a round that must go over gRPC waits for the daemon to take the
// rank's earlier slot rounds (its watcher does so within microseconds).
constexpr absl::Duration kTakePatience = absl::Seconds(5);

uint64_t NewIncarnation() {
  std::random_device rd;
  uint64_t value = 0;
  while (value == 0) {
    value = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
  return value;
}

std::string KindName(v1::EventKind kind) {
  std::string name = v1::EventKind_Name(kind);
  if (absl::StartsWith(name, "EVENT_KIND_")) {
    name = name.substr(strlen("EVENT_KIND_"));
  }
  return name.empty() ? absl::StrCat("EVENT_KIND(", kind, ")") : name;
}

// The failure an event announces, or OK for events that are not failures.
absl::Status FailureOf(const v1::JobEvent& event, absl::string_view job_id) {
  switch (event.kind()) {
    case v1::EVENT_KIND_JOB_FAILED:
    case v1::EVENT_KIND_MEMBER_LOST:
    case v1::EVENT_KIND_NODE_LOST:
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
  return absl::AbortedError(absl::StrCat(
      "job ", job_id, " failed (", what,
      "): ", event.message().empty() ? "no cause given" : event.message()));
}

// ClientOptions::round_spin, resolved for a node of `local_ranks` ranks.
absl::Duration RoundSpin(const ClientOptions& options, uint32_t local_ranks) {
  if (options.round_spin.has_value()) return *options.round_spin;
  return DefaultRoundSpin(local_ranks);
}

// Asks the daemon for this rank's round slots and maps them. Returns the
// slots (null when rounds stay on gRPC) and the path rounds take, with the
// reason when it is gRPC.
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

}  // namespace

class ClientCore {
 public:
  enum class State { kNotJoined, kJoining, kJoined, kLeft };

  explicit ClientCore(std::shared_ptr<const Connection> connection)
      : conn(std::move(connection)),
        stub(v1::Rank::NewStub(conn->channel())),
        incarnation(NewIncarnation()) {}

  // Returns the member identity for a call of `method`, or why the call
  // must not reach the daemon (not joined, left, job failed).
  absl::StatusOr<v1::MemberRef> CheckJoined(absl::string_view method)
      ABSL_LOCKS_EXCLUDED(mu) {
    absl::MutexLock lock(&mu);
    return CheckJoinedLocked(method);
  }

  absl::StatusOr<v1::MemberRef> CheckJoinedLocked(absl::string_view method)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    switch (state) {
      case State::kNotJoined:
      case State::kJoining:
        return absl::FailedPreconditionError(absl::StrCat(
            conn->Context(method), ": not joined; call Join first"));
      case State::kLeft:
        return absl::FailedPreconditionError(absl::StrCat(
            conn->Context(method),
            ": this client left the job; create a new Client to join again"));
      case State::kJoined:
        break;
    }
    if (!health.ok()) {
      return absl::Status(health.code(), absl::StrCat(conn->Context(method),
                                                      ": ", health.message()));
    }
    return member;
  }

  // Records the job's first failure and tells the failure callback.
  void Fail(absl::Status failure) ABSL_LOCKS_EXCLUDED(mu) {
    std::shared_ptr<const Client::FailureCallback> callback;
    std::shared_ptr<RoundSlotClient> slots;
    {
      absl::MutexLock lock(&mu);
      if (!health.ok()) return;
      health = failure;
      callback = failure_callback;
      slots = round_slots;
    }
    // Rounds waiting on the slots end now, as gRPC rounds would on the
    // daemon's answer.
    if (slots != nullptr) slots->Break(failure);
    if (callback != nullptr && *callback) (*callback)(failure);
  }

  // Marks the round sequence unusable after `round` failed.
  void PoisonRounds(uint64_t round, const absl::Status& cause)
      ABSL_LOCKS_EXCLUDED(mu) {
    absl::MutexLock lock(&mu);
    if (!rounds_failed.ok()) return;
    rounds_failed = absl::FailedPreconditionError(absl::StrCat(
        "all_gather_words round ", round, " failed (", cause.message(),
        "); round numbers can no longer be matched with the other ranks', so "
        "this client runs no further rounds"));
  }

  // Body of the watch thread: reads job events until the stream ends.
  void WatchLoop(grpc::ClientContext* context, v1::WatchRequest request) {
    std::unique_ptr<grpc::ClientReader<v1::JobEvent>> reader =
        stub->Watch(context, request);
    v1::JobEvent event;
    bool completed = false;
    while (reader->Read(&event)) {
      absl::Status failure = FailureOf(event, request.member().job_id());
      if (!failure.ok()) Fail(failure);
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
            : absl::StrCat(
                  "watch stream ended: ",
                  absl::StatusCodeToString(
                      static_cast<absl::StatusCode>(status.error_code())),
                  ": ", status.error_message());
    Fail(absl::UnavailableError(absl::StrCat(
        conn->Context("Watch"), ": connection to local rankd daemon lost (",
        cause, "); the job will treat rank ", request.member().rank(),
        " as lost")));
  }

  const std::shared_ptr<const Connection> conn;
  const std::unique_ptr<v1::Rank::Stub> stub;  // Thread-safe.
  const uint64_t incarnation;

  // Held across numbering and starting a round; taken before mu.
  absl::Mutex submit_mu ABSL_ACQUIRED_BEFORE(mu);
  absl::Mutex mu;
  State state ABSL_GUARDED_BY(mu) = State::kNotJoined;
  // Written once by Join, under mu, before state becomes kJoined.
  v1::SessionDescriptor descriptor;
  v1::MemberRef member ABSL_GUARDED_BY(mu);
  uint64_t last_round ABSL_GUARDED_BY(mu) = 0;
  // Set by Join when the daemon's round slots are mapped; then fixed.
  std::shared_ptr<RoundSlotClient> round_slots ABSL_GUARDED_BY(mu);
  std::string round_path ABSL_GUARDED_BY(mu) = "grpc (not joined)";
  // gRPC rounds not finished: a slot round must not overtake them.
  std::atomic<int> grpc_rounds_in_flight{0};
  absl::Status rounds_failed ABSL_GUARDED_BY(mu);
  absl::Status health ABSL_GUARDED_BY(mu);
  bool leaving ABSL_GUARDED_BY(mu) = false;
  std::shared_ptr<const Client::EventCallback> event_callback
      ABSL_GUARDED_BY(mu);
  std::shared_ptr<const Client::FailureCallback> failure_callback
      ABSL_GUARDED_BY(mu);
  // The watch stream's context; created by Join, cancelled by Leave.
  std::unique_ptr<grpc::ClientContext> watch_context ABSL_GUARDED_BY(mu);
  std::thread watch_thread ABSL_GUARDED_BY(mu);
};

// One all_gather_words round in flight, over gRPC or the round slots. Over
// gRPC it owns everything the call touches and is kept alive by the
// completion callback until the call is finished; over the slots its
// waiters read the answer out of the shared file themselves.
class RoundCall {
 public:
  RoundCall(std::shared_ptr<ClientCore> core, uint64_t round,
            size_t frame_words)
      : core_(std::move(core)), round_(round), frame_words_(frame_words) {}

  // Starts the RPC. `self` must own this object.
  static void Start(const std::shared_ptr<RoundCall>& self,
                    absl::Duration rpc_timeout) {
    self->rpc_timeout_ = rpc_timeout;
    self->core_->grpc_rounds_in_flight.fetch_add(1);
    self->core_->conn->PrepareContext(&self->context_, rpc_timeout);
    self->core_->stub->async()->AllGatherWords(
        &self->context_, &self->request_, &self->response_,
        [self](grpc::Status status) { self->OnDone(status); });
  }

  // Adopts request `sequence` of `slots`, which carries this round; its
  // answer is due within `answer_timeout`.
  void StartOnSlots(std::shared_ptr<RoundSlotClient> slots, uint64_t sequence,
                    absl::Duration answer_timeout) {
    slots_ = std::move(slots);
    sequence_ = sequence;
    answer_timeout_ = answer_timeout;
    answer_deadline_ = MonotonicNow() + answer_timeout;
  }

  v1::AllGatherWordsRequest& request() { return request_; }
  uint64_t round() const { return round_; }
  bool IsDone() {
    if (slots_ != nullptr) return AwaitSlots(absl::InfinitePast());
    return done_.HasBeenNotified();
  }
  bool WaitFor(absl::Duration timeout) {
    if (slots_ != nullptr) return AwaitSlots(MonotonicNow() + timeout);
    return done_.WaitForNotificationWithTimeout(timeout);
  }
  void WaitDone() {
    if (slots_ != nullptr) {
      AwaitSlots(absl::InfiniteFuture());
      return;
    }
    done_.WaitForNotification();
  }

  // Valid once done.
  const absl::StatusOr<std::vector<uint32_t>>& result() const {
    return result_;
  }
  absl::StatusOr<std::vector<uint32_t>> TakeResult() {
    return std::move(result_);
  }

  void Cancel() {
    if (IsDone()) return;
    if (slots_ != nullptr) {
      absl::MutexLock lock(&mu_);
      if (done_.HasBeenNotified()) return;
      slots_->Abandon(sequence_);
      FinishLocked(absl::CancelledError(
          absl::StrCat(Context(), ": cancelled by the caller")));
      return;
    }
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
    }
    context_.TryCancel();
    WaitDone();
  }

  // `status` with this round's context in front of its message.
  absl::Status InContext(const absl::Status& status) const {
    return absl::Status(status.code(),
                        absl::StrCat(Context(), ": ", status.message()));
  }

  std::string Context() const {
    return absl::StrCat(core_->conn->Context("AllGatherWords"), " round ",
                        round_);
  }

 private:
  void OnDone(const grpc::Status& status) {
    bool cancelled;
    {
      absl::MutexLock lock(&mu_);
      cancelled = cancelled_;
    }
    core_->grpc_rounds_in_flight.fetch_sub(1);
    if (status.ok()) {
      result_ = CheckResult(response_.round(), response_.words_per_rank(),
                            std::vector<uint32_t>(response_.words().begin(),
                                                  response_.words().end()));
    } else if (cancelled &&
               status.error_code() == grpc::StatusCode::CANCELLED) {
      result_ = absl::CancelledError(
          absl::StrCat(Context(), ": cancelled by the caller"));
    } else {
      result_ = FromGrpcStatus(status, Context(), rpc_timeout_);
    }
    if (!result_.ok()) core_->PoisonRounds(round_, result_.status());
    done_.Notify();
  }

  // Waits for the slot answer until `deadline` (InfinitePast: just looks)
  // and finishes the round with it; true once the round is done. The
  // answer is claimed and the round finished under mu_, so a concurrent
  // waiter either claims it or finds the round done.
  bool AwaitSlots(absl::Time deadline) {
    while (true) {
      const uint32_t bell = slots_->Bell();
      {
        absl::MutexLock lock(&mu_);
        if (done_.HasBeenNotified()) return true;
        std::optional<SlotAnswer> answer = slots_->Claim(sequence_);
        if (!answer.has_value()) {
          if (absl::Status health = slots_->health(); !health.ok()) {
            answer = slots_->Claim(sequence_);  // it may just have come
            if (!answer.has_value()) {
              FinishLocked(InContext(health));
              return true;
            }
          }
        }
        if (answer.has_value()) {
          FinishLocked(answer->status.ok()
                           ? CheckResult(answer->round, answer->words_per_rank,
                                         std::move(answer->words))
                           : InContext(answer->status));
          return true;
        }
        if (MonotonicNow() >= answer_deadline_) {
          FinishLocked(absl::DeadlineExceededError(
              absl::StrCat(Context(), ": the daemon did not answer within ",
                           absl::FormatDuration(answer_timeout_),
                           " (the round's timeout plus grace)")));
          return true;
        }
      }
      if (MonotonicNow() >= deadline) return false;
      slots_->Wait(bell, std::min(deadline, answer_deadline_));
    }
  }

  void FinishLocked(absl::StatusOr<std::vector<uint32_t>> result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    result_ = std::move(result);
    if (!result_.ok()) core_->PoisonRounds(round_, result_.status());
    done_.Notify();
  }

  absl::StatusOr<std::vector<uint32_t>> CheckResult(
      uint64_t round, uint32_t words_per_rank,
      std::vector<uint32_t> words) const {
    const uint32_t world = core_->descriptor.world_size();
    if (round != round_ || words_per_rank != frame_words_ ||
        static_cast<uint64_t>(words.size()) !=
            static_cast<uint64_t>(frame_words_) * world) {
      return absl::InternalError(
          absl::StrCat(Context(), ": malformed answer from the daemon (round ",
                       round, ", ", words_per_rank, " words per rank, ",
                       words.size(), " words; expected round ", round_, ", ",
                       frame_words_, " words per rank, ", frame_words_ * world,
                       " words for ", world, " ranks)"));
    }
    return words;
  }

  const std::shared_ptr<ClientCore> core_;
  const uint64_t round_;
  const size_t frame_words_;
  absl::Duration rpc_timeout_;
  grpc::ClientContext context_;
  v1::AllGatherWordsRequest request_;
  v1::AllGatherWordsResponse response_;
  // Over the slots (set before the round is shared, then fixed).
  std::shared_ptr<RoundSlotClient> slots_;
  uint64_t sequence_ = 0;
  absl::Duration answer_timeout_;
  absl::Time answer_deadline_;
  absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  // Written by OnDone or FinishLocked before done_ is notified; read-only
  // afterwards.
  absl::StatusOr<std::vector<uint32_t>> result_;
  absl::Notification done_;
};

namespace {

// Validates and starts one round; shared by both all_gather_words forms.
absl::StatusOr<std::shared_ptr<RoundCall>> SubmitRound(
    const std::shared_ptr<ClientCore>& core, absl::Span<const uint32_t> words,
    absl::Duration timeout) {
  const std::string context = core->conn->Context("AllGatherWords");
  if (timeout == absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        context, ": round timeout is zero; every round needs a deadline"));
  }
  absl::StatusOr<uint32_t> timeout_ms = ToMillis32(timeout, "round timeout");
  if (!timeout_ms.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, ": ", timeout_ms.status().message()));
  }
  if (words.size() > kMaxFrameWords) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, ": frame of ", words.size(),
                     " words exceeds the limit of ", kMaxFrameWords));
  }
  // Numbering and starting happen under submit_mu, so rounds reach gRPC in
  // the order of their numbers. core->mu is not held while starting: gRPC
  // may run the completion callback inline, and it takes core->mu.
  absl::MutexLock submit_lock(&core->submit_mu);
  std::shared_ptr<RoundCall> call;
  std::shared_ptr<RoundSlotClient> slots;
  {
    absl::MutexLock lock(&core->mu);
    absl::StatusOr<v1::MemberRef> member =
        core->CheckJoinedLocked("AllGatherWords");
    if (!member.ok()) return member.status();
    if (!core->rounds_failed.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat(context, ": ", core->rounds_failed.message()));
    }
    call = std::make_shared<RoundCall>(core, ++core->last_round, words.size());
    v1::AllGatherWordsRequest& request = call->request();
    *request.mutable_member() = *std::move(member);
    request.set_round(call->round());
    request.set_timeout_ms(*timeout_ms);
    slots = core->round_slots;
  }
  const absl::Duration answer_timeout =
      absl::Milliseconds(*timeout_ms) + kRoundGrace;
  // The slots carry the round unless its frame is too long, every slot
  // waits for an answer, or gRPC rounds are still out (they could be
  // overtaken: the daemon takes each rank's rounds strictly in order).
  if (slots != nullptr && slots->Fits(words.size()) &&
      core->grpc_rounds_in_flight.load() == 0) {
    if (std::optional<uint64_t> sequence =
            slots->TryPost(call->round(), *timeout_ms, words)) {
      call->StartOnSlots(slots, *sequence, answer_timeout);
      return call;
    }
  }
  // Likewise a gRPC round must not overtake slot rounds the daemon has not
  // taken yet; its watcher takes them within microseconds.
  if (slots != nullptr) {
    const absl::Duration patience = std::min(answer_timeout, kTakePatience);
    const absl::Time give_up = MonotonicNow() + patience;
    while (!slots->AllTaken()) {
      absl::Status health = slots->health();
      if (health.ok() && MonotonicNow() >= give_up) {
        health = absl::UnavailableError(absl::StrCat(
            "the daemon did not take this rank's earlier rounds from its "
            "round slots within ",
            absl::FormatDuration(patience)));
      }
      if (!health.ok()) {
        // Sending the round anyway would reach the daemon before earlier
        // ones; the numbering is lost either way.
        absl::Status failed = call->InContext(health);
        core->PoisonRounds(call->round(), failed);
        return failed;
      }
      absl::SleepFor(absl::Microseconds(50));
    }
  }
  call->request().mutable_words()->Add(words.begin(), words.end());
  RoundCall::Start(call, answer_timeout);
  return call;
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
  return call_->result();
}

void Client::PendingWords::Cancel() { call_->Cancel(); }

// ---------------------------------------------------------------------------
// Client

Client::Client(std::shared_ptr<internal::ClientCore> core)
    : core_(std::move(core)) {}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(
    const ClientOptions& given) {
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
      new Client(std::make_shared<internal::ClientCore>(*std::move(conn))));
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
      case internal::ClientCore::State::kNotJoined:
        break;
      case internal::ClientCore::State::kJoining:
        return absl::FailedPreconditionError(
            absl::StrCat(context, ": another Join is in progress"));
      case internal::ClientCore::State::kJoined:
        return absl::FailedPreconditionError(absl::StrCat(
            context, ": already joined job ", core_->member.job_id(),
            " as rank ", core_->member.rank()));
      case internal::ClientCore::State::kLeft:
        return absl::FailedPreconditionError(absl::StrCat(
            context,
            ": this client left the job; create a new Client to join again"));
    }
    core_->state = internal::ClientCore::State::kJoining;
  }

  v1::JoinRequest request;
  request.set_job_id(options.job_id);
  request.set_local_rank(options.local_rank);
  if (options.rank.has_value()) request.set_rank(*options.rank);
  request.set_world_size(options.world_size);
  *request.mutable_device() = options.device;
  request.set_incarnation(core_->incarnation);
  request.set_pid(static_cast<uint32_t>(::getpid()));
  request.set_wait_for_world_ms(*wait_ms);

  const absl::Duration rpc_timeout =
      absl::Milliseconds(*wait_ms) + core_->conn->options().call_timeout;
  grpc::ClientContext rpc;
  core_->conn->PrepareContext(&rpc, rpc_timeout);
  v1::JoinResponse response;
  grpc::Status status = core_->stub->Join(&rpc, request, &response);

  absl::Status error;
  if (!status.ok()) {
    error = FromGrpcStatus(status, context, rpc_timeout);
  } else {
    const v1::SessionDescriptor& s = response.session();
    if (s.world_size() == 0 || s.rank() >= s.world_size() ||
        s.job_id() != options.job_id ||
        (response.has_member() &&
         (response.member().incarnation() != core_->incarnation ||
          response.member().rank() != s.rank()))) {
      error = absl::InternalError(
          absl::StrCat(context, ": inconsistent answer from the daemon: ",
                       response.ShortDebugString()));
    }
  }
  std::pair<std::shared_ptr<internal::RoundSlotClient>, std::string> slots;
  if (error.ok()) {
    v1::MemberRef member;
    member.set_job_id(response.session().job_id());
    member.set_rank(response.session().rank());
    member.set_incarnation(core_->incarnation);
    slots = internal::OpenRoundSlots(*core_->conn, *core_->stub, member,
                                     response.session());
  }
  absl::MutexLock lock(&core_->mu);
  if (!error.ok()) {
    core_->state = internal::ClientCore::State::kNotJoined;
    return error;
  }
  core_->round_slots = std::move(slots.first);
  core_->round_path = std::move(slots.second);
  core_->descriptor = response.session();
  core_->member.set_job_id(response.session().job_id());
  core_->member.set_rank(response.session().rank());
  core_->member.set_incarnation(core_->incarnation);
  core_->state = internal::ClientCore::State::kJoined;

  // The watch stream: job events, and this rank's liveness lease. It has no
  // deadline on purpose; keepalive (TCP) or the socket closing (Unix)
  // bounds how long a dead daemon goes unnoticed.
  core_->watch_context = std::make_unique<grpc::ClientContext>();
  core_->conn->PrepareContext(core_->watch_context.get(),
                              absl::InfiniteDuration());
  v1::WatchRequest watch;
  *watch.mutable_member() = core_->member;
  watch.set_after_sequence(0);
  core_->watch_thread =
      std::thread([core = core_, context = core_->watch_context.get(),
                   watch = std::move(watch)]() mutable {
        core->WatchLoop(context, std::move(watch));
      });
  return core_->descriptor;
}

const v1::SessionDescriptor& Client::descriptor() const {
  return core_->descriptor;
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
  return (*call)->TakeResult();
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
  grpc::ClientContext rpc;
  core_->conn->PrepareContext(&rpc, timeout);
  v1::KvSetResponse response;
  grpc::Status status = core_->stub->KvSet(&rpc, request, &response);
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
  grpc::ClientContext rpc;
  core_->conn->PrepareContext(&rpc, rpc_timeout);
  v1::KvGetResponse response;
  grpc::Status status = core_->stub->KvGet(&rpc, request, &response);
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
  grpc::ClientContext rpc;
  core_->conn->PrepareContext(&rpc, timeout);
  v1::KvAddResponse response;
  grpc::Status status = core_->stub->KvAdd(&rpc, request, &response);
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
  grpc::ClientContext rpc;
  core_->conn->PrepareContext(&rpc, timeout);
  v1::KvDeleteResponse response;
  grpc::Status status = core_->stub->KvDelete(&rpc, request, &response);
  if (!status.ok()) return FromGrpcStatus(status, context, timeout);
  return response.existed();
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
    core_->failure_callback = shared;
    failure = core_->health;
  }
  // Fail() calls the callback it finds only when health was OK, so exactly
  // one of Fail() and this call runs the new callback.
  if (!failure.ok() && *shared) (*shared)(failure);
}

absl::Status Client::JobHealth() const {
  absl::MutexLock lock(&core_->mu);
  return core_->health;
}

absl::Status Client::Leave() {
  v1::LeaveRequest request;
  {
    absl::MutexLock lock(&core_->mu);
    switch (core_->state) {
      case internal::ClientCore::State::kNotJoined:
        core_->state = internal::ClientCore::State::kLeft;
        return absl::OkStatus();
      case internal::ClientCore::State::kJoining:
        return absl::FailedPreconditionError(absl::StrCat(
            core_->conn->Context("Leave"), ": a Join is in progress"));
      case internal::ClientCore::State::kLeft:
        return absl::OkStatus();
      case internal::ClientCore::State::kJoined:
        break;
    }
    core_->state = internal::ClientCore::State::kLeft;
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
