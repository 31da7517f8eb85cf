// scale_sim: many simulated nodes of one rankd job in one process, speaking
// the real Peer protocol (proto/rankd/v1/peer.proto) to a real coordinator
// daemon, for the scale benchmark (bench/run_scale.sh). Each simulated node
// does what a node daemon does: RegisterNode with its own node token (derived
// from the job's node.key, as a daemon holding the key does), follows its
// Subscribe stream, heartbeats, joins its --nproc_per_node ranks with
// JoinRank, and runs all_gather_words rounds, one contribution of all its
// ranks' frames per round, over the coordinator's round link when the
// coordinator offers one (the daemon's handshake, ShakeHandsAsNode, and its
// outcome decoding, TakeOutcomeWords; one thread drives every node's link
// with epoll, see RunLinkRounds), else (or with --round_path=stream) over
// its own Peer.Rounds stream. Each node has its own TCP connections to the
// coordinator.
//
// Phases, each printed on stdout:
//   1. "REGISTERED nodes=N": every node registered and subscribed; then it
//      waits until --go_file exists.
//   2. "JOINED start_ns=S end_ns=E coordinator_cpu_us=C": first JoinRank
//      sent, last answered, and the coordinator's CPU meanwhile (-1
//      without --coordinator_pid).
//   3. "SUMMARY nodes=N rounds=R p50_us=X p99_us=Y failed_heartbeats=F".
//   4. "COORDINATOR cpu_us_per_round=C rss_kb=K hwm_kb=H" (with
//      --coordinator_pid).
//   5. "DONE".
//   6. With --recover_go_file (the recovery drill; the coordinator runs with
//      --recovery=on): once that file exists, the process simulating node
//      1 reports node 1's first rank lost (ReleaseRank, not clean) and
//      prints "LOSS ns=T"; every process then waits until its first node's
//      event stream reports JOB_RECOVERING and joins all its ranks again:
//      the lost one as its replacement (a new incarnation, answered once
//      the job is READY at the new epoch), the others as survivors entering
//      the new epoch. It prints "RECOVERED seen_ns=S end_ns=E epoch=N": the
//      loss seen (its JoinRanks sent then) and the last one answered.
// then keeps heartbeating until it is killed (the job must stay whole while
// other processes finish). Times are CLOCK_MONOTONIC (steady_clock), so
// lines from several processes on one machine compare. Each round's result
// is checked: its size always, every word in the warmup rounds and the last
// round (frames are bench_rank.h's FrameWord, as the real ranks send). --out
// gets one line per timed round: "<round> <slowest node's latency in ns>".
// Any error prints "ERROR ..." and exits non-zero.
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "bench/bench_rank.h"
#include "common/credentials.h"
#include "common/monotonic_clock.h"
#include "daemon/node/round_link.h"
#include "daemon/transport/round_link_protocol.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "rankd/v1/peer.grpc.pb.h"

ABSL_FLAG(std::string, coordinator, "", "coordinator host:port (required)");
ABSL_FLAG(std::string, credentials_dir, "", "the job's credentials (node.key)");
// --job_id is bench_rank's.
ABSL_DECLARE_FLAG(std::string, job_id);
ABSL_FLAG(int, nnodes, 0, "nodes in the job (required)");
ABSL_FLAG(int, nproc_per_node, 8, "ranks per node");
ABSL_FLAG(int, first_node, 1, "first node index this process simulates");
ABSL_FLAG(int, node_count, 1, "nodes this process simulates");
ABSL_FLAG(bool, decode_events, true,
          "decode every event batch, as a node daemon does; false reads the "
          "bytes undecoded, so that the coordinator's own cost is measured "
          "(512 nodes on 2 cores decode 512 times what one node does)");
ABSL_FLAG(std::string, round_path, "link",
          "link: the coordinator's round link when it offers one; stream: "
          "the Peer.Rounds stream");
