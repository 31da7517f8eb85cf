// env_rank: a rank for rankrun's tests. It prints the environment rankrun
// gave it, optionally joins the job through it (the C++ client, everything
// from RANKD_* variables) and runs one all_gather_words round, and can fail,
// sleep, ignore SIGTERM or leave a grandchild behind on purpose, or write
// long lines in pieces (as Python's print does unbuffered: the text, then
// the newline) to check that rankrun keeps ranks' lines apart. For
// rankrun --max_restarts, rank R can kill itself with SIGKILL right after
// it joined (before it leaves) in its first K lives (RANKD_RESTART_COUNT
// below K), and every rank can hold its place after joining until
// SIGTERM instead of leaving (--hold), joining every new epoch again
// (--rejoin: Client::Rejoin once a loss moved the job on).
//
//   env_rank [--join] [--gather] [--fail_rank=R --fail_code=C]
//            [--kill_rank=R [--kill_lives=K]] [--sleep_ms=N] [--term_exit=C]
//            [--kill_after_join_rank=R [--kill_lives=K]] [--hold [--rejoin]]
//            [--ignore_term] [--grandchild]
//            [--lines=N --line_bytes=B] [ARGS...]
//
// Output lines (stdout): "ENV k=v ...", "ARGS ...", "JOINED rank=R world=W",
// "GATHERED 0,1,...", "HOLDING", "REJOINED rank=R epoch=E",
// "SLEEPING pid=P", "GRANDCHILD pid=P",
// "TERM"; with
// --lines, N lines LongLine(rank, i, B) and then "TAIL<rank>" with no
// newline. Exit 0 on success, 4 when the gathered words are not
// 0..world-1, 5 when a join or round fails, else what was asked.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/client.h"

namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "<unset>" : v;
}

