// Unit tests of the serving example's pure parts: model spec, request
// streams, batch frames, shard math against the reference, expert dispatch
// plans, the self-check and the report; what recovery adds (the step to
// resume at, the request ledger); what recovery by replica adds (the world
// round by replica, its tally, the last stage's own check). The
// multi-process run (real
// daemons, Gloo) is //tests:run_sh_test.
#include <cmath>
#include <cstdint>
#include <set>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "common/topology.h"
#include "examples/serving/batch_agreement.h"
#include "examples/serving/collectives.h"
#include "examples/serving/forward_step.h"
#include "examples/serving/layout.h"
#include "examples/serving/model_shard.h"
#include "examples/serving/model_spec.h"
#include "examples/serving/moe_dispatch.h"
#include "examples/serving/reference_model.h"
#include "examples/serving/replica_check.h"
#include "examples/serving/replica_round.h"
#include "examples/serving/replica_tally.h"
#include "examples/serving/report.h"
#include "examples/serving/request_ledger.h"
#include "examples/serving/request_stream.h"
#include "examples/serving/resume_agreement.h"
#include "examples/serving/self_check.h"
#include "gtest/gtest.h"

namespace rankd::examples {
namespace {

ServingLayout MakeLayout(ParallelTopology topology, uint32_t rank) {
  ServingLayout l;
  l.topology = topology;
  l.world_size =
      topology.tensor * topology.pipeline * topology.expert * topology.data;
  l.rank = rank;
  l.nnodes = 1;
  l.coords = CoordinatesOf(topology, rank);
  l.tensor_group = 2;
  l.pipeline_group = 3;
  l.expert_group = 4;
  return l;
}

ModelSpec SpecFor(ParallelTopology topology) {
  auto spec =
      ModelSpecFor(topology, ModelSpec{.ffn = 0, .layers = 0, .experts = 0});
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

// A step plan with the next batch of every slot's stream.
StepPlan NextPlan(std::vector<RequestStream>& streams, uint32_t step) {
  StepPlan plan;
  plan.step = step;
  for (RequestStream& s : streams) plan.slots.push_back(s.Next());
  return plan;
}

TEST(ModelSpecTest, DefaultsRoundUpToTheLayout) {
  auto spec = ModelSpecFor({.tensor = 3, .pipeline = 3, .expert = 3},
                           ModelSpec{.ffn = 0, .layers = 0, .experts = 0});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->ffn, 129u);
  EXPECT_EQ(spec->layers, 3u);
  EXPECT_EQ(spec->experts, 6u);
}

TEST(ModelSpecTest, ExplicitValueThatDoesNotDivideIsRefused) {
  auto spec = ModelSpecFor({.tensor = 2, .pipeline = 1, .expert = 1},
                           ModelSpec{.ffn = 7});
  ASSERT_FALSE(spec.ok());
  EXPECT_TRUE(absl::StrContains(spec.status().message(), "--ffn=7"))
      << spec.status();
}

TEST(RequestStreamTest, DeterministicBoundedAndUniqueIds) {
  RequestStream a(7, 1, 3), b(7, 1, 3), other(7, 2, 3);
  std::set<uint32_t> ids_a, ids_other;
  size_t tokens = 0;
  for (int step = 0; step < 200; ++step) {
    const SlotBatch x = a.Next();
    EXPECT_EQ(x, b.Next());
    EXPECT_LE(x.requests.size(), kMaxRequestsPerStep);
    tokens += x.tokens();
    for (const RequestSlice& r : x.requests) {
      EXPECT_GT(r.count, 0u);
      EXPECT_EQ(r.request_id % 3, 2u);  // id = local * slots + slot + 1
      ids_a.insert(r.request_id);
    }
    for (const RequestSlice& r : other.Next().requests) {
      ids_other.insert(r.request_id);
    }
  }
  EXPECT_GT(tokens, 200u);
  for (uint32_t id : ids_a) EXPECT_EQ(ids_other.count(id), 0u);
}

TEST(BatchAgreementTest, FramesRoundTrip) {
  const ServingLayout layout =
      MakeLayout({.tensor = 2, .pipeline = 2, .expert = 2}, 0);
  std::vector<RequestStream> streams;
  for (uint32_t s = 0; s < layout.num_slots(); ++s)
    streams.emplace_back(1, s, 2);
  streams[0].Next();  // make the slots differ
  const StepPlan want = NextPlan(streams, 4);
  std::vector<uint32_t> words;
  for (uint32_t r = 0; r < layout.world_size; ++r) {
    const RankCoordinates c = CoordinatesOf(layout.topology, r);
    const uint32_t slot = layout.SlotOf(c.data, c.expert);
    const bool scheduler = layout.SchedulerOf(slot) == r;
    const auto f = EncodeFrame(4, scheduler ? &want.slots[slot] : nullptr,
                               /*stop=*/r == 3, /*drain=*/r == 5 || r == 6);
    ASSERT_EQ(f.size(), kFrameWords);
    words.insert(words.end(), f.begin(), f.end());
  }
  auto plan = DecodeFrames(layout, 4, words);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->slots, want.slots);
  EXPECT_EQ(plan->stop_requested_by, std::vector<uint32_t>{3});
  EXPECT_EQ(plan->drain_requested_by, (std::vector<uint32_t>{5, 6}));

