// client/client.h: the library a serving process (a "rank") links to take
// part in a rankd job through its node's daemon.
//
// A Client connects to the daemon (Unix socket by default, TCP optional),
// joins the job once, and then offers the control-plane services of
// docs/client-api.md and docs/contract.md: the rank's session descriptor,
// world-wide all_gather_words rounds (blocking and bounded forms), the job's
// key-value broker (used for NCCL unique ids and Gloo rendezvous) and prompt
// notice of job failure through a watch stream that is also the rank's
// liveness lease.
//
//   rankd::ClientOptions options;  // target defaults to the node's socket
//   auto client = rankd::Client::Connect(options);
//   if (!client.ok()) return client.status();
//   rankd::JoinOptions join;
//   join.job_id = "llama-70b";
//   join.local_rank = local_rank;
//   auto session = (*client)->Join(join);
//   ...
//   auto all = (*client)->AllGatherWords(my_words, absl::Seconds(30));
//
// Depends only on //proto (the generated rankd.v1 API, status_details),
// //common, gRPC and abseil; gRPC types do not appear in this header.
//
// Recovery (rankd --recovery=on; docs/architecture.md, "Epochs and
// recovery"): when a rank or node is lost the job moves to a new epoch and
// JobHealth() turns failed; a surviving process calls Rejoin to enter the
// new epoch once the lost slots are taken again, and carries on.
//
// Thread safety: every Client method may be called from any thread
// concurrently, except that descriptor() must not race with Join(), and the
// destructor must not race with anything. Errors are absl::Status values
// whose message starts with "rankd <Method> via <target>:" and whose code is
// the daemon's gRPC code.

#ifndef RANKD_CLIENT_CLIENT_H_
#define RANKD_CLIENT_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/channel.h"
#include "common/kv_limits.h"
#include "common/round_limits.h"
#include "rankd/v1/common.pb.h"

namespace rankd {

namespace internal {
class RankConnection;
class RoundCall;
}  // namespace internal

// kMaxFrameWords (common/round_limits.h): the largest all_gather_words
// frame, in words, that a rank may contribute.
// The environment variable holding this rank's own token, which Connect
// presents when ClientOptions::bearer_token is empty (launchers set it per
// rank: docs/operations.md, "Credentials").
inline constexpr char kRankTokenEnvVar[] = "RANKD_RANK_TOKEN";

// Largest key-value broker key (bytes) and value (bytes).
inline constexpr size_t kMaxKeyBytes = kMaxKvKeyBytes;
inline constexpr size_t kMaxValueBytes = kMaxKvValueBytes;

// What a rank says about itself when joining.
struct JoinOptions {
  // The job to join; must match the daemon's job id. Required.
  std::string job_id;
  // Index of this process on its node, in [0, nproc_per_node). Absent:
  // 0, or with `rank` given, a slot the daemon picks (the rank's earlier
  // slot on this node, else its default one, rank % nproc_per_node, when
  // free and the rank is in this node's block, else the lowest free one).
  std::optional<uint32_t> local_rank;
  // Explicit world rank; when absent the daemon assigns
  // node_index * nproc_per_node + local_rank.
  std::optional<uint32_t> rank;
  // When non-zero, must equal the job's world size.
  uint32_t world_size = 0;
  // The device this rank drives (kind "cpu" or "cuda", index, uuid, ...).
  // A "cuda" device with a negative index is recorded as the GPU of the
  // rank's local slot (the daemon chooses the slot when local_rank is
  // unset).
  v1::DeviceInfo device;
  // How long Join waits for every rank of the job to join before returning.
  // Zero returns as soon as this rank is registered. Must be finite.
  absl::Duration wait_for_world = absl::Seconds(60);
};

class Client {
 public:
  // The bounded form of all_gather_words: one submitted round whose result
  // is collected later. Returned by SubmitAllGatherWords.
  //
  // A PendingWords owns, through shared state, every resource its round uses
  // (request, response, gRPC context, channel); they stay alive until gRPC
  // has finished the call, even if the PendingWords or its Client is
  // destroyed first. Thread-safe.
  class PendingWords {
   public:
    // Cancels the round if it is still in flight (see Cancel()).
    ~PendingWords();
    PendingWords(const PendingWords&) = delete;
    PendingWords& operator=(const PendingWords&) = delete;

