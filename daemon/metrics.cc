#include "daemon/metrics.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <map>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/monotonic_clock.h"
#include "daemon/config.h"
#include "daemon/coordinator/event_log.h"
#include "google/protobuf/descriptor.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/histogram.h"
#include "prometheus/metric_family.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"
#include "rankd/v1/rank.pb.h"

namespace rankd {
namespace {

constexpr char kRankService[] = "/rankd.v1.Rank/";

// True for a method the Rank service defines (from its descriptor).
bool IsRankMethod(absl::string_view method) {
  static const google::protobuf::ServiceDescriptor* const kRank =
      v1::JoinRequest::descriptor()->file()->FindServiceByName("Rank");
  return kRank != nullptr && kRank->FindMethodByName(std::string(method));
}
constexpr char kPeerService[] = "/rankd.v1.Peer/";

// Seconds; from sub-millisecond rounds on one host to waits of a minute.
const prometheus::Histogram::BucketBoundaries& LatencyBuckets() {
  static const auto* const kBuckets =
      new prometheus::Histogram::BucketBoundaries{
          0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
          0.25,   0.5,   1,      2.5,   5,    10,    30,   60};
  return *kBuckets;
}

std::string CodeName(absl::StatusCode code) {
  return absl::StatusCodeToString(code);
}

// "JOB_STATE_READY" -> "READY".
std::string EnumSuffix(const std::string& name, absl::string_view prefix) {
  return std::string(absl::StripPrefix(name, prefix));
}

prometheus::ClientMetric Gauge(
    double value, std::vector<prometheus::ClientMetric::Label> labels = {}) {
  prometheus::ClientMetric m;
  m.label = std::move(labels);
  m.gauge.value = value;
  return m;
}

prometheus::MetricFamily CounterFamily(std::string name, std::string help,
                                       const std::atomic<uint64_t>& value) {
  prometheus::MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = prometheus::MetricType::Counter;
  prometheus::ClientMetric m;
  m.counter.value = static_cast<double>(value.load(std::memory_order_relaxed));
  f.metric.push_back(std::move(m));
  return f;
}

prometheus::MetricFamily GaugeFamily(std::string name, std::string help) {
  prometheus::MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = prometheus::MetricType::Gauge;
  return f;
}

}  // namespace

// Counters and histograms updated as things happen.
class DaemonMetrics::Instruments {
 public:
  Instruments()
      : registry_(std::make_shared<prometheus::Registry>()),
        rounds_(prometheus::BuildCounter()
                    .Name("rankd_rounds_total")
                    .Help("all_gather_words calls of this daemon's ranks, by "
                          "outcome (gRPC status code)")
                    .Register(*registry_)),
        round_seconds_(prometheus::BuildHistogram()
                           .Name("rankd_round_duration_seconds")
                           .Help("How long a rank of this daemon waited for an "
                                 "all_gather_words round (successful rounds)")
                           .Register(*registry_)),
        kv_ops_(prometheus::BuildCounter()
                    .Name("rankd_kv_operations_total")
                    .Help("Key-value operations of this daemon's ranks, by "
                          "operation and outcome")
                    .Register(*registry_)),
        kv_seconds_(prometheus::BuildHistogram()
                        .Name("rankd_kv_operation_duration_seconds")
                        .Help("Latency of key-value operations of this "
                              "daemon's ranks (blocking gets included)")
                        .Register(*registry_)),
        rank_rpcs_(prometheus::BuildCounter()
                       .Name("rankd_rank_requests_total")
                       .Help("Calls of the Rank service (serving processes), "
                             "by method and outcome")
                       .Register(*registry_)),
        heartbeats_sent_(
            prometheus::BuildCounter()
                .Name("rankd_heartbeats_sent_total")
                .Help("Heartbeats this daemon sent to its coordinator, by "
                      "outcome")
                .Register(*registry_)),
        heartbeats_received_(
            prometheus::BuildCounter()
                .Name("rankd_heartbeats_received_total")
                .Help("Heartbeats the coordinator received from node "
                      "daemons, by outcome (coordinator only)")
                .Register(*registry_)),
        ranks_lost_(prometheus::BuildCounter()
                        .Name("rankd_ranks_lost_total")
                        .Help("Ranks declared lost (their process, "
                              "connection or node died)")
                        .Register(*registry_)
                        .Add({})),
        nodes_lost_(prometheus::BuildCounter()
                        .Name("rankd_nodes_lost_total")
                        .Help("Node daemons declared lost")
                        .Register(*registry_)
                        .Add({})),
        events_(prometheus::BuildCounter()
                    .Name("rankd_job_events_total")
                    .Help("Job membership events seen by this daemon, by kind")
                    .Register(*registry_)) {
    // Zero series for the common outcomes, so rates exist before the first
    // event.
    rounds_.Add({{"code", "OK"}});
    round_seconds_.Add({}, LatencyBuckets());
    for (const char* op : {"set", "get", "add", "delete"}) {
      kv_ops_.Add({{"op", op}, {"code", "OK"}});
      kv_seconds_.Add({{"op", op}}, LatencyBuckets());
    }
    heartbeats_sent_.Add({{"code", "OK"}});
    heartbeats_received_.Add({{"code", "OK"}});
  }

  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  void ObserveRound(absl::StatusCode code, absl::Duration elapsed) {
    rounds_.Add({{"code", CodeName(code)}}).Increment();
    if (code == absl::StatusCode::kOk) {
      round_seconds_.Add({}, LatencyBuckets())
          .Observe(absl::ToDoubleSeconds(elapsed));
    }
  }

