// The physical floor under an all_gather_words round between two processes
// on one machine: a ping-pong of a WORDS-word frame, timed the way
// bench/allgather_words_bench.cc times a round (one "<start_ns> <end_ns>"
// line per timed round, after a "# ..." header; bench/summarize.py reads
// it as the rank 0 of a system named floor_<mode>).
//
//   --mode=unix   a Unix stream socketpair: the parent writes the frame, the
//                 child reads it and writes it back (two syscalls each way
//                 plus two wake-ups: what a Unix-socket RPC cannot beat);
//   --mode=futex  shared memory and a futex: the parent writes the frame and
//                 bumps a sequence word (FUTEX_WAKE), the child waits on it
//                 (FUTEX_WAIT), copies the frame back and bumps a second
//                 word (what a shared-memory fast path that sleeps cannot
//                 beat);
//   --mode=spin   the same without the kernel: both sides busy-poll the
//                 sequence words (one cache line each way: what only a
//                 spinning fast path reaches, at a core per waiter).
//
// The futex mode never spins and the spin mode never sleeps: the two ends
// of what a fast path can choose between (sleeping costs a wake-up across
// cores; spinning costs a core per waiter). With --cpu_a/--cpu_b the
// two processes are pinned to those CPUs. The parent records; the child only
// echoes. Depends on Linux and the C++ standard library only.
#include <linux/futex.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Args {
  std::string mode = "futex";
  int warmup = 200;
  int rounds = 2000;
  int words = 4;
  int cpu_a = -1, cpu_b = -1;
  int pace_us = 0;  // pause between round trips (the pinger's side)
  std::string out;
};

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "floor_pingpong: %s: %s\n", what.c_str(),
               std::strerror(errno));
  std::exit(1);
}

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    auto value = [&](const char* flag) -> const char* {
      const size_t n = std::strlen(flag);
      return s.compare(0, n, flag) == 0 ? s.c_str() + n : nullptr;
    };
    if (const char* v = value("--mode=")) {
      a.mode = v;
    } else if (const char* v = value("--warmup=")) {
      a.warmup = std::atoi(v);
    } else if (const char* v = value("--rounds=")) {
      a.rounds = std::atoi(v);
    } else if (const char* v = value("--words=")) {
      a.words = std::atoi(v);
    } else if (const char* v = value("--cpu_a=")) {
      a.cpu_a = std::atoi(v);
    } else if (const char* v = value("--cpu_b=")) {
      a.cpu_b = std::atoi(v);
    } else if (const char* v = value("--pace_us=")) {
      a.pace_us = std::atoi(v);
    } else if (const char* v = value("--out=")) {
      a.out = v;
    } else {
      std::fprintf(stderr,
                   "usage: floor_pingpong --mode=unix|futex|spin --out=PATH "
                   "[--warmup=N] [--rounds=N] [--words=N] [--cpu_a=C] "
                   "[--cpu_b=C] [--pace_us=N]\n");
      std::exit(2);
    }
  }
  if ((a.mode != "unix" && a.mode != "futex" && a.mode != "spin") ||
      a.out.empty() || a.rounds < 1 || a.words < 1 || a.words > 4096 ||
      a.warmup < 0 || a.pace_us < 0) {
    std::fprintf(stderr, "floor_pingpong: bad arguments (see usage)\n");
    std::exit(2);
  }
  return a;
}

int64_t NowNs() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return int64_t{t.tv_sec} * 1000000000 + t.tv_nsec;
}

void Pin(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) Die("sched_setaffinity");
}

// --- futex ------------------------------------------------------------------

struct Shared {
  std::atomic<uint32_t> ping{0};  // rounds the parent posted
  std::atomic<uint32_t> pong{0};  // rounds the child answered
  uint32_t frame[4096];
  uint32_t reply[4096];
};

void FutexWait(std::atomic<uint32_t>* word, uint32_t seen) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, seen,
          nullptr, nullptr, 0);
}
void FutexWake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, 1, nullptr,
          nullptr, 0);
}

