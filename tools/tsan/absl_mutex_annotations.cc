// ThreadSanitizer builds only (--config=tsan in .bazelrc links this into
// every binary through --custom_malloc; it provides no malloc).
//
// Debian's abseil is not built with ThreadSanitizer, so TSan cannot see
// absl::Mutex lock or unlock, and every access guarded by one (rankd's and
// gRPC's alike) is reported as a race. This file defines absl::Mutex's and
// absl::CondVar's public locking functions (and absl::Notification's) in the
// executable, which
// preempts the shared library's definitions (the dynamic linker searches the
// executable first, for the library's own calls too), tells TSan what each
// one does with the same __tsan_mutex_* annotations abseil's own TSan build
// makes, and calls the library's definition, found with dlsym(RTLD_NEXT).
// A wait (Await, CondVar::Wait) releases and reacquires the mutex in the
// mode it is held in, which this file tracks per thread for reader locks.
// The library's *WithTimeout functions call its *WithDeadline ones, so here
// they call the annotated *WithDeadline instead, to be annotated once.
//
// The mangled names are those of Debian 12's abseil (inline namespace
// debian3); a missing one aborts at first use, naming it.
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <unordered_map>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace {

template <typename Fn>
Fn Real(const char* mangled) {
  void* fn = dlsym(RTLD_NEXT, mangled);
  if (fn == nullptr) {
    std::fprintf(stderr, "absl_mutex_annotations: %s not found: %s\n", mangled,
                 dlerror());
    std::abort();
  }
  return reinterpret_cast<Fn>(fn);
}

// Mutexes this thread holds in reader mode (a thread holds few at once).
thread_local std::array<const void*, 32> reader_held{};
thread_local size_t readers = 0;

void NoteReader(const void* mu) {
  if (readers < reader_held.size()) reader_held[readers++] = mu;
}
void ForgetReader(const void* mu) {
  auto end = reader_held.begin() + readers;
  auto it = std::find(reader_held.begin(), end, mu);
  if (it != end) {
    *it = *(end - 1);
    --readers;
  }
}
unsigned ModeOf(const void* mu) {
  auto end = reader_held.begin() + readers;
  return std::find(reader_held.begin(), end, mu) != end ? __tsan_mutex_read_lock
                                                        : 0;
}

// True when `caller` lies in this program's own (instrumented) code rather
// than in a system library (libgrpc, libabsl_*, libprotobuf, ...).
// Answers are cached per call site.
bool CalledFromInstrumentedCode(void* caller) {
  thread_local std::unordered_map<void*, bool> known;
  auto it = known.find(caller);
  if (it != known.end()) return it->second;
  Dl_info info{};
  bool ours = true;
  if (dladdr(caller, &info) != 0 && info.dli_fname != nullptr) {
    const std::string_view file = info.dli_fname;
    ours = file.find("/usr/lib/") == std::string_view::npos &&
           file.find("/lib/x86_64-linux-gnu/") == std::string_view::npos;
  }
  known.emplace(caller, ours);
  return ours;
}

void PreLock(void* mu, unsigned flags) { __tsan_mutex_pre_lock(mu, flags); }
void PostLock(void* mu, unsigned flags) {
  __tsan_mutex_post_lock(mu, flags, 0);
  if (flags & __tsan_mutex_read_lock) NoteReader(mu);
}
void PreUnlock(void* mu, unsigned flags) { __tsan_mutex_pre_unlock(mu, flags); }
void PostUnlock(void* mu, unsigned flags) {
  __tsan_mutex_post_unlock(mu, flags);
  if (flags & __tsan_mutex_read_lock) ForgetReader(mu);
}

// A condition the library evaluates while it holds the mutex, but where TSan
// does not know it is held (inside LockWhen before it returns, inside Await
// after the release above): the evaluation acquires from and releases to
// the mutex, the order the real lock gives it.
struct Guarded {
  void* mu;
  const absl::Condition* cond;
};
bool EvalGuarded(Guarded* g) {
  __tsan_acquire(g->mu);
  const bool met = g->cond->Eval();
  __tsan_release(g->mu);
  return met;
}

// Runs `wait` (which releases `mu` and reacquires it before returning) with
// TSan told of the release and the reacquisition.
template <typename Wait>
auto Released(void* mu, Wait wait) {
  const unsigned mode = ModeOf(mu);
  __tsan_mutex_pre_unlock(mu, mode);
  __tsan_mutex_post_unlock(mu, mode);
  auto result = wait();
  __tsan_mutex_pre_lock(mu, mode);
  __tsan_mutex_post_lock(mu, mode, 0);
  return result;
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

#define RANKD_REAL(type, name) static const auto real = Real<type>(name)

void Mutex::Lock() {
  RANKD_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex4LockEv");
  PreLock(this, 0);
  real(this);
  PostLock(this, 0);
}

void Mutex::Unlock() {
  RANKD_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex6UnlockEv");
  PreUnlock(this, 0);
  real(this);
  PostUnlock(this, 0);
}

bool Mutex::TryLock() {
  RANKD_REAL(bool (*)(Mutex*), "_ZN4absl7debian35Mutex7TryLockEv");
  PreLock(this, __tsan_mutex_try_lock);
  const bool locked = real(this);
  PostLock(this,
           __tsan_mutex_try_lock | (locked ? 0 : __tsan_mutex_try_lock_failed));
  return locked;
}

void Mutex::ReaderLock() {
  RANKD_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex10ReaderLockEv");
  PreLock(this, __tsan_mutex_read_lock);
  real(this);
  PostLock(this, __tsan_mutex_read_lock);
}

void Mutex::ReaderUnlock() {
  RANKD_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex12ReaderUnlockEv");
  PreUnlock(this, __tsan_mutex_read_lock);
  real(this);
  PostUnlock(this, __tsan_mutex_read_lock);
}

bool Mutex::ReaderTryLock() {
  RANKD_REAL(bool (*)(Mutex*), "_ZN4absl7debian35Mutex13ReaderTryLockEv");
  PreLock(this, __tsan_mutex_try_read_lock);
  const bool locked = real(this);
  PostLock(this, locked ? __tsan_mutex_try_read_lock
                        : __tsan_mutex_try_read_lock_failed);
  return locked;
}

void Mutex::LockWhen(const Condition& cond) {
  Guarded guarded{this, &cond};
  RANKD_REAL(void (*)(Mutex*, const Condition&),
             "_ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE");
  PreLock(this, 0);
  real(this, Condition(&EvalGuarded, &guarded));
  PostLock(this, 0);
}

void Mutex::ReaderLockWhen(const Condition& cond) {
  Guarded guarded{this, &cond};
  RANKD_REAL(void (*)(Mutex*, const Condition&),
             "_ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE");
  PreLock(this, __tsan_mutex_read_lock);
  real(this, Condition(&EvalGuarded, &guarded));
  PostLock(this, __tsan_mutex_read_lock);
}

bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  return LockWhenWithDeadline(cond, Now() + timeout);
}

bool Mutex::ReaderLockWhenWithTimeout(const Condition& cond, Duration timeout) {
  return ReaderLockWhenWithDeadline(cond, Now() + timeout);
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  Guarded guarded{this, &cond};
  RANKD_REAL(
      bool (*)(Mutex*, const Condition&, Time),
      "_ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_"
      "4TimeE");
  PreLock(this, 0);
  const bool met = real(this, Condition(&EvalGuarded, &guarded), deadline);
  PostLock(this, 0);
  return met;
}

bool Mutex::ReaderLockWhenWithDeadline(const Condition& cond, Time deadline) {
  Guarded guarded{this, &cond};
  RANKD_REAL(
      bool (*)(Mutex*, const Condition&, Time),
      "_ZN4absl7debian35Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_"
      "4TimeE");
  PreLock(this, __tsan_mutex_read_lock);
  const bool met = real(this, Condition(&EvalGuarded, &guarded), deadline);
  PostLock(this, __tsan_mutex_read_lock);
  return met;
}

void Mutex::Await(const Condition& cond) {
  Guarded guarded{this, &cond};
  RANKD_REAL(void (*)(Mutex*, const Condition&),
             "_ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE");
  Released(this, [&] {
    real(this, Condition(&EvalGuarded, &guarded));
    return 0;
  });
}

bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  return AwaitWithDeadline(cond, Now() + timeout);
}

bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  Guarded guarded{this, &cond};
  RANKD_REAL(bool (*)(Mutex*, const Condition&, Time),
             "_ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_"
             "4TimeE");
  return Released(this, [&] {
    return real(this, Condition(&EvalGuarded, &guarded), deadline);
  });
}

void CondVar::Wait(Mutex* mu) {
  RANKD_REAL(void (*)(CondVar*, Mutex*),
             "_ZN4absl7debian37CondVar4WaitEPNS0_5MutexE");
  Released(mu, [&] {
    real(this, mu);
    return 0;
  });
}

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  return WaitWithDeadline(mu, Now() + timeout);
}

bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  RANKD_REAL(bool (*)(CondVar*, Mutex*, Time),
             "_ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_"
             "4TimeE");
  return Released(mu, [&] { return real(this, mu, deadline); });
}

Mutex::~Mutex() {
  RANKD_REAL(void (*)(Mutex*), "_ZN4absl7debian35MutexD2Ev");
  // A later mutex at the same address (a stack frame reused) starts fresh.
  // Only for mutexes of instrumented code: TSan saw those created, and sees
  // how their owners hand them between threads; an uninstrumented library
  // (gRPC) frees its own mutexes after hand-offs TSan cannot see.
  if (CalledFromInstrumentedCode(__builtin_return_address(0))) {
    __tsan_mutex_destroy(this, 0);
  }
  real(this);
}