  void ObserveRpc(absl::string_view method, absl::StatusCode code,
                  absl::Duration elapsed) {
    const std::string code_name = CodeName(code);
    const double seconds = absl::ToDoubleSeconds(elapsed);
    if (absl::ConsumePrefix(&method, kRankService)) {
      // A caller chooses the path: only the service's own methods get a
      // label of their own, so labels stay bounded.
      rank_rpcs_
          .Add({{"method", IsRankMethod(method) ? std::string(method)
                                                : std::string("unknown")},
                {"code", code_name}})
          .Increment();
      if (method == "AllGatherWords") {
        ObserveRound(code, elapsed);
        return;
      }
      static const auto* const kKvOps =
          new std::map<std::string, std::string>{{"KvSet", "set"},
                                                 {"KvGet", "get"},
                                                 {"KvAdd", "add"},
                                                 {"KvDelete", "delete"},
                                                 {"KvCount", "count"}};
      auto op = kKvOps->find(std::string(method));
      if (op != kKvOps->end()) {
        kv_ops_.Add({{"op", op->second}, {"code", code_name}}).Increment();
        kv_seconds_.Add({{"op", op->second}}, LatencyBuckets())
            .Observe(seconds);
      }
      return;
    }
    if (absl::ConsumePrefix(&method, kPeerService) && method == "Heartbeat") {
      heartbeats_received_.Add({{"code", code_name}}).Increment();
    }
  }

  void ObserveHeartbeatSent(absl::StatusCode code) {
    heartbeats_sent_.Add({{"code", CodeName(code)}}).Increment();
  }

  void ObserveEvent(const v1::JobEvent& event) {
    events_.Add({{"kind", EventKindName(event.kind())}}).Increment();
    switch (event.kind()) {
      case v1::EVENT_KIND_MEMBER_LOST:
        ranks_lost_.Increment(std::max(1, event.ranks_size()));
        break;
      case v1::EVENT_KIND_NODE_LOST:
        nodes_lost_.Increment();
        ranks_lost_.Increment(event.ranks_size());
        break;
      default:
        break;
    }
  }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& rounds_;
  prometheus::Family<prometheus::Histogram>& round_seconds_;
  prometheus::Family<prometheus::Counter>& kv_ops_;
  prometheus::Family<prometheus::Histogram>& kv_seconds_;
  prometheus::Family<prometheus::Counter>& rank_rpcs_;
  prometheus::Family<prometheus::Counter>& heartbeats_sent_;
  prometheus::Family<prometheus::Counter>& heartbeats_received_;
  prometheus::Counter& ranks_lost_;
  prometheus::Counter& nodes_lost_;
  prometheus::Family<prometheus::Counter>& events_;
};

// Gauges computed from the daemon's view of the job at scrape time.
class DaemonMetrics::SnapshotCollector : public prometheus::Collectable {
 public:
  SnapshotCollector(Identity identity, std::function<JobSnapshot()> snapshot)
      : identity_(std::move(identity)), snapshot_(std::move(snapshot)) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    const JobSnapshot s = snapshot_();
    const v1::JobStatus& job = s.job;
    std::vector<prometheus::MetricFamily> out;

