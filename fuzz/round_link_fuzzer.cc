// Fuzzes both ends of the round link (daemon/transport/round_link_protocol.h)
// with bytes an untrusted peer could send over TCP. The input's first byte
// picks the end (bit 0), the size of the chunks the rest is written in
// (1 + bits 1-6) and bit 7: at the coordinator's end, whether a second
// link replaces the first; at the node's, whether the node holds a token;
// the rest is the peer's bytes.
//   - coordinator end (bit 0 clear): a real RoundLinkServer, started once
//     on 127.0.0.1 with unit-level stub handlers, gets the bytes as a
//     node's connection, then the node's half-close. The admit stub admits
//     a hello whose proof is kNodeProof, so seeds reach the typed frames.
//     Checked: no crash; the server closes within kCloseBound of the
//     node's end; what it sent parses as frames, the greeting first, then
//     the welcome and typed frames, any last words (a refusing welcome or
//     an outcome with tag 0 and a code) last; when it closed before taking
//     every byte it said why; and a new connection completes a well-formed
//     handshake after every input (with bit 7: while the input's link is
//     open, as the same node, replacing it).
//   - node end (bit 0 set): a real RoundLink connects to a fake coordinator
//     socket that sends the bytes, then the end of its stream (with bit 7,
//     the node holds a token, so a welcome's proof fails). Once the link
//     opens it sends a contribution and a key-value call, so outcomes and
//     replies can match them. Checked: no crash; the node closes within
//     kCloseBound of the stream's end, the link ends with an error (never
//     OK), and each waiting call is answered exactly once.
// Every socket wait has a deadline; nothing outlives an input but the
// server, its thread and the two listening sockets.
//
// Depends on absl, the round link's two ends and protocol, WordRounds'
// outcome, call cancellation and the protos.
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/call_cancellation.h"
#include "daemon/coordinator/word_rounds.h"
#include "daemon/node/round_link.h"
#include "daemon/transport/round_link_protocol.h"
#include "daemon/transport/round_link_server.h"
#include "google/protobuf/stubs/logging.h"
#include "rankd/v1/peer.pb.h"

namespace rankd {
namespace {

// The proofs the stubs exchange (the seeds' hello carries kNodeProof).
constexpr absl::string_view kNodeProof = "fuzz-node-proof";
constexpr absl::string_view kCoordinatorProof = "fuzz-coordinator-proof";
// Far beyond what a healthy end takes (well under a millisecond), so only
// a hang trips it, even on a loaded machine.
constexpr absl::Duration kCloseBound = absl::Seconds(5);

void Require(bool promise, const char* what) {
  if (promise) return;
  std::fprintf(stderr, "round_link_fuzzer: broken promise: %s\n", what);
  std::abort();
}

// Closes the descriptor it holds.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Waits for `events` on `fd` until `deadline`; false when it passed.
bool AwaitFd(int fd, short events, absl::Time deadline) {
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    pollfd p{fd, events, 0};
    int n =
        ::poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return false;
  }
}

// A listening socket on 127.0.0.1; its port through `port`.
int ListenLocal(int* port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  Require(fd >= 0, "a socket for the fake coordinator");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  Require(
      ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
          ::listen(fd, 16) == 0,
      "the fake coordinator listens");
  socklen_t len = sizeof(address);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &len);
  *port = ntohs(address.sin_port);
  return fd;
}