  // A rank at another step is named.
  std::vector<uint32_t> skewed = words;
  skewed[5 * kFrameWords + 1] = 3;
  auto bad = DecodeFrames(layout, 4, skewed);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "ranks 5 are at"))
      << bad.status();
  // A non-scheduler claiming a batch is refused.
  std::vector<uint32_t> claimed = words;
  claimed[2 * kFrameWords + 2] |= kFlagScheduler;  // rank 2: t1, not one
  EXPECT_FALSE(DecodeFrames(layout, 4, claimed).ok());
}

TEST(ModelShardTest, TensorSlicesSumToTheFullMlp) {
  const ParallelTopology tp4{.tensor = 4};
  const ModelSpec spec = SpecFor(tp4);
  const ServingLayout whole = MakeLayout({}, 0);
  const ModelShard full(spec, whole);
  Matrix x = Matrix::Zeros(3, spec.hidden);
  for (size_t i = 0; i < x.values.size(); ++i) x.values[i] = std::sin(i * 0.1f);
  const Matrix want = full.MlpPartial(0, x);
  Matrix sum = Matrix::Zeros(3, spec.hidden);
  for (uint32_t t = 0; t < 4; ++t) {
    const Matrix part = ModelShard(spec, MakeLayout(tp4, t)).MlpPartial(0, x);
    for (size_t i = 0; i < sum.values.size(); ++i)
      sum.values[i] += part.values[i];
  }
  for (size_t i = 0; i < sum.values.size(); ++i) {
    EXPECT_NEAR(sum.values[i], want.values[i], 1e-5) << i;
  }
}

// The whole model on one rank (no collective needed) equals the reference.
class NoCollectives : public Collectives {
 public:
  const char* backend() const override { return "none"; }
  uint64_t epoch() const override { return 1; }
  absl::Status Reform(absl::Duration) override {
    return absl::UnimplementedError("none");
  }
  absl::StatusOr<std::vector<uint32_t>> AllGatherWords(
      absl::Span<const uint32_t>) override {
    return absl::UnimplementedError("none");
  }
  absl::Status AllReduceSum(uint32_t, Matrix&) override {
    return absl::UnimplementedError("none");
  }
  absl::StatusOr<Matrix> AllToAllV(uint32_t, const Matrix&,
                                   absl::Span<const size_t>,
                                   absl::Span<const size_t>) override {
    return absl::UnimplementedError("none");
  }
  absl::Status Send(uint32_t, size_t, const Matrix&) override {
    return absl::UnimplementedError("none");
  }
  absl::StatusOr<Matrix> Receive(uint32_t, size_t, size_t, size_t) override {
    return absl::UnimplementedError("none");
  }
  absl::StatusOr<Matrix> AllGather(const Matrix&) override {
    return absl::UnimplementedError("none");
  }
};

TEST(ForwardStepTest, OneRankMatchesTheReference) {
  const ServingLayout layout = MakeLayout({}, 0);
  const ModelSpec spec = SpecFor({});
  const ModelShard shard(spec, layout);
  const ReferenceModel reference(spec);
  std::vector<RequestStream> streams;
  streams.emplace_back(spec.seed, 0, 1);
  NoCollectives none;
  for (uint32_t step = 1; step <= 5; ++step) {
    const StepPlan plan = NextPlan(streams, step);
    auto out = ForwardStep(none, shard, layout, plan);
    ASSERT_TRUE(out.ok()) << out.status();
    const Matrix want = reference.Forward(plan.slots[0]);
    ASSERT_EQ(out->rows, want.rows);
    for (size_t i = 0; i < want.values.size(); ++i) {
      EXPECT_NEAR(out->values[i], want.values[i], 1e-5);
    }
  }
}