    // The round's sequence number (1 for the client's first round).
    uint64_t round() const;

    // True once the round has finished (successfully or not): Wait() will
    // then return without blocking. Never blocks.
    bool IsReady() const;

    // Blocks until the round finishes or `timeout` passes. Returns the
    // rank-major concatenation of every rank's frame (word i of rank r at
    // r * frame_size + i), or the round's error. Returns InvalidArgument for
    // a zero or negative timeout, and DeadlineExceeded when the timeout
    // passes first; the round then stays in flight and Wait may be called
    // again. An infinite timeout waits for the round itself, which its
    // round_timeout bounds. May be called any number of times, from any
    // thread; each call returns a copy of the same result.
    absl::StatusOr<std::vector<uint32_t>> Wait(absl::Duration timeout) const;

    // Cancels the round's RPC and returns once gRPC has finished with it, so
    // no resource of the round is in use afterwards. A no-op when the round
    // already finished. A cancelled round leaves the client's round sequence
    // poisoned (see AllGatherWords).
    void Cancel();

   private:
    friend class Client;
    explicit PendingWords(std::shared_ptr<internal::RoundCall> call);
    std::shared_ptr<internal::RoundCall> call_;
  };

  // Invoked with each job event the daemon pushes, in sequence order.
  using EventCallback = std::function<void(const v1::JobEvent&)>;
  // Invoked once per epoch, with JobHealth()'s new value, when the job is
  // first seen failed in this client's epoch.
  using FailureCallback = std::function<void(const absl::Status&)>;

  // Connects to the daemon at options.target (empty = DefaultTarget()) and
  // waits until the connection is ready, at most options.connect_timeout.
  // Every call presents options.bearer_token, or when that is empty the
  // rank's own token from $RANKD_RANK_TOKEN (kRankTokenEnvVar).
  // Returns InvalidArgument for bad options and Unavailable when the daemon
  // cannot be reached in time; both name the target. Does not join.
  // In an optimized build of rankd, the first call turns abseil's
  // process-wide lock-order checker off (common/lock_order_checks.h;
  // RANKD_LOCK_ORDER_CHECKS=keep leaves it alone).
  static absl::StatusOr<std::unique_ptr<Client>> Connect(
      const ClientOptions& options);

  // Leaves the job if joined (ignoring errors) and stops the watch thread.
  // In-flight rounds (PendingWords) stay valid.
  ~Client();

  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Joins the job as described by `options`, sending this client's
  // incarnation and the process id, and returns this rank's descriptor. On
  // success, opens the watch stream (the rank's liveness lease: the daemon
  // declares the rank lost when it breaks without Leave) on a background
  // thread. Returns FailedPrecondition when already joined, joining or left;
  // InvalidArgument for bad options; otherwise the daemon's rejection (e.g.
  // rank claimed, wrong world size, DeadlineExceeded naming missing ranks
  // when wait_for_world passes). A failed Join may be retried.
  absl::StatusOr<v1::SessionDescriptor> Join(const JoinOptions& options);

  // Enters the job's next epoch after the epoch `ended_epoch` ended (a
  // rank or node was lost; rankd --recovery=on) and returns this rank's
  // descriptor there, whose epoch is later than `ended_epoch`.
  //
  // If this client already joined into an epoch later than `ended_epoch`,
  // returns descriptor() at once, so every user of the client (say, two
  // data-plane sessions) may call it with the epoch its own failure named.
  // Otherwise waits until the job has moved past `ended_epoch` (the watch
  // stream's events name the job's epoch), then joins again with this
  // client's incarnation and the JoinOptions of its Join, waiting for every
  // rank of the new epoch (a survivor's join, or a replacement's) for the
  // rest of `timeout`. A further loss while it waits (that epoch ended too)
  // is waited out the same way, within `timeout`.
  //
  // After success: descriptor() and epoch() are the new epoch's; JobHealth()
  // is OK again (losses that ended earlier epochs no longer count; one that
  // ends the new epoch does, and calls the failure callback again); rounds
  // are numbered from 1 again and a round sequence poisoned in an earlier
  // epoch is usable again (rounds of the earlier epoch still in flight end
  // with their own error and poison nothing); the round slots are opened
  // again (round_path()). Keys are the job's, as before.
  //
  // Errors: InvalidArgument for a zero, negative or infinite timeout;
  // FailedPrecondition before Join, after Leave, on the watch thread (from
  // an event or failure callback: it reads the events this waits for), or
  // when the daemon answers with an epoch not later than `ended_epoch`;
  // the job's failure (its code)
  // at once when the job FAILED (recovery off, or its recovery deadline
  // passed) or the watch stream was lost, since no epoch follows then;
  // DeadlineExceeded naming the epoch waited for (and, from the daemon, the
  // ranks still missing) when `timeout` passes; otherwise the daemon's
  // rejection of the join (e.g. FailedPrecondition when this process was
  // itself declared lost). A failed Rejoin leaves the client in its old
  // epoch and may be retried. Concurrent calls run one after another.
  absl::StatusOr<v1::SessionDescriptor> Rejoin(uint64_t ended_epoch,
                                               absl::Duration timeout);

