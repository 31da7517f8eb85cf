// bench_rank: what every benchmark rank program (allgather_words_bench,
// allreduce_bench, soak_bench, bootstrap_rank) does first. It defines the flags
// that name the rank's daemon and job, shared by all of them:
//   --target        daemon target, e.g. unix:///tmp/x/node0.sock
//   --job_id        job id (default "bench")
//   --local_rank    local rank on this node (default 0)
//   --world_size    expected world size (0: don't check)
//   --join_wait_ms  how long Join waits for every rank (default 120000)
// and joins the job with them as a CPU rank; and the frames and error lines
// the all_gather_words ranks share. Depends on the client library.
#ifndef RANKD_BENCH_BENCH_RANK_H_
#define RANKD_BENCH_BENCH_RANK_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/client.h"

namespace rankd::bench {

// A rank that has joined: its client (owned) and its descriptor.
struct JoinedRank {
  std::unique_ptr<Client> client;
  v1::SessionDescriptor descriptor;
};

// Connects to --target and joins --job_id as --local_rank, waiting up to
// --join_wait_ms for the world (of --world_size ranks, when not 0). Returns
// the client's error from Connect or Join. A positive `connect_timeout`
// replaces ClientOptions' default.
absl::StatusOr<JoinedRank> JoinFromFlags(
    absl::Duration connect_timeout = absl::ZeroDuration());

// Prints "ERROR <what>: <status>" on stdout (flushed) and returns 3, a
// benchmark rank's exit status for a failed call.
int Fail(const std::string& what, const absl::Status& status);

// Word `j` of `rank`'s frame in round `round`: distinct per rank, round and
// position, so that every rank can check a result word by word.
uint32_t FrameWord(uint32_t rank, int round, int j);

}  // namespace rankd::bench

#endif  // RANKD_BENCH_BENCH_RANK_H_
