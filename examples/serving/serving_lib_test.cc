// Unit tests of the serving example's pure parts: model spec, request
// streams, batch frames, shard math against the reference, expert dispatch
// plans, the self-check and the report; what recovery adds (the step to
// resume at, the request ledger). The multi-process run (real
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

}  // namespace
}  // namespace rankd::examples
