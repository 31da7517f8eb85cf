// rank_worker: a serving-process stand-in for integration tests. It joins a
// job through the client library, then runs the scenario its flags ask for
// (key-value traffic, all_gather_words rounds with self-checked results, a
// stall that waits for the job to fail) and prints one line per outcome:
//   JOINED rank=R world=W node=N
//   DESCRIPTOR {json}
//   KV_OK keys=M
//   ROUNDS_OK n=N
//   KV_SET key=K
//   ERROR code=CODE elapsed_ms=T msg=MESSAGE    (exit 3)
//   MISMATCH ...                                 (exit 4)
//   DONE                                         (exit 0)
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "google/protobuf/util/json_util.h"

ABSL_FLAG(std::string, target, "", "daemon target");
ABSL_FLAG(std::string, job_id, "itest", "job id");
ABSL_FLAG(uint32_t, local_rank, 0, "local rank");
ABSL_FLAG(uint32_t, world_size, 0, "expected world size");
ABSL_FLAG(int, join_wait_ms, 30000, "wait for the world at join");
ABSL_FLAG(int, rounds, 0, "all_gather_words rounds to run");
ABSL_FLAG(int, words, 4, "words per frame");
ABSL_FLAG(int, long_frame_every, 0,
          "every N-th round sends 300-word frames instead (longer than a "
          "round slot holds, so they go over gRPC)");
ABSL_FLAG(std::string, words_for_rank, "",
          "R:K makes rank R send K words instead (frame-length mismatch)");
ABSL_FLAG(int, round_timeout_ms, 20000, "per-round deadline");
ABSL_FLAG(int, round_pause_ms, 0, "sleep this long between rounds");
ABSL_FLAG(int, stall_at_round, 0,
          "before this round, stop and wait for the job to fail");
ABSL_FLAG(int, stall_ms, 30000, "longest stall");
ABSL_FLAG(int, kv_keys, 0, "keys each rank sets and reads back from all");
ABSL_FLAG(int, hold_ms, 0, "after the scenario, stay joined this long");
ABSL_FLAG(bool, hold_through_failure, false,
          "during --hold_ms, stay (neither leave nor exit) when the job "
          "fails or starts recovering: a survivor that never rejoins");
ABSL_FLAG(bool, bounded, false, "use the bounded (submit/wait) round form");
ABSL_FLAG(bool, shared_memory_rounds, true,
          "send rounds through the daemon's round slots when it offers them "
          "(ClientOptions.shared_memory_rounds)");
ABSL_FLAG(std::vector<std::string>, kv_set, {},
          "KEY=VALUE pairs (comma-separated) to set after joining");
ABSL_FLAG(std::string, token_file, "",
          "file holding the bearer token to send to the daemon");
ABSL_FLAG(std::string, leave_when_file, "",
          "after the scenario (and --hold_ms), stay joined until this file "
          "exists, then leave");

