// Reporting for the serving example: the progress line rank 0 prints while
// serving, the end-of-run statistics every rank contributes (one
// all_gather_words round), and the summary table rank 0 prints from them.
#ifndef RANKD_EXAMPLES_SERVING_REPORT_H_
#define RANKD_EXAMPLES_SERVING_REPORT_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "examples/serving/collectives.h"
#include "examples/serving/layout.h"
#include "examples/serving/model_spec.h"
#include "rankd/v1/admin.pb.h"

namespace rankd::examples {

// The q-quantile (0..1, nearest rank) of `samples`; zero when empty.
absl::Duration Percentile(std::vector<absl::Duration> samples, double q);

// "8/8 up" or "7/8 up; lost: 5 (node 1)" from a daemon's member list.
std::string RanksUp(const v1::MemberList& members);

// "PROGRESS step 20/50  tokens 412  2,981 tokens/s  ranks 8/8 up"; with
// steps 0 (serving until stopped) "PROGRESS step 20  tokens ...".
std::string ProgressLine(uint32_t step, uint32_t steps, uint64_t tokens,
                         absl::Duration elapsed, const std::string& ranks_up);

// What one rank reports at the end of the run.
struct RankReport {
  struct Kind {
    uint32_t calls = 0;
    uint64_t total_us = 0;  // two words: a long-running server passes 2^32
    uint32_t max_us = 0;
  };
  std::array<Kind, kNumCollectiveKinds> kinds{};
  // Tokens of this rank's slot it processed.
  uint32_t tokens = 0;
  // Non-zero when this rank saw the self-check fail (rank 0) or was asked
  // to stop.
  uint32_t failed = 0;
};

// The end-of-run frame (kReportWords long) and its decoding (rank-major).
// Per kind: calls, total microseconds (low and high word), max
// microseconds; then tokens and the failed flag.
inline constexpr size_t kReportWords = 4 * kNumCollectiveKinds + 2;
std::vector<uint32_t> EncodeReport(const CollectiveStats& stats,
                                   uint64_t tokens, bool failed);
absl::StatusOr<std::vector<RankReport>> DecodeReports(
    absl::Span<const uint32_t> words, uint32_t world_size);

// Recovery by domain (replica_tally.h): what one data-parallel replica
// served, as the rank printing the summary counted it from the world
// rounds.
struct ReplicaSummary {
  uint32_t replica = 0;
  uint32_t first_rank = 0;
  uint32_t last_rank = 0;
  uint64_t epoch = 0;  // its epoch in the last round
  uint32_t steps = 0;  // steps it completed
  uint32_t checked_steps = 0;
  uint32_t recoveries = 0;
  // Steps it served while another replica recovered (agreed in rounds
  // that did not span every replica), and which replicas those were
  // ("1", "1, 2").
  uint32_t steps_while_others_recovered = 0;
  std::string recovered_meanwhile;
};

// Everything the summary table shows.
struct RunSummary {
  ServingLayout layout;
  ModelSpec spec;
  std::string backend;
  uint32_t steps = 0;       // the last step served
  uint32_t first_step = 1;  // the first (> 1: --first_step, a restarted job)
  uint64_t tokens = 0;
  absl::Duration wall;  // the serving loop on rank 0
  // Per step on rank 0, without the check: every step, or the most recent
  // ones when a long-running server keeps only those.
  std::vector<absl::Duration> latency;
  absl::Duration check_time;  // rank 0's reference + compare
  uint32_t checked_steps = 0;
  uint64_t checked_values = 0;
  double max_abs_error = 0;
  std::string tolerance;
  bool check_passed = true;
  std::vector<RankReport> ranks;
  // Rank 0's request ledger (request_ledger.h) and the losses this run
  // recovered from in place (--recover).
  uint64_t requests = 0;
  uint32_t recoveries = 0;
  uint64_t requests_in_flight = 0;
  uint64_t requests_rerun = 0;
  uint64_t requests_lost = 0;
  // Recovery by domain with dp > 1: one entry per replica; then `steps`
  // and `checked_steps` count replica steps (every replica's together),
  // each replica served `steps_per_replica` steps (0: served until
  // stopped, each replica its own count), and the self-check is
  // every last-stage rank's own (replica_check.h).
  std::vector<ReplicaSummary> replicas;
  uint32_t steps_per_replica = 0;
  // Which rank counted the rounds (the lowest that saw every one), and
  // whether any rank did.
  uint32_t counted_by = 0;
  bool counted_every_round = true;
};

// The multi-line summary table (ends with a newline).
std::string SummaryTable(const RunSummary& summary);

}  // namespace rankd::examples

#endif  // RANKD_EXAMPLES_SERVING_REPORT_H_
