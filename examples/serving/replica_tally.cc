// Counting the replicas' work from the world rounds (see replica_tally.h).
#include "examples/serving/replica_tally.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "common/topology.h"

namespace rankd::examples {

ReplicaTally::ReplicaTally(const ServingLayout& layout)
    : layout_(layout),
      replicas_(layout.topology.data),
      ranks_(layout.world_size) {}

void ReplicaTally::Complete(Replica& replica) {
  replica.ledger.Completed(*replica.last);
  ++replica.steps;
  replica.tokens += replica.last->total_tokens();
  replica.last.reset();
}

void ReplicaTally::Observe(const ReplicaRound& round) {
  std::vector<uint32_t> missing;
  for (uint32_t d = 0; d < layout_.topology.data; ++d) {
    if (round.Find(d) == nullptr) missing.push_back(d);
  }
  for (const ReplicaInRound& in : round.replicas) {
    if (in.replica >= replicas_.size()) continue;
    Replica& r = replicas_[in.replica];
    r.epoch = in.epoch;
    switch (in.kind) {
      case ReplicaFrame::Kind::kStep:
        // A step agreed again (a re-run after a recovery) has not
        // completed; another one means the last did.
        if (r.last.has_value() && r.last->step != in.plan.step) Complete(r);
        r.last = in.plan;
        if (!missing.empty()) {
          ++r.steps_while_others_recovered;
          r.recovered_meanwhile.insert(missing.begin(), missing.end());
        }
        break;
      case ReplicaFrame::Kind::kIdle:
        // Idle frames name the last step served: a step agreed in the
        // round that asked every rank to stop was never served.
        if (r.last.has_value() && r.last->step <= in.step) Complete(r);
        r.last.reset();
        break;
      case ReplicaFrame::Kind::kResume:
        ++r.recoveries;
        if (r.last.has_value()) {
          if (r.last->step == in.step) {
            // In flight at the loss: served again from the next round on.
            r.ledger.Interrupted(*r.last);
            r.last.reset();
          } else if (r.last->step < in.step) {
            Complete(r);
          } else {
            r.last.reset();
          }
        }
        break;
    }
  }
  for (const RankInRound& in : round.ranks) {
    if (in.rank >= ranks_.size()) continue;
    RankCounts& c = ranks_[in.rank];
    const bool same = c.generation == in.generation;
    const CheckCounts& from = same ? c.last : CheckCounts{};
    c.total.passed +=
        in.checks.passed - std::min(in.checks.passed, from.passed);
    c.total.failed +=
        in.checks.failed - std::min(in.checks.failed, from.failed);
    c.total.values +=
        in.checks.values - std::min(in.checks.values, from.values);
    c.total.max_abs_error =
        std::max(c.total.max_abs_error, in.checks.max_abs_error);
    c.generation = in.generation;
    c.last = in.checks;
  }
}

ReplicaSummary ReplicaTally::Summary(uint32_t replica) const {
  ReplicaSummary s;
  s.replica = replica;
  const uint32_t size = DomainSizeOf(layout_.topology);
  s.first_rank = replica * size;
  s.last_rank = s.first_rank + size - 1;
  if (replica >= replicas_.size()) return s;
  const Replica& r = replicas_[replica];
  s.epoch = r.epoch;
  s.steps = r.steps;
  s.recoveries = r.recoveries;
  s.steps_while_others_recovered = r.steps_while_others_recovered;
  s.recovered_meanwhile = absl::StrJoin(r.recovered_meanwhile, ", ");
  // The fewest steps any last-stage rank of the replica checked.
  bool any = false;
  for (uint32_t rank = s.first_rank; rank <= s.last_rank; ++rank) {
    if (CoordinatesOf(layout_.topology, rank).pipeline + 1 !=
        layout_.topology.pipeline) {
      continue;
    }
    const uint32_t passed = ranks_[rank].total.passed;
    s.checked_steps = any ? std::min(s.checked_steps, passed) : passed;
    any = true;
  }
  return s;
}

uint64_t ReplicaTally::tokens() const {
  uint64_t n = 0;
  for (const Replica& r : replicas_) n += r.tokens;
  return n;
}

uint32_t ReplicaTally::recoveries() const {
  uint32_t n = 0;
  for (const Replica& r : replicas_) n += r.recoveries;
  return n;
}

uint64_t ReplicaTally::SumOfLedgers(uint64_t (RequestLedger::*count)()
                                        const) const {
  uint64_t n = 0;
  for (const Replica& r : replicas_) n += (r.ledger.*count)();
  return n;
}

uint64_t ReplicaTally::requests_served() const {
  return SumOfLedgers(&RequestLedger::served);
}

uint64_t ReplicaTally::requests_in_flight() const {
  return SumOfLedgers(&RequestLedger::in_flight);
}

uint64_t ReplicaTally::requests_rerun() const {
  return SumOfLedgers(&RequestLedger::rerun);
}

uint64_t ReplicaTally::requests_lost() const {
  return SumOfLedgers(&RequestLedger::lost);
}

CheckCounts ReplicaTally::checks() const {
  CheckCounts total;
  for (const RankCounts& c : ranks_) {
    total.passed += c.total.passed;
    total.failed += c.total.failed;
    total.values += c.total.values;
    total.max_abs_error = std::max(total.max_abs_error, c.total.max_abs_error);
  }
  return total;
}

}  // namespace rankd::examples