namespace {

void Print(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

int Fail(const absl::Status& status, absl::Time started) {
  Print(absl::StrCat(
      "ERROR code=", absl::StatusCodeToString(status.code()),
      " elapsed_ms=", absl::ToInt64Milliseconds(absl::Now() - started),
      " msg=", status.message()));
  return 3;
}

uint32_t Word(uint32_t rank, int round, int j) {
  return rank * 1000003u + static_cast<uint32_t>(round) * 131u +
         static_cast<uint32_t>(j);
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  absl::Time started = absl::Now();
  rankd::ClientOptions options;
  options.target = absl::GetFlag(FLAGS_target);
  options.shared_memory_rounds = absl::GetFlag(FLAGS_shared_memory_rounds);
  if (std::string path = absl::GetFlag(FLAGS_token_file); !path.empty()) {
    std::ifstream in(path);
    std::stringstream token;
    token << in.rdbuf();
    options.bearer_token = std::string(absl::StripAsciiWhitespace(token.str()));
  }
  auto client = rankd::Client::Connect(options);
  if (!client.ok()) return Fail(client.status(), started);
  rankd::JoinOptions join;
  join.job_id = absl::GetFlag(FLAGS_job_id);
  join.local_rank = absl::GetFlag(FLAGS_local_rank);
  join.world_size = absl::GetFlag(FLAGS_world_size);
  join.device.set_kind("cpu");
  join.wait_for_world = absl::Milliseconds(absl::GetFlag(FLAGS_join_wait_ms));
  auto descriptor = (*client)->Join(join);
  if (!descriptor.ok()) return Fail(descriptor.status(), started);
  const uint32_t rank = descriptor->rank();
  const uint32_t world = descriptor->world_size();
  Print(absl::StrCat("JOINED rank=", rank, " world=", world,
                     " node=", descriptor->node_index()));
  std::string json;
  google::protobuf::util::JsonPrintOptions print;
  print.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(*descriptor, &json, print);
  Print(absl::StrCat("DESCRIPTOR ", json));
  Print(absl::StrCat("ROUND_PATH ", (*client)->round_path()));

  for (const std::string& pair : absl::GetFlag(FLAGS_kv_set)) {
    std::vector<std::string> kv = absl::StrSplit(pair, absl::MaxSplits('=', 1));
    if (kv.size() != 2) {
      Print("ERROR code=INVALID_ARGUMENT elapsed_ms=0 msg=bad --kv_set");
      return 2;
    }
    auto s = (*client)->KvSet(kv[0], kv[1]);
    if (!s.ok()) return Fail(s, started);
    Print(absl::StrCat("KV_SET key=", kv[0]));
  }

  // Key-value traffic: every rank writes its keys (under its own "r<rank>/")
  // and bumps a shared counter (under "shared/", which the test's daemons
  // declare shared with --kv_shared_prefixes=shared/), then reads every
  // other rank's keys (blocking until set).
  const int keys = absl::GetFlag(FLAGS_kv_keys);
  constexpr char kCounter[] = "shared/counter";
  if (keys > 0) {
    for (int i = 0; i < keys; ++i) {
      auto s = (*client)->KvSet(absl::StrCat("r", rank, "/k", i),
                                absl::StrCat("v", rank, "-", i));
      if (!s.ok()) return Fail(s, started);
      auto n = (*client)->KvAdd(kCounter, 1);
      if (!n.ok()) return Fail(n.status(), started);
    }
    // The last rank publishes "late" after a pause: everyone else's get
    // is blocked until then.
    if (rank == world - 1) {
      absl::SleepFor(absl::Milliseconds(300));
      auto s = (*client)->KvSet(absl::StrCat("r", rank, "/late"), "released");
      if (!s.ok()) return Fail(s, started);
    }
    auto late = (*client)->KvGet(absl::StrCat("r", world - 1, "/late"),
                                 absl::Seconds(20));
    if (!late.ok()) return Fail(late.status(), started);
    if (*late != "released") {
      Print(absl::StrCat("MISMATCH late=", *late));
      return 4;
    }
    for (uint32_t s = 0; s < world; ++s) {
      for (int i = 0; i < keys; ++i) {
        auto v =
            (*client)->KvGet(absl::StrCat("r", s, "/k", i), absl::Seconds(20));
        if (!v.ok()) return Fail(v.status(), started);
        if (*v != absl::StrCat("v", s, "-", i)) {
          Print(absl::StrCat("MISMATCH key r", s, "/k", i, "=", *v));
          return 4;
        }
      }
    }
    // Barrier, then everyone's increments must be visible.
    uint32_t token = rank;
    auto barrier = (*client)->AllGatherWords(absl::MakeConstSpan(&token, 1),
                                             absl::Seconds(20));
    if (!barrier.ok()) return Fail(barrier.status(), started);
    auto counter = (*client)->KvGet(kCounter, absl::Seconds(1));
    if (!counter.ok()) return Fail(counter.status(), started);
    if (*counter != absl::StrCat(world * keys)) {
      Print(
          absl::StrCat("MISMATCH counter=", *counter, " want ", world * keys));
      return 4;
    }
    Print(absl::StrCat("KV_OK keys=", keys));
  }

  // all_gather_words rounds with deterministic frames, checked exactly.
  const int rounds = absl::GetFlag(FLAGS_rounds);
  int words = absl::GetFlag(FLAGS_words);
  int odd_rank = -1, odd_words = 0;
  if (std::string spec = absl::GetFlag(FLAGS_words_for_rank); !spec.empty()) {
    std::vector<std::string> parts = absl::StrSplit(spec, ':');
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &odd_rank) ||
        !absl::SimpleAtoi(parts[1], &odd_words)) {
      Print(
          "ERROR code=INVALID_ARGUMENT elapsed_ms=0 msg=bad --words_for_rank");
      return 2;
    }
  }
  const absl::Duration round_timeout =
      absl::Milliseconds(absl::GetFlag(FLAGS_round_timeout_ms));
  for (int round = 1; round <= rounds; ++round) {
    if (round > 1 && absl::GetFlag(FLAGS_round_pause_ms) > 0) {
      absl::SleepFor(absl::Milliseconds(absl::GetFlag(FLAGS_round_pause_ms)));
    }
    if (round == absl::GetFlag(FLAGS_stall_at_round)) {
      Print(absl::StrCat("STALLING round=", round));
      absl::Time stall_start = absl::Now();
      absl::Time until =
          stall_start + absl::Milliseconds(absl::GetFlag(FLAGS_stall_ms));
      while (absl::Now() < until) {
        absl::Status health = (*client)->JobHealth();
        if (!health.ok()) return Fail(health, stall_start);
        absl::SleepFor(absl::Milliseconds(5));
      }
      Print(
          "ERROR code=DEADLINE_EXCEEDED elapsed_ms=0 msg=stall ended without a "
          "job failure");
      return 3;
    }
    const int every = absl::GetFlag(FLAGS_long_frame_every);
    const int round_words = every > 0 && round % every == 0 ? 300 : words;
    std::vector<uint32_t> frame(
        static_cast<int>(rank) == odd_rank ? odd_words : round_words);
    for (size_t j = 0; j < frame.size(); ++j) frame[j] = Word(rank, round, j);
    absl::Time round_start = absl::Now();
    absl::StatusOr<std::vector<uint32_t>> result;
    if (absl::GetFlag(FLAGS_bounded)) {
      auto pending = (*client)->SubmitAllGatherWords(frame, round_timeout);
      if (!pending.ok()) return Fail(pending.status(), round_start);
      result = (*pending)->Wait(round_timeout + absl::Seconds(5));
    } else {
      result = (*client)->AllGatherWords(frame, round_timeout);
    }
    if (!result.ok()) return Fail(result.status(), round_start);
    if (result->size() != static_cast<size_t>(world) * round_words) {
      Print(absl::StrCat("MISMATCH round=", round, " size=", result->size()));
      return 4;
    }
    for (uint32_t r = 0; r < world; ++r) {
      for (int j = 0; j < round_words; ++j) {
        if ((*result)[r * round_words + j] != Word(r, round, j)) {
          Print(
              absl::StrCat("MISMATCH round=", round, " rank=", r, " word=", j));
          return 4;
        }
      }
    }
  }
  if (rounds > 0) Print(absl::StrCat("ROUNDS_OK n=", rounds));

  absl::Time hold_until =
      absl::Now() + absl::Milliseconds(absl::GetFlag(FLAGS_hold_ms));
  while (absl::Now() < hold_until) {
    absl::Status health = (*client)->JobHealth();
    if (!health.ok() && !absl::GetFlag(FLAGS_hold_through_failure)) {
      return Fail(health, started);
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  if (std::string path = absl::GetFlag(FLAGS_leave_when_file); !path.empty()) {
    while (!std::ifstream(path).good()) {
      absl::Status health = (*client)->JobHealth();
      if (!health.ok()) return Fail(health, started);
      absl::SleepFor(absl::Milliseconds(10));
    }
  }
  auto left = (*client)->Leave();
  if (!left.ok()) return Fail(left, started);
  Print("DONE");
  return 0;
}
