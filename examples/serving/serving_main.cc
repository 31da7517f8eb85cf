// serving: a model-parallel "inference server" rank, the way a real serving
// process uses rankd. One process per rank; run it through tools/run.sh,
// which starts the rankd daemons and every rank (see README.md), or in a
// Kubernetes pod next to the rankd sidecar (deploy/kubernetes: one process
// per local rank, --steps=0).
//
// It joins the job through its node's daemon (rankd::Client), opens a
// data-plane session (Gloo, or NCCL on GPUs) over the client's control
// plane, loads its shard of a small model (tensor-parallel MLPs, experts,
// pipeline stages; model_shard.h) and serves a stream of synthetic requests
// step by step:
//
//   agree on the batch      all_gather_words (batch_agreement.h)
//   run its stage           receive / all_reduce_sum / all_to_all_v / send
//                           (forward_step.h)
//   gather outputs          all_gather, checked by rank 0 against a
//                           single-process reference (self_check.h)
//
// With --recover (the daemons run with --recovery=on; docs/operations.md,
// "Recovering in place: the demo") a lost rank or node does not end the
// run: a step that fails because the job lost a member is served again.
// Each survivor re-forms its session at the job's next epoch
// (Collectives::Reform: GlooSession::Reform / NcclSession::Reform, which
// rejoin through Client::Rejoin), keeps its model shard, and re-runs the
// failed step with the batch it already had. A replacement process (one
// that joins a recovering job, at epoch 2 or later: rankrun restarted it,
// or a new node daemon's ranks) loads its shard and opens its session at
// that epoch (when that epoch ends too before its session connects, a
// second loss, it joins the next one and opens there, keeping its process
// and shard; REFORMED then names the epoch it opened at). Then every rank
// agrees on the step to resume at in one round (resume_agreement.h: survivors
// name the failed step, a replacement says it does not know) and serving goes
// on; rank 0 counts the requests in flight at the loss and their re-runs
// (request_ledger.h).
//
// When the job recovers by data-parallel domain (rankd --recovery=domain,
// dp > 1; the Join answer says so) it serves by replica instead
// (ServeByReplica; docs/operations.md, "By replica"): each replica serves
// its own request streams, --steps steps each, in world rounds that span
// the replicas serving (Client::AllGatherWordsWithView; replica_round.h);
// the session holds only its replica's groups, so every last-stage rank
// checks its own outputs (replica_check.h) and the counts travel in the
// rounds; a loss re-forms the hit replica alone, which re-enters at its
// entry round with the resume agreement while the others serve on; the
// lowest rank that saw every round prints the summary (replica_tally.h).
//
// It serves --steps steps, or with --steps=0 until it gets SIGTERM or
// SIGINT (how Kubernetes stops a container). A stop signal does not end the
// process at once: the rank finishes its current step and says so at the
// next batch agreement, where every rank of the job (in every pod) stops
// together; then the end-of-run round, rank 0's summary, a clean Leave and
// exit 0. (Before the serving loop starts, a signal ends the process as
// usual.)
//
// Output lines (tools/run.sh and the tests read them):
//   NCCL_RUNTIME <CUDA runtime, NCCL, driver, GPUs>  (--backend=nccl)
//   BACKEND_OK B devices=N                           (--probe_backend)
//   REFUSED <why the backend cannot run here>        (exit 2)
//   READY rank=R node=N coords=dD pP tT eE backend=B [hostname=H (Gloo)]
//   SERVING world W (...), <model>, N steps|until stopped[ per replica,
//                           recovery by replica (D replicas)], backend B
//                           (rank 0)
//   REPLICAS rank=R step=S unix_us=T: serving 0 (epoch 1)[; recovering 1]
//                           (by replica: the first rank of each replica,
//                           when the replicas in the rounds change)
//   PROGRESS step S/N  tokens T  X tokens/s  ranks 8/8 up          (rank 0;
//                           "PROGRESS step S  ..." with --steps=0)
//   SELF-CHECK FAILED ...                                          (rank 0)
//   STALLING rank=R step=S pid=P                             (drill victim)
//   DYING rank=R epoch=E unix_us=T pid=P    (--die_at_epoch's victim, then
//                           SIGKILL)
//   JOINED rank=R epoch=E unix_us=T restart=N     (a replacement; N from
//                           $RANKD_RESTART_COUNT, 0 when unset)
//   LOSS rank=R step=S epoch=E unix_us=T CODE: <op>: <message>  (--recover:
//                           a survivor saw the loss that ended epoch E; or
//                           step=0: a replacement's first open failed
//                           because epoch E ended too, and it joins the
//                           next epoch instead of exiting)
//   REFORMED rank=R epoch=E unix_us=T shard=kept|loaded  (session at E)
//   RESUMING rank=R step=S epoch=E                (the agreed step)
//   RESUMED rank=R step=S epoch=E unix_us=T       (first step served after
//                           a recovery or a --first_step start, on this
//                           rank)
//   RESTARTED rank=R step=S unix_us=T shard=loaded  (--first_step > 1: a
//                           job started again after a loss, session open
//                           and shard loaded)
//   SIGNAL rank=R step=S SIGTERM: every rank stops at this step's agreement
//   DRAINED rank=R step=S: rank Q got a stop signal; served S-1 steps
//   FAILED rank=R step=S unix_ms=T CODE: <op>: <message>
//   CAUSE rank=R CODE: <the job failure, naming the lost rank or node>
//   STOPPED rank=R step=S: ...
//   DONE rank=R tokens=T
//   == summary ...          (rank 0; by replica, the lowest rank that saw
//                           every round)
// The unix_us stamps are CLOCK_REALTIME in microseconds (absl::Now), so
// tools/run.sh can order them across the processes of one host.
// Exit status: 0 served (all --steps, or until a stop signal) and the
// self-check passed; 2 bad flags or backend unavailable; 3 a collective or
// the job failed (e.g. a peer was lost); 4 the self-check failed.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/admin_client.h"
#include "client/client.h"
#include "common/monotonic_clock.h"
#include "dataplane/control_plane.h"
#include "examples/serving/backends.h"
#include "examples/serving/batch_agreement.h"
#include "examples/serving/collectives.h"
#include "examples/serving/forward_step.h"
#include "examples/serving/layout.h"
#include "examples/serving/model_shard.h"
#include "examples/serving/model_spec.h"
#include "examples/serving/replica_check.h"
#include "examples/serving/replica_round.h"
#include "examples/serving/replica_tally.h"
#include "examples/serving/report.h"
#include "examples/serving/request_ledger.h"
#include "examples/serving/request_stream.h"
#include "examples/serving/resume_agreement.h"
#include "examples/serving/self_check.h"

ABSL_FLAG(std::string, target, "",
          "the node's rankd daemon (default: $RANKD_TARGET, else "
          "unix:///run/rankd/rankd.sock)");