ABSL_FLAG(int, warmup, 20, "untimed rounds");
ABSL_FLAG(int, rounds, 200, "timed rounds");
ABSL_FLAG(int, words, 4, "words per rank per round");
ABSL_FLAG(int, heartbeat_ms, 1000, "heartbeat interval per node");
ABSL_FLAG(int, round_timeout_ms, 60000, "deadline of each round");
ABSL_FLAG(std::string, go_file, "", "joins start once this file exists");
ABSL_FLAG(std::string, out, "", "per-round slowest latencies (optional)");
ABSL_FLAG(std::string, recover_go_file, "",
          "the recovery drill (phase 6) starts once this file exists");
ABSL_FLAG(int, coordinator_pid, 0,
          "measure this process's CPU over the timed rounds and its memory");

namespace {

namespace v1 = rankd::v1;
using rankd::bench::FrameWord;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

[[noreturn]] void Die(const std::string& what) {
  std::printf("ERROR %s\n", what.c_str());
  std::fflush(stdout);
  _exit(3);
}

// utime + stime of `pid` in microseconds.
int64_t CpuUs(int pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  std::getline(in, line);
  // Fields after the command's closing parenthesis: state is field 3;
  // utime and stime are fields 14 and 15.
  std::istringstream rest(line.substr(line.rfind(')') + 2));
  std::string field;
  int64_t utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stoll(field);
    if (i == 15) stime = std::stoll(field);
  }
  return (utime + stime) * 1000000 / sysconf(_SC_CLK_TCK);
}

// A line "Name:   123 kB" of /proc/<pid>/status, in kB.
int64_t StatusKb(int pid, const std::string& name) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + ":", 0) == 0) {
      return std::stoll(line.substr(name.size() + 1));
    }
  }
  return -1;
}

// Reads a node's event stream until it ends; the end is an error unless
// the process is finishing.
class EventReader : public grpc::ClientReadReactor<v1::JobEventBatch> {
 public:
  EventReader(v1::Peer::Stub* stub, const std::string& token,
              const v1::NodeRef& node) {
    context_.AddMetadata("authorization", "Bearer " + token);
    *request_.mutable_node() = node;
    stub->async()->Subscribe(&context_, &request_, this);
    StartRead(&batch_);
    StartCall();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    for (const v1::JobEvent& event : batch_.events()) {
      if (event.kind() == v1::EVENT_KIND_JOB_RECOVERING) {
        int64_t none = 0;
        recovering_seen_ns_.compare_exchange_strong(none, NowNs());
      }
      if (event.kind() == v1::EVENT_KIND_JOB_FAILED) {
        Die(absl::StrCat("node ", request_.node().node_index(),
                         " heard the job fail: ", event.message()));
      }
    }
    StartRead(&batch_);
  }
  void OnDone(const grpc::Status& status) override {
    Die(absl::StrCat("event stream of node ", request_.node().node_index(),
                     " ended: ", status.error_message()));
  }
  // When this node's stream first reported JOB_RECOVERING (steady clock,
  // ns), or 0.
  int64_t recovering_seen_ns() const { return recovering_seen_ns_.load(); }

 private:
  std::atomic<int64_t> recovering_seen_ns_{0};
  grpc::ClientContext context_;
  v1::SubscribeRequest request_;
  v1::JobEventBatch batch_;
};

// The same without decoding: the stream's bytes are read and dropped (a
// server-streaming call made as a generic one: one request, then reads).
class RawEventReader
    : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  RawEventReader(grpc::GenericStub* stub, const std::string& token,
                 const v1::NodeRef& node)
      : node_(node.node_index()) {
    context_.AddMetadata("authorization", "Bearer " + token);
    v1::SubscribeRequest request;
    *request.mutable_node() = node;
    const std::string bytes = request.SerializeAsString();
    grpc::Slice slice(bytes);
    request_ = grpc::ByteBuffer(&slice, 1);
    stub->PrepareBidiStreamingCall(&context_, "/rankd.v1.Peer/Subscribe",
                                   grpc::StubOptions(), this);
    StartWriteLast(&request_, grpc::WriteOptions());
    StartRead(&incoming_);
    StartCall();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    incoming_.Clear();
    StartRead(&incoming_);
  }
  void OnDone(const grpc::Status& status) override {
    Die(absl::StrCat("event stream of node ", node_,
                     " ended: ", status.error_message()));
  }

 private:
  const uint32_t node_;
  grpc::ClientContext context_;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer incoming_;
};