    auto info = GaugeFamily(
        "rankd_info",
        "Identity of this daemon (always 1): job id, node index, whether it "
        "coordinates, job incarnation");
    info.metric.push_back(
        Gauge(1, {{"job_id", identity_.job_id},
                  {"node", absl::StrCat(identity_.node_index)},
                  {"coordinator", identity_.coordinator ? "true" : "false"},
                  {"job_incarnation", absl::StrCat(job.job_incarnation())}}));
    out.push_back(std::move(info));

    auto ready = GaugeFamily(
        "rankd_ready",
        "1 when this node is registered with the coordinator and the job has "
        "not failed (the readiness probe)");
    ready.metric.push_back(Gauge(s.ready ? 1 : 0));
    out.push_back(std::move(ready));

    auto state = GaugeFamily(
        "rankd_job_state",
        "1 for the job's current state (FORMING, READY, RECOVERING, FAILED, "
        "DRAINING, COMPLETED)");
    const auto* job_states = v1::JobState_descriptor();
    for (int i = 0; i < job_states->value_count(); ++i) {
      const auto* value = job_states->value(i);
      if (value->number() == v1::JOB_STATE_UNSPECIFIED) continue;
      state.metric.push_back(
          Gauge(job.state() == value->number() ? 1 : 0,
                {{"state", EnumSuffix(value->name(), "JOB_STATE_")}}));
    }
    out.push_back(std::move(state));

    auto scalar = [&out](std::string name, std::string help, double value) {
      auto f = GaugeFamily(std::move(name), std::move(help));
      f.metric.push_back(Gauge(value));
      out.push_back(std::move(f));
    };
    scalar("rankd_job_epoch",
           "The job's epoch: 1 when it forms, +1 at each loss it recovers "
           "from (--recovery)",
           static_cast<double>(job.epoch()));
    scalar("rankd_job_world_size", "Ranks in the job", job.world_size());
    scalar("rankd_job_nodes", "Nodes (daemons) in the job", job.nnodes());
    scalar("rankd_job_ranks_joined", "Ranks that have joined the job",
           job.joined_ranks());
    scalar("rankd_job_nodes_registered",
           "Nodes registered with the coordinator", job.registered_nodes());
    scalar("rankd_job_rounds_completed",
           "Highest all_gather_words round completed job-wide",
           static_cast<double>(job.completed_rounds()));
    scalar("rankd_job_uptime_seconds",
           "Seconds since this daemon's view of the job started",
           static_cast<double>(job.uptime_ms()) / 1000.0);

    std::map<int, int> member_states;
    for (const v1::MemberStatus& m : s.members.members()) {
      ++member_states[m.state()];
    }
    auto members = GaugeFamily(
        "rankd_members",
        "Ranks of the job by state (NOT_JOINED, JOINED, IN_ROUND, LOST, "
        "LEFT), as this daemon sees them");
    const auto* states = v1::MemberState_descriptor();
    for (int i = 0; i < states->value_count(); ++i) {
      const auto* value = states->value(i);
      if (value->number() == v1::MEMBER_STATE_UNSPECIFIED) continue;
      members.metric.push_back(
          Gauge(member_states[value->number()],
                {{"state", EnumSuffix(value->name(), "MEMBER_STATE_")}}));
    }
    out.push_back(std::move(members));

    std::map<int, int> node_states;
    auto ages = GaugeFamily(
        "rankd_node_heartbeat_age_seconds",
        "Seconds since the coordinator last heard from each node (on the "
        "coordinator; absent where unknown)");
    for (const v1::NodeStatus& n : s.members.nodes()) {
      ++node_states[n.state()];
      if (n.heartbeat_age_ms() >= 0) {
        ages.metric.push_back(
            Gauge(static_cast<double>(n.heartbeat_age_ms()) / 1000.0,
                  {{"node", absl::StrCat(n.node_index())}}));
      }
    }
    auto nodes = GaugeFamily(
        "rankd_nodes",
        "Nodes of the job by state (NOT_REGISTERED, REGISTERED, LOST, LEFT)");
    const auto* nstates = v1::NodeState_descriptor();
    for (int i = 0; i < nstates->value_count(); ++i) {
      const auto* value = nstates->value(i);
      if (value->number() == v1::NODE_STATE_UNSPECIFIED) continue;
      nodes.metric.push_back(
          Gauge(node_states[value->number()],
                {{"state", EnumSuffix(value->name(), "NODE_STATE_")}}));
    }
    out.push_back(std::move(nodes));
    out.push_back(std::move(ages));
    return out;
  }