  // This rank's descriptor: empty until Join succeeds, then the descriptor
  // of the epoch this client joined into last (Join, then each Rejoin).
  // The object referred to never changes and stays valid for the life of
  // the Client; a Rejoin makes later calls return a different object, so a
  // reader concurrent with Rejoin sees either the old or the new epoch's
  // descriptor, whole.
  const v1::SessionDescriptor& descriptor() const;

  // The epoch this client joined into (descriptor().epoch()); 0 before
  // Join. Changes only in Rejoin.
  uint64_t epoch() const;

  // The identity sent with every request after Join (empty before).
  v1::MemberRef member() const;

  // This client's incarnation: random, non-zero, fixed at Connect.
  uint64_t incarnation() const;

  // How this client's all_gather_words rounds reach the daemon:
  // "shared-memory" once Join mapped the daemon's round slots (the default
  // on a Unix socket: docs/architecture.md, "Local fast path"), otherwise
  // "grpc (<why>)". Rounds whose frame is longer than a slot holds
  // (common/round_slots.h, kRoundSlotFrameWords) go over gRPC either way;
  // both paths have the same semantics.
  std::string round_path() const;

  // How this client's key-value calls reach the daemon: "kv-channel" once
  // Join opened the daemon's key-value channel (the default on a Unix
  // socket), otherwise "grpc (<why>)". A channel that breaks leaves the
  // calls after it on gRPC. Both paths answer alike.
  std::string kv_path() const;

  // The daemon address, as given (or defaulted) in ClientOptions.
  const std::string& target() const;

  // One world-wide all_gather_words round: sends `words` (this rank's frame,
  // at most kMaxFrameWords; every rank must send the same length) and blocks
  // until every rank contributed or `timeout` passes. Returns the rank-major
  // concatenation of every rank's frame.
  //
  // Rounds are numbered 1, 2, 3, ... in the order they are submitted (from
  // 1 again in each epoch Rejoin enters); this method and
  // SubmitAllGatherWords share the numbering. Every rank must run
  // the same sequence of rounds. Once a submitted round fails (deadline, lost
  // member, frame-length disagreement, cancellation), the numbering can no
  // longer be trusted to match the other ranks', so every later round fails
  // at once with FailedPrecondition naming the failed round.
  //
  // Errors: InvalidArgument for a bad timeout (zero, negative, infinite) or
  // an oversized frame, without using a round number; FailedPrecondition
  // before Join or after Leave; JobHealth() when the job already failed;
  // otherwise the daemon's error (DeadlineExceeded naming the ranks that did
  // not contribute, ...).
  //
  // With the daemons' --recovery=domain (docs/contract.md, "Data-parallel
  // domains") a world round spans the data-parallel replicas serving when
  // it ran. A round that did not span every replica fails here with
  // FailedPrecondition naming the replicas it spanned, so that no caller
  // takes a partial world for the whole (the round still counts as
  // completed: the numbering stays good); AllGatherWordsWithView returns
  // it.
  absl::StatusOr<std::vector<uint32_t>> AllGatherWords(
      absl::Span<const uint32_t> words, absl::Duration timeout);

