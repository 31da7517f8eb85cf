// allgather_words_bench: one rank of the all_gather_words latency benchmark
// (bench/run_allgather_words.sh starts the daemons and one of these per
// rank). It connects to its node's daemon through the client library, joins
// the job, runs --warmup untimed rounds and then --rounds timed rounds of
// AllGatherWords with a --words-word frame, and writes one line per timed
// round to --out:
//   <start_ns> <end_ns>
// (steady_clock, i.e. CLOCK_MONOTONIC, comparable across processes on one
// machine). The first line of --out is a "# ..." header that also gives the
// process's CPU time (cpu_us, all threads, user + system) and voluntary and
// involuntary context switches (vcsw, ivcsw) over the timed rounds. On
// stdout it prints
//   JOINED rank=R world=W
//   SUMMARY rank=R rounds=N p50_us=X p99_us=Y
// and exits 0; on any error it prints "ERROR ..." and exits non-zero.
//
// With --recover (the scale benchmark's recovery drill, bench/run_scale.sh
// --recovery; the daemons run with --recovery=on), after the rounds it
// waits for the job to lose a rank (Client::JobHealth fails), then
// re-enters the next epoch as a survivor does (Client::Rejoin), and prints
//   RECOVERED rank=R seen_ns=S ready_ns=E epoch=N
// (the loss seen; Rejoin returned: the job READY again) before it leaves.
//
// Results of the warmup rounds and of the last timed round are checked word
// by word (outside the timed region); the others only by size.
//
// --path selects how a round reaches the daemon:
//   client     (default) rankd::Client::AllGatherWords, the product path;
//   sync_stub  diagnostic only: after joining through the client library,
//              send the same AllGatherWords RPCs with gRPC's synchronous stub
//              on this thread over a second channel to the same socket,
//              bypassing the client library's callback-API call and
//              notification hand-off. It measures what the client path
//              costs; it is not how serving processes should talk to rankd.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/bench_rank.h"
#include "client/client.h"
#include "grpcpp/grpcpp.h"
#include "rankd/v1/rank.grpc.pb.h"

ABSL_FLAG(int, warmup, 200, "untimed rounds before the timed ones");
ABSL_FLAG(int, rounds, 2000, "timed rounds");
ABSL_FLAG(int, words, 4, "uint32 words per rank per round");
ABSL_FLAG(int, pace_us, 0,
          "pause after each round, as a serving engine's step does its work "
          "between rounds (0: back to back)");
ABSL_FLAG(int, round_timeout_ms, 30000, "deadline of each round");
ABSL_FLAG(
    std::string, path, "client",
    "client (product path) or sync_stub (diagnostic, see the file comment)");
ABSL_FLAG(std::string, out, "", "file for per-round timestamps (required)");
ABSL_FLAG(bool, recover, false,
          "after the rounds, wait for a loss and Rejoin the next epoch");

namespace {

using rankd::bench::Fail;
using rankd::bench::FrameWord;

// CPU time (user + system, every thread) and context switches so far.
struct Usage {
  int64_t cpu_us = 0, vcsw = 0, ivcsw = 0;
};
Usage SelfUsage() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto us = [](const timeval& tv) {
    return static_cast<int64_t>(tv.tv_sec) * 1000000 + tv.tv_usec;
  };
  return {us(ru.ru_utime) + us(ru.ru_stime), ru.ru_nvcsw, ru.ru_nivcsw};
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int warmup = absl::GetFlag(FLAGS_warmup);
  const absl::Duration pace =
      absl::Microseconds(std::max(0, absl::GetFlag(FLAGS_pace_us)));
  const int rounds = absl::GetFlag(FLAGS_rounds);
  const int words = absl::GetFlag(FLAGS_words);
  const std::string out_path = absl::GetFlag(FLAGS_out);
  const std::string path = absl::GetFlag(FLAGS_path);
  if (path != "client" && path != "sync_stub") {
    std::printf("ERROR usage: --path must be client or sync_stub\n");
    return 2;
  }
  if (warmup < 0 || rounds < 1 || words < 1 ||
      words > static_cast<int>(rankd::kMaxFrameWords) || out_path.empty()) {
    std::printf(
        "ERROR usage: need --warmup>=0 --rounds>=1 --words in [1, %zu] "
        "--out=FILE\n",
        rankd::kMaxFrameWords);
    return 2;
  }
  FILE* out = std::fopen(out_path.c_str(), "w");
  if (out == nullptr) {
    std::printf("ERROR cannot write %s\n", out_path.c_str());
    return 2;
  }

  auto joined = rankd::bench::JoinFromFlags();
  if (!joined.ok()) return Fail("join", joined.status());
  std::unique_ptr<rankd::Client>& client = joined->client;
  const uint32_t rank = joined->descriptor.rank();
  const uint32_t world = joined->descriptor.world_size();
  std::printf("JOINED rank=%u world=%u\n", rank, world);
  std::fflush(stdout);