// A non-blocking connection to 127.0.0.1:`port` that closes with a reset
// (SO_LINGER 0), so hundreds of thousands of inputs leave no TIME_WAIT
// behind to exhaust the ephemeral ports.
int ConnectLocal(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  Require(fd >= 0, "a socket for the node");
  linger no_linger{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &no_linger, sizeof(no_linger));
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) !=
          0 &&
      errno != EINPROGRESS) {
    ::close(fd);
    return -1;
  }
  if (!AwaitFd(fd, POLLOUT, absl::Now() + kCloseBound)) {
    ::close(fd);
    return -1;
  }
  int error = 0;
  socklen_t len = sizeof(error);
  ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len);
  if (error != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Writes `bytes` in chunks of `chunk`, yielding between them so the reader
// tends to see them apart (best effort: the kernel may still merge them).
// False once the peer no longer takes them (it closed).
bool WriteInChunks(int fd, absl::string_view bytes, size_t chunk) {
  for (size_t at = 0; at < bytes.size();) {
    const size_t size = std::min(chunk, bytes.size() - at);
    if (!AwaitFd(fd, POLLOUT, absl::Now() + kCloseBound)) return false;
    ssize_t n = ::send(fd, bytes.data() + at, size, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return false;
    }
    at += static_cast<size_t>(n);
    ::sched_yield();
  }
  return true;
}

// Reads until the peer closes (true; `reset` when it reset the connection)
// or `deadline` (false).
bool ReadUntilClosed(int fd, absl::Time deadline, std::string* out,
                     bool* reset) {
  char buffer[16 << 10];
  while (true) {
    if (!AwaitFd(fd, POLLIN, deadline)) return false;
    ssize_t n = ::recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n > 0) {
      out->append(buffer, static_cast<size_t>(n));
    } else if (n == 0) {
      return true;
    } else if (errno != EINTR && errno != EAGAIN) {
      *reset = true;
      return true;
    }
  }
}

// Reads one untyped frame (the handshake's) by `deadline`.
bool ReadFrameBy(int fd, absl::Time deadline, std::string* payload) {
  std::string in;
  while (in.size() < kRoundLinkHeaderBytes ||
         in.size() < kRoundLinkHeaderBytes + RoundLinkFrameLength(in.data())) {
    if (in.size() >= kRoundLinkHeaderBytes &&
        RoundLinkFrameLength(in.data()) > kMaxRoundLinkHandshakeBytes) {
      return false;
    }
    if (!AwaitFd(fd, POLLIN, deadline)) return false;
    char c[256];
    // Never past this frame: what follows is not ours to take.
    size_t want = in.size() < kRoundLinkHeaderBytes
                      ? kRoundLinkHeaderBytes - in.size()
                      : kRoundLinkHeaderBytes +
                            RoundLinkFrameLength(in.data()) - in.size();
    ssize_t n = ::recv(fd, c, std::min(want, sizeof(c)), MSG_DONTWAIT);
    if (n == 0) return false;
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return false;
    }
    in.append(c, static_cast<size_t>(n));
  }
  *payload = in.substr(kRoundLinkHeaderBytes);
  return true;
}

// ---- The coordinator's end -------------------------------------------

// Answers a key-value call as a coordinator could: at once, except a get
// with a timeout, which waits until the node cancels it or the link ends
// (as a blocked get waits in the coordinator).
void StubKv(std::optional<uint32_t> node, const v1::KvLinkRequest& request,
            const CancellationRef& cancellation, RoundLinkServer::KvDone done) {
  v1::KvLinkReply reply;
  switch (request.call_case()) {
    case v1::KvLinkRequest::kKvSet:
      if (request.kv_set().key().empty()) {
        reply.set_code(static_cast<int>(absl::StatusCode::kInvalidArgument));
        reply.set_message("an empty key");
      } else {
        reply.mutable_kv_set()->set_stored(!request.kv_set().if_absent());
      }
      break;
    case v1::KvLinkRequest::kKvGet:
      if (request.kv_get().timeout_ms() > 0) {
        cancellation->OnCancel([done] {
          v1::KvLinkReply cancelled;
          cancelled.set_code(static_cast<int>(absl::StatusCode::kCancelled));
          cancelled.set_message("cancelled");
          done(std::move(cancelled));
        });
        return;
      }
      reply.mutable_kv_get()->set_value(request.kv_get().key());
      break;
    case v1::KvLinkRequest::kKvAdd:
      reply.mutable_kv_add()->set_value(request.kv_add().delta());
      break;
    case v1::KvLinkRequest::kKvDelete:
      reply.mutable_kv_delete()->set_existed(!node.has_value());
      break;
    case v1::KvLinkRequest::kKvCount:
      reply.set_code(static_cast<int>(absl::StatusCode::kPermissionDenied));
      reply.set_message("not this node's rank");
      break;
    case v1::KvLinkRequest::CALL_NOT_SET:
      Require(false, "the server hands on only calls that name one");
  }
  done(std::move(reply));
}