  // Recovery by domain: one data-parallel replica and the epoch it served
  // a round at.
  struct DomainEpoch {
    uint32_t domain = 0;
    uint64_t epoch = 0;
    friend bool operator==(const DomainEpoch&, const DomainEpoch&) = default;
  };
  // A world round's result and the serving view it was taken in.
  struct WorldWords {
    // Rank-major frames of the ranks of `domains` (every rank's when not
    // partial). Domains are contiguous rank blocks of T*P*E ranks, so rank
    // r's frame is block (index of r's domain in `domains`), offset
    // r mod T*P*E.
    std::vector<uint32_t> words;
    // True when the round did not span every replica (one recovered).
    bool partial = false;
    // The replicas the round spans, ascending, with their epochs; empty
    // without recovery by domain.
    std::vector<DomainEpoch> domains;
  };
  // AllGatherWords that returns a partial round too, with its view: the
  // documented way to learn which replicas serve now. Same numbering,
  // errors and bounds as AllGatherWords. With recovery by domain, rounds
  // go over gRPC, never the round slots (whose answers carry no view).
  absl::StatusOr<WorldWords> AllGatherWordsWithView(
      absl::Span<const uint32_t> words, absl::Duration timeout);

  // The bounded form of AllGatherWords: validates and submits the round now
  // and returns at once; the result is collected with PendingWords::Wait.
  // `round_timeout` bounds the whole round on the daemon. Errors as for
  // AllGatherWords, for what can be known at submission; the round's own
  // outcome is reported by Wait.
  absl::StatusOr<std::unique_ptr<PendingWords>> SubmitAllGatherWords(
      absl::Span<const uint32_t> words, absl::Duration round_timeout);

  // Key-value broker of the job (namespaced per job and job incarnation by
  // the daemon). Keys are 1..kMaxKeyBytes bytes, values at most
  // kMaxValueBytes; InvalidArgument otherwise. Each call fails with
  // FailedPrecondition before Join or after Leave, and with JobHealth() once
  // the job failed.
  //
  // Keys have owners (docs/operations.md, "Key-value ownership"): a key
  // under "r<N>/" belongs to rank N; one under a prefix the job declares
  // shared (rankd --kv_shared_prefixes) to no one, and is written with
  // KvCompareAndSet / KvCompareAndDelete; any other key to the rank that
  // created it. Writing a key another rank owns fails with
  // PermissionDenied naming the owner. Every rank reads every key.
  //
  // KvSet stores `value` under `key`, replacing any previous value.
  absl::Status KvSet(absl::string_view key, absl::string_view value);
  // Compare-and-set: stores `value` only when `key` holds `expected`, or,
  // with `expected` nullopt, only when `key` does not exist. Returns
  // whether it stored.
  absl::StatusOr<bool> KvCompareAndSet(
      absl::string_view key, std::optional<absl::string_view> expected,
      absl::string_view value);
  // KvGet returns the value of `key`, waiting up to `timeout` for it to be
  // set. A zero timeout does not wait: NotFound when absent. DeadlineExceeded
  // when the timeout passes; InvalidArgument for a negative/infinite timeout.
  absl::StatusOr<std::string> KvGet(absl::string_view key,
                                    absl::Duration timeout);
  // KvAdd adds `delta` to the signed 64-bit counter at `key` (absent = 0)
  // and returns the new value. Fails when `key` holds a non-counter value.
  absl::StatusOr<int64_t> KvAdd(absl::string_view key, int64_t delta);
  // KvDelete removes `key`; returns whether it existed.
  absl::StatusOr<bool> KvDelete(absl::string_view key);
  // Removes `key` only when it holds `expected`; returns whether it did.
  absl::StatusOr<bool> KvCompareAndDelete(absl::string_view key,
                                          absl::string_view expected);
  // KvCount returns how many keys of the job's store start with `prefix`
  // (empty: every key, the data plane's own included), as of one moment.
  // InvalidArgument for a prefix over 512 bytes.
  absl::StatusOr<uint64_t> KvCount(absl::string_view prefix);

  // Sets the function called, on the watch thread, with every job event
  // (replayed from the job's first event when the stream opens). Replaces
  // any previous callback; an empty function clears it. The callback should
  // return quickly (it delays the next event) and may call any Client
  // method, Leave() included, but Rejoin (FailedPrecondition there).
  void SetEventCallback(EventCallback callback);

  // Sets the function called once, on the thread that notices it (usually
  // the watch thread), when JobHealth() first becomes non-OK; called at once
  // on this thread if it already is. Meant for aborting data-plane
  // communicators. Same rules as the event callback. Replaces what an
  // earlier SetFailureCallback set (an empty function clears it); those
  // AddFailureCallback added stay.
  void SetFailureCallback(FailureCallback callback);

