// One rank of the bootstrap benchmark (bench/run_bootstrap.sh): how long
// from the moment the daemons are started until this rank holds its
// descriptor, with every rank of the world joined.
//
// Started before the daemons, it sleeps until --start_ns (CLOCK_REALTIME,
// shared with the launcher, which starts the daemons at that moment), waits
// for the daemon's Unix socket to appear (a stat every --retry_ms: cheap,
// so waiting ranks take no CPU from starting daemons), then connects to
// --target (with a new channel every --retry_ms while the daemon does not
// accept yet, so gRPC's reconnect backoff never adds to the time), joins
// with wait_for_world, and writes
// "# bootstrap_rank rank=R" and "<start_ns> <end_ns>" (end: Join returned)
// to --out. Then it leaves. Exit status 0, or 3 with an ERROR line.
#include <sys/stat.h>
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/bench_rank.h"
#include "client/client.h"

ABSL_DECLARE_FLAG(std::string, target);  // bench_rank.cc

ABSL_FLAG(int64_t, start_ns, 0,
          "CLOCK_REALTIME nanoseconds at which the daemons start");
ABSL_FLAG(int, retry_ms, 2, "pause between connection attempts");
ABSL_FLAG(int, connect_deadline_ms, 30000,
          "give up connecting after this long");
ABSL_FLAG(std::string, out, "", "where to write the result");

namespace {

int64_t RealtimeNs() {
  timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return int64_t{t.tv_sec} * 1000000000 + t.tv_nsec;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int64_t start = absl::GetFlag(FLAGS_start_ns);
  const std::string out = absl::GetFlag(FLAGS_out);
  if (start <= 0 || out.empty()) {
    std::fprintf(stderr, "bootstrap_rank: --start_ns and --out are required\n");
    return 2;
  }
  const int64_t now = RealtimeNs();
  if (start > now) absl::SleepFor(absl::Nanoseconds(start - now));

  const absl::Time give_up =
      absl::Now() +
      absl::Milliseconds(absl::GetFlag(FLAGS_connect_deadline_ms));
  const absl::Duration retry =
      absl::Milliseconds(absl::GetFlag(FLAGS_retry_ms));
  const std::string target = absl::GetFlag(FLAGS_target);
  constexpr char kUnix[] = "unix://";
  if (target.rfind(kUnix, 0) == 0) {
    const std::string path = target.substr(sizeof(kUnix) - 1);
    struct stat st;
    while (stat(path.c_str(), &st) != 0 && absl::Now() < give_up) {
      absl::SleepFor(retry);
    }
  }
  absl::StatusOr<rankd::bench::JoinedRank> joined;
  while (true) {
    joined = rankd::bench::JoinFromFlags(retry * 10);
    // Unavailable: the daemon is not listening yet; anything else is final.
    if (joined.ok() ||
        joined.status().code() != absl::StatusCode::kUnavailable ||
        absl::Now() > give_up) {
      break;
    }
    absl::SleepFor(retry);
  }
  const int64_t end = RealtimeNs();
  if (!joined.ok()) return rankd::bench::Fail("join", joined.status());
  FILE* f = std::fopen(out.c_str(), "w");
  if (f == nullptr) {
    return rankd::bench::Fail("open " + out, absl::InternalError("fopen"));
  }
  std::fprintf(f, "# bootstrap_rank rank=%u\n%lld %lld\n",
               joined->descriptor.rank(), static_cast<long long>(start),
               static_cast<long long>(end));
  std::fclose(f);
  absl::Status left = joined->client->Leave();
  if (!left.ok()) return rankd::bench::Fail("leave", left);
  return 0;
}