ABSL_FLAG(std::string, job_id, "serving", "the rankd job to join");
ABSL_FLAG(uint32_t, local_rank, 0, "this process's index on its node");
ABSL_FLAG(uint32_t, world_size, 0, "expected world size (0: the job's)");
ABSL_FLAG(std::string, backend, "gloo", "data plane: gloo or nccl");
ABSL_FLAG(bool, probe_backend, false,
          "only check that --backend can run on this machine, then exit");
ABSL_FLAG(uint32_t, steps, 50,
          "serving steps; 0: serve until SIGTERM or SIGINT (a long-running "
          "server, e.g. in a pod), then stop every rank cleanly");
ABSL_FLAG(uint64_t, seed, 2024, "model weights and request traffic seed");
ABSL_FLAG(uint32_t, hidden, 64, "model width");
ABSL_FLAG(uint32_t, ffn, 0, "MLP width (0: 128 rounded up to the TP degree)");
ABSL_FLAG(uint32_t, layers, 0, "layers (0: 2 rounded up to the PP degree)");
ABSL_FLAG(uint32_t, experts, 0,
          "experts per layer (0: 4 rounded up to the EP degree)");
ABSL_FLAG(std::string, hostname, "",
          "address of this rank's Gloo transport, the node's (pod's) address "
          "its peers reach (default: $POD_IP when set, else 127.0.0.1)");
ABSL_FLAG(int, join_wait_ms, 60000,
          "how long joining waits for every rank of the world (pods of a "
          "group may start minutes apart)");
ABSL_FLAG(int, connect_timeout_ms, 60000, "session connect deadline");
ABSL_FLAG(int, op_timeout_ms, 30000, "deadline of each data-plane operation");
ABSL_FLAG(double, atol, 1e-4, "self-check absolute tolerance");
ABSL_FLAG(double, rtol, 1e-4, "self-check relative tolerance");
ABSL_FLAG(int, progress_ms, 1000, "rank 0 prints progress at least this often");
ABSL_FLAG(int, step_interval_ms, 0,
          "shortest time from one step's start to the next (0: back to back); "
          "paces a long-running server");
ABSL_FLAG(uint32_t, stall_at_step, 0,
          "failure drill: stall after agreeing on this step (0: never); "
          "tools/run.sh --kill-rank kills the stalled rank. A replacement "
          "process never stalls");
ABSL_FLAG(std::string, stall_ranks, "",
          "the ranks that stall at --stall_at_step, comma-separated (empty: "
          "this process, whatever its rank); lets one command line, as "
          "rankrun gives every rank of a node, pick the drill's victims");
ABSL_FLAG(bool, recover, false,
          "in-place recovery (the daemons need --recovery=on): after a lost "
          "rank or node, re-form the session at the next epoch, keep the "
          "model shard and serve the failed step again");
ABSL_FLAG(uint32_t, first_step, 1,
          "serve steps first_step..steps: a job started again from scratch "
          "after a loss (tools/run.sh --full-restart, the baseline that "
          "in-place recovery is measured against) resumes the request "
          "streams at the step the lost job did not finish");
ABSL_FLAG(int, recover_timeout_ms, 120000,
          "the longest one recovery may take, from the failed step to a "
          "re-formed session and the agreed step (a replacement must join "
          "within it)");
ABSL_FLAG(uint32_t, die_at_epoch, 0,
          "failure drill, a second loss during recovery: rank --die_rank "
          "kills itself with SIGKILL the moment its client joined this epoch "
          "(0: never), before its re-formed session connects. A replacement "
          "process never does");
ABSL_FLAG(int, die_rank, -1, "the rank that --die_at_epoch kills");
ABSL_FLAG(int, hold_replacement_open_ms, 0,
          "failure drill: a replacement that joined at epoch 2 waits this "
          "long before opening its session (0: not at all), so that a "
          "--die_at_epoch=2 loss lands while every session of epoch 2 is "
          "still connecting");
ABSL_FLAG(uint32_t, inject_error_at_step, 0,
          "testing the self-check: perturb this rank's outputs at this step "
          "(0: never)");

