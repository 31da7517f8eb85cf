// ReplicaTally: what the replicas served, counted from the world rounds
// alone under recovery by domain (replica_round.h). Every rank keeps one
// and feeds it every round it took part in; the rank that saw every round
// (kFlagFresh: it never recovered and replaces no one) prints the summary
// from its own, so the summary needs no rank in particular to survive.
//
// Per replica:
//   - steps      a step agreed in one round completes when a later round
//                shows the replica at another step, idle past it, or
//                re-entering one step further; each step counts once
//   - requests   a RequestLedger (request_ledger.h) of the replica's slots:
//                when a replica re-enters at the step it was last seen
//                agreeing on (resume frames), that step's requests were in
//                flight at its loss and must be served again
//   - recoveries its resume rounds
//   - steps while others recovered: its steps agreed in rounds that did
//     not span every replica, and which replicas were missing
//   - checks     its last-stage ranks' own counts (replica_check.h), which
//                each frame carries cumulatively per process: a rank's
//                counts add up over its processes (a replacement starts
//                again from zero); a replica's checked steps are the
//                fewest any of its last-stage ranks checked
// A rank that missed rounds (its own replica recovered) undercounts. Pure;
// not thread-safe.
#ifndef RANKD_EXAMPLES_SERVING_REPLICA_TALLY_H_
#define RANKD_EXAMPLES_SERVING_REPLICA_TALLY_H_

#include <cstdint>
#include <optional>
#include <set>
#include <vector>

#include "examples/serving/batch_agreement.h"
#include "examples/serving/layout.h"
#include "examples/serving/replica_round.h"
#include "examples/serving/report.h"
#include "examples/serving/request_ledger.h"

namespace rankd::examples {

class ReplicaTally {
 public:
  explicit ReplicaTally(const ServingLayout& layout);

  // A round this rank took part in; rounds in order.
  void Observe(const ReplicaRound& round);

  ReplicaSummary Summary(uint32_t replica) const;
  // Over every replica.
  uint64_t tokens() const;
  uint32_t recoveries() const;
  uint64_t requests_served() const;
  uint64_t requests_in_flight() const;
  uint64_t requests_rerun() const;
  uint64_t requests_lost() const;
  // Every process's checks, added up.
  CheckCounts checks() const;

 private:
  struct Replica {
    std::optional<StepPlan> last;  // agreed, not yet seen completed
    RequestLedger ledger;
    uint64_t epoch = 0;
    uint32_t steps = 0;
    uint64_t tokens = 0;
    uint32_t recoveries = 0;
    uint32_t steps_while_others_recovered = 0;
    std::set<uint32_t> recovered_meanwhile;
  };
  struct RankCounts {
    uint32_t generation = 0;  // 0: none seen yet
    CheckCounts last;         // the latest frame's
    CheckCounts total;        // over every process
  };
  static void Complete(Replica& replica);
  // `count` of every replica's ledger, added up.
  uint64_t SumOfLedgers(uint64_t (RequestLedger::*count)() const) const;

  ServingLayout layout_;
  std::vector<Replica> replicas_;
  std::vector<RankCounts> ranks_;
};

}  // namespace rankd::examples

#endif  // RANKD_EXAMPLES_SERVING_REPLICA_TALLY_H_