struct SimNode {
  uint32_t index = 0;
  std::string token;
  v1::NodeRef ref;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Peer::Stub> stub;
  // Never destroyed: _exit ends us. One of the two, per --decode_events.
  std::unique_ptr<EventReader> events;
  std::unique_ptr<grpc::GenericStub> generic;
  std::unique_ptr<RawEventReader> raw_events;
  uint32_t round_link_port = 0;  // 0: the coordinator offers none
};

// What every node does each round.
struct RoundPlan {
  int nproc = 0;
  int words = 0;
  uint32_t world = 0;
  int warmup = 0;
  int rounds = 0;
  int timeout_ms = 0;
};

// Node `n`'s contribution to round `k` (0-based): all its ranks' frames.
void FillContribution(const SimNode& n, const RoundPlan& plan, int k,
                      v1::ContributeWordsRequest& request) {
  if (request.frames_size() == 0) {
    *request.mutable_node() = n.ref;
    request.set_timeout_ms(plan.timeout_ms);
    for (int l = 0; l < plan.nproc; ++l) {
      v1::RankFrame* frame = request.add_frames();
      frame->set_rank(n.index * plan.nproc + l);
      frame->mutable_words()->Resize(plan.words, 0);
    }
  }
  request.set_round(k + 1);
  for (int l = 0; l < plan.nproc; ++l) {
    auto* w = request.mutable_frames(l)->mutable_words();
    for (int j = 0; j < plan.words; ++j) {
      w->Set(j, FrameWord(n.index * plan.nproc + l, k, j));
    }
  }
}

// Dies unless `result` is round `k`'s whole outcome; its every word is
// compared in the warmup rounds and the last one.
void CheckOutcome(const SimNode& n, const RoundPlan& plan, int k,
                  const absl::StatusOr<v1::AllGatherWordsResponse>& result) {
  if (!result.ok()) {
    Die(absl::StrCat("node ", n.index, " round ", k + 1, ": ",
                     result.status().ToString()));
  }
  const auto& got = result->words();
  if (got.size() != static_cast<int>(plan.world) * plan.words) {
    Die(absl::StrCat("node ", n.index, " round ", k + 1, ": ", got.size(),
                     " words, expected ", plan.world * plan.words));
  }
  if (k < plan.warmup || k == plan.warmup + plan.rounds - 1) {
    for (uint32_t r = 0; r < plan.world; ++r) {
      for (int j = 0; j < plan.words; ++j) {
        if (got[r * plan.words + j] != FrameWord(r, k, j)) {
          Die(absl::StrCat("node ", n.index, " round ", k + 1, ": wrong word ",
                           j, " of rank ", r));
        }
      }
    }
  }
}