namespace rankd::examples {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitUsage = 2;
constexpr int kExitFailed = 3;
constexpr int kExitCheckFailed = 4;

void Print(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

int64_t UnixMs() { return absl::ToUnixMillis(absl::Now()); }
// CLOCK_REALTIME, the recovery phases' stamps (comparable across processes
// of one host).
int64_t UnixUs() { return absl::ToUnixMicros(absl::Now()); }

// $RANKD_RESTART_COUNT, which rankrun sets (0 in a first process).
uint32_t RestartCount() {
  const char* value = std::getenv("RANKD_RESTART_COUNT");
  uint32_t count = 0;
  if (value == nullptr || !absl::SimpleAtoi(value, &count)) return 0;
  return count;
}

// How long a failed operation waits for the job's notice of a failure
// behind it: to report it, and (--recover) to tell a loss, which is
// recovered from, from any other error (a node is declared lost after the
// daemons' --heartbeat_timeout_ms, 2 s by default).
constexpr absl::Duration kFailureNoticeWait = absl::Seconds(2);
constexpr absl::Duration kLossNoticeWait = absl::Seconds(10);

// Rank 0 keeps at most twice this many step latencies (the most recent).
constexpr size_t kMaxLatencySamples = 100000;

// Recovery by domain: how long a rank with no step to serve waits before
// its next world round when the last one had no replica serving (the
// others recover, or every one is done and one is still missing).
constexpr absl::Duration kIdleRoundPace = absl::Milliseconds(10);

// The stop signal (SIGTERM or SIGINT) received once serving started; 0:
// none. Set by the handler, read by the serving loop.
std::atomic<int> stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free,
              "the signal handler needs a lock-free atomic");

void OnStopSignal(int signal) {
  stop_signal.store(signal, std::memory_order_relaxed);
}

// From here on SIGTERM and SIGINT ask the serving loop to stop (every rank
// at the same step) instead of ending the process.
void CatchStopSignals() {
  struct sigaction action = {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
}

const char* SignalName(int signal) {
  return signal == SIGINT ? "SIGINT" : "SIGTERM";
}

// --hostname, else $POD_IP (Kubernetes' downward API), else loopback.
std::string GlooHostname() {
  std::string hostname = absl::GetFlag(FLAGS_hostname);
  if (hostname.empty()) {
    const char* pod_ip = std::getenv("POD_IP");
    hostname = pod_ip != nullptr && *pod_ip != '\0' ? pod_ip : "127.0.0.1";
  }
  return hostname;
}

// What one step came to.
struct StepOutcome {
  enum class Kind { kServed, kStopped, kDrained, kStall };
  Kind kind = Kind::kServed;
  StepPlan plan;
  // Every rank's outputs, `rows` rows each (rank 0 checks them).
  Matrix gathered;
  size_t rows = 0;
};

class ServingProcess {
 public:
  int Run();

 private:
  int Setup();
  int Serve();
  // A scheduler's request stream, at first_step_: a replacement starts
  // where the job (or its replica) resumes, the batches before it served
  // (the streams are deterministic). Empty on other ranks.
  std::optional<RequestStream> StreamFromFirstStep() const;
  // Serve under recovery by domain with dp > 1 (replica_round.h): every
  // replica serves its own steps in world rounds that span the replicas
  // serving; a loss re-forms this rank's replica alone.
  int ServeByReplica();
  // One world round by replica: this rank's frame, AllGatherWordsWithView,
  // decoded. A round failed by another replica's loss (ABORTED naming that
  // domain) is run again at once, at the next round number, as every
  // member of the serving replicas does. Any other error is returned.
  absl::StatusOr<ReplicaRound> WorldRound(const ReplicaFrame& frame);
  // This rank's frame of `kind` at `step`, with its counts and flags.
  ReplicaFrame MyFrame(ReplicaFrame::Kind kind, uint32_t step,
                       const SlotBatch* batch) const;
  // Counts a round (the tally) and takes in its stop and drain flags.
  void ObserveRound(const ReplicaRound& round, uint32_t step);
  // The summary from the final round (every replica there, all idle), by
  // the lowest rank that saw every round. kExitOk or kExitCheckFailed.
  int FinishByReplica(const ReplicaRound& final_round, absl::Duration wall);
  // One step: agreement, forward, outputs gathered. The first failing
  // operation's error; the agreed plan is in in_flight_ from the agreement
  // on.
  absl::StatusOr<StepOutcome> ServeStep(uint32_t step, const SlotBatch* batch,
                                        bool drain, bool stall);
  // Reports a failed operation and the job failure behind it, if any.
  int Failed(uint32_t step, const absl::Status& status);
  // The job's failure, waited for up to `wait` (a transport error can beat
  // the daemon's notice: by a moment for a lost rank, by up to the
  // daemons' --heartbeat_timeout_ms for a lost node); OK when the job still
  // looks healthy then.
  absl::Status JobFailure(absl::Duration wait);
  // Opens this process's first session at the epoch it joined (`joined`).
  // A replacement whose open fails because that epoch ended too (a second
  // loss while the job re-forms) joins the next epoch (ControlPlane::Rejoin)
  // and opens there, within --recover_timeout_ms (each open's connect bound
  // cut to the time left), printing LOSS and CAUSE for each such epoch.
  // Otherwise the open's error, or Rejoin's.
  absl::StatusOr<std::unique_ptr<Collectives>> OpenFirstSession(
      const v1::SessionDescriptor& joined, const BackendOptions& backend);
  // --recover: `status` failed step `step`. When a loss behind it ended
  // the job's epoch, re-forms at the next one and agrees that the job
  // resumes at `step`: kExitOk, and the caller serves `step` again.
  // Otherwise Failed's exit status.
  int Recover(uint32_t step, const absl::Status& status);
  // Enters the current epoch (re-forming first when `reform`; a
  // replacement's fresh session needs none) and agrees on the step to
  // resume at, this rank naming `known_step` (kUnknownStep: a
  // replacement); re-forms again after another loss, all within
  // --recover_timeout_ms. kExitOk with *resume set, else Failed's status.
  int Reenter(uint32_t known_step, bool reform, uint32_t* resume);
  // Whether this process is a drill victim at --stall_at_step.
  bool StallsHere() const;
  // The drill victim: waits until it is killed (or the job fails).
  int Stall(uint32_t step);
  void MaybeProgress(uint32_t step, bool force);

  std::unique_ptr<Client> client_;
  std::unique_ptr<dataplane::ControlPlane> control_plane_;
  std::unique_ptr<Collectives> collectives_;
  std::unique_ptr<AdminClient> admin_;
  ServingLayout layout_;
  ModelSpec spec_;
  std::unique_ptr<ModelShard> shard_;
  std::unique_ptr<SelfCheck> check_;
  Tolerance tolerance_;
  // --stall_ranks, parsed (empty: every process given --stall_at_step).
  std::set<uint32_t> stall_ranks_;
  // --die_at_epoch's watch of this rank's epoch (stopped and joined before
  // the client it reads is destroyed).
  std::jthread second_loss_drill_;

  // Recovery by domain with dp > 1 (the Join answer says so): this rank's
  // replica, its process's generation (the epoch it joined at), whether it
  // saw every world round, its own checks (last stage), the tally of the
  // rounds, and the stop and drain requests seen in any round.
  bool by_replica_ = false;
  uint32_t replica_ = 0;
  uint64_t generation_ = 1;
  bool fresh_ = true;
  std::unique_ptr<ReplicaCheck> replica_check_;
  CheckCounts my_checks_;
  std::unique_ptr<ReplicaTally> tally_;
  bool stop_seen_ = false;
  bool drain_seen_ = false;
  bool signal_seen_ = false;
  std::set<uint32_t> replicas_seen_;

  // Recovery: whether this process replaces a lost one (it joined at epoch
  // 2 or later), the step it starts at, and the plan of the step in
  // progress once agreed (the requests in flight should a loss interrupt
  // it).
  bool replacement_ = false;
  uint32_t first_step_ = 1;
  std::optional<StepPlan> in_flight_;

  // Rank 0's view of the run.
  RunSummary summary_;
  RequestLedger ledger_;
  absl::Time started_;
  absl::Time last_progress_;
  bool joined_ = false;
  uint64_t my_tokens_ = 0;
  bool check_failed_ = false;
};

int ServingProcess::Run() {
  const std::string backend = absl::GetFlag(FLAGS_backend);
  if (backend != "gloo" && backend != "nccl") {
    Print(absl::StrCat("ERROR --backend=", backend, ": use gloo or nccl"));
    return kExitUsage;
  }
  int devices = 0;
  if (backend == "nccl") {
    std::string runtime;
    auto count = NcclDevices(&runtime);
    // What was loaded, first: a refusal is easier to read with it.
    Print(absl::StrCat("NCCL_RUNTIME ", runtime));
    if (!count.ok()) {
      Print(absl::StrCat("REFUSED ", count.status().message()));
      return kExitUsage;
    }
    devices = *count;
  }
  if (absl::GetFlag(FLAGS_probe_backend)) {
    Print(absl::StrCat("BACKEND_OK ", backend, " devices=", devices));
    return kExitOk;
  }
  const uint32_t steps = absl::GetFlag(FLAGS_steps);
  first_step_ = absl::GetFlag(FLAGS_first_step);
  if (first_step_ == 0 || (steps > 0 && first_step_ > steps)) {
    Print(absl::StrCat("ERROR --first_step=", first_step_, ": must be ",
                       steps > 0 ? absl::StrCat("in 1..", steps, " (--steps)")
                                 : "at least 1"));
    return kExitUsage;
  }
  if (absl::GetFlag(FLAGS_join_wait_ms) <= 0 ||
      absl::GetFlag(FLAGS_step_interval_ms) < 0 ||
      absl::GetFlag(FLAGS_recover_timeout_ms) <= 0) {
    Print(
        "ERROR --join_wait_ms and --recover_timeout_ms must be positive and "
        "--step_interval_ms not negative");
    return kExitUsage;
  }
  for (absl::string_view word : absl::StrSplit(absl::GetFlag(FLAGS_stall_ranks),
                                               ',', absl::SkipEmpty())) {
    uint32_t rank = 0;
    if (!absl::SimpleAtoi(word, &rank)) {
      Print(
          absl::StrCat("ERROR --stall_ranks=", absl::GetFlag(FLAGS_stall_ranks),
                       ": '", word, "' is not a rank"));
      return kExitUsage;
    }
    stall_ranks_.insert(rank);
  }
  if (int code = Setup(); code != kExitOk) return code;
  CatchStopSignals();
  const int code = by_replica_ ? ServeByReplica() : Serve();
  // Every rank is past its last data-plane operation (the end-of-run round
  // is a barrier) before anyone closes its session.
  collectives_.reset();
  if (code == kExitOk || code == kExitCheckFailed) {
    if (absl::Status s = client_->Leave(); !s.ok()) {
      Print(absl::StrCat("ERROR leaving the job: ", s.ToString()));
      return kExitFailed;
    }
  }
  return code;
}

int ServingProcess::Setup() {
  ClientOptions options;
  options.target = absl::GetFlag(FLAGS_target);
  auto client = Client::Connect(options);
  if (!client.ok()) return Failed(0, client.status());
  client_ = *std::move(client);

  const bool nccl = absl::GetFlag(FLAGS_backend) == "nccl";
  JoinOptions join;
  join.job_id = absl::GetFlag(FLAGS_job_id);
  join.local_rank = absl::GetFlag(FLAGS_local_rank);
  join.world_size = absl::GetFlag(FLAGS_world_size);
  join.device.set_kind(nccl ? "cuda" : "cpu");
  join.device.set_index(static_cast<int32_t>(*join.local_rank));
  join.wait_for_world = absl::Milliseconds(absl::GetFlag(FLAGS_join_wait_ms));
  auto descriptor = client_->Join(join);
  if (!descriptor.ok()) return Failed(0, descriptor.status());
  // A job that is past its first epoch lost a member before this process
  // joined (a loss while forming fails the job): this process replaces it.
  replacement_ = descriptor->epoch() > 1;
  if (replacement_) {
    Print(absl::StrCat("JOINED rank=", descriptor->rank(),
                       " epoch=", descriptor->epoch(), " unix_us=", UnixUs(),
                       " restart=", RestartCount()));
  }

  auto layout = LayoutFromDescriptor(*descriptor);
  if (!layout.ok()) return Failed(0, layout.status());
  layout_ = *layout;
  joined_ = true;
  by_replica_ = descriptor->recovery_by_domain() && layout_.topology.data > 1;
  replica_ = layout_.coords.data;
  generation_ = descriptor->epoch();
  fresh_ = !replacement_;
  if (by_replica_ && !absl::GetFlag(FLAGS_recover)) {
    Print(
        "ERROR the job recovers by data-parallel domain (rankd "
        "--recovery=domain): run every rank with --recover");
    return kExitUsage;
  }
  if (by_replica_ && absl::GetFlag(FLAGS_first_step) != 1) {
    Print(
        "ERROR --first_step: a job that recovers by data-parallel domain "
        "starts at step 1 (its replicas count their own steps)");
    return kExitUsage;
  }
  ModelSpec requested;
  requested.hidden = absl::GetFlag(FLAGS_hidden);
  requested.ffn = absl::GetFlag(FLAGS_ffn);
  requested.layers = absl::GetFlag(FLAGS_layers);
  requested.experts = absl::GetFlag(FLAGS_experts);
  requested.seed = absl::GetFlag(FLAGS_seed);
  auto spec = ModelSpecFor(layout_.topology, requested);
  if (!spec.ok()) {
    Print(absl::StrCat("ERROR ", spec.status().message()));
    return kExitUsage;
  }
  spec_ = *spec;

  if (const uint64_t die_at = absl::GetFlag(FLAGS_die_at_epoch);
      die_at > 1 && !replacement_ &&
      absl::GetFlag(FLAGS_die_rank) == static_cast<int>(layout_.rank)) {
    // Client::Rejoin moves epoch() on once the world is whole again: the
    // moment every session of that epoch starts connecting.
    second_loss_drill_ = std::jthread([this, die_at](std::stop_token stop) {
      while (!stop.stop_requested()) {
        if (const uint64_t epoch = client_->epoch(); epoch >= die_at) {
          Print(absl::StrCat("DYING rank=", layout_.rank, " epoch=", epoch,
                             " unix_us=", UnixUs(), " pid=", ::getpid()));
          ::raise(SIGKILL);
        }
        absl::SleepFor(absl::Milliseconds(2));
      }
    });
  }
  control_plane_ = dataplane::MakeClientControlPlane(client_.get());
  BackendOptions backend;
  backend.hostname = GlooHostname();
  backend.connect_timeout =
      absl::Milliseconds(absl::GetFlag(FLAGS_connect_timeout_ms));
  backend.op_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_op_timeout_ms));
  if (const int hold = absl::GetFlag(FLAGS_hold_replacement_open_ms);
      hold > 0 && replacement_ && descriptor->epoch() == 2) {
    absl::SleepFor(absl::Milliseconds(hold));
  }
  auto collectives = OpenFirstSession(*descriptor, backend);
  if (!collectives.ok()) return Failed(0, collectives.status());
  collectives_ = *std::move(collectives);
  shard_ = std::make_unique<ModelShard>(spec_, layout_);
  tolerance_.atol = absl::GetFlag(FLAGS_atol);
  tolerance_.rtol = absl::GetFlag(FLAGS_rtol);
  if (by_replica_) {
    tally_ = std::make_unique<ReplicaTally>(layout_);
    if (layout_.last_stage()) {
      replica_check_ =
          std::make_unique<ReplicaCheck>(spec_, layout_, tolerance_);
    }
  }
  Print(absl::StrCat("READY rank=", layout_.rank, " node=", layout_.node_index,
                     " coords=d", layout_.coords.data, " p",
                     layout_.coords.pipeline, " t", layout_.coords.tensor, " e",
                     layout_.coords.expert,
                     " backend=", collectives_->backend(),
                     nccl ? "" : absl::StrCat(" hostname=", backend.hostname)));
  if (first_step_ > 1 && !replacement_) {
    Print(absl::StrCat("RESTARTED rank=", layout_.rank, " step=", first_step_,
                       " unix_us=", UnixUs(), " shard=loaded"));
  }
  if (replacement_) {
    // Its session was opened at the recovering epoch; the survivors
    // re-form theirs to meet it. Then the step to start at.
    Print(absl::StrCat("REFORMED rank=", layout_.rank,
                       " epoch=", collectives_->epoch(), " unix_us=", UnixUs(),
                       " shard=loaded"));
    if (int code = Reenter(kUnknownStep, /*reform=*/false, &first_step_);
        code != kExitOk) {
      return code;
    }
  }