void Print(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

// Line `i` of rank `rank` for --lines, `bytes` long without its newline:
// "L<rank>:<i>:" and then the letter 'a' + rank % 26 up to `bytes`.
// rankrun_test builds the same lines to compare.
std::string LongLine(int rank, int i, int bytes) {
  std::string line = absl::StrCat("L", rank, ":", i, ":");
  if (static_cast<int>(line.size()) < bytes) {
    line.append(bytes - line.size(), static_cast<char>('a' + rank % 26));
  }
  return line;
}

// Writes all of `data` with write(2), unbuffered.
void WriteRaw(absl::string_view data) {
  while (!data.empty()) {
    const ssize_t n = write(STDOUT_FILENO, data.data(), data.size());
    if (n <= 0) return;
    data.remove_prefix(static_cast<size_t>(n));
  }
}

int term_exit = -1;

void OnTerm(int) {
  const char kLine[] = "TERM\n";
  ssize_t ignored = write(STDOUT_FILENO, kLine, sizeof(kLine) - 1);
  (void)ignored;
  _exit(term_exit);
}

int Flag(const std::vector<std::string>& args, const std::string& name,
         int fallback) {
  for (const std::string& a : args) {
    if (absl::StartsWith(a, name + "=")) {
      int v = 0;
      if (absl::SimpleAtoi(a.substr(name.size() + 1), &v)) return v;
    }
  }
  return fallback;
}

bool Has(const std::vector<std::string>& args, const std::string& name) {
  for (const std::string& a : args) {
    if (a == name) return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  Print(absl::StrCat(
      "ENV RANKD_TARGET=", Env("RANKD_TARGET"), " RANKD_JOB_ID=",
      Env("RANKD_JOB_ID"), " RANKD_LOCAL_RANK=", Env("RANKD_LOCAL_RANK"),
      " RANKD_RANK=", Env("RANKD_RANK"),
      " RANKD_WORLD_SIZE=", Env("RANKD_WORLD_SIZE"), " RANKD_NPROC_PER_NODE=",
      Env("RANKD_NPROC_PER_NODE"), " RANKD_NODE_RANK=", Env("RANKD_NODE_RANK"),
      " RANKD_TOKEN_FILE=", Env("RANKD_TOKEN_FILE"),
      // Which rank the token names, not the secret after it.
      " RANKD_RANK_TOKEN=",
      Env("RANKD_RANK_TOKEN").substr(0, Env("RANKD_RANK_TOKEN").find('.')),
      " LOCAL_RANK=", Env("LOCAL_RANK"), " RANK=", Env("RANK"), " WORLD_SIZE=",
      Env("WORLD_SIZE"), " LOCAL_WORLD_SIZE=", Env("LOCAL_WORLD_SIZE"),
      " RANKD_RESTART_COUNT=", Env("RANKD_RESTART_COUNT"), " pid=", getpid()));
  Print(absl::StrCat("ARGS ", absl::StrJoin(args, " ")));
  int rank = -1;
  if (!absl::SimpleAtoi(Env("RANKD_RANK"), &rank)) rank = -1;

  term_exit = Flag(args, "--term_exit", -1);
  if (term_exit >= 0) signal(SIGTERM, OnTerm);
  if (Has(args, "--ignore_term")) signal(SIGTERM, SIG_IGN);

  if (Has(args, "--join")) {
    rankd::ClientOptions options;  // RANKD_TARGET
    auto client = rankd::Client::Connect(options);
    if (!client.ok()) {
      Print(absl::StrCat("ERROR connect: ", client.status().ToString()));
      return 5;
    }
    rankd::JoinOptions join;
    join.job_id = Env("RANKD_JOB_ID");
    join.local_rank = std::atoi(Env("RANKD_LOCAL_RANK").c_str());
    join.rank = static_cast<uint32_t>(rank);
    join.world_size = std::atoi(Env("RANKD_WORLD_SIZE").c_str());
    join.wait_for_world = absl::Seconds(30);
    // The first event proves the watch stream (the rank's liveness lease)
    // open: a rank killed before that is lost only when its lease expires
    // (the daemon's heartbeat timeout), and its replacement's join would
    // find the slot still held.
    auto watching = std::make_shared<absl::Notification>();
    (*client)->SetEventCallback([watching](const rankd::v1::JobEvent&) {
      if (!watching->HasBeenNotified()) watching->Notify();
    });
    auto session = (*client)->Join(join);
    if (!session.ok()) {
      Print(absl::StrCat("ERROR join: ", session.status().ToString()));
      return 5;
    }
    Print(absl::StrCat(
        "JOINED rank=", session->rank(), " world=", session->world_size(),
        " recovery_by_domain=", session->recovery_by_domain() ? 1 : 0));
    int restarts = 0;
    if (!absl::SimpleAtoi(Env("RANKD_RESTART_COUNT"), &restarts)) restarts = 0;
    if (rank == Flag(args, "--kill_after_join_rank", -2) &&
        restarts < Flag(args, "--kill_lives", 1)) {
      if (!watching->WaitForNotificationWithTimeout(absl::Seconds(10))) {
        Print("ERROR watch: no job event within 10 s of joining");
        return 5;
      }
      raise(SIGKILL);
    }
    if (Has(args, "--hold")) {
      // Until SIGTERM (--term_exit), at most two minutes. With --rejoin, a
      // survivor whose job moved to a new epoch (a lost rank) joins it
      // again, as a serving process does before it re-forms.
      Print("HOLDING");
      const absl::Time until = absl::Now() + absl::Seconds(120);
      while (absl::Now() < until) {
        if (Has(args, "--rejoin") && !(*client)->JobHealth().ok()) {
          const uint64_t ended = (*client)->epoch();
          auto joined = (*client)->Rejoin(ended, absl::Seconds(30));
          if (!joined.ok()) {
            Print(absl::StrCat("ERROR rejoin: ", joined.status().ToString()));
            return 5;
          }
          Print(absl::StrCat("REJOINED rank=", joined->rank(),
                             " epoch=", joined->epoch()));
        }
        absl::SleepFor(absl::Milliseconds(20));
      }
      return 6;
    }
    if (Has(args, "--gather")) {
      const uint32_t mine = static_cast<uint32_t>(rank);
      auto all = (*client)->AllGatherWords({&mine, 1}, absl::Seconds(30));
      if (!all.ok()) {
        Print(absl::StrCat("ERROR gather: ", all.status().ToString()));
        return 5;
      }
      Print(absl::StrCat("GATHERED ", absl::StrJoin(*all, ",")));
      for (size_t i = 0; i < all->size(); ++i) {
        if ((*all)[i] != i) return 4;
      }
      if (all->size() != session->world_size()) return 4;
    }
    if (absl::Status s = (*client)->Leave(); !s.ok()) {
      Print(absl::StrCat("ERROR leave: ", s.ToString()));
      return 5;
    }
  }
  if (Has(args, "--grandchild")) {
    const pid_t pid = fork();
    if (pid == 0) {
      execl("/bin/sleep", "sleep", "120", static_cast<char*>(nullptr));
      _exit(127);
    }
    Print(absl::StrCat("GRANDCHILD pid=", pid));
  }
  if (rank == Flag(args, "--kill_rank", -2)) {
    // In its first --kill_lives lives only (every life without it).
    int life = 0;
    if (!absl::SimpleAtoi(Env("RANKD_RESTART_COUNT"), &life)) life = 0;
    if (life < Flag(args, "--kill_lives", 1 << 30)) raise(SIGKILL);
  }
  if (rank == Flag(args, "--fail_rank", -2)) {
    return Flag(args, "--fail_code", 1);
  }
  if (const int lines = Flag(args, "--lines", 0); lines > 0) {
    const int bytes = Flag(args, "--line_bytes", 100);
    for (int i = 0; i < lines; ++i) {
      // Three writes per line, as an unbuffered print() makes two: another
      // rank's bytes can land between them on a shared output.
      const std::string line = LongLine(rank, i, bytes);
      WriteRaw(absl::string_view(line).substr(0, line.size() / 2));
      WriteRaw(absl::string_view(line).substr(line.size() / 2));
      WriteRaw("\n");
    }
    WriteRaw(absl::StrCat("TAIL", rank));  // no newline: flushed at exit
  }
  if (const int ms = Flag(args, "--sleep_ms", 0); ms > 0) {
    Print(absl::StrCat("SLEEPING pid=", getpid()));
    absl::SleepFor(absl::Milliseconds(ms));
  }
  return 0;
}