 private:
  const Identity identity_;
  const std::function<JobSnapshot()> snapshot_;
};

namespace {

// Times one Rank or Peer call and reports its status when it is sent.
class RpcInterceptor : public grpc::experimental::Interceptor {
 public:
  RpcInterceptor(std::string method, DaemonMetrics* metrics)
      : method_(std::move(method)), metrics_(metrics), start_(MonotonicNow()) {}

  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status status = methods->GetSendStatus();
      metrics_->ObserveRpc(method_,
                           static_cast<absl::StatusCode>(status.error_code()),
                           MonotonicNow() - start_);
    }
    methods->Proceed();
  }

 private:
  const std::string method_;
  DaemonMetrics* const metrics_;
  const absl::Time start_;
};

class RpcInterceptorFactory
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit RpcInterceptorFactory(DaemonMetrics* metrics) : metrics_(metrics) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    const char* method = info->method();
    if (method == nullptr) return nullptr;
    if (!absl::StartsWith(method, kRankService) &&
        !absl::StartsWith(method, kPeerService)) {
      return nullptr;  // Admin, health and reflection calls are not counted.
    }
    return new RpcInterceptor(method, metrics_);
  }

 private:
  DaemonMetrics* const metrics_;
};

}  // namespace

DaemonMetrics::DaemonMetrics(Identity identity,
                             std::function<JobSnapshot()> snapshot)
    : instruments_(std::make_shared<Instruments>()),
      collector_(std::make_shared<SnapshotCollector>(std::move(identity),
                                                     std::move(snapshot))) {}

DaemonMetrics::~DaemonMetrics() {
  // Stop serving (and scraping) before the collectors go away.
  endpoint_.reset();
}

absl::Status DaemonMetrics::Serve(const std::string& address,
                                  HttpOptions options) {
  auto endpoint = HttpEndpoint::Start(
      address, options, [this] { return Render(); }, &http_counters_);
  if (!endpoint.ok()) return endpoint.status();
  endpoint_ = *std::move(endpoint);
  port_ = endpoint_->port();
  return absl::OkStatus();
}

std::string DaemonMetrics::Render() const {
  std::vector<prometheus::MetricFamily> families = collector_->Collect();
  for (prometheus::MetricFamily& f : instruments_->registry()->Collect()) {
    families.push_back(std::move(f));
  }
  // The endpoint's own: what floods of connections cost it.
  families.push_back(CounterFamily(
      "rankd_metrics_connections_displaced_total",
      "metrics connections closed to make room for newer ones "
      "(--metrics_max_connections, --metrics_max_connections_per_address)",
      http_counters_.displaced));
  families.push_back(
      CounterFamily("rankd_metrics_connections_timed_out_total",
                    "metrics connections closed at their deadline "
                    "(--metrics_request_timeout_ms)",
                    http_counters_.timed_out));
  families.push_back(CounterFamily(
      "rankd_metrics_accept_backoffs_total",
      "times accept failed with an error not of one connection (EMFILE, "
      "ENFILE, ENOBUFS, ENOMEM or any other) and the metrics endpoint "
      "paused accepting",
      http_counters_.accept_backoffs));
  return prometheus::TextSerializer().Serialize(families);
}

void DaemonMetrics::ObserveRpc(absl::string_view method, absl::StatusCode code,
                               absl::Duration elapsed) {
  instruments_->ObserveRpc(method, code, elapsed);
}

void DaemonMetrics::ObserveRound(absl::StatusCode code,
                                 absl::Duration elapsed) {
  instruments_->ObserveRound(code, elapsed);
}

void DaemonMetrics::ObserveHeartbeatSent(absl::StatusCode code) {
  instruments_->ObserveHeartbeatSent(code);
}

void DaemonMetrics::ObserveEvent(const v1::JobEvent& event) {
  instruments_->ObserveEvent(event);
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
DaemonMetrics::MakeInterceptorFactory() {
  return std::make_unique<RpcInterceptorFactory>(this);
}

}  // namespace rankd