  // Under recovery by replica any rank may print the summary.
  summary_.layout = layout_;
  summary_.spec = spec_;
  summary_.backend = collectives_->backend();
  summary_.tolerance = tolerance_.ToString();
  if (layout_.rank == 0) {
    if (!by_replica_) {
      check_ = std::make_unique<SelfCheck>(spec_, layout_, tolerance_);
    }
    auto admin = AdminClient::Connect(options);
    if (admin.ok()) admin_ = *std::move(admin);
    const uint32_t steps = absl::GetFlag(FLAGS_steps);
    Print(absl::StrCat(
        "SERVING world ", layout_.world_size, " (",
        DescribeTopology(layout_.topology), "), ", spec_.ToString(), ", ",
        steps > 0 ? absl::StrCat(steps, " steps")
                  : std::string("until stopped (SIGTERM)"),
        by_replica_ ? absl::StrCat(" per replica, recovery by replica (",
                                   layout_.topology.data, " replicas)")
                    : std::string(),
        ", backend ", collectives_->backend()));
  }
  return kExitOk;
}

std::optional<RequestStream> ServingProcess::StreamFromFirstStep() const {
  std::optional<RequestStream> stream;
  if (layout_.is_scheduler()) {
    stream.emplace(spec_.seed, layout_.my_slot(), layout_.num_slots());
    for (uint32_t s = 1; s < first_step_; ++s) stream->Next();
  }
  return stream;
}