// Waits until *word != seen: in the kernel, or with `spin_only` by
// polling.
void AwaitChange(std::atomic<uint32_t>* word, uint32_t seen, bool spin_only) {
  while (word->load(std::memory_order_acquire) == seen) {
    if (spin_only) {
      __builtin_ia32_pause();
    } else {
      FutexWait(word, seen);
    }
  }
}

// --- unix -------------------------------------------------------------------

void WriteAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) Die("write");
    p += w;
    n -= static_cast<size_t>(w);
  }
}
void ReadAll(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) Die("read");
    p += r;
    n -= static_cast<size_t>(r);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = Parse(argc, argv);
  const int total = a.warmup + a.rounds;
  const size_t bytes = sizeof(uint32_t) * static_cast<size_t>(a.words);
  const bool spin_only = a.mode == "spin";
  std::vector<int64_t> start(a.rounds), end(a.rounds);

  void* mapped = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) Die("mmap");
  Shared* shared = new (mapped) Shared();
  int fds[2] = {-1, -1};
  if (a.mode == "unix" && socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) {
    Die("socketpair");
  }

  const pid_t child = fork();
  if (child < 0) Die("fork");
  if (child == 0) {  // the echo
    Pin(a.cpu_b);
    std::vector<uint32_t> frame(a.words);
    for (int i = 0; i < total; ++i) {
      if (a.mode == "unix") {
        ReadAll(fds[1], frame.data(), bytes);
        WriteAll(fds[1], frame.data(), bytes);
      } else {
        AwaitChange(&shared->ping, static_cast<uint32_t>(i), spin_only);
        std::memcpy(shared->reply, shared->frame, bytes);
        shared->pong.store(static_cast<uint32_t>(i + 1),
                           std::memory_order_release);
        if (!spin_only) FutexWake(&shared->pong);
      }
    }
    _exit(0);
  }

  Pin(a.cpu_a);
  std::vector<uint32_t> frame(a.words), back(a.words);
  for (int i = 0; i < total; ++i) {
    for (int w = 0; w < a.words; ++w) frame[w] = static_cast<uint32_t>(i + w);
    const int64_t t0 = NowNs();
    if (a.mode == "unix") {
      WriteAll(fds[0], frame.data(), bytes);
      ReadAll(fds[0], back.data(), bytes);
    } else {
      std::memcpy(shared->frame, frame.data(), bytes);
      shared->ping.store(static_cast<uint32_t>(i + 1),
                         std::memory_order_release);
      if (!spin_only) FutexWake(&shared->ping);
      AwaitChange(&shared->pong, static_cast<uint32_t>(i), spin_only);
      std::memcpy(back.data(), shared->reply, bytes);
    }
    const int64_t t1 = NowNs();
    if (std::memcmp(frame.data(), back.data(), bytes) != 0) {
      std::fprintf(stderr, "floor_pingpong: round %d echoed other bytes\n", i);
      return 1;
    }
    if (i >= a.warmup) {
      start[i - a.warmup] = t0;
      end[i - a.warmup] = t1;
    }
    if (a.pace_us > 0) usleep(static_cast<useconds_t>(a.pace_us));
  }
  int status = 0;
  if (waitpid(child, &status, 0) != child || !WIFEXITED(status) ||
      WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "floor_pingpong: the echo process failed\n");
    return 1;
  }
  FILE* f = std::fopen(a.out.c_str(), "w");
  if (f == nullptr) Die("open " + a.out);
  std::fprintf(f, "# floor_%s words=%d rounds=%d warmup=%d\n", a.mode.c_str(),
               a.words, a.rounds, a.warmup);
  for (int i = 0; i < a.rounds; ++i) {
    std::fprintf(f, "%lld %lld\n", static_cast<long long>(start[i]),
                 static_cast<long long>(end[i]));
  }
  std::fclose(f);
  return 0;
}
