// scale_sim: many simulated nodes of one rankd job in one process, speaking
// the real Peer protocol (proto/rankd/v1/peer.proto) to a real coordinator
// daemon, for the scale benchmark (bench/run_scale.sh). Each simulated node
// does what a node daemon does: RegisterNode with its own node token (derived
// from the job's node.key, as a daemon holding the key does), follows its
// Subscribe stream, heartbeats, joins its --nproc_per_node ranks with
// JoinRank, and runs all_gather_words rounds, one contribution of all its
// ranks' frames per round, over the coordinator's round link with the
// daemon's own client (daemon/round_link.h) when the coordinator offers one,
// else (or with --round_path=stream) over its own Peer.Rounds stream. Each
// node has its own TCP connections to the coordinator.
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
// then keeps heartbeating until it is killed (the job must stay whole while
// other processes finish). Times are CLOCK_MONOTONIC (steady_clock), so
// lines from several processes on one machine compare. Each round's result
// is checked: its size always, every word in the warmup rounds and the last
// round (frames are bench_rank.h's FrameWord, as the real ranks send). --out
// gets one line per timed round: "<round> <slowest node's latency in ns>".
// Any error prints "ERROR ..." and exits non-zero.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
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
#include "daemon/round_link.h"
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

 private:
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

}  // namespace

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
  struct Join {
    grpc::ClientContext context;
    v1::JoinRankRequest request;
    v1::JoinRankResponse response;
  };
  std::vector<std::unique_ptr<Join>> joins;
  absl::Mutex join_mu;
  int joins_left = count * nproc;
  std::string join_error;
  const int64_t join_start = NowNs();
  for (SimNode& n : nodes) {
    for (int l = 0; l < nproc; ++l) {
      auto j = std::make_unique<Join>();
      j->context.AddMetadata("authorization", "Bearer " + n.token);
      j->context.set_deadline(
          absl::ToChronoTime(absl::Now() + absl::Seconds(180)));
      *j->request.mutable_node() = n.ref;
      j->request.set_rank(n.index * nproc + l);
      j->request.set_local_rank(l);
      j->request.set_incarnation(0x7000000000ull + n.index * nproc + l);
      j->request.mutable_device()->set_kind("cpu");
      j->request.set_pid(getpid());
      j->request.set_wait_for_world_ms(120000);
      n.stub->async()->JoinRank(
          &j->context, &j->request, &j->response,
          [&, rank = j->request.rank()](grpc::Status s) {
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
  {
    absl::MutexLock lock(&join_mu);
    join_mu.Await(absl::Condition(
        +[](int* left) { return *left == 0; }, &joins_left));
    if (!join_error.empty()) Die(join_error);
  }
  const int64_t join_end = NowNs();
  const int64_t join_cpu_us =
      coordinator > 0 ? CpuUs(coordinator) - join_cpu_before : -1;
  std::printf("JOINED start_ns=%lld end_ns=%lld coordinator_cpu_us=%lld\n",
              static_cast<long long>(join_start),
              static_cast<long long>(join_end),
              static_cast<long long>(join_cpu_us));
  std::fflush(stdout);

  // --- Rounds: one thread and one Rounds stream per node.
  const int total = warmup + rounds;
  // latency[i][k]: node i's latency in timed round k.
  std::vector<std::vector<int64_t>> latency(count,
                                            std::vector<int64_t>(rounds));
  const int pid = absl::GetFlag(FLAGS_coordinator_pid);
  std::atomic<int64_t> cpu_before{-1};
  std::vector<std::thread> threads;
  const bool use_link = absl::GetFlag(FLAGS_round_path) == "link";
  // Open until the process ends, like the nodes' daemons' links.
  std::vector<std::unique_ptr<rankd::RoundLink>> links(count);
  for (int i = 0; i < count; ++i) {
    threads.emplace_back([&, i] {
      SimNode& n = nodes[i];
      v1::ContributeWordsRequest request;
      *request.mutable_node() = n.ref;
      request.set_timeout_ms(timeout_ms);
      for (int l = 0; l < nproc; ++l) {
        v1::RankFrame* frame = request.add_frames();
        frame->set_rank(n.index * nproc + l);
        frame->mutable_words()->Resize(words, 0);
      }
      // One exchange of `request`: the outcome, or the transport's error.
      std::function<absl::StatusOr<v1::AllGatherWordsResponse>()> exchange;
      std::unique_ptr<rankd::RoundLink>& link = links[i];
      grpc::ClientContext context;
      std::unique_ptr<grpc::ClientReaderWriter<v1::ContributeWordsRequest,
                                               v1::RoundOutcome>>
          stream;
      v1::RoundOutcome outcome;
      if (use_link && n.round_link_port != 0) {
        rankd::RoundLink::Options options;
        options.host = absl::GetFlag(FLAGS_coordinator);
        options.host = options.host.substr(0, options.host.rfind(':'));
        options.port = static_cast<uint16_t>(n.round_link_port);
        options.coordinator_address = absl::GetFlag(FLAGS_coordinator);
        options.node = n.ref;
        options.node_token = n.token;
        link = std::make_unique<rankd::RoundLink>(std::move(options));
        if (absl::Status s = link->WaitOpen(absl::Seconds(30)); !s.ok()) {
          Die(absl::StrCat("node ", n.index, " round link: ", s.ToString()));
        }
        exchange = [&]() -> absl::StatusOr<v1::AllGatherWordsResponse> {
          absl::Notification done;
          absl::StatusOr<v1::AllGatherWordsResponse> result;
          rankd::PendingRounds::RoundReply reply =
              [&](absl::StatusOr<v1::AllGatherWordsResponse> r) {
                result = std::move(r);
                done.Notify();
              };
          if (!link->Send(request, reply, absl::InfiniteFuture())) {
            return absl::UnavailableError("the round link ended");
          }
          done.WaitForNotification();
          return result;
        };
      } else {
        context.AddMetadata("authorization", "Bearer " + n.token);
        stream = n.stub->Rounds(&context);
        exchange = [&]() -> absl::StatusOr<v1::AllGatherWordsResponse> {
          request.set_tag(request.round());
          if (!stream->Write(request) || !stream->Read(&outcome)) {
            return absl::UnavailableError(absl::StrCat(
                "stream ended: ", stream->Finish().error_message()));
          }
          if (outcome.tag() != request.round()) {
            return absl::InternalError(
                absl::StrCat("outcome for tag ", outcome.tag()));
          }
          if (outcome.code() != 0) {
            return absl::Status(static_cast<absl::StatusCode>(outcome.code()),
                                outcome.message());
          }
          return std::move(*outcome.mutable_result());
        };
      }
      for (int k = 0; k < total; ++k) {
        if (k == warmup && i == 0 && pid > 0) cpu_before = CpuUs(pid);
        request.set_round(k + 1);
        for (int l = 0; l < nproc; ++l) {
          auto* w = request.mutable_frames(l)->mutable_words();
          for (int j = 0; j < words; ++j) {
            w->Set(j, FrameWord(n.index * nproc + l, k, j));
          }
        }
        const int64_t t0 = NowNs();
        absl::StatusOr<v1::AllGatherWordsResponse> result = exchange();
        const int64_t t1 = NowNs();
        if (!result.ok()) {
          Die(absl::StrCat("node ", n.index, " round ", k + 1, ": ",
                           result.status().ToString()));
        }
        const auto& got = result->words();
        if (got.size() != static_cast<int>(world) * words) {
          Die(absl::StrCat("node ", n.index, " round ", k + 1, ": ", got.size(),
                           " words, expected ", world * words));
        }
        if (k < warmup || k == total - 1) {
          for (uint32_t r = 0; r < world; ++r) {
            for (int j = 0; j < words; ++j) {
              if (got[r * words + j] != FrameWord(r, k, j)) {
                Die(absl::StrCat("node ", n.index, " round ", k + 1,
                                 ": wrong word ", j, " of rank ", r));
              }
            }
          }
        }
        if (k >= warmup) latency[i][k - warmup] = t1 - t0;
      }
      if (stream != nullptr) stream->WritesDone();
    });
  }
  for (auto& t : threads) t.join();
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
  for (;;) pause();  // heartbeats go on until the launcher stops us
}