int ServingProcess::Serve() {
  const uint32_t steps = absl::GetFlag(FLAGS_steps);
  const bool recover = absl::GetFlag(FLAGS_recover);
  std::optional<RequestStream> stream = StreamFromFirstStep();
  if (check_ != nullptr) check_->SkipTo(first_step_);
  const absl::Duration interval =
      absl::Milliseconds(absl::GetFlag(FLAGS_step_interval_ms));
  started_ = last_progress_ = MonotonicNow();
  absl::Time step_start = started_;
  uint32_t done = first_step_ - 1;
  int code = kExitOk;
  bool signal_seen = false;
  // After a recovery: the failed step's batch, served again, and whether
  // the first step since has yet to complete.
  std::optional<SlotBatch> retry_batch;
  bool retrying = false;
  bool resume_pending = replacement_ || first_step_ > 1;
  uint32_t step = first_step_;
  while (steps == 0 || step <= steps) {
    if (step > first_step_) {
      absl::SleepFor(step_start + interval - MonotonicNow());
    }
    step_start = MonotonicNow();
    // A stop signal that arrives later is seen at the next step.
    const int signal = stop_signal.load(std::memory_order_relaxed);
    if (signal != 0 && !signal_seen) {
      signal_seen = true;
      Print(absl::StrCat("SIGNAL rank=", layout_.rank, " step=", step, " ",
                         SignalName(signal),
                         ": every rank stops at this step's agreement"));
    }
    std::optional<SlotBatch> batch;
    if (retrying) {
      batch = std::move(retry_batch);
    } else if (stream) {
      batch = stream->Next();
    }
    const bool stall =
        !retrying && step == absl::GetFlag(FLAGS_stall_at_step) && StallsHere();
    retrying = false;
    in_flight_.reset();
    auto outcome =
        ServeStep(step, batch ? &*batch : nullptr, signal_seen, stall);
    if (!outcome.ok()) {
      if (!recover) return Failed(step, outcome.status());
      if (int c = Recover(step, outcome.status()); c != kExitOk) return c;
      retry_batch = std::move(batch);
      retrying = true;
      resume_pending = true;
      continue;
    }
    if (outcome->kind == StepOutcome::Kind::kStall) return Stall(step);
    if (outcome->kind == StepOutcome::Kind::kStopped) {
      Print(absl::StrCat("STOPPED rank=", layout_.rank, " step=", step,
                         ": rank ", outcome->plan.stop_requested_by[0],
                         " asked every rank to stop (its self-check failed)"));
      code = kExitCheckFailed;
      break;
    }
    if (outcome->kind == StepOutcome::Kind::kDrained) {
      Print(absl::StrCat("DRAINED rank=", layout_.rank, " step=", step,
                         ": rank ", outcome->plan.drain_requested_by[0],
                         " got a stop signal; served ", done, " steps"));
      break;
    }
    const StepPlan& plan = outcome->plan;
    my_tokens_ += plan.slots[layout_.my_slot()].tokens();
    done = step++;
    if (resume_pending) {
      resume_pending = false;
      Print(absl::StrCat("RESUMED rank=", layout_.rank, " step=", done,
                         " epoch=", collectives_->epoch(),
                         " unix_us=", UnixUs()));
    }
    if (layout_.rank != 0) continue;

    if (summary_.latency.size() >= 2 * kMaxLatencySamples) {
      summary_.latency.erase(summary_.latency.begin(),
                             summary_.latency.begin() + kMaxLatencySamples);
    }
    summary_.latency.push_back(MonotonicNow() - step_start);
    summary_.tokens += plan.total_tokens();
    ledger_.Completed(plan);
    const absl::Time check_start = MonotonicNow();
    const StepCheck check =
        check_->Check(plan, outcome->gathered, outcome->rows);
    summary_.check_time += MonotonicNow() - check_start;
    summary_.checked_values += check.values_checked;
    summary_.max_abs_error =
        std::max(summary_.max_abs_error, check.max_abs_error);
    if (check.status.ok()) {
      ++summary_.checked_steps;
    } else if (!check_failed_) {
      check_failed_ = true;
      Print(absl::StrCat("SELF-CHECK FAILED ", check.status.message()));
    }
    // With --steps=0 the first step is shown at once: serving has begun.
    MaybeProgress(done, steps == 0 ? done == first_step_ : done == steps);
  }
  const absl::Duration wall = MonotonicNow() - started_;

  // End of run: every rank's statistics in one round (also a barrier). A
  // loss here is recovered as a step's is, with the step after the last
  // (a replacement then serves no step); not when serving until stopped,
  // where a replacement could not tell the end had come.
  absl::StatusOr<std::vector<uint32_t>> words;
  while (true) {
    words = collectives_->AllGatherWords(EncodeReport(
        collectives_->stats(), my_tokens_, check_failed_ || code != kExitOk));
    if (words.ok()) break;
    if (!recover || steps == 0) return Failed(done, words.status());
    if (int c = Recover(done + 1, words.status()); c != kExitOk) return c;
  }
  auto reports = DecodeReports(*words, layout_.world_size);
  if (!reports.ok()) return Failed(done, reports.status());
  bool any_failed = false;
  for (const RankReport& r : *reports) any_failed |= r.failed != 0;
  if (layout_.rank == 0) {
    summary_.steps = done;
    summary_.first_step = first_step_;
    summary_.wall = wall;
    summary_.check_passed = !check_failed_;
    summary_.ranks = *std::move(reports);
    summary_.requests = ledger_.served();
    summary_.requests_in_flight = ledger_.in_flight();
    summary_.requests_rerun = ledger_.rerun();
    summary_.requests_lost = ledger_.lost();
    std::fputs(SummaryTable(summary_).c_str(), stdout);
    std::fflush(stdout);
  }
  if (any_failed) return kExitCheckFailed;
  Print(absl::StrCat("DONE rank=", layout_.rank, " tokens=", my_tokens_));
  return code;
}

