// Progress and summary output of the serving example (see report.h).
#include "examples/serving/report.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace rankd::examples {
namespace {

// Per kind: calls, total microseconds (low and high word), max
// microseconds; then tokens and the failed flag.
constexpr size_t kWordsPerKind = 4;
static_assert(kReportWords == kWordsPerKind * kNumCollectiveKinds + 2);

uint32_t Micros(absl::Duration d) {
  const int64_t us = absl::ToInt64Microseconds(d);
  return static_cast<uint32_t>(std::clamp<int64_t>(us, 0, UINT32_MAX));
}

double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

// 12345 -> "12,345".
std::string Thousands(uint64_t v) {
  std::string digits = absl::StrCat(v), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace

absl::Duration Percentile(std::vector<absl::Duration> samples, double q) {
  if (samples.empty()) return absl::ZeroDuration();
  std::sort(samples.begin(), samples.end());
  size_t index = static_cast<size_t>(std::ceil(q * samples.size()));
  index = std::clamp<size_t>(index, 1, samples.size()) - 1;
  return samples[index];
}

std::string RanksUp(const v1::MemberList& members) {
  int up = 0;
  std::vector<std::string> lost, left, waiting;
  for (const v1::MemberStatus& m : members.members()) {
    const std::string who =
        absl::StrCat(m.rank(), " (node ", m.node_index(), ")");
    switch (m.state()) {
      case v1::MEMBER_STATE_JOINED:
      case v1::MEMBER_STATE_IN_ROUND:
        ++up;
        break;
      case v1::MEMBER_STATE_LOST:
        lost.push_back(who);
        break;
      case v1::MEMBER_STATE_LEFT:
        left.push_back(who);
        break;
      default:
        waiting.push_back(who);
        break;
    }
  }
  std::string out = absl::StrCat(up, "/", members.members_size(), " up");
  if (!lost.empty())
    absl::StrAppend(&out, "; lost: ", absl::StrJoin(lost, ", "));
  if (!left.empty())
    absl::StrAppend(&out, "; left: ", absl::StrJoin(left, ", "));
  if (!waiting.empty()) {
    absl::StrAppend(&out, "; not joined: ", absl::StrJoin(waiting, ", "));
  }
  return out;
}

std::string ProgressLine(uint32_t step, uint32_t steps, uint64_t tokens,
                         absl::Duration elapsed, const std::string& ranks_up) {
  const double seconds = absl::ToDoubleSeconds(elapsed);
  const uint64_t rate =
      seconds > 0 ? static_cast<uint64_t>(tokens / seconds) : 0;
  return absl::StrCat("PROGRESS step ", step,
                      steps > 0 ? absl::StrCat("/", steps) : "", "  tokens ",
                      Thousands(tokens), "  ", Thousands(rate),
                      " tokens/s  ranks ", ranks_up);
}

std::vector<uint32_t> EncodeReport(const CollectiveStats& stats,
                                   uint64_t tokens, bool failed) {
  std::vector<uint32_t> words;
  words.reserve(kReportWords);
  for (size_t k = 0; k < kNumCollectiveKinds; ++k) {
    const KindStats& s = stats.of(static_cast<CollectiveKind>(k));
    words.push_back(
        static_cast<uint32_t>(std::min<uint64_t>(s.calls, UINT32_MAX)));
    const uint64_t total_us = static_cast<uint64_t>(
        std::max<int64_t>(absl::ToInt64Microseconds(s.total), 0));
    words.push_back(static_cast<uint32_t>(total_us));
    words.push_back(static_cast<uint32_t>(total_us >> 32));
    words.push_back(Micros(s.max));
  }
  words.push_back(
      static_cast<uint32_t>(std::min<uint64_t>(tokens, UINT32_MAX)));
  words.push_back(failed ? 1 : 0);
  return words;
}

absl::StatusOr<std::vector<RankReport>> DecodeReports(
    absl::Span<const uint32_t> words, uint32_t world_size) {
  if (words.size() != size_t{world_size} * kReportWords) {
    return absl::FailedPreconditionError(
        absl::StrCat("end-of-run reports: got ", words.size(),
                     " words; expected ", world_size, " x ", kReportWords));
  }
  std::vector<RankReport> reports(world_size);
  for (uint32_t r = 0; r < world_size; ++r) {
    const uint32_t* w = &words[r * kReportWords];
    for (size_t k = 0; k < kNumCollectiveKinds; ++k) {
      const uint32_t* kind = &w[kWordsPerKind * k];
      reports[r].kinds[k] = {
          kind[0], kind[1] | (static_cast<uint64_t>(kind[2]) << 32), kind[3]};
    }
    reports[r].tokens = w[kWordsPerKind * kNumCollectiveKinds];
    reports[r].failed = w[kWordsPerKind * kNumCollectiveKinds + 1];
  }
  return reports;
}

std::string SummaryTable(const RunSummary& s) {
  const ServingLayout& l = s.layout;
  const double seconds = absl::ToDoubleSeconds(s.wall);
  std::string out = "== summary\n";
  absl::StrAppendFormat(
      &out, "  %-13s %d nodes x %d ranks = world %d; %s; backend %s\n",
      "topology", l.nnodes, l.world_size / std::max(1u, l.nnodes), l.world_size,
      DescribeTopology(l.topology), s.backend);
  absl::StrAppendFormat(
      &out, "  %-13s %s; per rank: ffn %d, %d layer(s), %d expert(s)/layer\n",
      "model", s.spec.ToString(), s.spec.ffn / l.topology.tensor,
      s.spec.layers / l.topology.pipeline, s.spec.experts / l.topology.expert);
  // A job started again at --first_step served the steps from there on.
  const uint32_t served =
      s.steps >= s.first_step ? s.steps - s.first_step + 1 : 0;
  const std::string from =
      s.first_step > 1 ? absl::StrFormat(" (steps %d-%d: started again at %d)",
                                         s.first_step, s.steps, s.first_step)
                       : "";
  const bool by_replica = !s.replicas.empty();
  std::string what = absl::StrCat(served, " steps", from);
  if (by_replica && s.steps_per_replica == 0) {
    // Served until stopped: the replicas' counts differ.
    what = absl::StrFormat("%d replicas until stopped (%d replica steps)",
                           s.replicas.size(), served);
  } else if (by_replica) {
    what = absl::StrFormat("%d replicas x %d steps (%d replica steps)",
                           s.replicas.size(), s.steps_per_replica, served);
  }
  absl::StrAppendFormat(
      &out,
      "  %-13s %s, %s tokens from %d request streams, %s tokens/s"
      " (%.2f s)\n",
      "served", what, Thousands(s.tokens), l.num_slots(),
      Thousands(seconds > 0 ? static_cast<uint64_t>(s.tokens / seconds) : 0),
      seconds);
  for (const ReplicaSummary& r : s.replicas) {
    std::string meanwhile;
    if (!r.recovered_meanwhile.empty()) {
      meanwhile = absl::StrFormat(
          "; served %d of them while replica %s recovered",
          r.steps_while_others_recovered, r.recovered_meanwhile);
    }
    if (r.recoveries > 0) {
      absl::StrAppendFormat(&meanwhile, "; %d loss%s recovered in place",
                            r.recoveries, r.recoveries == 1 ? "" : "es");
    }
    absl::StrAppendFormat(
        &out,
        "  %-13s ranks %d-%d, epoch %d: %d steps served, %d self-checked%s\n",
        absl::StrCat("replica ", r.replica), r.first_rank, r.last_rank, r.epoch,
        r.steps, r.checked_steps, meanwhile);
  }
  if (by_replica && !s.counted_every_round) {
    absl::StrAppendFormat(
        &out,
        "  %-13s counted by rank %d, which missed the rounds while its own "
        "replica recovered (every replica recovered once)\n",
        "", s.counted_by);
  }
  const std::string which =
      s.latency.size() < (by_replica ? s.steps_per_replica : served)
          ? absl::StrCat("last ", Thousands(s.latency.size()), " steps, ")
          : "";
  absl::StrAppendFormat(
      &out, "  %-13s p50 %.2f ms, p99 %.2f ms, max %.2f ms (rank %d, %s%s)\n",
      "step latency", Ms(Percentile(s.latency, 0.5)),
      Ms(Percentile(s.latency, 0.99)), Ms(Percentile(s.latency, 1.0)),
      by_replica ? s.counted_by : 0, which,
      by_replica ? "agreement to its replica's step done"
                 : "agreement to outputs gathered");
  if (by_replica) {
    absl::StrAppendFormat(
        &out,
        "  %-13s %s: %d/%d steps (every replica's, by its last-stage ranks),"
        " %s values, max |error| %.2g, tolerance %s\n",
        "self-check", s.check_passed ? "PASSED" : "FAILED", s.checked_steps,
        served, Thousands(s.checked_values), s.max_abs_error, s.tolerance);
  } else {
    absl::StrAppendFormat(
        &out,
        "  %-13s %s: %d/%d steps, %s values, max |error| %.2g, tolerance"
        " %s; reference %.2f ms/step on rank 0\n",
        "self-check", s.check_passed ? "PASSED" : "FAILED", s.checked_steps,
        served, Thousands(s.checked_values), s.max_abs_error, s.tolerance,
        s.checked_steps > 0 ? Ms(s.check_time) / s.checked_steps : 0.0);
  }
  absl::StrAppendFormat(&out, "  %-13s %s served", "requests",
                        Thousands(s.requests));
  if (s.recoveries > 0) {
    absl::StrAppendFormat(
        &out,
        "; %d loss%s recovered in place: %s in flight at the loss, %s "
        "re-run, %s lost",
        s.recoveries, s.recoveries == 1 ? "" : "es",
        Thousands(s.requests_in_flight), Thousands(s.requests_rerun),
        Thousands(s.requests_lost));
  }
  out += "\n";
  absl::StrAppendFormat(&out, "\n  %-17s %-24s %5s %10s %9s %9s %7s\n",
                        "collective", "used for", "ranks", "calls/rank",
                        "ms/call", "ms/rank", "of run");
  for (size_t k = 0; k < kNumCollectiveKinds; ++k) {
    uint32_t ranks = 0;
    uint64_t calls = 0, total_us = 0;
    for (const RankReport& r : s.ranks) {
      if (r.kinds[k].calls == 0) continue;
      ++ranks;
      calls += r.kinds[k].calls;
      total_us += r.kinds[k].total_us;
    }
    const auto kind = static_cast<CollectiveKind>(k);
    if (ranks == 0) {
      absl::StrAppendFormat(&out, "  %-17s %-24s %5d %10s %9s %9s %7s\n",
                            CollectiveKindName(kind),
                            CollectiveKindPurpose(kind), 0, "-", "-", "-", "-");
      continue;
    }
    const double per_rank_ms = total_us / 1000.0 / ranks;
    absl::StrAppendFormat(
        &out, "  %-17s %-24s %5d %10.1f %9.3f %9.1f %6.0f%%\n",
        CollectiveKindName(kind), CollectiveKindPurpose(kind), ranks,
        static_cast<double>(calls) / ranks, total_us / 1000.0 / calls,
        per_rank_ms, seconds > 0 ? per_rank_ms / 10.0 / seconds : 0.0);
  }
  return out;
}

}  // namespace rankd::examples