RoundLinkServer::Handlers StubHandlers() {
  RoundLinkServer::Handlers h;
  h.admit =
      [](const v1::RoundLinkHello& hello, absl::string_view,
         absl::string_view) -> absl::StatusOr<RoundLinkServer::Admission> {
    if (hello.proof() != kNodeProof) {
      return absl::PermissionDeniedError("the node's proof does not hold");
    }
    RoundLinkServer::Admission admission;
    // A named job's links speak for their node (one link per node);
    // others for any.
    if (!hello.node().job_id().empty()) {
      admission.node = hello.node().node_index();
    }
    admission.proof = std::string(kCoordinatorProof);
    return admission;
  };
  h.authorize = [](std::optional<uint32_t> node,
                   const v1::ContributeWordsRequest& request) {
    if (node.has_value() && request.node().node_index() != *node) {
      return absl::PermissionDeniedError("a contribution for another node");
    }
    return absl::OkStatus();
  };
  h.contribute = [](const v1::ContributeWordsRequest& request,
                    WordRounds::SharedDone done) {
    // An error outcome only for a tagged contribution: with tag 0 it would
    // read as the coordinator's last words (a real node never sends tag 0).
    if (request.tag() != 0 && request.round() % 4 == 3) {
      done(std::make_shared<WordRounds::Outcome>(
          request.round(), absl::DeadlineExceededError("round timed out")));
      return;
    }
    v1::AllGatherWordsResponse result;
    result.set_round(request.round());
    for (const v1::RankFrame& frame : request.frames()) {
      if (result.words_size() > 4096) break;
      result.set_words_per_rank(static_cast<uint32_t>(frame.words_size()));
      for (uint32_t word : frame.words()) result.add_words(word);
    }
    done(std::make_shared<WordRounds::Outcome>(request.round(),
                                               std::move(result)));
  };
  h.kv = StubKv;
  h.observe = [](absl::string_view, absl::StatusCode, absl::Duration) {};
  return h;
}

RoundLinkServer& Server() {
  static RoundLinkServer* server = [] {
    auto started = RoundLinkServer::Start("127.0.0.1", 0, StubHandlers());
    Require(started.ok(), "the round link server starts");
    return started->release();  // lives as long as the process
  }();
  return *server;
}

// Checks what the server sent a node (`out`, all of it when `whole`):
// frames, the greeting first, the welcome or last words next, typed frames
// once open, nothing after last words. Returns whether it ended with last
// words (a refusal included).
bool CheckServerOutput(absl::string_view out, bool whole) {
  enum class Phase {
    kGreeting,
    kWelcome,
    kOpen,
    kEnded
  } phase = Phase::kGreeting;
  while (out.size() >= kRoundLinkHeaderBytes) {
    const uint32_t length = RoundLinkFrameLength(out.data());
    if (out.size() < kRoundLinkHeaderBytes + length) break;
    absl::string_view payload = out.substr(kRoundLinkHeaderBytes, length);
    out.remove_prefix(kRoundLinkHeaderBytes + length);
    Require(phase != Phase::kEnded, "nothing follows the last words");
    if (phase == Phase::kGreeting) {
      std::string nonce;
      Require(ParseRoundLinkGreeting(payload, &nonce).ok(),
              "the server's first frame is a greeting");
      phase = Phase::kWelcome;
      continue;
    }
    // Last words: a typed outcome with tag 0 and a code (a welcome's
    // encoding never starts with the outcome's type byte, 2).
    RoundLinkFrameType type;
    absl::string_view message;
    const bool typed =
        ParseRoundLinkFrame(payload, "coordinator", kCoordinatorFrameTypes,
                            &type, &message)
            .ok();
    if (phase == Phase::kWelcome &&
        !(typed && type == RoundLinkFrameType::kOutcome)) {
      v1::RoundLinkWelcome welcome;
      Require(welcome.ParseFromArray(payload.data(),
                                     static_cast<int>(payload.size())),
              "the second frame is a RoundLinkWelcome or last words");
      if (welcome.code() != 0) {
        Require(!welcome.message().empty(), "a refusal says why");
        phase = Phase::kEnded;
      } else {
        Require(welcome.proof() == kCoordinatorProof,
                "a welcome carries the coordinator's proof");
        phase = Phase::kOpen;
      }
      continue;
    }
    Require(typed, "every frame after the welcome is a coordinator's type");
    if (type == RoundLinkFrameType::kKvReply) {
      Require(phase == Phase::kOpen, "kv replies only on an open link");
      v1::KvLinkReply reply;
      Require(reply.ParseFromArray(message.data(),
                                   static_cast<int>(message.size())),
              "a kv reply frame holds a KvLinkReply");
      Require(reply.id() != 0, "a kv reply names its call");
      continue;
    }
    v1::RoundOutcome outcome;
    Require(outcome.ParseFromArray(message.data(),
                                   static_cast<int>(message.size())),
            "an outcome frame holds a RoundOutcome");
    if (outcome.tag() == 0 && outcome.code() != 0) {
      Require(!outcome.message().empty(), "last words say why");
      phase = Phase::kEnded;
      continue;
    }
    Require(phase == Phase::kOpen, "outcomes only on an open link");
  }
  Require(!whole || out.empty(), "the server sends whole frames");
  Require(phase != Phase::kGreeting, "the server greets every connection");
  return phase == Phase::kEnded;
}