int ServingProcess::ServeByReplica() {
  const uint32_t steps = absl::GetFlag(FLAGS_steps);
  std::optional<RequestStream> stream = StreamFromFirstStep();
  if (replica_check_ != nullptr) replica_check_->SkipTo(first_step_);
  const absl::Duration interval =
      absl::Milliseconds(absl::GetFlag(FLAGS_step_interval_ms));
  started_ = last_progress_ = MonotonicNow();
  absl::Time step_start = started_;
  uint32_t step = first_step_;
  std::optional<SlotBatch> retry_batch;
  bool retrying = false;
  bool resume_pending = replacement_;
  bool last_round_active = true;
  while (true) {
    // No step to serve: this replica served its steps, or a stop or drain
    // request ends the run; the rounds go on until every replica is there
    // and idle.
    const bool idle = stop_seen_ || drain_seen_ || (steps > 0 && step > steps);
    if (idle) {
      if (!last_round_active) absl::SleepFor(kIdleRoundPace);
    } else if (step > first_step_) {
      absl::SleepFor(step_start + interval - MonotonicNow());
    }
    step_start = MonotonicNow();
    const int signal = stop_signal.load(std::memory_order_relaxed);
    if (signal != 0 && !signal_seen_) {
      signal_seen_ = true;
      Print(absl::StrCat("SIGNAL rank=", layout_.rank, " step=", step, " ",
                         SignalName(signal),
                         ": every rank stops at the next round that spans "
                         "every replica"));
    }
    std::optional<SlotBatch> batch;
    if (!idle) {
      if (retrying) {
        batch = std::move(retry_batch);
      } else if (stream) {
        batch = stream->Next();
      }
    }
    const bool stall = !idle && !retrying &&
                       step == absl::GetFlag(FLAGS_stall_at_step) &&
                       StallsHere();
    retrying = false;
    in_flight_.reset();
    absl::Status failed;
    auto round = WorldRound(
        MyFrame(idle ? ReplicaFrame::Kind::kIdle : ReplicaFrame::Kind::kStep,
                idle ? step - 1 : step, batch ? &*batch : nullptr));
    if (round.ok()) {
      ObserveRound(*round, step);
      last_round_active = round->AnyActive();
      if (!round->partial && round->AllIdle()) {
        return FinishByReplica(*round, MonotonicNow() - started_);
      }
      if (idle) continue;
      if (stop_seen_ || drain_seen_) {
        // Asked in this very round: the step is not served (its requests
        // were never started).
        continue;
      }
      const ReplicaInRound* mine = round->Find(replica_);
      if (mine == nullptr || mine->kind != ReplicaFrame::Kind::kStep ||
          mine->plan.step != step) {
        return Failed(step, absl::FailedPreconditionError(absl::StrCat(
                                "world round by replica: replica ", replica_,
                                " is not at step ", step, " in it")));
      }
      in_flight_ = mine->plan;
      if (stall) return Stall(step);
      auto out = ForwardStep(*collectives_, *shard_, layout_, mine->plan);
      if (out.ok()) {
        const StepPlan& plan = mine->plan;
        if (replica_check_ != nullptr) {
          Matrix outputs = *std::move(out);
          if (step == absl::GetFlag(FLAGS_inject_error_at_step) &&
              !outputs.values.empty()) {
            outputs.values[0] += 1.0f;
          }
          const StepCheck check = replica_check_->Check(
              step, plan.slots[layout_.my_slot()], outputs);
          my_checks_.values += check.values_checked;
          my_checks_.max_abs_error =
              std::max(my_checks_.max_abs_error,
                       static_cast<float>(check.max_abs_error));
          if (check.status.ok()) {
            ++my_checks_.passed;
          } else {
            ++my_checks_.failed;
            if (!check_failed_) {
              check_failed_ = true;
              Print(absl::StrCat("SELF-CHECK FAILED ", check.status.message()));
            }
          }
        }
        my_tokens_ += plan.slots[layout_.my_slot()].tokens();
        const uint32_t done = step++;
        if (resume_pending) {
          resume_pending = false;
          Print(absl::StrCat("RESUMED rank=", layout_.rank, " step=", done,
                             " epoch=", collectives_->epoch(),
                             " unix_us=", UnixUs()));
        }
        if (summary_.latency.size() >= 2 * kMaxLatencySamples) {
          summary_.latency.erase(summary_.latency.begin(),
                                 summary_.latency.begin() + kMaxLatencySamples);
        }
        summary_.latency.push_back(MonotonicNow() - step_start);
        if (layout_.rank == 0) {
          summary_.tokens = tally_->tokens();
          MaybeProgress(done, steps == 0 ? done == first_step_ : done == steps);
        }
        continue;
      }
      failed = out.status();
    } else {
      failed = round.status();
    }
    // Only a loss in this replica gets here: recover it and serve the
    // step again (with the same batch), or go on idling.
    if (int c = Recover(step, failed); c != kExitOk) return c;
    if (!idle) {
      retry_batch = std::move(batch);
      retrying = true;
      resume_pending = true;
    }
    last_round_active = true;
  }
}

absl::StatusOr<ReplicaRound> ServingProcess::WorldRound(
    const ReplicaFrame& frame) {
  const std::vector<uint32_t> words = EncodeReplicaFrame(frame);
  const absl::Duration timeout =
      absl::Milliseconds(absl::GetFlag(FLAGS_op_timeout_ms));
  const std::string mine = absl::StrCat("domain ", replica_, " (ranks ");
  while (true) {
    const absl::Time start = MonotonicNow();
    auto result = client_->AllGatherWordsWithView(words, timeout);
    collectives_->Record(CollectiveKind::kAllGatherWords,
                         MonotonicNow() - start);
    if (result.ok()) {
      std::vector<uint32_t> replicas;
      std::vector<uint64_t> epochs;
      for (const Client::DomainEpoch& d : result->domains) {
        replicas.push_back(d.domain);
        epochs.push_back(d.epoch);
      }
      return DecodeReplicaRound(layout_, result->partial, replicas, epochs,
                                result->words);
    }
    // Another replica's loss failed the round on every contributor; the
    // next round spans the replicas still serving.
    if (result.status().code() == absl::StatusCode::kAborted &&
        !absl::StrContains(result.status().message(), mine)) {
      continue;
    }
    return absl::Status(result.status().code(),
                        absl::StrCat("all_gather_words by replica: ",
                                     result.status().message()));
  }
}

ReplicaFrame ServingProcess::MyFrame(ReplicaFrame::Kind kind, uint32_t step,
                                     const SlotBatch* batch) const {
  ReplicaFrame f;
  f.kind = kind;
  f.step = step;
  f.batch = batch;
  f.stop = check_failed_ || stop_seen_;
  f.drain = signal_seen_ || drain_seen_;
  f.fresh = fresh_;
  f.generation = generation_;
  f.epoch = collectives_->epoch();
  f.checks = my_checks_;
  f.stats = &collectives_->stats();
  f.tokens = my_tokens_;
  f.failed = check_failed_ || stop_seen_;
  return f;
}

