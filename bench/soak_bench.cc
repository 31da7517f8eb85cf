// soak_bench: one rank of the soak (bench/run_soak.sh starts the daemons,
// one of these per rank, and samples the daemons' resident memory). It joins
// the job through the client library and runs --rounds all_gather_words
// rounds, each result checked word by word, with key-value traffic every
// --kv_every rounds: it sets its own key in one of 64 slots (a 256-byte value
// naming the round), reads its neighbour's key of the previous batch back
// and checks it, deletes its key from the slot half a cycle back, and bumps a
// shared counter. On stdout it prints
//   JOINED rank=R world=W
//   PROGRESS round=N rss_kb=K        every --progress_every rounds
//   DONE rounds=N kv_batches=B rss_kb=K
// and exits 0; on any error it prints "ERROR ..." and exits non-zero.
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "bench/bench_rank.h"
#include "client/client.h"

ABSL_FLAG(int, rounds, 100000, "all_gather_words rounds");
ABSL_FLAG(int, words, 4, "uint32 words per rank per round");
ABSL_FLAG(int, kv_every, 10, "key-value traffic every this many rounds");
ABSL_FLAG(int, progress_every, 1000, "a PROGRESS line every this many rounds");
ABSL_FLAG(int, round_timeout_ms, 30000, "deadline of each round and get");

namespace {

constexpr int kSlots = 64;

using rankd::bench::Fail;
using rankd::bench::FrameWord;

std::string Key(uint32_t rank, int slot) {
  return absl::StrCat("soak/r", rank, "/s", slot);
}

// 256 bytes that name the writer and the round.
std::string Value(uint32_t rank, int round) {
  std::string v = absl::StrFormat("rank %u round %d ", rank, round);
  v.resize(256, '.');
  return v;
}

// VmRSS of this process in KiB (0 when unreadable).
long RssKb() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int rounds = absl::GetFlag(FLAGS_rounds);
  const int words = absl::GetFlag(FLAGS_words);
  const int kv_every = absl::GetFlag(FLAGS_kv_every);
  const int progress_every = absl::GetFlag(FLAGS_progress_every);
  if (rounds < 1 || words < 1 || kv_every < 1 || progress_every < 1) {
    std::printf(
        "ERROR usage: --rounds, --words, --kv_every and --progress_every "
        "must be at least 1\n");
    return 2;
  }
  auto joined = rankd::bench::JoinFromFlags();
  if (!joined.ok()) return Fail("join", joined.status());
  std::unique_ptr<rankd::Client>& client = joined->client;
  const uint32_t rank = joined->descriptor.rank();
  const uint32_t world = joined->descriptor.world_size();
  const uint32_t neighbour = (rank + 1) % world;
  std::printf("JOINED rank=%u world=%u\n", rank, world);
  std::fflush(stdout);

  const absl::Duration timeout =
      absl::Milliseconds(absl::GetFlag(FLAGS_round_timeout_ms));
  std::vector<uint32_t> frame(words);
  int kv_batches = 0;
  int last_batch_round = 0;  // the round of the previous batch's set
  for (int i = 1; i <= rounds; ++i) {
    for (int j = 0; j < words; ++j) frame[j] = FrameWord(rank, i, j);
    auto result = client->AllGatherWords(frame, timeout);
    if (!result.ok()) return Fail(absl::StrCat("round ", i), result.status());
    if (result->size() != static_cast<size_t>(world) * words) {
      std::printf("ERROR round %d: %zu words, expected %zu\n", i,
                  result->size(), static_cast<size_t>(world) * words);
      return 4;
    }
    for (uint32_t r = 0; r < world; ++r) {
      for (int j = 0; j < words; ++j) {
        if ((*result)[r * words + j] != FrameWord(r, i, j)) {
          std::printf("ERROR round %d: wrong word %d of rank %u\n", i, j, r);
          return 4;
        }
      }
    }
    // Every rank finished the previous batch's set before it submitted this
    // round, so the neighbour's key of that batch is there to read.
    if (last_batch_round != 0 && i == last_batch_round + 1) {
      const int slot = (last_batch_round / kv_every) % kSlots;
      auto got = client->KvGet(Key(neighbour, slot), timeout);
      if (!got.ok()) return Fail(absl::StrCat("get round ", i), got.status());
      if (*got != Value(neighbour, last_batch_round)) {
        std::printf("ERROR round %d: key %s holds '%s'\n", i,
                    Key(neighbour, slot).c_str(), got->substr(0, 40).c_str());
        return 4;
      }
      auto bumped = client->KvAdd("soak/ops", 1);
      if (!bumped.ok()) return Fail("add", bumped.status());
    }
    if (i % kv_every == 0) {
      const int slot = (i / kv_every) % kSlots;
      absl::Status set = client->KvSet(Key(rank, slot), Value(rank, i));
      if (!set.ok()) return Fail(absl::StrCat("set round ", i), set);
      auto gone = client->KvDelete(Key(rank, (slot + kSlots / 2) % kSlots));
      if (!gone.ok()) return Fail("delete", gone.status());
      last_batch_round = i;
      ++kv_batches;
    }
    if (i % progress_every == 0) {
      std::printf("PROGRESS round=%d rss_kb=%ld\n", i, RssKb());
      std::fflush(stdout);
    }
  }
  std::printf("DONE rounds=%d kv_batches=%d rss_kb=%ld\n", rounds, kv_batches,
              RssKb());
  std::fflush(stdout);
  (void)client->Leave();
  return 0;
}