std::string HelloFrame(absl::string_view job) {
  v1::RoundLinkHello hello;
  hello.mutable_node()->set_job_id(std::string(job));
  hello.mutable_node()->set_node_index(7);
  hello.set_nonce(std::string(kRoundLinkNonceBytes, 'n'));
  hello.set_proof(std::string(kNodeProof));
  return RoundLinkFrame(hello.SerializeAsString());
}

// A well-formed node completes its handshake on a new connection. With
// `job` "fuzz" the link speaks for node 7, as the seeds' hello does, so it
// replaces an open link of theirs; with "" it speaks for no node.
void CheckServerLive(absl::string_view job) {
  Fd fd(ConnectLocal(Server().port()));
  Require(fd.get() >= 0, "the server accepts a new connection");
  const absl::Time deadline = absl::Now() + kCloseBound;
  std::string payload, nonce;
  Require(ReadFrameBy(fd.get(), deadline, &payload) &&
              ParseRoundLinkGreeting(payload, &nonce).ok(),
          "the server greets a new connection");
  Require(WriteInChunks(fd.get(), HelloFrame(job), 4096),
          "the server takes a hello");
  v1::RoundLinkWelcome welcome;
  Require(ReadFrameBy(fd.get(), deadline, &payload) &&
              welcome.ParseFromString(payload) && welcome.code() == 0 &&
              welcome.proof() == kCoordinatorProof,
          "the server welcomes a well-formed hello");
}

// `replace`: the liveness link opens while the input's is still open, as
// node 7 (a restarted daemon's link replacing its older one).
void FuzzServer(absl::string_view bytes, size_t chunk, bool replace) {
  {
    Fd fd(ConnectLocal(Server().port()));
    Require(fd.get() >= 0, "the server accepts the node's connection");
    const bool took_all = WriteInChunks(fd.get(), bytes, chunk);
    if (replace) CheckServerLive("fuzz");
    ::shutdown(fd.get(), SHUT_WR);
    std::string out;
    bool reset = false;
    Require(ReadUntilClosed(fd.get(), absl::Now() + kCloseBound, &out, &reset),
            "the server closes the link after the node's end");
    const bool last_words = CheckServerOutput(out, !reset);
    Require(took_all || last_words,
            "a server that closes before the node is done says why");
  }
  if (!replace) CheckServerLive("");
}

// ---- The node's end ----------------------------------------------------

struct FakeCoordinator {
  int listen_fd = -1;
  int port = 0;
};

FakeCoordinator& Coordinator() {
  static FakeCoordinator* coordinator = [] {
    auto* c = new FakeCoordinator;  // lives as long as the process
    c->listen_fd = ListenLocal(&c->port);
    return c;
  }();
  return *coordinator;
}

// What the link reported, from its thread and its callers'.
struct LinkRecord {
  absl::Mutex mu;
  bool settled = false;  // on_open failed, or on_end ran
  bool opened = false;
  absl::Status end;
  int round_replies = 0;
  int kv_replies = 0;
};