// Notification, implemented here as the library does (its flag set under
// its mutex, waits through LockWhen) but with instrumented atomics and the
// annotated mutex functions above, so TSan sees notify-then-wait.
void Notification::Notify() {
  MutexLock lock(&mutex_);
  if (notified_yet_.load(std::memory_order_relaxed)) {
    std::fprintf(stderr, "Notify() called more than once on %p\n", this);
    std::abort();
  }
  notified_yet_.store(true, std::memory_order_release);
}

Notification::~Notification() {
  // Waits for a Notify() in progress on another thread to finish.
  MutexLock lock(&mutex_);
}

void Notification::WaitForNotification() const {
  if (!HasBeenNotifiedInternal(&notified_yet_)) {
    mutex_.LockWhen(Condition(&HasBeenNotifiedInternal, &notified_yet_));
    mutex_.Unlock();
  }
}

bool Notification::WaitForNotificationWithTimeout(Duration timeout) const {
  bool notified = HasBeenNotifiedInternal(&notified_yet_);
  if (!notified) {
    notified = mutex_.LockWhenWithTimeout(
        Condition(&HasBeenNotifiedInternal, &notified_yet_), timeout);
    mutex_.Unlock();
  }
  return notified;
}

bool Notification::WaitForNotificationWithDeadline(Time deadline) const {
  bool notified = HasBeenNotifiedInternal(&notified_yet_);
  if (!notified) {
    notified = mutex_.LockWhenWithDeadline(
        Condition(&HasBeenNotifiedInternal, &notified_yet_), deadline);
    mutex_.Unlock();
  }
  return notified;
}

#undef RANKD_REAL

ABSL_NAMESPACE_END
}  // namespace absl

// Notification::HasBeenNotifiedInternal is declared inline but defined only
// in the library, so it is defined here under its symbol name.
bool HasBeenNotifiedInternal(const std::atomic<bool>* notified_yet) __asm__(
    "_ZN4absl7debian312Notification23HasBeenNotifiedInternalEPKSt6atomicIbE");
bool HasBeenNotifiedInternal(const std::atomic<bool>* notified_yet) {
  return notified_yet->load(std::memory_order_acquire);
}

// TSan's defaults for every binary of the build (TSAN_OPTIONS adds to them).
extern "C" const char* __tsan_default_options() {
  // Races seen only inside uninstrumented libraries (their memcpy, for
  // example) are theirs to find, not ours.
  return "ignore_noninstrumented_modules=1";
}

extern "C" const char* __tsan_default_suppressions() {
  // Only code of gRPC's own that its headers inline into our binaries: it is
  // instrumented, but the gRPC internals that hand its state between
  // threads (completion queues, the executor) are in the uninstrumented
  // libgrpc, so TSan sees the accesses without the synchronization.
  // Each entry names a gRPC function that only touches gRPC's own state (a
  // tag reset, an op set), never one that calls back into our code, so no
  // race of ours can match it.
  return "race:grpc::internal::CallOpSet\n"
         "race:grpc::internal::CallbackWithSuccessTag::Clear\n";
}