TEST(MoeDispatchTest, SendsMatchReceivesAcrossTheExpertGroup) {
  const ParallelTopology topology{.tensor = 1, .pipeline = 1, .expert = 4};
  const ModelSpec spec = SpecFor(topology);
  std::vector<RequestStream> streams;
  for (uint32_t s = 0; s < 4; ++s) streams.emplace_back(spec.seed, s, 4);
  for (uint32_t step = 1; step <= 10; ++step) {
    const StepPlan plan = NextPlan(streams, step);
    std::vector<DispatchPlan> plans;
    for (uint32_t e = 0; e < 4; ++e) {
      const ServingLayout l = MakeLayout(topology, e);
      plans.push_back(PlanDispatch(ModelShard(spec, l), l, plan, 0));
    }
    for (uint32_t m = 0; m < 4; ++m) {
      EXPECT_EQ(plans[m].send_order.size(), plan.slots[m].tokens());
      for (uint32_t n = 0; n < 4; ++n) {
        EXPECT_EQ(plans[m].send_counts[n], plans[n].receive_counts[m]);
      }
      for (uint32_t expert : plans[m].received_experts) {
        EXPECT_EQ(expert / (spec.experts / 4), m);
      }
    }
  }
}

TEST(SelfCheckTest, PassesOnTheReferenceAndNamesACorruptedValue) {
  const ParallelTopology topology{.tensor = 2, .pipeline = 1, .expert = 1};
  const ServingLayout layout = MakeLayout(topology, 0);
  const ModelSpec spec = SpecFor(topology);
  const ReferenceModel reference(spec);
  SelfCheck check(spec, layout, Tolerance{});
  std::vector<RequestStream> streams;
  streams.emplace_back(spec.seed, 0, 1);
  for (uint32_t step = 1; step <= 3; ++step) {
    const StepPlan plan = NextPlan(streams, step);
    const size_t rows = plan.max_slot_tokens();
    const Matrix out = reference.Forward(plan.slots[0]);
    // Both tensor ranks (0 and 1) hold the slot's outputs.
    Matrix gathered = Matrix::Zeros(2 * rows, spec.hidden);
    std::copy(out.values.begin(), out.values.end(), gathered.values.begin());
    std::copy(out.values.begin(), out.values.end(), gathered.row(rows));
    if (step == 3 && rows > 0) gathered.row(rows)[5] += 0.01f;
    const StepCheck result = check.Check(plan, gathered, rows);
    if (step < 3 || rows == 0) {
      EXPECT_TRUE(result.status.ok()) << result.status;
      EXPECT_EQ(result.max_abs_error, 0.0);
    } else {
      ASSERT_FALSE(result.status.ok());
      EXPECT_TRUE(absl::StrContains(result.status.message(),
                                    "output of rank 1 (d0 p0 t1 e0), token 0"))
          << result.status;
      EXPECT_TRUE(absl::StrContains(result.status.message(), "element 5"));
    }
  }
}

TEST(SelfCheckTest, NamesADivergedBatch) {
  const ServingLayout layout = MakeLayout({}, 0);
  const ModelSpec spec = SpecFor({});
  SelfCheck check(spec, layout, Tolerance{});
  std::vector<RequestStream> streams;
  streams.emplace_back(spec.seed + 1, 0, 1);  // another seed: other traffic
  const StepPlan plan = NextPlan(streams, 1);
  const StepCheck result =
      check.Check(plan, Matrix::Zeros(plan.max_slot_tokens(), spec.hidden),
                  plan.max_slot_tokens());
  ASSERT_FALSE(result.status.ok());
  EXPECT_TRUE(
      absl::StrContains(result.status.message(), "its request stream has"))
      << result.status;
}

// A replaced rank 0 checks from the step the job resumed at.
TEST(SelfCheckTest, SkipToStartsAtTheResumedStep) {
  const ServingLayout layout = MakeLayout({}, 0);
  const ModelSpec spec = SpecFor({});
  const ReferenceModel reference(spec);
  SelfCheck check(spec, layout, Tolerance{});
  check.SkipTo(4);
  std::vector<RequestStream> streams;
  streams.emplace_back(spec.seed, 0, 1);
  for (uint32_t step = 1; step < 4; ++step) NextPlan(streams, step);
  const StepPlan plan = NextPlan(streams, 4);
  const StepCheck result = check.Check(plan, reference.Forward(plan.slots[0]),
                                       plan.max_slot_tokens());
  EXPECT_TRUE(result.status.ok()) << result.status;
}

std::vector<uint32_t> ResumeWords(
    const std::vector<std::pair<uint32_t, uint64_t>>& frames) {
  std::vector<uint32_t> words;
  for (const auto& [step, epoch] : frames) {
    const std::vector<uint32_t> f = EncodeResumeFrame(step, epoch);
    words.insert(words.end(), f.begin(), f.end());
  }
  return words;
}

