#include "bench/bench_rank.h"

#include <cstdio>
#include <string>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/time/time.h"

ABSL_FLAG(std::string, target, "",
          "daemon target, e.g. unix:///tmp/x/node0.sock");
ABSL_FLAG(std::string, job_id, "bench", "job id");
ABSL_FLAG(uint32_t, local_rank, 0, "local rank on this node");
ABSL_FLAG(uint32_t, world_size, 0, "expected world size (0: don't check)");
ABSL_FLAG(int, join_wait_ms, 120000, "how long Join waits for every rank");

namespace rankd::bench {

absl::StatusOr<JoinedRank> JoinFromFlags(absl::Duration connect_timeout) {
  ClientOptions options;
  options.target = absl::GetFlag(FLAGS_target);
  if (connect_timeout > absl::ZeroDuration()) {
    options.connect_timeout = connect_timeout;
  }
  auto client = Client::Connect(options);
  if (!client.ok()) return client.status();
  JoinOptions join;
  join.job_id = absl::GetFlag(FLAGS_job_id);
  join.local_rank = absl::GetFlag(FLAGS_local_rank);
  join.world_size = absl::GetFlag(FLAGS_world_size);
  join.device.set_kind("cpu");
  join.wait_for_world = absl::Milliseconds(absl::GetFlag(FLAGS_join_wait_ms));
  auto descriptor = (*client)->Join(join);
  if (!descriptor.ok()) return descriptor.status();
  return JoinedRank{*std::move(client), *std::move(descriptor)};
}

int Fail(const std::string& what, const absl::Status& status) {
  std::printf("ERROR %s: %s\n", what.c_str(), status.ToString().c_str());
  std::fflush(stdout);
  return 3;
}

uint32_t FrameWord(uint32_t rank, int round, int j) {
  return rank * 1000003u + static_cast<uint32_t>(round) * 131u +
         static_cast<uint32_t>(j);
}

}  // namespace rankd::bench
