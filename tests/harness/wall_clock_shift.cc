// libwall_clock_shift.so: steps the wall clock of the processes it is
// preloaded into (LD_PRELOAD), as NTP or an operator's `date -s` would,
// without touching the host's clock. Test-only (tests/wall_clock_step_test.cc).
//
// The shift is 8 bytes, a signed count of nanoseconds, at the start of the
// file named by RANKD_TEST_WALL_CLOCK_SHIFT_FILE; the test writes it while the
// processes run and they see it on their next reading. CLOCK_REALTIME (and
// its coarse variant), gettimeofday and time move by it; the monotonic clocks
// do not. Depends only on libc.
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

namespace {

using ClockGettime = int (*)(clockid_t, struct timespec*);

ClockGettime real_clock_gettime = nullptr;
const int64_t* shift_ns = nullptr;  // mapped from the file; null if none
pthread_once_t once = PTHREAD_ONCE_INIT;

void Load() {
  real_clock_gettime =
      reinterpret_cast<ClockGettime>(dlsym(RTLD_NEXT, "clock_gettime"));
  const char* path = getenv("RANKD_TEST_WALL_CLOCK_SHIFT_FILE");
  if (path == nullptr) return;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  void* map = mmap(nullptr, sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (map != MAP_FAILED) shift_ns = static_cast<const int64_t*>(map);
}

int64_t ShiftNs() {
  return shift_ns == nullptr ? 0 : __atomic_load_n(shift_ns, __ATOMIC_RELAXED);
}

void Shift(struct timespec* ts) {
  int64_t ns =
      static_cast<int64_t>(ts->tv_sec) * 1000000000 + ts->tv_nsec + ShiftNs();
  ts->tv_sec = ns / 1000000000;
  ts->tv_nsec = ns % 1000000000;
  if (ts->tv_nsec < 0) {
    ts->tv_nsec += 1000000000;
    ts->tv_sec -= 1;
  }
}

}  // namespace

extern "C" {

int clock_gettime(clockid_t clock, struct timespec* ts) {
  pthread_once(&once, Load);
  if (real_clock_gettime == nullptr) return -1;
  int rc = real_clock_gettime(clock, ts);
  if (rc == 0 && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE)) {
    Shift(ts);
  }
  return rc;
}

int gettimeofday(struct timeval* tv, void* /*tz*/) {
  struct timespec ts;
  int rc = clock_gettime(CLOCK_REALTIME, &ts);
  if (rc == 0) {  // glibc declares `tv` non-null
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
  }
  return rc;
}

time_t time(time_t* out) {
  struct timespec ts;
  if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return -1;
  if (out != nullptr) *out = ts.tv_sec;
  return ts.tv_sec;
}

}  // extern "C"