// A connected TCP socket to `host`:`port`, or death.
int ConnectTo(const std::string& host, uint32_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), absl::StrCat(port).c_str(), &hints,
                             &found);
      rc != 0) {
    Die(absl::StrCat("cannot resolve ", host, ": ", ::gai_strerror(rc)));
  }
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, 0);
    if (fd >= 0 && ::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd < 0) {
    Die(absl::StrCat("cannot connect to ", host, ":", port, ": ",
                     std::strerror(errno)));
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

// Every node's rounds over its own round link, all driven by this thread
// with epoll: a node daemon runs one link on its own CPU, and a thread per
// simulated node (two, with RoundLink's reader) spent more of this
// machine's cores switching between 512 threads than the coordinator spent
// on the rounds (bench/RESULTS.md, "Reading the scale numbers"). Each node
// opens its link with the daemon's handshake (ShakeHandsAsNode) and reads
// outcomes as a daemon does (TakeOutcomeWords); each round, every node sends
// its contribution, then the thread reads outcomes as they come.
void RunLinkRounds(std::vector<SimNode>& nodes, const RoundPlan& plan,
                   const std::function<void()>& timed_rounds_start,
                   std::vector<std::vector<int64_t>>& latency) {
  std::string host = absl::GetFlag(FLAGS_coordinator);
  host = host.substr(0, host.rfind(':'));
  struct Link {
    int fd = -1;
    std::vector<char> in;  // in[0, used): bytes read, not yet whole frames
    size_t used = 0;
    int64_t sent_ns = 0;
    v1::ContributeWordsRequest request;
  };
  std::vector<Link> links(nodes.size());
  const int epoll = ::epoll_create1(EPOLL_CLOEXEC);
  if (epoll < 0) Die(absl::StrCat("epoll_create1: ", std::strerror(errno)));
  for (size_t i = 0; i < nodes.size(); ++i) {
    const SimNode& n = nodes[i];
    Link& link = links[i];
    link.fd = ConnectTo(host, n.round_link_port);
    absl::Status s = rankd::ShakeHandsAsNode(
        link.fd, n.ref, n.token, rankd::MonotonicNow() + absl::Seconds(30),
        [] { return false; }, absl::StrCat("node ", n.index, " round link"));
    if (!s.ok()) Die(s.ToString());
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.u64 = i;
    if (::epoll_ctl(epoll, EPOLL_CTL_ADD, link.fd, &event) != 0) {
      Die(absl::StrCat("epoll_ctl: ", std::strerror(errno)));
    }
  }
  constexpr size_t kReadBytes = 256 << 10;
  std::vector<epoll_event> ready(nodes.size());
  v1::RoundOutcome outcome;
  for (int k = 0; k < plan.warmup + plan.rounds; ++k) {
    if (k == plan.warmup) timed_rounds_start();
    for (size_t i = 0; i < nodes.size(); ++i) {
      Link& link = links[i];
      FillContribution(nodes[i], plan, k, link.request);
      link.request.set_tag(k + 1);
      const std::string frame =
          rankd::RoundLinkTypedFrame(rankd::RoundLinkFrameType::kContribution,
                                     link.request.SerializeAsString());
      link.sent_ns = NowNs();
      if (::send(link.fd, frame.data(), frame.size(), MSG_NOSIGNAL) !=
          static_cast<ssize_t>(frame.size())) {
        Die(absl::StrCat("node ", nodes[i].index, " round ", k + 1,
                         ": cannot send the contribution"));
      }
    }
    size_t waiting = nodes.size();
    while (waiting > 0) {
      const int count = ::epoll_wait(
          epoll, ready.data(), static_cast<int>(ready.size()), plan.timeout_ms);
      if (count == 0) {
        Die(absl::StrCat("round ", k + 1, ": ", waiting,
                         " nodes had no outcome within ", plan.timeout_ms,
                         " ms"));
      }
      if (count < 0 && errno != EINTR) {
        Die(absl::StrCat("epoll_wait: ", std::strerror(errno)));
      }
      for (int e = 0; e < count; ++e) {
        const size_t i = ready[e].data.u64;
        const SimNode& n = nodes[i];
        Link& link = links[i];
        // Reads straight into the link's buffer (no copy per frame): grown
        // to hold a whole frame, never shrunk.
        for (;;) {
          if (link.in.size() - link.used < kReadBytes) {
            link.in.resize(link.used + kReadBytes);
          }
          ssize_t got = ::recv(link.fd, link.in.data() + link.used,
                               link.in.size() - link.used, MSG_DONTWAIT);
          if (got > 0) {
            link.used += static_cast<size_t>(got);
            continue;
          }
          if (got < 0 && (errno == EAGAIN || errno == EINTR)) break;
          Die(absl::StrCat("node ", n.index, " round link ended: ",
                           got == 0 ? "closed" : std::strerror(errno)));
        }
        size_t start = 0;
        while (link.used - start >= rankd::kRoundLinkHeaderBytes) {
          const size_t length =
              rankd::RoundLinkFrameLength(link.in.data() + start);
          const size_t whole = rankd::kRoundLinkHeaderBytes + length;
          if (link.used - start < whole) break;
          const int64_t now = NowNs();
          rankd::RoundLinkFrameType type;
          absl::string_view message;
          if (absl::Status s = rankd::ParseRoundLinkFrame(
                  absl::string_view(
                      link.in.data() + start + rankd::kRoundLinkHeaderBytes,
                      length),
                  "coordinator", rankd::kCoordinatorFrameTypes, &type,
                  &message);
              !s.ok() || type != rankd::RoundLinkFrameType::kOutcome ||
              !outcome.ParseFromArray(message.data(),
                                      static_cast<int>(message.size()))) {
            Die(absl::StrCat("node ", n.index, ": not a RoundOutcome frame"));
          }
          start += whole;
          if (outcome.code() != 0) {
            Die(absl::StrCat("node ", n.index, " round ", k + 1, ": code ",
                             outcome.code(), ": ", outcome.message()));
          }
          if (outcome.tag() != static_cast<uint64_t>(k + 1)) {
            Die(absl::StrCat("node ", n.index, " round ", k + 1,
                             ": an outcome for tag ", outcome.tag()));
          }
          CheckOutcome(n, plan, k, rankd::TakeOutcomeWords(outcome));
          if (k >= plan.warmup) {
            latency[i][k - plan.warmup] = now - link.sent_ns;
          }
          --waiting;
        }
        if (start > 0) {
          std::memmove(link.in.data(), link.in.data() + start,
                       link.used - start);
          link.used -= start;
        }
      }
    }
  }
  // The links stay open (their fds are never closed) until the process
  // ends, as the nodes' daemons' links do.
}

// Every node's rounds over its own Peer.Rounds stream, one thread each.
void RunStreamRounds(std::vector<SimNode>& nodes, const RoundPlan& plan,
                     const std::function<void()>& timed_rounds_start,
                     std::vector<std::vector<int64_t>>& latency) {
  std::vector<std::thread> threads;
  for (size_t i = 0; i < nodes.size(); ++i) {
    threads.emplace_back([&, i] {
      SimNode& n = nodes[i];
      grpc::ClientContext context;
      context.AddMetadata("authorization", "Bearer " + n.token);
      auto stream = n.stub->Rounds(&context);
      v1::ContributeWordsRequest request;
      v1::RoundOutcome outcome;
      for (int k = 0; k < plan.warmup + plan.rounds; ++k) {
        if (k == plan.warmup && i == 0) timed_rounds_start();
        FillContribution(n, plan, k, request);
        request.set_tag(k + 1);
        const int64_t t0 = NowNs();
        absl::StatusOr<v1::AllGatherWordsResponse> result;
        if (!stream->Write(request) || !stream->Read(&outcome)) {
          result = absl::UnavailableError(
              absl::StrCat("stream ended: ", stream->Finish().error_message()));
        } else if (outcome.tag() != static_cast<uint64_t>(k + 1)) {
          result = absl::InternalError(
              absl::StrCat("outcome for tag ", outcome.tag()));
        } else if (outcome.code() != 0) {
          result = absl::Status(static_cast<absl::StatusCode>(outcome.code()),
                                outcome.message());
        } else {
          result = rankd::TakeOutcomeWords(outcome);
        }
        const int64_t t1 = NowNs();
        CheckOutcome(n, plan, k, result);
        if (k >= plan.warmup) latency[i][k - plan.warmup] = t1 - t0;
      }
      stream->WritesDone();
    });
  }
  for (auto& t : threads) t.join();
}

}  // namespace

