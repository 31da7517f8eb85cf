// ThreadSanitizer builds only (--config=tsan in .bazelrc links this into
// every binary through --custom_malloc; it provides no malloc).
//
// Debian's abseil is not built with ThreadSanitizer, so TSan cannot see
// absl::Mutex lock or unlock, and every access guarded by one (rankd's and
// gRPC's alike) is reported as a race. This file defines absl::Mutex's and
// absl::CondVar's public locking functions (and absl::Notification's) in the
// executable, which preempts the shared library's definitions (the dynamic
// linker searches the executable first, for the library's own calls too),
// and calls the library's definition, found with dlsym(RTLD_NEXT).
//
// Each wrapper tells TSan the happens-before order the lock creates: taking
// a mutex acquires from it (__tsan_acquire on its address), releasing it
// releases to it (__tsan_release), a wait releases before and acquires
// after, and a condition the library evaluates while it holds the mutex
// acquires before and releases after. That is all a data race check needs.
// It does not use TSan's mutex annotations (__tsan_mutex_pre_lock ...):
// those also track who holds each mutex, which breaks on gRPC's mutexes,
// locked and freed by gRPC's uninstrumented code after hand-offs TSan cannot
// see. So TSan reports no lock-order inversions and lists no held mutexes
// in its reports; races are reported as usual.
//
// This file itself is compiled without TSan instrumentation (its BUILD
// target): the wrapper conditions it hands the library are read by other
// threads inside the library, before they could announce their acquire.
//
// The library's *WithTimeout functions call its *WithDeadline ones, so here
// they call the wrapped *WithDeadline instead, to be annotated once. The
// mangled names are those of Debian 12's abseil (inline namespace debian3);
// a missing one aborts at first use, naming it.
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

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

// A condition, evaluated by the library while it holds `mu` (on whichever
// thread): ordered after the mutex's last release and before its next
// acquisition, as the lock orders it.
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

// Runs `wait`, which releases `mu` and holds it again when it returns.
template <typename Wait>
auto Released(void* mu, Wait wait) {
  __tsan_release(mu);
  auto result = wait();
  __tsan_acquire(mu);
  return result;
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

#define RANKD_REAL(type, name) static const auto real = Real<type>(name)

void Mutex::Lock() {
  RANKD_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex4LockEv");
  real(this);
  __tsan_acquire(this);
}

void Mutex::Unlock() {
  RANKD_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex6UnlockEv");
  __tsan_release(this);
  real(this);
}

bool Mutex::TryLock() {
  RANKD_REAL(bool (*)(Mutex*), "_ZN4absl7debian35Mutex7TryLockEv");
  const bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}

void Mutex::ReaderLock() {
  RANKD_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex10ReaderLockEv");
  real(this);
  __tsan_acquire(this);
}

void Mutex::ReaderUnlock() {
  RANKD_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex12ReaderUnlockEv");
  __tsan_release(this);
  real(this);
}

bool Mutex::ReaderTryLock() {
  RANKD_REAL(bool (*)(Mutex*), "_ZN4absl7debian35Mutex13ReaderTryLockEv");
  const bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}

void Mutex::LockWhen(const Condition& cond) {
  RANKD_REAL(void (*)(Mutex*, const Condition&),
             "_ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE");
  Guarded guarded{this, &cond};
  __tsan_release(this);  // publishes `cond` to the thread that evaluates it
  real(this, Condition(&EvalGuarded, &guarded));
  __tsan_acquire(this);
}

void Mutex::ReaderLockWhen(const Condition& cond) {
  RANKD_REAL(void (*)(Mutex*, const Condition&),
             "_ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE");
  Guarded guarded{this, &cond};
  __tsan_release(this);  // publishes `cond` to the thread that evaluates it
  real(this, Condition(&EvalGuarded, &guarded));
  __tsan_acquire(this);
}

bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  return LockWhenWithDeadline(cond, Now() + timeout);
}

bool Mutex::ReaderLockWhenWithTimeout(const Condition& cond, Duration timeout) {
  return ReaderLockWhenWithDeadline(cond, Now() + timeout);
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  RANKD_REAL(
      bool (*)(Mutex*, const Condition&, Time),
      "_ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_"
      "4TimeE");
  Guarded guarded{this, &cond};
  __tsan_release(this);
  const bool met = real(this, Condition(&EvalGuarded, &guarded), deadline);
  __tsan_acquire(this);  // held either way
  return met;
}