// `with_token`: the node holds a token, so it checks the welcome's proof
// (which bytes chosen before the node's random nonce cannot make).
void FuzzNode(absl::string_view bytes, size_t chunk, bool with_token) {
  FakeCoordinator& coordinator = Coordinator();
  auto record = std::make_shared<LinkRecord>();
  // Set once the link exists, before its thread can open (that takes the
  // greeting the fake coordinator sends below).
  auto link_ptr = std::make_shared<std::atomic<RoundLink*>>(nullptr);
  RoundLink::Options options;
  options.host = "127.0.0.1";
  options.port = static_cast<uint16_t>(coordinator.port);
  options.coordinator_address = "fuzz-coordinator";
  options.node.set_job_id("fuzz");
  options.node.set_node_index(7);
  if (with_token) options.node_token = "fuzz-node-token";
  options.open_timeout = kCloseBound;
  options.send_timeout = absl::Milliseconds(500);
  // Once open, a contribution and a key-value call wait (tag 1, id 1), so
  // the bytes that follow the welcome can answer them.
  options.on_open = [record, link_ptr](const absl::Status& s) {
    if (!s.ok()) {
      absl::MutexLock lock(&record->mu);
      record->settled = true;
      record->end = s;
      return;
    }
    {
      absl::MutexLock lock(&record->mu);
      record->opened = true;
    }
    RoundLink* link = link_ptr->load();
    const absl::Time deadline = absl::InfiniteFuture();
    PendingRounds::RoundReply round_reply =
        [record](absl::StatusOr<v1::AllGatherWordsResponse>) {
          absl::MutexLock lock(&record->mu);
          ++record->round_replies;
        };
    v1::ContributeWordsRequest request;
    request.set_round(1);
    Require(link->Send(request, round_reply, deadline),
            "an open link takes a contribution");
    PendingKvCalls::KvReply kv_reply =
        [record](absl::StatusOr<v1::KvLinkReply>) {
          absl::MutexLock lock(&record->mu);
          ++record->kv_replies;
        };
    v1::KvLinkRequest kv;
    kv.mutable_kv_get()->set_key("k");
    Require(link->SendKv(kv, kv_reply, deadline, nullptr),
            "an open link takes a key-value call");
  };
  options.on_end = [record](const absl::Status& s) {
    absl::MutexLock lock(&record->mu);
    record->settled = true;
    record->end = s;
  };
  RoundLink link(std::move(options));
  link_ptr->store(&link);
  {
    Require(AwaitFd(coordinator.listen_fd, POLLIN, absl::Now() + kCloseBound),
            "the node's link connects");
    Fd fd(::accept4(coordinator.listen_fd, nullptr, nullptr,
                    SOCK_NONBLOCK | SOCK_CLOEXEC));
    Require(fd.get() >= 0, "the fake coordinator accepts the node");
    WriteInChunks(fd.get(), bytes, chunk);
    // The end of the stream ends the link: the node reads every byte sent,
    // then the end, and closes.
    ::shutdown(fd.get(), SHUT_WR);
    std::string ignored;
    bool reset = false;
    Require(
        ReadUntilClosed(fd.get(), absl::Now() + kCloseBound, &ignored, &reset),
        "the node closes its link once the coordinator's stream ends");
  }
  auto settled = [&record]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(record->mu) {
    return record->settled;
  };
  {
    absl::MutexLock lock(&record->mu);
    Require(record->mu.AwaitWithTimeout(absl::Condition(&settled), kCloseBound),
            "the node's link ends once the coordinator closes");
    Require(!record->end.ok(), "a link that ends says why");
  }
  link.Stop();
  absl::MutexLock lock(&record->mu);
  if (record->opened) {
    Require(record->round_replies == 1, "the contribution is answered once");
    Require(record->kv_replies == 1, "the key-value call is answered once");
  } else {
    Require(record->round_replies == 0 && record->kv_replies == 0,
            "nothing is sent before the link opens");
  }
}

}  // namespace
}  // namespace rankd

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Strings that are not UTF-8 are every other input here: protobuf's log
  // line for each would cost more than the input (before any thread, as
  // SetLogHandler is not thread-safe).
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool node_end = (data[0] & 1) != 0;
  const size_t chunk = 1 + ((data[0] >> 1) & 63);
  const bool bit7 = (data[0] & 0x80) != 0;
  absl::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (node_end) {
    rankd::FuzzNode(bytes, chunk, /*with_token=*/bit7);
  } else {
    rankd::FuzzServer(bytes, chunk, /*replace=*/bit7);
  }
  return 0;
}