// The incarnation of `rank`'s first process in this run.
uint64_t Incarnation(uint32_t rank) { return 0x7000000000ull + rank; }

// Sends JoinRank for every rank of `nodes` at once (rank r with incarnation
// `incarnation(r)`) and waits until every one is answered: the coordinator
// answers once the whole world joined. Returns the epoch joined into, or
// the first refusal, naming the rank.
absl::StatusOr<uint64_t> JoinAll(
    std::vector<SimNode>& nodes, int nproc,
    const std::function<uint64_t(uint32_t)>& incarnation) {
  struct Join {
    grpc::ClientContext context;
    v1::JoinRankRequest request;
    v1::JoinRankResponse response;
  };
  std::vector<std::unique_ptr<Join>> joins;
  absl::Mutex join_mu;
  int joins_left = static_cast<int>(nodes.size()) * nproc;
  std::string join_error;
  for (SimNode& n : nodes) {
    for (int l = 0; l < nproc; ++l) {
      auto j = std::make_unique<Join>();
      j->context.AddMetadata("authorization", "Bearer " + n.token);
      j->context.set_deadline(
          absl::ToChronoTime(absl::Now() + absl::Seconds(180)));
      *j->request.mutable_node() = n.ref;
      const uint32_t rank = n.index * nproc + l;
      j->request.set_rank(rank);
      j->request.set_local_rank(l);
      j->request.set_incarnation(incarnation(rank));
      j->request.mutable_device()->set_kind("cpu");
      j->request.set_pid(getpid());
      j->request.set_wait_for_world_ms(120000);
      n.stub->async()->JoinRank(
          &j->context, &j->request, &j->response, [&, rank](grpc::Status s) {
            absl::MutexLock lock(&join_mu);
            if (!s.ok() && join_error.empty()) {
              join_error =
                  absl::StrCat("rank ", rank, " JoinRank: ", s.error_message());
            }
            --joins_left;
          });
      joins.push_back(std::move(j));
    }
  }
  absl::MutexLock lock(&join_mu);
  join_mu.Await(absl::Condition(
      +[](int* left) { return *left == 0; }, &joins_left));
  if (!join_error.empty()) return absl::UnavailableError(join_error);
  uint64_t epoch = 0;
  for (const auto& j : joins) epoch = std::max(epoch, j->response.epoch());
  return epoch;
}