TEST(ResumeAgreementTest, ReplacementsLearnTheSurvivorsStep) {
  auto step = DecodeResumeFrames(
      4, 2, ResumeWords({{10, 2}, {kUnknownStep, 2}, {10, 2}, {10, 2}}));
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(*step, 10u);
}

TEST(ResumeAgreementTest, RefusesDisagreementAndNamesTheRanks) {
  auto step = DecodeResumeFrames(
      5, 3, ResumeWords({{10, 3}, {10, 3}, {11, 3}, {10, 3}, {0, 3}}));
  ASSERT_FALSE(step.ok());
  EXPECT_EQ(step.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(
      absl::StrContains(step.status().message(),
                        "step 10 from ranks 0-1, 3; step 11 from rank 2"))
      << step.status();

  step = DecodeResumeFrames(2, 2, ResumeWords({{0, 2}, {0, 2}}));
  ASSERT_FALSE(step.ok());
  EXPECT_TRUE(absl::StrContains(step.status().message(), "no rank knows"))
      << step.status();

  step = DecodeResumeFrames(2, 2, ResumeWords({{4, 2}, {4, 1}}));
  ASSERT_FALSE(step.ok());
  EXPECT_TRUE(
      absl::StrContains(step.status().message(), "rank 1 are at another epoch"))
      << step.status();

  std::vector<uint32_t> words = ResumeWords({{4, 2}, {4, 2}});
  words[3] = 0;  // rank 1's magic
  step = DecodeResumeFrames(2, 2, words);
  ASSERT_FALSE(step.ok());
  EXPECT_TRUE(absl::StrContains(step.status().message(),
                                "malformed frames from rank 1"))
      << step.status();
  step = DecodeResumeFrames(3, 2, ResumeWords({{4, 2}, {4, 2}}));
  EXPECT_FALSE(step.ok());

  // The frames of ranks 4 and 5 (a replica resuming alone).
  step = DecodeResumeFrames(2, 2, ResumeWords({{4, 2}, {4, 1}}),
                            /*first_rank=*/4);
  ASSERT_FALSE(step.ok());
  EXPECT_TRUE(
      absl::StrContains(step.status().message(), "rank 5 are at another epoch"))
      << step.status();
}

StepPlan PlanOf(uint32_t step, std::vector<std::vector<RequestSlice>> slots) {
  StepPlan plan;
  plan.step = step;
  for (auto& requests : slots) plan.slots.push_back({std::move(requests)});
  return plan;
}

TEST(RequestLedgerTest, CountsServedInFlightReRunAndLost) {
  RequestLedger ledger;
  ledger.Completed(PlanOf(1, {{{1, 0, 4}}, {{2, 0, 3}}}));
  ledger.Completed(PlanOf(2, {{{1, 4, 1}, {3, 0, 2}}, {{2, 3, 1}}}));
  EXPECT_EQ(ledger.served(), 3u);
  // Step 3 is interrupted with 3 requests in flight; a second loss during
  // its re-run counts them once.
  const StepPlan third = PlanOf(3, {{{1, 5, 1}, {3, 2, 1}}, {{2, 4, 1}}});
  ledger.Interrupted(third);
  ledger.Interrupted(third);
  EXPECT_EQ(ledger.in_flight(), 3u);
  EXPECT_EQ(ledger.lost(), 3u);  // not served again yet
  ledger.Completed(third);
  EXPECT_EQ(ledger.rerun(), 3u);
  EXPECT_EQ(ledger.lost(), 0u);
  EXPECT_EQ(ledger.served(), 3u);

  // A re-run that misses a request (or serves other tokens of it) loses it.
  const StepPlan fourth = PlanOf(4, {{{1, 6, 1}, {5, 0, 3}}, {{2, 5, 1}}});
  ledger.Interrupted(fourth);
  ledger.Completed(PlanOf(4, {{{1, 6, 1}}, {{2, 5, 2}}}));
  EXPECT_EQ(ledger.in_flight(), 6u);
  EXPECT_EQ(ledger.rerun(), 4u);
  EXPECT_EQ(ledger.lost(), 2u);
}

TEST(ReportTest, SummaryCountsRequestsAndRecoveries) {
  RunSummary summary;
  summary.layout = MakeLayout({}, 0);
  summary.requests = 37;
  std::string table = SummaryTable(summary);
  EXPECT_TRUE(absl::StrContains(table, "requests      37 served\n")) << table;
  summary.recoveries = 1;
  summary.requests_in_flight = 6;
  summary.requests_rerun = 6;
  table = SummaryTable(summary);
  EXPECT_TRUE(absl::StrContains(
      table,
      "37 served; 1 loss recovered in place: 6 in flight at the loss, 6 "
      "re-run, 0 lost"))
      << table;
}

TEST(ReportTest, PercentilesAndReportsRoundTrip) {
  std::vector<absl::Duration> samples;
  for (int i = 1; i <= 100; ++i) samples.push_back(absl::Milliseconds(i));
  EXPECT_EQ(Percentile(samples, 0.5), absl::Milliseconds(50));
  EXPECT_EQ(Percentile(samples, 0.99), absl::Milliseconds(99));
  EXPECT_EQ(Percentile({}, 0.5), absl::ZeroDuration());

  CollectiveStats stats;
  stats.Record(CollectiveKind::kAllToAllV, absl::Microseconds(300));
  stats.Record(CollectiveKind::kAllToAllV, absl::Microseconds(500));
  std::vector<uint32_t> words = EncodeReport(stats, 42, false);
  const std::vector<uint32_t> second = EncodeReport(CollectiveStats{}, 7, true);
  words.insert(words.end(), second.begin(), second.end());
  auto reports = DecodeReports(words, 2);
  ASSERT_TRUE(reports.ok()) << reports.status();
  const auto& a2a =
      (*reports)[0].kinds[static_cast<size_t>(CollectiveKind::kAllToAllV)];
  EXPECT_EQ(a2a.calls, 2u);
  EXPECT_EQ(a2a.total_us, 800u);
  EXPECT_EQ(a2a.max_us, 500u);
  EXPECT_EQ((*reports)[0].tokens, 42u);
  EXPECT_EQ((*reports)[1].failed, 1u);
  EXPECT_FALSE(DecodeReports(words, 3).ok());

  // A long-running server's totals pass 2^32 microseconds (71 minutes).
  CollectiveStats day;
  day.Record(CollectiveKind::kAllGatherWords, absl::Hours(25));
  auto long_run = DecodeReports(EncodeReport(day, 1, false), 1);
  ASSERT_TRUE(long_run.ok()) << long_run.status();
  EXPECT_EQ((*long_run)[0].kinds[0].total_us, uint64_t{25} * 3600 * 1000000);

  RunSummary summary;
  summary.layout = MakeLayout({.tensor = 2}, 0);
  summary.spec = SpecFor({.tensor = 2});
  summary.backend = "gloo";
  summary.steps = 100;
  summary.tokens = 12345;
  summary.wall = absl::Seconds(2);
  summary.latency = samples;
  summary.ranks = *reports;
  const std::string table = SummaryTable(summary);
  EXPECT_TRUE(absl::StrContains(table, "6,172 tokens/s")) << table;
  EXPECT_TRUE(absl::StrContains(table, "p50 50.00 ms, p99 99.00 ms")) << table;
  EXPECT_TRUE(absl::StrContains(table, "all_to_all_v")) << table;
  EXPECT_FALSE(absl::StrContains(table, "last ")) << table;

  // Serving until stopped: no step count in the progress line, and the
  // latency of the most recent steps only.
  EXPECT_EQ(ProgressLine(20, 0, 412, absl::Seconds(1), "8/8 up"),
            "PROGRESS step 20  tokens 412  412 tokens/s  ranks 8/8 up");
  EXPECT_EQ(ProgressLine(20, 50, 412, absl::Seconds(1), "8/8 up"),
            "PROGRESS step 20/50  tokens 412  412 tokens/s  ranks 8/8 up");
  summary.steps = 150000;
  EXPECT_TRUE(absl::StrContains(SummaryTable(summary),
                                "(rank 0, last 100 steps, agreement"))
      << SummaryTable(summary);
}

// Recovery by replica: world 4 = 2 replicas (dp2) of a pp2 pipeline.
constexpr ParallelTopology kTwoReplicas = {.pipeline = 2, .data = 2};

// Replica d's slot (d) batch at `step`: request ids grow with the step.
SlotBatch ReplicaBatch(uint32_t replica, uint32_t step) {
  return SlotBatch{{{replica * 100 + step, 0, replica + 1}}};
}

// The frames of both ranks of `replica` (rank 2d schedules its slot).
std::vector<uint32_t> ReplicaWords(uint32_t replica, ReplicaFrame::Kind kind,
                                   uint32_t step,
                                   std::vector<uint32_t> out = {},
                                   CheckCounts last_stage_checks = {},
                                   uint64_t last_stage_generation = 1) {
  const SlotBatch batch = ReplicaBatch(replica, step);
  for (uint32_t i = 0; i < 2; ++i) {
    ReplicaFrame f;
    f.kind = kind;
    f.step = step;
    f.batch = i == 0 ? &batch : nullptr;
    f.epoch = replica + 1;
    if (i == 1) {
      f.checks = last_stage_checks;
      f.generation = last_stage_generation;
      f.epoch = std::max<uint64_t>(f.epoch, last_stage_generation);
    }
    f.tokens = 10 * replica + i;
    const std::vector<uint32_t> w = EncodeReplicaFrame(f);
    out.insert(out.end(), w.begin(), w.end());
  }
  return out;
}

ReplicaRound Decoded(bool partial, std::vector<uint32_t> replicas,
                     std::vector<uint64_t> epochs,
                     const std::vector<uint32_t>& words) {
  auto round = DecodeReplicaRound(MakeLayout(kTwoReplicas, 0), partial,
                                  replicas, epochs, words);
  EXPECT_TRUE(round.ok()) << round.status();
  return round.ok() ? *round : ReplicaRound{};
}

TEST(ReplicaRoundTest, EachReplicaAgreesOnItsOwnStep) {
  CheckCounts checks{
      .passed = 6, .failed = 0, .values = 1ull << 33, .max_abs_error = 0.25f};
  std::vector<uint32_t> words =
      ReplicaWords(0, ReplicaFrame::Kind::kStep, 7, {}, checks);
  words = ReplicaWords(1, ReplicaFrame::Kind::kStep, 3, words);
  ASSERT_EQ(words.size(), 4 * kReplicaFrameWords);
  const ReplicaRound round = Decoded(false, {0, 1}, {1, 2}, words);
  ASSERT_EQ(round.replicas.size(), 2u);
  EXPECT_EQ(round.replicas[0].plan.step, 7u);
  EXPECT_EQ(round.replicas[0].plan.slots[0], ReplicaBatch(0, 7));
  EXPECT_TRUE(round.replicas[0].plan.slots[1].requests.empty());
  EXPECT_EQ(round.replicas[1].plan.step, 3u);
  EXPECT_EQ(round.replicas[1].plan.slots[1], ReplicaBatch(1, 3));
  EXPECT_EQ(round.replicas[1].epoch, 2u);
  ASSERT_EQ(round.ranks.size(), 4u);
  EXPECT_EQ(round.ranks[1].checks.passed, 6u);
  EXPECT_EQ(round.ranks[1].checks.values, 1ull << 33);
  EXPECT_EQ(round.ranks[1].checks.max_abs_error, 0.25f);
  EXPECT_EQ(round.ranks[3].report.tokens, 11u);
  EXPECT_FALSE(round.AllIdle());

  // A partial round holds the serving replicas only.
  const ReplicaRound partial =
      Decoded(true, {1}, {2}, ReplicaWords(1, ReplicaFrame::Kind::kIdle, 3));
  EXPECT_TRUE(partial.partial);
  EXPECT_EQ(partial.Find(0), nullptr);
  ASSERT_NE(partial.Find(1), nullptr);
  EXPECT_EQ(partial.Find(1)->step, 3u);
  EXPECT_TRUE(partial.AllIdle());
}

TEST(ReplicaRoundTest, RefusesAReplicaThatDisagrees) {
  std::vector<uint32_t> words = ReplicaWords(0, ReplicaFrame::Kind::kStep, 1);
  std::vector<uint32_t> other = ReplicaWords(1, ReplicaFrame::Kind::kStep, 1);
  // Rank 3 idles while rank 2 serves step 1.
  other[kReplicaFrameWords + 2] |= kFlagIdle;
  words.insert(words.end(), other.begin(), other.end());
  auto round = DecodeReplicaRound(MakeLayout(kTwoReplicas, 0), false, {0, 1},
                                  {1, 1}, words);
  ASSERT_FALSE(round.ok());
  EXPECT_TRUE(absl::StrContains(round.status().message(),
                                "replica 1 disagrees: rank 2 sent a step "
                                "frame, rank 3 a idle frame"))
      << round.status();
  // The wrong number of words for the view.
  round =
      DecodeReplicaRound(MakeLayout(kTwoReplicas, 0), true, {0}, {1}, words);
  EXPECT_FALSE(round.ok());
}

TEST(ReplicaRoundTest, AReEnteringReplicaLearnsItsSurvivorsStep) {
  std::vector<uint32_t> words = ReplicaWords(0, ReplicaFrame::Kind::kStep, 9);
  std::vector<uint32_t> resume =
      ReplicaWords(1, ReplicaFrame::Kind::kResume, 4, {}, {}, 2);
  resume[1] = 4;                                  // the survivor, rank 2
  resume[kReplicaFrameWords + 1] = kUnknownStep;  // the replacement, rank 3
  resume[kFrameWords + 1] = 2;                    // both at epoch 2
  words.insert(words.end(), resume.begin(), resume.end());
  const ReplicaRound round = Decoded(false, {0, 1}, {1, 2}, words);
  ASSERT_NE(round.Find(1), nullptr);
  EXPECT_EQ(round.Find(1)->kind, ReplicaFrame::Kind::kResume);
  EXPECT_EQ(round.Find(1)->step, 4u);
  EXPECT_EQ(round.Find(0)->plan.step, 9u);

  // Replica 1's two ranks name different steps: the error names them as
  // the job's ranks 2 and 3, not as the replica's 0 and 1.
  words = ReplicaWords(0, ReplicaFrame::Kind::kStep, 9);
  resume[kReplicaFrameWords + 1] = 5;
  words.insert(words.end(), resume.begin(), resume.end());
  auto refused = DecodeReplicaRound(MakeLayout(kTwoReplicas, 0), false, {0, 1},
                                    {1, 2}, words);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::StrContains(refused.status().message(),
                                "replica 1: agreeing on the step to resume at "
                                "epoch 2: the survivors name different steps: "
                                "step 4 from rank 2; step 5 from rank 3"))
      << refused.status();
}

