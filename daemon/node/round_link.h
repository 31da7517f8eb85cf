// RoundLink: a node's end of the round link to the coordinator
// (round_link_protocol.h): one TCP connection over which the node's
// daemon sends each round's contribution as one frame and reads every
// outcome, matched by tag, and forwards its ranks' key-value calls, each
// answered by a reply matched by id. It exists because a gRPC message costs
// the coordinator and the node far more CPU and latency than a frame on a
// socket (bench/RESULTS.md, "Rounds between nodes" and "Forwarded
// key-value calls").
//
// The link connects and shakes hands on its own thread, which then reads
// what the coordinator sends; until the handshake is done, and once the
// link has ended, Send and SendKv refuse and the caller uses another path
// (the Rounds stream, a unary Peer call). The link never reconnects: one
// that ends stays ended.
//
// Depends on absl, daemon/pending_rounds, daemon/pending_kv_calls,
// daemon/call_cancellation, the round link protocol, common/credentials
// and the protos.
#ifndef RANKD_DAEMON_ROUND_LINK_H_
#define RANKD_DAEMON_ROUND_LINK_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/call_cancellation.h"
#include "daemon/node/pending_kv_calls.h"
#include "daemon/node/pending_rounds.h"
#include "rankd/v1/peer.pb.h"

namespace rankd {

// The node's side of the round link's handshake on `fd`, a socket connected
// to the coordinator's round link port: reads the greeting, sends this
// node's hello (with TokenProof over its transcript when `node_token` is not
// empty), reads the welcome and checks the coordinator's proof. OK once the
// link is open, `fd` then carrying frames; otherwise why not, the message
// starting with `where`: the coordinator's refusal with its code,
// PermissionDenied when the peer cannot prove it holds the node key,
// DeadlineExceeded past `deadline` (on MonotonicNow's clock,
// common/monotonic_clock.h), Cancelled once `stopping` returns true,
// Unavailable when the socket fails. Blocks the caller; `fd` stays the
// caller's. RoundLink opens with it; the scale benchmark's simulated nodes
// (bench/scale_sim.cc) too.
absl::Status ShakeHandsAsNode(int fd, const v1::NodeRef& node,
                              absl::string_view node_token, absl::Time deadline,
                              absl::FunctionRef<bool()> stopping,
                              absl::string_view where);

class RoundLink {
 public:
  struct Options {
    std::string host;  // the coordinator's host (DNS name or address)
    uint16_t port = 0;
    std::string coordinator_address;  // for messages: "host:port" of gRPC
    v1::NodeRef node;
    // This node's token ("" when the job runs without authentication).
    std::string node_token;
    // Bounds connecting plus the handshake.
    absl::Duration open_timeout = absl::Seconds(5);
    // A send the coordinator does not take within this ends the link.
    absl::Duration send_timeout = absl::Seconds(5);
    // Key-value calls waiting for the coordinator at once (SendKv); 0:
    // kMaxKvCallsPerRoundLink (common/limits.h, which this header does not
    // include: the scale benchmark includes it next to client.h).
    size_t max_kv_calls = 0;
    // Each runs at most once, on the link's thread, outside its locks:
    // on_open with OK once the handshake is done or with why the link could
    // not open; on_end with why an open link ended (Cancelled after Stop).
    std::function<void(const absl::Status&)> on_open;
    std::function<void(const absl::Status&)> on_end;
  };

  // Starts connecting in the background.
  explicit RoundLink(Options options);
  // Stop()s.
  ~RoundLink();
  RoundLink(const RoundLink&) = delete;
  RoundLink& operator=(const RoundLink&) = delete;

  // Sends `request` (its tag is set here); `reply` runs once, on the link's
  // thread or the caller's, with the coordinator's outcome, DeadlineExceeded
  // once ExpireOverdue sees `deadline` pass, or the link's end (Unavailable
  // naming the coordinator, or the coordinator's own reason). Returns false,
  // leaving `reply` untouched, while the link is not open.
  bool Send(v1::ContributeWordsRequest request,
            PendingRounds::RoundReply& reply, absl::Time deadline);

  // Forwards a rank's key-value call (its id is set here); `reply` runs
  // once, on the link's thread or the caller's, with the coordinator's
  // KvLinkReply (whose code is the call's outcome), or: ResourceExhausted
  // when Options::max_kv_calls calls wait already; DeadlineExceeded once
  // ExpireOverdue sees `deadline` pass; when the link ends first,
  // Unavailable naming the link and saying the call may have been applied
  // (Cancelled after Stop). Once `cancellation` (may be null) is cancelled
  // while the call waits, the link asks the coordinator to release its
  // wait (a kKvCancel frame); the coordinator's reply still ends the call.
  // Returns false, leaving `reply` untouched and the call unsent, while
  // the link is not open.
  bool SendKv(v1::KvLinkRequest request, PendingKvCalls::KvReply& reply,
              absl::Time deadline, const CancellationRef& cancellation);

  // Fails the contributions and key-value calls left unanswered past their
  // deadline, and cancels those calls at the coordinator.
  void ExpireOverdue(absl::Time now);

  // Key-value calls waiting for their reply now (for tests).
  size_t waiting_kv_calls() { return kv_calls_.size(); }

  // Waits until the handshake is done (OK) or failed, or `timeout` passed
  // (DeadlineExceeded). After failure: why the link could not open.
  absl::Status WaitOpen(absl::Duration timeout);

  // Ends the link: waiting contributions and key-value calls fail with
  // Cancelled ("daemon is shutting down") and the thread is joined.
  // Idempotent.
  void Stop();

  // Ends the link without waiting for its thread, which fails the waiting
  // contributions and key-value calls with `why` (a key-value call's
  // message says it may have been applied): for a coordinator declared
  // lost, whose host may still keep the connection open, so that nothing
  // read from it would ever end them. No effect after Stop or the link's
  // end; a later Stop still joins the thread.
  void End(absl::Status why);

 private:
  // What a caller's cancellation reaches: this link until Stop, then
  // nothing (a cancellation may fire after the link is gone).
  struct CancelTarget {
    absl::Mutex mu;
    RoundLink* link ABSL_GUARDED_BY(mu) = nullptr;
  };

  void Run();
  // Connects and shakes hands; the connected socket or why not.
  absl::Status Open(int* fd);
  // Reads outcomes and key-value replies until the link ends; returns why
  // it ended.
  absl::Status ReadFrames(int fd);
  // Sends a whole frame; a failed send shuts the socket down (the reader
  // then fails what waits). False while the link is not open.
  bool SendFrame(const std::string& frame)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(send_mu_);
  // Asks the coordinator to release call `id`'s wait, if it still waits.
  void CancelKv(uint64_t id);

  const Options options_;
  const std::string name_;  // "round link to coordinator at host:port"
  PendingRounds pending_;
  PendingKvCalls kv_calls_;
  const std::shared_ptr<CancelTarget> cancel_target_;

  absl::Mutex mu_;
  int fd_ ABSL_GUARDED_BY(mu_) = -1;
  bool open_ ABSL_GUARDED_BY(mu_) = false;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Why End ended the link (OK until then).
  absl::Status ended_by_ ABSL_GUARDED_BY(mu_);
  absl::Status open_error_ ABSL_GUARDED_BY(mu_);
  // Serializes writers so frames never interleave; held across a send.
  absl::Mutex send_mu_ ABSL_ACQUIRED_BEFORE(mu_);

  std::thread thread_;
};

}  // namespace rankd

#endif  // RANKD_DAEMON_ROUND_LINK_H_