bool Mutex::ReaderLockWhenWithDeadline(const Condition& cond, Time deadline) {
  RANKD_REAL(
      bool (*)(Mutex*, const Condition&, Time),
      "_ZN4absl7debian35Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_"
      "4TimeE");
  Guarded guarded{this, &cond};
  __tsan_release(this);
  const bool met = real(this, Condition(&EvalGuarded, &guarded), deadline);
  __tsan_acquire(this);
  return met;
}

void Mutex::Await(const Condition& cond) {
  RANKD_REAL(void (*)(Mutex*, const Condition&),
             "_ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE");
  Guarded guarded{this, &cond};
  Released(this, [&] {
    real(this, Condition(&EvalGuarded, &guarded));
    return 0;
  });
}

bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  return AwaitWithDeadline(cond, Now() + timeout);
}

bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  RANKD_REAL(bool (*)(Mutex*, const Condition&, Time),
             "_ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_"
             "4TimeE");
  Guarded guarded{this, &cond};
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

#undef RANKD_REAL

// Notification, implemented here as the library does (its flag set under
// its mutex, waits through LockWhen) but with the wrapped mutex functions
// above, and the flag's store and loads annotated, so TSan sees
// notify-then-wait.
void Notification::Notify() {
  MutexLock lock(&mutex_);
  __tsan_release(&notified_yet_);
  if (notified_yet_.load(std::memory_order_relaxed)) {
    std::fprintf(stderr, "Notify() called more than once on %p\n",
                 static_cast<void*>(this));
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
  return WaitForNotificationWithDeadline(Now() + timeout);
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

ABSL_NAMESPACE_END
}  // namespace absl

// Notification::HasBeenNotifiedInternal is declared inline but defined only
// in the library, so it is defined here under its symbol name.
bool HasBeenNotifiedInternal(const std::atomic<bool>* notified_yet) __asm__(
    "_ZN4absl7debian312Notification23HasBeenNotifiedInternalEPKSt6atomicIbE");
bool HasBeenNotifiedInternal(const std::atomic<bool>* notified_yet) {
  const bool notified = notified_yet->load(std::memory_order_acquire);
  if (notified) __tsan_acquire(const_cast<std::atomic<bool>*>(notified_yet));
  return notified;
}

// TSan's defaults for every binary of the build (TSAN_OPTIONS adds to them).
extern "C" const char* __tsan_default_options() {
  // Races seen only inside uninstrumented libraries (their memcpy, for
  // example) are theirs to find, not ours.
  return "ignore_noninstrumented_modules=1";
}

extern "C" const char* __tsan_default_suppressions() {
  // gRPC code that its headers inline into our binaries is instrumented, but
  // the gRPC internals that hand its state between threads (completion
  // queues, the executor) are in the uninstrumented libgrpc, so TSan sees
  // those accesses without their synchronization. race_top matches only a
  // racing access made by gRPC's own code (its tags, op sets and byte
  // buffers), not the messages it fills in for us, nor our callbacks it
  // runs. The race: entry
  // matches any frame, so a race inside the destructor of one of our
  // callbacks' captures, which Clear runs, would be hidden too: the blind
  // spot this suppression costs.
  return "race_top:grpc::\n"
         "race:grpc::internal::CallbackWithSuccessTag::Clear\n"
         "race:grpc::internal::CallbackWithSuccessTag::Set\n"
         // Moves the call's final status into the tag's grpc::Status, which
         // the caller's thread constructed; the hand-off between the two is
         // libgrpc's completion queue (seen in //client:admin_client_test).
         "race:grpc::internal::CallOpClientRecvStatus::FinishOp\n"
         // Holds and destroys the serializer of a message being sent, which
         // runs in the uninstrumented libprotobuf.
         "race:grpc::internal::InterceptorBatchMethodsImpl\n"
         // A unary callback call: its status tag and our callback's copy
         // are built in the caller's thread and run by gRPC's callback
         // thread after the hand-off in libgrpc's completion queue (seen in
         // //tests:cluster_test's rank_worker). Matches only when one side
         // is the call's construction, so what the callback does later
         // stays checked.
         "race:grpc::internal::CallbackUnaryCallImpl\n"
         // Threads libgrpc starts for itself (the callback API's
         // "nexting_thread"s, its executor's) that a process can still have
         // at exit: gRPC joins them when its last channel goes, which a
         // rank leaving on an error can race. A leak of a thread rankd
         // starts (std::thread, not grpc_core::Thread) is still reported.
         "thread:grpc_core::Thread::Thread\n";
}