void ServingProcess::ObserveRound(const ReplicaRound& round, uint32_t step) {
  tally_->Observe(round);
  if (!round.stop_requested_by.empty() && !stop_seen_) {
    stop_seen_ = true;
    Print(absl::StrCat("STOPPED rank=", layout_.rank, " step=", step, ": rank ",
                       round.stop_requested_by[0],
                       " asked every rank to stop (a self-check failed)"));
  }
  if (!round.drain_requested_by.empty() && !drain_seen_) {
    drain_seen_ = true;
    Print(absl::StrCat("DRAINED rank=", layout_.rank, " step=", step, ": rank ",
                       round.drain_requested_by[0],
                       " got a stop signal; replica ", replica_, " served ",
                       step - 1, " steps"));
  }
  // The first rank of each replica says when the serving replicas change.
  std::set<uint32_t> now;
  for (const ReplicaInRound& r : round.replicas) now.insert(r.replica);
  if (now != replicas_seen_ &&
      layout_.rank == replica_ * DomainSizeOf(layout_.topology)) {
    std::vector<std::string> serving, away;
    for (const ReplicaInRound& r : round.replicas) {
      serving.push_back(absl::StrCat(r.replica, " (epoch ", r.epoch, ")"));
    }
    for (uint32_t d = 0; d < layout_.topology.data; ++d) {
      if (!now.contains(d)) away.push_back(absl::StrCat(d));
    }
    Print(absl::StrCat(
        "REPLICAS rank=", layout_.rank, " step=", step, " unix_us=", UnixUs(),
        ": serving ", absl::StrJoin(serving, ", "),
        away.empty()
            ? std::string()
            : absl::StrCat("; recovering ", absl::StrJoin(away, ", "))));
  }
  replicas_seen_ = std::move(now);
}

int ServingProcess::FinishByReplica(const ReplicaRound& final_round,
                                    absl::Duration wall) {
  // The lowest rank that saw every round counts for the summary; every
  // rank reads the same final round, so every rank names the same one.
  uint32_t printer = 0;
  bool found = false;
  bool any_failed = stop_seen_;
  for (const RankInRound& r : final_round.ranks) {
    any_failed |= r.report.failed != 0 || r.checks.failed != 0;
    if (!found && (r.flags & kFlagFresh) != 0) {
      printer = r.rank;
      found = true;
    }
  }
  if (layout_.rank == printer) {
    const uint32_t steps = absl::GetFlag(FLAGS_steps);
    summary_.first_step = 1;
    summary_.steps = 0;
    summary_.checked_steps = 0;
    summary_.replicas.clear();
    for (uint32_t d = 0; d < layout_.topology.data; ++d) {
      ReplicaSummary replica = tally_->Summary(d);
      summary_.steps += replica.steps;
      summary_.checked_steps += replica.checked_steps;
      summary_.replicas.push_back(std::move(replica));
    }
    summary_.steps_per_replica = steps;
    summary_.counted_by = printer;
    summary_.counted_every_round = found;
    summary_.wall = wall;
    summary_.tokens = tally_->tokens();
    const CheckCounts checks = tally_->checks();
    summary_.checked_values = checks.values;
    summary_.max_abs_error = checks.max_abs_error;
    summary_.check_passed = !any_failed;
    for (const RankInRound& r : final_round.ranks) {
      summary_.ranks.push_back(r.report);
    }
    summary_.requests = tally_->requests_served();
    summary_.recoveries = tally_->recoveries();
    summary_.requests_in_flight = tally_->requests_in_flight();
    summary_.requests_rerun = tally_->requests_rerun();
    summary_.requests_lost = tally_->requests_lost();
    std::fputs(SummaryTable(summary_).c_str(), stdout);
    std::fflush(stdout);
  }
  if (any_failed) return kExitCheckFailed;
  Print(absl::StrCat("DONE rank=", layout_.rank, " tokens=", my_tokens_));
  return kExitOk;
}

absl::StatusOr<StepOutcome> ServingProcess::ServeStep(uint32_t step,
                                                      const SlotBatch* batch,
                                                      bool drain, bool stall) {
  StepOutcome outcome;
  auto plan =
      AgreeOnBatch(*collectives_, layout_, step, batch, check_failed_, drain);
  if (!plan.ok()) return plan.status();
  in_flight_ = *plan;
  outcome.plan = *std::move(plan);
  const StepPlan& agreed = outcome.plan;
  if (!agreed.stop_requested_by.empty()) {
    outcome.kind = StepOutcome::Kind::kStopped;
    return outcome;
  }
  if (!agreed.drain_requested_by.empty()) {
    outcome.kind = StepOutcome::Kind::kDrained;
    return outcome;
  }
  if (stall) {
    outcome.kind = StepOutcome::Kind::kStall;
    return outcome;
  }

  auto out = ForwardStep(*collectives_, *shard_, layout_, agreed);
  if (!out.ok()) return out.status();

  // Every rank's outputs to everyone, padded to the largest slot; only
  // the last stage's rows are used.
  outcome.rows = agreed.max_slot_tokens();
  if (outcome.rows > 0) {
    Matrix mine = Matrix::Zeros(outcome.rows, spec_.hidden);
    if (layout_.last_stage()) {
      std::copy(out->values.begin(), out->values.end(), mine.values.begin());
      if (step == absl::GetFlag(FLAGS_inject_error_at_step) && out->rows > 0) {
        mine.values[0] += 1.0f;
      }
    }
    auto all = collectives_->AllGather(mine);
    if (!all.ok()) return all.status();
    outcome.gathered = *std::move(all);
  }
  return outcome;
}

void ServingProcess::MaybeProgress(uint32_t step, bool force) {
  const absl::Time now = MonotonicNow();
  const uint32_t steps = absl::GetFlag(FLAGS_steps);
  // Every 20% of a bounded run; only by time when serving until stopped.
  const bool milestone = steps > 0 && step % std::max(1u, steps / 5) == 0;
  if (!force && !milestone &&
      now - last_progress_ <
          absl::Milliseconds(absl::GetFlag(FLAGS_progress_ms))) {
    return;
  }
  last_progress_ = now;
  std::string up = "unknown";
  if (admin_ != nullptr) {
    auto members = admin_->ListMembers();
    up = members.ok() ? RanksUp(*members) : members.status().ToString();
  }
  Print(ProgressLine(step, steps, summary_.tokens, now - started_, up));
}

int ServingProcess::Failed(uint32_t step, const absl::Status& status) {
  Print(absl::StrCat(
      "FAILED rank=",
      joined_ ? absl::StrCat(layout_.rank)
              : absl::StrCat("? (local ", absl::GetFlag(FLAGS_local_rank), ")"),
      " step=", step, " unix_ms=", UnixMs(), " ", status.ToString()));
  if (control_plane_ != nullptr) {
    if (absl::Status cause = JobFailure(kFailureNoticeWait); !cause.ok()) {
      Print(absl::StrCat("CAUSE rank=", layout_.rank, " ", cause.ToString()));
    }
  }
  return kExitFailed;
}