TEST(ReplicaTallyTest, CountsEachReplicaAndTheReRunOfItsInterruptedStep) {
  const ServingLayout layout = MakeLayout(kTwoReplicas, 0);
  ReplicaTally tally(layout);
  using Kind = ReplicaFrame::Kind;
  const auto both = [&](Kind k0, uint32_t s0, Kind k1, uint32_t s1,
                        CheckCounts c1 = {}, uint64_t g1 = 1) {
    std::vector<uint32_t> words =
        ReplicaWords(0, k0, s0, {}, {.passed = s0 - (k0 == Kind::kStep)});
    words = ReplicaWords(1, k1, s1, words, c1, g1);
    tally.Observe(Decoded(false, {0, 1}, {1, g1}, words));
  };
  const auto only_0 = [&](uint32_t s0) {
    tally.Observe(
        Decoded(true, {0}, {1},
                ReplicaWords(0, Kind::kStep, s0, {}, {.passed = s0 - 1})));
  };
  both(Kind::kStep, 1, Kind::kStep, 1);
  both(Kind::kStep, 2, Kind::kStep, 2, {.passed = 1});
  // Rank 3 is lost during step 2: replica 0 serves 3 and 4 alone.
  only_0(3);
  only_0(4);
  // Replica 1 re-enters at step 2 (its replacement of rank 3 checked
  // nothing yet), serves it again and step 3; replica 0 finishes at 5.
  both(Kind::kStep, 5, Kind::kResume, 2, {}, 2);
  both(Kind::kIdle, 5, Kind::kStep, 2, {}, 2);
  both(Kind::kIdle, 5, Kind::kStep, 3, {.passed = 1}, 2);
  both(Kind::kIdle, 5, Kind::kIdle, 3, {.passed = 2}, 2);

  const ReplicaSummary r0 = tally.Summary(0);
  EXPECT_EQ(r0.steps, 5u);
  EXPECT_EQ(r0.checked_steps, 5u);
  EXPECT_EQ(r0.steps_while_others_recovered, 2u);
  EXPECT_EQ(r0.recovered_meanwhile, "1");
  EXPECT_EQ(r0.recoveries, 0u);
  const ReplicaSummary r1 = tally.Summary(1);
  EXPECT_EQ(r1.steps, 3u);
  // Rank 3's first process checked step 1, its replacement steps 2 and 3.
  EXPECT_EQ(r1.checked_steps, 3u);
  EXPECT_EQ(r1.recoveries, 1u);
  EXPECT_EQ(r1.epoch, 2u);
  EXPECT_EQ(r1.first_rank, 2u);
  EXPECT_EQ(r1.last_rank, 3u);
  EXPECT_EQ(tally.recoveries(), 1u);
  EXPECT_EQ(tally.requests_in_flight(), 1u);  // request 102, step 2
  EXPECT_EQ(tally.requests_rerun(), 1u);
  EXPECT_EQ(tally.requests_lost(), 0u);
  EXPECT_EQ(tally.requests_served(), 8u);
  EXPECT_EQ(tally.tokens(), 5u * 1 + 3u * 2);
}