  const absl::Duration timeout =
      absl::Milliseconds(absl::GetFlag(FLAGS_round_timeout_ms));
  const size_t expected = static_cast<size_t>(world) * words;
  // Diagnostic path: the same RPC through a synchronous stub.
  std::unique_ptr<rankd::v1::Rank::Stub> stub;
  rankd::v1::AllGatherWordsRequest request;
  if (path == "sync_stub") {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    stub = rankd::v1::Rank::NewStub(grpc::CreateCustomChannel(
        client->target(), grpc::InsecureChannelCredentials(), args));
    *request.mutable_member() = client->member();
    request.set_timeout_ms(absl::GetFlag(FLAGS_round_timeout_ms));
  }
  auto sync_round = [&](uint64_t number, const std::vector<uint32_t>& words_in)
      -> absl::StatusOr<std::vector<uint32_t>> {
    request.set_round(number);
    request.mutable_words()->Assign(words_in.begin(), words_in.end());
    rankd::v1::AllGatherWordsResponse response;
    grpc::ClientContext context;
    context.set_deadline(
        absl::ToChronoTime(absl::Now() + timeout + absl::Seconds(5)));
    grpc::Status status = stub->AllGatherWords(&context, request, &response);
    if (!status.ok()) {
      return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                          status.error_message());
    }
    return std::vector<uint32_t>(response.words().begin(),
                                 response.words().end());
  };

  std::vector<uint32_t> frame(words);
  std::vector<int64_t> start(rounds), end(rounds);
  const int total = warmup + rounds;
  Usage before;
  for (int i = 0; i < total; ++i) {
    if (i == warmup) before = SelfUsage();
    for (int j = 0; j < words; ++j) frame[j] = FrameWord(rank, i, j);
    const int64_t t0 = NowNs();
    auto result = stub ? sync_round(i + 1, frame)
                       : client->AllGatherWords(frame, timeout);
    const int64_t t1 = NowNs();
    if (!result.ok())
      return Fail(absl::StrCat("round ", i + 1), result.status());
    if (result->size() != expected) {
      std::printf("ERROR round %d: %zu words, expected %zu\n", i + 1,
                  result->size(), expected);
      return 4;
    }
    if (i < warmup || i == total - 1) {
      for (uint32_t r = 0; r < world; ++r) {
        for (int j = 0; j < words; ++j) {
          if ((*result)[r * words + j] != FrameWord(r, i, j)) {
            std::printf("ERROR round %d: wrong word %d of rank %u\n", i + 1, j,
                        r);
            return 4;
          }
        }
      }
    }
    if (i >= warmup) {
      start[i - warmup] = t0;
      end[i - warmup] = t1;
    }
    if (pace > absl::ZeroDuration()) absl::SleepFor(pace);
  }

  const Usage after = SelfUsage();
  std::fprintf(out,
               "# rankd all_gather_words rank=%u world=%u words=%d warmup=%d "
               "rounds=%d path=%s cpu_us=%lld vcsw=%lld ivcsw=%lld\n",
               rank, world, words, warmup, rounds, path.c_str(),
               static_cast<long long>(after.cpu_us - before.cpu_us),
               static_cast<long long>(after.vcsw - before.vcsw),
               static_cast<long long>(after.ivcsw - before.ivcsw));
  std::vector<int64_t> lat(rounds);
  for (int i = 0; i < rounds; ++i) {
    std::fprintf(out, "%lld %lld\n", static_cast<long long>(start[i]),
                 static_cast<long long>(end[i]));
    lat[i] = end[i] - start[i];
  }
  if (std::fclose(out) != 0) {
    std::printf("ERROR writing %s\n", out_path.c_str());
    return 2;
  }
  std::sort(lat.begin(), lat.end());
  auto pct = [&](double p) {
    size_t k = static_cast<size_t>(p / 100.0 * rounds + 0.999999);
    return lat[std::clamp<size_t>(k, 1, rounds) - 1] / 1000.0;
  };
  std::printf("SUMMARY rank=%u rounds=%d p50_us=%.1f p99_us=%.1f\n", rank,
              rounds, pct(50), pct(99));
  std::fflush(stdout);
  if (absl::GetFlag(FLAGS_recover)) {
    const absl::Time until = absl::Now() + absl::Seconds(120);
    while (client->JobHealth().ok()) {
      if (absl::Now() > until) {
        std::printf("ERROR no loss within 120 s\n");
        return 5;
      }
      absl::SleepFor(absl::Microseconds(200));
    }
    const int64_t seen = NowNs();
    auto rejoined = client->Rejoin(client->epoch(), absl::Seconds(120));
    if (!rejoined.ok()) return Fail("rejoin", rejoined.status());
    std::printf("RECOVERED rank=%u seen_ns=%lld ready_ns=%lld epoch=%llu\n",
                rank, static_cast<long long>(seen),
                static_cast<long long>(NowNs()),
                static_cast<unsigned long long>(rejoined->epoch()));
    std::fflush(stdout);
  }
  auto left = client->Leave();
  if (!left.ok()) return Fail("leave", left);
  return 0;
}