// Phase 6 (see the file comment): the loss, then every rank joins again.
void RunRecoveryDrill(std::vector<SimNode>& nodes, int nproc,
                      const std::string& go_file) {
  while (access(go_file.c_str(), F_OK) != 0) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  const uint32_t lost = static_cast<uint32_t>(nproc);  // node 1's first rank
  SimNode& first = nodes.front();
  if (first.index == 1) {
    grpc::ClientContext context;
    context.AddMetadata("authorization", "Bearer " + first.token);
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    v1::ReleaseRankRequest request;
    *request.mutable_node() = first.ref;
    request.set_rank(lost);
    request.set_incarnation(Incarnation(lost));
    request.set_clean(false);
    request.set_reason("the recovery drill: its process was killed");
    v1::ReleaseRankResponse response;
    const int64_t loss = NowNs();
    grpc::Status s = first.stub->ReleaseRank(&context, request, &response);
    if (!s.ok()) Die(absl::StrCat("ReleaseRank: ", s.error_message()));
    std::printf("LOSS ns=%lld\n", static_cast<long long>(loss));
    std::fflush(stdout);
  }
  // Each node learns of the loss from its event stream, as a daemon does.
  if (first.events == nullptr) Die("the recovery drill needs --decode_events");
  const absl::Time until = absl::Now() + absl::Seconds(60);
  while (first.events->recovering_seen_ns() == 0) {
    if (absl::Now() > until) Die("no JOB_RECOVERING event within 60 s");
    absl::SleepFor(absl::Microseconds(200));
  }
  const int64_t seen = first.events->recovering_seen_ns();
  absl::StatusOr<uint64_t> epoch = JoinAll(nodes, nproc, [&](uint32_t rank) {
    // The lost rank's replacement is a new process: a new incarnation.
    return rank == lost ? Incarnation(rank) + 0x100000000ull
                        : Incarnation(rank);
  });
  if (!epoch.ok()) Die(epoch.status().ToString());
  const int64_t ready = NowNs();
  std::printf("RECOVERED seen_ns=%lld end_ns=%lld epoch=%llu\n",
              static_cast<long long>(seen), static_cast<long long>(ready),
              static_cast<unsigned long long>(*epoch));
  std::fflush(stdout);
}

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string job = absl::GetFlag(FLAGS_job_id);
  const int nnodes = absl::GetFlag(FLAGS_nnodes);
  const int nproc = absl::GetFlag(FLAGS_nproc_per_node);
  const int first = absl::GetFlag(FLAGS_first_node);
  const int count = absl::GetFlag(FLAGS_node_count);
  const int warmup = absl::GetFlag(FLAGS_warmup);
  const int rounds = absl::GetFlag(FLAGS_rounds);
  const int words = absl::GetFlag(FLAGS_words);
  const int timeout_ms = absl::GetFlag(FLAGS_round_timeout_ms);
  const uint32_t world = static_cast<uint32_t>(nnodes * nproc);
  if (absl::GetFlag(FLAGS_coordinator).empty() || nnodes < 2 || nproc < 1 ||
      first < 1 || count < 1 || first + count > nnodes || rounds < 1 ||
      words < 1) {
    Die("usage: see the file comment (need --coordinator, --nnodes >= 2, "
        "1 <= --first_node, --first_node + --node_count <= --nnodes)");
  }
  auto key = rankd::ReadCredentialFile(absl::GetFlag(FLAGS_credentials_dir),
                                       rankd::kNodeKeyFile);
  if (!key.ok()) Die(key.status().ToString());

  // --- Register and subscribe every node.
  v1::RegisterNodeRequest registration;
  v1::JobConfig* config = registration.mutable_config();
  config->set_job_id(job);
  config->set_world_size(world);
  config->set_nnodes(nnodes);
  config->set_nproc_per_node(nproc);
  config->mutable_topology()->set_tensor(1);
  config->mutable_topology()->set_pipeline(1);
  config->mutable_topology()->set_expert(1);
  config->mutable_topology()->set_data(world);
  std::vector<SimNode> nodes(count);
  for (int i = 0; i < count; ++i) {
    SimNode& n = nodes[i];
    n.index = first + i;
    n.token = rankd::NodeToken(*key, job, n.index);
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // own connection
    n.channel =
        grpc::CreateCustomChannel(absl::GetFlag(FLAGS_coordinator),
                                  grpc::InsecureChannelCredentials(), args);
    n.stub = v1::Peer::NewStub(n.channel);
    n.ref.set_job_id(job);
    n.ref.set_node_index(n.index);
    n.ref.set_daemon_incarnation(0x5000000000ull + n.index * 7919ull +
                                 getpid());
    v1::NodeInfo* info = registration.mutable_node();
    info->set_node_index(n.index);
    info->set_hostname(absl::StrCat("sim-", n.index));
    info->set_address(absl::StrCat("127.0.0.1:", 20000 + n.index));
    info->set_boot_id("00000000-0000-0000-0000-000000000000");
    info->set_local_ranks(nproc);
    info->set_daemon_incarnation(n.ref.daemon_incarnation());
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    for (;;) {
      grpc::ClientContext context;
      context.AddMetadata("authorization", "Bearer " + n.token);
      context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
      v1::RegisterNodeResponse response;
      grpc::Status s = n.stub->RegisterNode(&context, registration, &response);
      if (s.ok()) {
        n.round_link_port = response.round_link_port();
        break;
      }
      if (s.error_code() != grpc::StatusCode::UNAVAILABLE ||
          absl::Now() > deadline) {
        Die(absl::StrCat("node ", n.index,
                         " RegisterNode: ", s.error_message()));
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    if (absl::GetFlag(FLAGS_decode_events)) {
      n.events = std::make_unique<EventReader>(n.stub.get(), n.token, n.ref);
    } else {
      n.generic = std::make_unique<grpc::GenericStub>(n.channel);
      n.raw_events =
          std::make_unique<RawEventReader>(n.generic.get(), n.token, n.ref);
    }
  }
  std::printf("REGISTERED nodes=%d\n", count);
  std::fflush(stdout);

  // --- Heartbeats, for as long as the process lives.
  std::atomic<int64_t> failed_heartbeats{0};
  std::thread heartbeats([&] {
    for (;;) {
      const absl::Time next =
          absl::Now() + absl::Milliseconds(absl::GetFlag(FLAGS_heartbeat_ms));
      for (SimNode& n : nodes) {
        grpc::ClientContext context;
        context.AddMetadata("authorization", "Bearer " + n.token);
        context.set_deadline(
            absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
        v1::HeartbeatRequest request;
        *request.mutable_node() = n.ref;
        v1::HeartbeatResponse response;
        // As a daemon does, a late or failed heartbeat is only counted:
        // whether the node is lost is the coordinator's call (its
        // heartbeat timeout), which the event stream then reports.
        if (!n.stub->Heartbeat(&context, request, &response).ok()) {
          ++failed_heartbeats;
        }
      }
      absl::SleepFor(next - absl::Now());
    }
  });
  heartbeats.detach();

  const std::string go = absl::GetFlag(FLAGS_go_file);
  while (!go.empty() && access(go.c_str(), F_OK) != 0) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  const int coordinator = absl::GetFlag(FLAGS_coordinator_pid);
  const int64_t join_cpu_before = coordinator > 0 ? CpuUs(coordinator) : 0;

  // --- Join every rank at once; the coordinator answers when all joined.
  const int64_t join_start = NowNs();
  if (auto joined = JoinAll(nodes, nproc, Incarnation); !joined.ok()) {
    Die(joined.status().ToString());
  }
  const int64_t join_end = NowNs();
  const int64_t join_cpu_us =
      coordinator > 0 ? CpuUs(coordinator) - join_cpu_before : -1;
  std::printf("JOINED start_ns=%lld end_ns=%lld coordinator_cpu_us=%lld\n",
              static_cast<long long>(join_start),
              static_cast<long long>(join_end),
              static_cast<long long>(join_cpu_us));
  std::fflush(stdout);

  // --- Rounds: over the round link (one thread drives every node's link)
  // or one thread and one Rounds stream per node.
  RoundPlan plan;
  plan.nproc = nproc;
  plan.words = words;
  plan.world = world;
  plan.warmup = warmup;
  plan.rounds = rounds;
  plan.timeout_ms = timeout_ms;
  // latency[i][k]: node i's latency in timed round k.
  std::vector<std::vector<int64_t>> latency(count,
                                            std::vector<int64_t>(rounds));
  const int pid = absl::GetFlag(FLAGS_coordinator_pid);
  std::atomic<int64_t> cpu_before{-1};
  auto timed_rounds_start = [&] {
    if (pid > 0) cpu_before = CpuUs(pid);
  };
  const bool offered =
      std::all_of(nodes.begin(), nodes.end(),
                  [](const SimNode& n) { return n.round_link_port != 0; });
  if (absl::GetFlag(FLAGS_round_path) == "link" && offered) {
    RunLinkRounds(nodes, plan, timed_rounds_start, latency);
  } else {
    RunStreamRounds(nodes, plan, timed_rounds_start, latency);
  }
  const int64_t cpu_after = pid > 0 ? CpuUs(pid) : 0;

  // Per round, the slowest node; p50/p99 over rounds.
  std::vector<int64_t> slowest(rounds, 0);
  for (int k = 0; k < rounds; ++k) {
    for (int i = 0; i < count; ++i)
      slowest[k] = std::max(slowest[k], latency[i][k]);
  }
  if (!absl::GetFlag(FLAGS_out).empty()) {
    std::ofstream out(absl::GetFlag(FLAGS_out));
    for (int k = 0; k < rounds; ++k) out << k + 1 << " " << slowest[k] << "\n";
  }
  std::vector<int64_t> sorted = slowest;
  std::sort(sorted.begin(), sorted.end());
  auto pct = [&](double p) {
    return sorted[std::min<size_t>(sorted.size() - 1, p * sorted.size())] / 1e3;
  };
  std::printf(
      "SUMMARY nodes=%d rounds=%d p50_us=%.1f p99_us=%.1f "
      "failed_heartbeats=%lld\n",
      count, rounds, pct(0.50), pct(0.99),
      static_cast<long long>(failed_heartbeats.load()));
  if (pid > 0) {
    std::printf("COORDINATOR cpu_us_per_round=%.1f rss_kb=%lld hwm_kb=%lld\n",
                static_cast<double>(cpu_after - cpu_before) / rounds,
                static_cast<long long>(StatusKb(pid, "VmRSS")),
                static_cast<long long>(StatusKb(pid, "VmHWM")));
  }
  std::printf("DONE\n");
  std::fflush(stdout);
  if (!absl::GetFlag(FLAGS_recover_go_file).empty()) {
    RunRecoveryDrill(nodes, nproc, absl::GetFlag(FLAGS_recover_go_file));
  }
  for (;;) pause();  // heartbeats go on until the launcher stops us
}