  // Adds a failure callback called as SetFailureCallback's is, beside it
  // and every other one added, so that each user of one client (the data
  // plane's control plane, c10d stores) hears of the failure. Returns its
  // id for RemoveFailureCallback, never 0.
  uint64_t AddFailureCallback(FailureCallback callback);
  // Removes the callback AddFailureCallback returned `id` for; a call of it
  // already running on another thread may still run after this returns.
  // An id not added (or removed already) is ignored.
  void RemoveFailureCallback(uint64_t id);

  // OK while the job is healthy as far as this client knows. Otherwise the
  // first failure seen that counts in this client's epoch: Aborted for a
  // JOB_FAILED event, or a MEMBER_LOST or NODE_LOST event of this client's
  // epoch or a later one (message names the job, ranks or node and the
  // daemon's cause: "job J failed (MEMBER_LOST, ...): ...", or, for a loss
  // the job recovers from in place (JobEvent.ends_epoch; see
  // descriptor().recovers_in_place()), "job J epoch E ended (MEMBER_LOST,
  // ...): ...", by domain "job J (DOMAIN_RECOVERING, ...): ..."; see
  // EndsAnEpoch), or Unavailable "connection to local rankd daemon lost"
  // when the watch stream breaks without Leave. A loss that ended an epoch
  // before the one this client joined into (a replacement's join replays
  // it) is not this client's failure. Rejoin makes it OK again after a
  // loss. Never contacts the daemon.
  absl::Status JobHealth() const;

  // Whether `failure` (JobHealth()'s, or what the failure callback got) is
  // a loss the job recovers from in place: it ended this client's epoch,
  // and Rejoin continues; false for a failed job, a lost daemon connection
  // and OK. The client marks such a failure (ErrorReason::kEpochEnded,
  // common/error_reason.h; code that rewrites its message keeps the mark
  // with KeepReason); the message is not read.
  static bool EndsAnEpoch(const absl::Status& failure);

  // Whether `error` (a key-value call's) is a recovering job's fence
  // between its epochs: the daemon refused this process, which joined an
  // epoch the job has left behind (FAILED_PRECONDITION "rank R joined into
  // epoch E but the job is at epoch F ...", by domain "... but its domain D
  // is at epoch F"). The daemon marks it (common/error_reason.h); the
  // message is not read. (A round's fence has the same words but no mark:
  // rounds carry code and message only.) The loss that ended the epoch
  // reaches JobHealth() on the watch stream, possibly a moment after such
  // an answer: a caller that wants to report the loss waits for it
  // briefly.
  static bool FencedByALaterEpoch(const absl::Status& error);

  // Leaves the job cleanly: tells the daemon, then closes the watch stream
  // and joins the watch thread. Idempotent: returns OK when not joined or
  // already left. Returns the daemon's error if the Leave call fails (the
  // watch stream is closed anyway, so the daemon will treat the rank as
  // lost). After Leave, calls that need a joined rank fail with
  // FailedPrecondition, and Join and Rejoin fail too (a new Client is a new
  // incarnation). Rounds already submitted are not cancelled.
  absl::Status Leave();

 private:
  explicit Client(std::shared_ptr<internal::RankConnection> core);
  absl::StatusOr<bool> KvWrite(absl::string_view method, absl::string_view key,
                               absl::string_view value,
                               std::optional<absl::string_view> expected,
                               bool if_absent);
  // Sends Join with this client's incarnation and validates the answer;
  // `by_domain` and `first_world_round` get JoinResponse's
  // recovery_by_domain and first_world_round.
  absl::StatusOr<v1::SessionDescriptor> SendJoin(const std::string& context,
                                                 const JoinOptions& options,
                                                 uint32_t wait_ms,
                                                 bool* by_domain,
                                                 uint64_t* first_world_round);
  absl::StatusOr<bool> KvRemove(absl::string_view method, absl::string_view key,
                                std::optional<absl::string_view> expected);

  // Shared with the watch thread and in-flight rounds.
  const std::shared_ptr<internal::RankConnection> core_;
};

}  // namespace rankd

#endif  // RANKD_CLIENT_CLIENT_H_