absl::StatusOr<std::unique_ptr<Collectives>> ServingProcess::OpenFirstSession(
    const v1::SessionDescriptor& joined, const BackendOptions& backend) {
  const bool nccl = absl::GetFlag(FLAGS_backend) == "nccl";
  const absl::Time open_by =
      MonotonicNow() +
      absl::Milliseconds(absl::GetFlag(FLAGS_recover_timeout_ms));
  v1::SessionDescriptor descriptor = joined;
  while (true) {
    BackendOptions bounded = backend;
    if (replacement_) {
      // The whole recovery budget, however many epochs it takes.
      bounded.connect_timeout =
          std::min(backend.connect_timeout,
                   std::max(open_by - MonotonicNow(), absl::Milliseconds(1)));
    }
    auto collectives =
        nccl ? OpenNcclCollectives(control_plane_.get(), descriptor, bounded)
             : OpenGlooCollectives(control_plane_.get(), descriptor, bounded);
    if (collectives.ok() || !replacement_) return collectives;
    // A replacement joined a recovering job; a second loss while the job
    // re-forms (another rank lost before every session connected) ends that
    // epoch too. Then it joins the epoch after it, as a survivor's Reform
    // does, instead of exiting (and being restarted to load its shard
    // again).
    const absl::Status cause =
        JobFailure(std::min(kLossNoticeWait, std::max(open_by - MonotonicNow(),
                                                      absl::ZeroDuration())));
    const absl::Duration left = open_by - MonotonicNow();
    if (cause.ok() || left <= absl::ZeroDuration()) return collectives;
    Print(absl::StrCat(
        "LOSS rank=", descriptor.rank(), " step=0 epoch=", descriptor.epoch(),
        " unix_us=", UnixUs(), " ", collectives.status().ToString()));
    Print(
        absl::StrCat("CAUSE rank=", descriptor.rank(), " ", cause.ToString()));
    auto next = control_plane_->Rejoin(descriptor.epoch(), left);
    if (!next.ok()) return next.status();
    descriptor = client_->descriptor();
  }
}

absl::Status ServingProcess::JobFailure(absl::Duration wait) {
  const absl::Time until = MonotonicNow() + wait;
  absl::Status cause = control_plane_->JobHealth();
  while (cause.ok() && MonotonicNow() < until) {
    absl::SleepFor(absl::Milliseconds(20));
    cause = control_plane_->JobHealth();
  }
  return cause;
}

int ServingProcess::Recover(uint32_t step, const absl::Status& status) {
  // Only a loss ends the epoch; anything else (a self-inflicted error, a
  // deadline with every member alive) is not recovered from.
  const absl::Status cause = JobFailure(kLossNoticeWait);
  if (cause.ok()) return Failed(step, status);
  Print(absl::StrCat("LOSS rank=", layout_.rank, " step=", step,
                     " epoch=", collectives_->epoch(), " unix_us=", UnixUs(),
                     " ", status.ToString()));
  Print(absl::StrCat("CAUSE rank=", layout_.rank, " ", cause.ToString()));
  if (!by_replica_ && layout_.rank == 0 && in_flight_.has_value() &&
      in_flight_->step == step) {
    ledger_.Interrupted(*in_flight_);
  }
  // This process misses the rounds until its replica is back.
  fresh_ = false;
  ++summary_.recoveries;
  uint32_t resume = kUnknownStep;
  if (int code = Reenter(step, /*reform=*/true, &resume); code != kExitOk) {
    return code;
  }
  if (resume != step) {
    return Failed(step, absl::FailedPreconditionError(absl::StrCat(
                            "the job resumes at step ", resume,
                            " but this rank failed at step ", step)));
  }
  return kExitOk;
}

int ServingProcess::Reenter(uint32_t known_step, bool reform,
                            uint32_t* resume) {
  const absl::Time deadline =
      MonotonicNow() +
      absl::Milliseconds(absl::GetFlag(FLAGS_recover_timeout_ms));
  while (true) {
    if (reform) {
      const uint64_t ended = collectives_->epoch();
      const absl::Duration left = deadline - MonotonicNow();
      if (left <= absl::ZeroDuration()) {
        return Failed(known_step,
                      absl::DeadlineExceededError(absl::StrCat(
                          "recovering from the loss that ended epoch ", ended,
                          " took longer than --recover_timeout_ms=",
                          absl::GetFlag(FLAGS_recover_timeout_ms))));
      }
      // The shard (the weights) stays as it is: only the session is new.
      if (absl::Status s = collectives_->Reform(left); !s.ok()) {
        return Failed(known_step, s);
      }
      Print(absl::StrCat("REFORMED rank=", layout_.rank,
                         " epoch=", collectives_->epoch(),
                         " unix_us=", UnixUs(), " shard=kept"));
    }
    absl::StatusOr<uint32_t> agreed = absl::UnknownError("not run");
    if (by_replica_) {
      // The replica's first round at its new epoch (its entry round): its
      // ranks send resume frames while the other replicas serve on.
      auto round =
          WorldRound(MyFrame(ReplicaFrame::Kind::kResume, known_step, nullptr));
      if (round.ok()) {
        ObserveRound(*round, known_step);
        const ReplicaInRound* mine = round->Find(replica_);
        agreed = mine != nullptr && mine->kind == ReplicaFrame::Kind::kResume
                     ? absl::StatusOr<uint32_t>(mine->step)
                     : absl::FailedPreconditionError(absl::StrCat(
                           "replica ", replica_,
                           " is not re-entering in its first round at epoch ",
                           collectives_->epoch()));
      } else {
        agreed = round.status();
      }
    } else {
      agreed = AgreeOnResume(*collectives_, layout_.world_size, known_step);
    }
    if (agreed.ok()) {
      *resume = *agreed;
      Print(absl::StrCat("RESUMING rank=", layout_.rank, " step=", *resume,
                         " epoch=", collectives_->epoch()));
      return kExitOk;
    }
    // Another loss while the job re-formed ends this epoch too.
    const absl::Status cause = JobFailure(kLossNoticeWait);
    if (cause.ok()) return Failed(known_step, agreed.status());
    Print(absl::StrCat("LOSS rank=", layout_.rank, " step=", known_step,
                       " epoch=", collectives_->epoch(), " unix_us=", UnixUs(),
                       " ", agreed.status().ToString()));
    Print(absl::StrCat("CAUSE rank=", layout_.rank, " ", cause.ToString()));
    reform = true;
  }
}

bool ServingProcess::StallsHere() const {
  return !replacement_ &&
         (stall_ranks_.empty() || stall_ranks_.count(layout_.rank) > 0);
}

int ServingProcess::Stall(uint32_t step) {
  Print(absl::StrCat("STALLING rank=", layout_.rank, " step=", step,
                     " pid=", ::getpid()));
  const absl::Time until = MonotonicNow() + absl::Seconds(60);
  while (MonotonicNow() < until) {
    if (absl::Status s = control_plane_->JobHealth(); !s.ok()) {
      return Failed(step, s);
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  return Failed(step, absl::DeadlineExceededError(
                          "stalled for 60 s and was never killed"));
}

}  // namespace
}  // namespace rankd::examples

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  rankd::examples::ServingProcess process;
  return process.Run();
}