TEST(ReplicaTallyTest, AStepAgreedWhenTheRunStoppedWasNotServed) {
  ReplicaTally tally(MakeLayout(kTwoReplicas, 0));
  using Kind = ReplicaFrame::Kind;
  for (uint32_t step : {1, 2}) {
    tally.Observe(Decoded(false, {0, 1}, {1, 1},
                          ReplicaWords(1, Kind::kStep, step,
                                       ReplicaWords(0, Kind::kStep, step))));
  }
  // Step 2's round asked every rank to stop: the idle frames name step 1.
  tally.Observe(Decoded(
      false, {0, 1}, {1, 1},
      ReplicaWords(1, Kind::kIdle, 1, ReplicaWords(0, Kind::kIdle, 1))));
  EXPECT_EQ(tally.Summary(0).steps, 1u);
  EXPECT_EQ(tally.Summary(1).steps, 1u);
}

TEST(ReplicaCheckTest, ChecksItsOwnOutputsAndBatch) {
  const ParallelTopology t = kTwoReplicas;
  const ServingLayout layout = MakeLayout(t, 3);  // replica 1, last stage
  const ModelSpec spec = SpecFor(t);
  ReplicaCheck check(spec, layout, Tolerance{});
  RequestStream stream(spec.seed, layout.my_slot(), layout.num_slots());
  const ReferenceModel reference(spec);
  uint32_t step = 1;
  SlotBatch batch = stream.Next();
  for (; batch.tokens() == 0; ++step) {
    EXPECT_TRUE(check.Check(step, batch, Matrix{}).status.ok());
    batch = stream.Next();
  }
  Matrix out = reference.Forward(batch);
  const StepCheck good = check.Check(step, batch, out);
  EXPECT_TRUE(good.status.ok()) << good.status;
  EXPECT_EQ(good.values_checked, out.values.size());

  // The next step with a corrupted value, then a batch its stream lacks.
  batch = stream.Next();
  out = reference.Forward(batch);
  if (!out.values.empty()) {
    out.values[0] += 1.0f;
    const StepCheck bad = check.Check(step + 1, batch, out);
    EXPECT_EQ(bad.status.code(), absl::StatusCode::kDataLoss);
    EXPECT_TRUE(absl::StrContains(bad.status.message(), "rank 3 (d1 p1"))
        << bad.status;
  }
  const StepCheck diverged =
      check.Check(step + 2, ReplicaBatch(1, 99), Matrix{});
  EXPECT_TRUE(absl::StrContains(diverged.status.message(),
                                "but its request stream has"))
      << diverged.status;
}

