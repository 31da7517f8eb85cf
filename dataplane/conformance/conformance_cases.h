// The data-plane conformance suite's case table: one list of cases that
// every backend runs (dataplane/conformance/run_case.h), so that Gloo and
// NCCL (on the CUDA/NCCL stand-in in CI, on GPUs through the GPU kit) are
// held to the same values, the same refusals with the same messages, the
// same bounded waits and poison, and the same agreement failures
// (docs/dataplane.md, "Conformance").
//
// A case describes, per rank, one call on DistributedSession (operation,
// scope, input values, counts, peer, caller-owned output) and what that
// rank must see: the output's shape and values, or the exact error, either
// at submission (a refusal) or from the completion, and optionally what
// the session's poison() and capabilities() say afterwards. Around the
// call a rank may use the session's failure vocabulary (Poison, Abort),
// and a case may open its sessions narrowed (restrict_capabilities).
// Messages are exact; "$backend" stands for the backend's name ("gloo",
// "nccl"). Where a backend legitimately differs, the case declares it in
// `differences`, with the reason; nothing else may differ.
//
// Testonly. Depends on dataplane/capabilities.h, collective_scope.h,
// dtype.h, completion.h and absl.
#ifndef RANKD_DATAPLANE_CONFORMANCE_CONFORMANCE_CASES_H_
#define RANKD_DATAPLANE_CONFORMANCE_CONFORMANCE_CASES_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "dataplane/capabilities.h"
#include "dataplane/collective_scope.h"
#include "dataplane/completion.h"
#include "dataplane/dtype.h"

namespace rankd::dataplane::conformance {

// The DistributedSession call a rank makes.
enum class Operation {
  kAllReduceSum,
  kAllReduceSumInto,
  kAllGather,
  kAllGatherInto,
  kAllToAllV,
  kAllToAllVInto,
  kSend,
  kReceive,
  kReceiveInto,
  kBatchSendReceive,  // sends `values` to `peer`, receives from `source`
  kNone,              // submits nothing (a member that never shows up)
};

// The session options a case needs, in backend-neutral words; each
// backend maps them onto its own options (short timeouts everywhere).
struct SessionSetup {
  bool verify_agreement = false;
  absl::Duration op_timeout = absl::Seconds(5);
  // Recovery by domain (dataplane/domain_groups.h) with domains of this
  // many ranks: the topology is tensor = domain_size, data = world /
  // domain_size, and each rank's descriptor is confined to its domain.
  // 0: no domains (the topology is data = world).
  uint32_t domain_size = 0;
  // The session is opened narrowed to these capabilities (both backends'
  // options.restrict_capabilities).
  std::optional<DistributedCapabilities> restrict_capabilities;
};

// A call on the session itself, in the failure vocabulary every backend
// shares (docs/contract.md, "Failures: one vocabulary").
struct SessionAction {
  enum class Kind {
    kPoison,  // Poison(cause): only latches
    kAbort,   // Abort(cause): latches and tears every native context down
  };
  Kind kind = Kind::kPoison;
  absl::Status cause;
};

// One rank's call.
struct RankCall {
  Operation operation = Operation::kAllReduceSum;
  CollectiveScope scope = CollectiveScope::World();
  // The input (for kReceive: the descriptor received).
  std::vector<size_t> shape;
  TensorDtype dtype = TensorDtype::kF32;
  std::vector<float> values;  // f32 only; other dtypes are zero-filled
  std::vector<size_t> send_counts, receive_counts;  // all_to_all_v
  size_t peer = 0;    // send/receive/batch: the member sent to
  size_t source = 0;  // batch: the member received from
  // *Into: the caller-owned output's shape (the input's dtype), or the
  // input itself.
  std::vector<size_t> output_shape;
  bool output_is_input = false;
  // After submitting: wait at most this long with this mode, instead of
  // an unbounded Wait (bounded-wait cases).
  std::optional<absl::Duration> bounded_wait;
  CancellationMode mode = CancellationMode::kQuarantineUntilComplete;
  // Before submitting (after `first`): calls on the session itself, in
  // order.
  std::vector<SessionAction> before;
  // Right after a successful submission, before waiting on it.
  std::optional<SessionAction> after_submit;
  // Calls this rank makes first, one at a time, each of which must be
  // accepted and complete successfully (outputs unchecked): for cases
  // about what earlier work leaves behind, such as a route's order, or a
  // warm-up that connects the world before a member stops submitting (a
  // kNone rank makes these too).
  std::vector<RankCall> first;
};

// What one rank must see.
struct RankOutcome {
  enum class When {
    kCompletes,       // the call is accepted and its completion succeeds
    kRefused,         // the call itself returns `code`/`message`
    kFails,           // the call is accepted; its completion fails so
    kMissesDeadline,  // the bounded wait returns DeadlineExceeded{mode}
    kIgnored,         // nothing checked (a member that never submits)
  };
  When when = When::kCompletes;
  std::vector<size_t> shape;  // kCompletes: the output's
  std::vector<float> values;  // kCompletes, f32 outputs
  absl::StatusCode code = absl::StatusCode::kOk;
  std::string message;  // exact; "$backend" is the backend's name
  // The message need only end with `message`: for a missed deadline, whose
  // beginning quotes the native layer's own words (Gloo's transport, NCCL's
  // watchdog) while the end names who did not submit, in shared words.
  bool message_is_suffix = false;
  // kMissesDeadline: what the next call (an all_reduce_sum of f32[1] on
  // the world) must be refused with: the session is poisoned.
  absl::StatusCode next_code = absl::StatusCode::kOk;
  std::string next_message_prefix;
  // When set, checked once the call's outcome was: what the session's
  // poison() returns (code and message), and what capabilities() then
  // advertises: nothing once poisoned, something while healthy.
  std::optional<absl::Status> poison;
  // When set, checked once the call's outcome was: exactly what
  // capabilities() advertises.
  std::optional<DistributedCapabilities> advertises;
};

// A backend that differs from the table in one case, and why.
struct Difference {
  std::function<RankOutcome(uint32_t rank)> outcome;
  std::string reason;
};

struct ConformanceCase {
  std::string name;  // a gtest name: letters, digits, underscores
  uint32_t world = 2;
  SessionSetup setup;
  std::function<RankCall(uint32_t rank)> call;
  std::function<RankOutcome(uint32_t rank)> outcome;
  std::map<std::string, Difference> differences;  // by backend name
};

// gtest prints a case by its name.
inline void PrintTo(const ConformanceCase& c, std::ostream* os) {
  *os << c.name;
}

// Every case, in a stable order.
const std::vector<ConformanceCase>& Cases();

// `message` with "$backend" replaced by `backend`.
std::string ForBackend(const std::string& message, const std::string& backend);

}  // namespace rankd::dataplane::conformance

#endif  // RANKD_DATAPLANE_CONFORMANCE_CONFORMANCE_CASES_H_