TEST(ReportTest, SummaryByReplica) {
  RunSummary summary;
  summary.layout = MakeLayout(kTwoReplicas, 0);
  summary.spec = SpecFor(kTwoReplicas);
  summary.backend = "gloo";
  summary.steps = 10;
  summary.checked_steps = 10;
  summary.steps_per_replica = 5;
  summary.wall = absl::Seconds(1);
  summary.recoveries = 1;
  summary.replicas = {{.replica = 0,
                       .first_rank = 0,
                       .last_rank = 1,
                       .epoch = 1,
                       .steps = 5,
                       .checked_steps = 5,
                       .steps_while_others_recovered = 2,
                       .recovered_meanwhile = "1"},
                      {.replica = 1,
                       .first_rank = 2,
                       .last_rank = 3,
                       .epoch = 2,
                       .steps = 5,
                       .checked_steps = 5,
                       .recoveries = 1}};
  const std::string table = SummaryTable(summary);
  EXPECT_TRUE(absl::StrContains(
      table, "served        2 replicas x 5 steps (10 replica steps)"))
      << table;
  EXPECT_TRUE(absl::StrContains(
      table,
      "  replica 0     ranks 0-1, epoch 1: 5 steps served, 5 self-checked; "
      "served 2 of them while replica 1 recovered\n"))
      << table;
  EXPECT_TRUE(absl::StrContains(
      table,
      "  replica 1     ranks 2-3, epoch 2: 5 steps served, 5 self-checked; 1 "
      "loss recovered in place\n"))
      << table;
  EXPECT_TRUE(absl::StrContains(table, "self-check    PASSED: 10/10 steps"))
      << table;
  // Served until stopped (--steps=0): each replica's own count only.
  summary.steps_per_replica = 0;
  EXPECT_TRUE(absl::StrContains(
      SummaryTable(summary),
      "served        2 replicas until stopped (10 replica steps)"))
      << SummaryTable(summary);
}

}  // namespace
}  // namespace rankd::examples
