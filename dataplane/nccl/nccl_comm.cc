#include "dataplane/nccl/nccl_comm.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/monotonic_clock.h"
#include "dataplane/nccl/cuda_device.h"
#include "dataplane/nccl/cuda_stream.h"
#include "dataplane/nccl/internal/native_abi.h"
#include "dataplane/nccl/internal/native_library.h"
#include "dataplane/nccl/internal/nccl_version.h"
#include "dataplane/nccl/internal/result_codes.h"

namespace rankd::dataplane::nccl {

using internal::kNcclScalableInitVersion;
using internal::NcclResult;
using internal::NcclResultCode;
using internal::NcclResultCodeOf;

static_assert(internal::kNcclUniqueIdSize == kNcclUniqueIdBytes);
static_assert(internal::kNcclSuccess == kNcclSuccess);
static_assert(internal::kNcclInProgress == kNcclInProgress);
static_assert(internal::kNcclSplitNoColor == kNcclSplitNoColor);
static_assert(static_cast<int>(NcclRedOp::kSum) == internal::kNcclSum);
static_assert(static_cast<int>(NcclRedOp::kMin) == internal::kNcclMin);
// The result table (internal/result_codes.h) names nccl.h's values.
static_assert(internal::kNcclUnhandledCudaError == 1 &&
              internal::kNcclSystemError == 2 &&
              internal::kNcclInternalError == 3 &&
              internal::kNcclInvalidArgument == 4 &&
              internal::kNcclInvalidUsage == 5 &&
              internal::kNcclRemoteError == 6 &&
              internal::kNcclInProgress == 7);

namespace {

// The loaded NCCL. Only called where a communicator exists (so NCCL
// loaded), or after LoadNccl() succeeded.
const internal::NcclApi& Nccl() { return **internal::LoadNccl(); }

// How Enqueue waits for NCCL's group thread (nccl_comm.h). It takes tens
// of microseconds in steady state, so a sleep would be most of the call.
// Yielding lets that thread run where the CPUs are busy (it may wait
// milliseconds for one on a loaded machine); waits longer than kYieldFor
// (peers connecting on first use, a device far behind, a missing peer)
// sleep, so that a stuck launch does not hold a core.
constexpr absl::Duration kSpinFor = absl::Microseconds(5);
constexpr absl::Duration kYieldFor = absl::Milliseconds(10);
constexpr absl::Duration kFirstSleep = absl::Microseconds(50);
constexpr absl::Duration kLongestSleep = absl::Milliseconds(1);
// Spinning checks the interrupt every this many polls (it takes locks).
constexpr uint64_t kInterruptEvery = 16;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace

int NcclRuntimeVersion() {
  auto nccl = internal::LoadNccl();
  return nccl.ok() ? (*nccl)->version : 0;
}

bool ScalableInitSupported() {
  auto nccl = internal::LoadNccl();
  return nccl.ok() && (*nccl)->version >= kNcclScalableInitVersion &&
         (*nccl)->CommInitRankScalable != nullptr;
}

bool SplitSupported() {
  auto nccl = internal::LoadNccl();
  return nccl.ok() && (*nccl)->version >= internal::kNcclSplitVersion &&
         (*nccl)->CommSplit != nullptr;
}

absl::StatusOr<std::string> NewNcclUniqueId() {
  auto nccl = internal::LoadNccl();
  if (!nccl.ok()) {
    return absl::UnavailableError(
        absl::StrCat("nccl: ncclGetUniqueId: ", nccl.status().message()));
  }
  internal::NcclUniqueId id;
  NcclResult r = (*nccl)->GetUniqueId(&id);
  if (r != kNcclSuccess) return NcclStatus(r, "ncclGetUniqueId");
  return std::string(id.internal, sizeof(id.internal));
}

absl::Status NcclStatus(int nccl_result, absl::string_view what,
                        NcclCommHandle comm) {
  auto nccl = internal::LoadNccl();
  if (!nccl.ok()) {
    return absl::UnavailableError(absl::StrCat("nccl: ", what, ": result ",
                                               nccl_result, "; ",
                                               nccl.status().message()));
  }
  const NcclResultCode& mapped = NcclResultCodeOf(nccl_result);
  std::string message = absl::StrCat("nccl: ", what, ": ", mapped.name, " (",
                                     (*nccl)->GetErrorString(nccl_result),
                                     ", code ", nccl_result, ")");
  const char* last = (*nccl)->GetLastError(comm);
  if (last != nullptr && last[0] != '\0') {
    absl::StrAppend(&message, "; last NCCL error: ", last);
  }
  return absl::Status(mapped.code, message);
}

int NcclAllReduce(const void* send, void* recv, size_t count, NcclDataType type,
                  NcclRedOp op, NcclCommHandle comm, CudaStreamHandle stream) {
  return Nccl().AllReduce(send, recv, count, static_cast<int>(type),
                          static_cast<int>(op), comm, stream);
}

int NcclAllGather(const void* send, void* recv, size_t send_count,
                  NcclDataType type, NcclCommHandle comm,
                  CudaStreamHandle stream) {
  return Nccl().AllGather(send, recv, send_count, static_cast<int>(type), comm,
                          stream);
}

int NcclBroadcast(const void* send, void* recv, size_t count, NcclDataType type,
                  int root, NcclCommHandle comm, CudaStreamHandle stream) {
  return Nccl().Broadcast(send, recv, count, static_cast<int>(type), root, comm,
                          stream);
}

int NcclSend(const void* send, size_t count, NcclDataType type, int peer,
             NcclCommHandle comm, CudaStreamHandle stream) {
  return Nccl().Send(send, count, static_cast<int>(type), peer, comm, stream);
}

int NcclRecv(void* recv, size_t count, NcclDataType type, int peer,
             NcclCommHandle comm, CudaStreamHandle stream) {
  return Nccl().Recv(recv, count, static_cast<int>(type), peer, comm, stream);
}

int NcclGrouped(const std::function<int()>& calls) {
  NcclResult r = Nccl().GroupStart();
  if (r != kNcclSuccess) return r;
  int first = calls();
  NcclResult end = Nccl().GroupEnd();
  if (first != kNcclSuccess && first != kNcclInProgress) return first;
  return end;
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::StartInit(
    Options options) {
  if (options.nranks < 1 || options.rank < 0 ||
      options.rank >= options.nranks || options.device < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "nccl: communicator ", options.name, ": rank ", options.rank, " of ",
        options.nranks, " on device ", options.device, " is not valid"));
  }
  const size_t n = options.unique_ids.size();
  if (n == 0 || n > static_cast<size_t>(options.nranks)) {
    return absl::InvalidArgumentError(
        absl::StrCat("nccl: communicator ", options.name, " needs 1..",
                     options.nranks, " unique ids; got ", n));
  }
  auto nccl = internal::LoadNccl();
  if (!nccl.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "nccl: communicator ", options.name, ": ", nccl.status().message()));
  }
  std::vector<internal::NcclUniqueId> ids(n);
  for (size_t i = 0; i < n; ++i) {
    if (options.unique_ids[i].size() != sizeof(ids[i].internal)) {
      return absl::InvalidArgumentError(
          absl::StrCat("nccl: communicator ", options.name, ": unique id ", i,
                       " has ", options.unique_ids[i].size(), " bytes"));
    }
    std::memcpy(ids[i].internal, options.unique_ids[i].data(),
                sizeof(ids[i].internal));
  }
  if (n > 1 && !ScalableInitSupported()) {
    return absl::UnimplementedError(
        absl::StrCat("nccl: communicator ", options.name, " was given ", n,
                     " unique ids but this NCCL (", NcclRuntimeVersion(),
                     ") has no ncclCommInitRankScalable"));
  }
  DeviceGuard guard(options.device);
  if (!guard.status().ok()) return guard.status();

  // The 2.17 layout only where it matters (splits): older NCCLs read the
  // 2.14 one.
  internal::NcclConfig config;
  config.blocking = 0;
  internal::NcclConfigWithSplitShare split_config;
  split_config.blocking = 0;
  split_config.split_share = options.share_resources ? 1 : 0;
  internal::NcclConfig* config_ptr =
      SplitSupported() ? internal::AsConfig(&split_config) : &config;
  NcclCommHandle comm = nullptr;
  NcclResult r;
  const std::string what = absl::StrCat(
      "init of communicator ", options.name, " (rank ", options.rank, " of ",
      options.nranks, ", device ", options.device, ")");
  if (n == 1) {
    r = (*nccl)->CommInitRankConfig(&comm, options.nranks, ids[0], options.rank,
                                    config_ptr);
  } else {
    r = (*nccl)->CommInitRankScalable(&comm, options.nranks, options.rank,
                                      static_cast<int>(n), ids.data(),
                                      config_ptr);
  }
  if (r != kNcclSuccess && r != kNcclInProgress) {
    absl::Status s = NcclStatus(r, what, comm);
    if (comm != nullptr) (void)(*nccl)->CommAbort(comm);
    return s;
  }
  std::unique_ptr<NcclCommunicator> c(new NcclCommunicator(std::move(options)));
  {
    absl::MutexLock lock(&c->mu_);
    c->comm_ = comm;
  }
  return c;
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Split(
    Options child, int color, int key, absl::Time deadline,
    const std::function<absl::Status()>& interrupt) {
  const bool joins = color != kNcclSplitNoColor;
  const std::string what =
      absl::StrCat("split of communicator ", options_.name, " into ",
                   joins ? child.name : std::string("nothing"), " (rank ",
                   options_.rank, " of ", options_.nranks, ")");
  if (!SplitSupported()) {
    return absl::UnimplementedError(
        absl::StrCat("nccl: ", what, ": this NCCL (", NcclRuntimeVersion(),
                     ") has no ncclCommSplit (2.18 or later)"));
  }
  if (joins && (child.nranks < 1 || child.rank < 0 ||
                child.rank >= child.nranks || color < 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("nccl: ", what, ": rank ", child.rank, " of ",
                     child.nranks, ", color ", color, " is not valid"));
  }
  absl::MutexLock serial(&enqueue_mu_);
  // NCCL writes the child's handle from its split thread when the child is
  // initialized; an abort of this communicator joins that thread, so the
  // handle is never written after this returns.
  NcclCommHandle handle = nullptr;
  auto abandon = [&](const absl::Status& cause) ABSL_EXCLUSIVE_LOCKS_REQUIRED(
                     mu_) { return AbandonSplitLocked(cause, &handle); };
  {
    absl::MutexLock lock(&mu_);
    if (!closed_.ok()) return closed_;
    if (!ready_ || comm_ == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "nccl: ", what, ": communicator ", options_.name, " is not ready"));
    }
    DeviceGuard guard(options_.device);
    if (!guard.status().ok()) return guard.status();
    internal::NcclConfigWithSplitShare config;
    config.blocking = 0;
    config.split_share = child.share_resources ? 1 : 0;
    NcclResult r = Nccl().CommSplit(comm_, color, key, &handle,
                                    internal::AsConfig(&config));
    if (r != kNcclSuccess && r != kNcclInProgress) {
      return abandon(NcclStatus(r, what, comm_));
    }
  }
  // NCCL's split thread runs it (collective: every rank must call it).
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      // Aborted by another thread meanwhile: that abort joined the split
      // thread, which may have written the child's handle first; the child
      // is aborted too, not left behind.
      if (!closed_.ok()) return abandon(closed_);
      NcclResult state = kNcclSuccess;
      NcclResult r = Nccl().CommGetAsyncError(comm_, &state);
      if (r != kNcclSuccess) return abandon(NcclStatus(r, what, comm_));
      if (state == kNcclSuccess) break;
      if (state != kNcclInProgress) {
        return abandon(NcclStatus(state, what, comm_));
      }
      if (interrupt) {
        absl::Status s = interrupt();
        if (!s.ok()) return abandon(s);
      }
      if (MonotonicNow() >= deadline) {
        return abandon(absl::DeadlineExceededError(absl::StrCat(
            "nccl: ", what,
            " did not finish before its deadline (are the other members "
            "splitting it too?); aborted")));
      }
    }
    absl::SleepFor(absl::Microseconds(200));
  }
  NcclCommHandle made = __atomic_load_n(&handle, __ATOMIC_ACQUIRE);
  if (!joins) return std::unique_ptr<NcclCommunicator>();
  if (made == nullptr) {
    return absl::InternalError(
        absl::StrCat("nccl: ", what, ": NCCL reported no new communicator"));
  }
  std::unique_ptr<NcclCommunicator> c(new NcclCommunicator(std::move(child)));
  c->set_destroy_timeout(destroy_timeout_);
  {
    absl::MutexLock lock(&c->mu_);
    c->comm_ = made;
  }
  absl::Status ready = c->AwaitReady(deadline, interrupt);
  if (!ready.ok()) return ready;
  return c;
}

absl::Status NcclCommunicator::AbandonSplitLocked(const absl::Status& cause,
                                                  NcclCommHandle* child) {
  AbortLocked(cause);  // joins NCCL's split thread
  NcclCommHandle made = __atomic_load_n(child, __ATOMIC_ACQUIRE);
  if (made != nullptr) {
    DeviceGuard guard(options_.device);
    (void)Nccl().CommAbort(made);
  }
  return cause;
}

NcclCommunicator::~NcclCommunicator() { Close(destroy_timeout_); }

absl::StatusOr<bool> NcclCommunicator::PollReady() {
  absl::MutexLock lock(&mu_);
  if (!closed_.ok()) return closed_;
  if (ready_) return true;
  if (comm_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("nccl: communicator ", options_.name, " has no handle"));
  }
  NcclResult state = kNcclSuccess;
  NcclResult r = Nccl().CommGetAsyncError(comm_, &state);
  if (r != kNcclSuccess) {
    return NcclStatus(
        r, absl::StrCat("ncclCommGetAsyncError on ", options_.name), comm_);
  }
  if (state == kNcclInProgress) return false;
  if (state == kNcclSuccess) {
    ready_ = true;
    return true;
  }
  return NcclStatus(
      state,
      absl::StrCat("init of communicator ", options_.name, " (rank ",
                   options_.rank, " of ", options_.nranks, ")"),
      comm_);
}

absl::Status NcclCommunicator::AwaitReady(
    absl::Time deadline, const std::function<absl::Status()>& interrupt,
    absl::Duration poll_interval) {
  while (true) {
    absl::StatusOr<bool> ready = PollReady();
    if (!ready.ok()) {
      Abort(ready.status());
      return ready.status();
    }
    if (*ready) return absl::OkStatus();
    if (interrupt) {
      absl::Status s = interrupt();
      if (!s.ok()) {
        Abort(s);
        return s;
      }
    }
    if (MonotonicNow() >= deadline) {
      absl::Status s = absl::DeadlineExceededError(absl::StrCat(
          "nccl: communicator ", options_.name, " (rank ", options_.rank,
          " of ", options_.nranks,
          ") did not finish initializing before its deadline; aborted"));
      Abort(s);
      return s;
    }
    absl::SleepFor(poll_interval);
  }
}

absl::Status NcclCommunicator::CheckAsyncError() {
  absl::MutexLock lock(&mu_);
  if (!closed_.ok()) return closed_;
  if (comm_ == nullptr || !ready_) return absl::OkStatus();
  NcclResult state = kNcclSuccess;
  NcclResult r = Nccl().CommGetAsyncError(comm_, &state);
  if (r != kNcclSuccess) {
    return NcclStatus(
        r, absl::StrCat("ncclCommGetAsyncError on ", options_.name), comm_);
  }
  if (state == kNcclSuccess || state == kNcclInProgress)
    return absl::OkStatus();
  return NcclStatus(
      state, absl::StrCat("asynchronous error on communicator ", options_.name),
      comm_);
}

absl::Status NcclCommunicator::Enqueue(
    absl::string_view what, const std::function<int(NcclCommHandle)>& body,
    absl::Time deadline, const std::function<absl::Status()>& interrupt) {
  absl::MutexLock serial(&enqueue_mu_);
  {
    absl::MutexLock lock(&mu_);
    if (!closed_.ok()) return closed_;
    if (!ready_ || comm_ == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "nccl: ", what, ": communicator ", options_.name, " is not ready"));
    }
    DeviceGuard guard(options_.device);
    if (!guard.status().ok()) return guard.status();
    int r = body(comm_);
    if (r == kNcclSuccess) return absl::OkStatus();
    if (r != kNcclInProgress) return NcclStatus(r, what, comm_);
  }
  // NCCL's group thread is launching the work: spin, then yield, then
  // sleep (kSpinFor, kYieldFor above). Abort() may run between polls.
  const absl::Time start = MonotonicNow();
  absl::Duration sleep = kFirstSleep;
  for (uint64_t polls = 0;; ++polls) {
    {
      absl::MutexLock lock(&mu_);
      if (!closed_.ok()) return closed_;
      NcclResult state = kNcclSuccess;
      NcclResult r = Nccl().CommGetAsyncError(comm_, &state);
      if (r != kNcclSuccess) return NcclStatus(r, what, comm_);
      if (state == kNcclSuccess) return absl::OkStatus();
      if (state != kNcclInProgress) return NcclStatus(state, what, comm_);
    }
    const absl::Time now = MonotonicNow();
    const absl::Duration waited = now - start;
    const bool spinning = waited < kSpinFor;
    if (interrupt && (!spinning || polls % kInterruptEvery == 0)) {
      absl::Status s = interrupt();
      if (!s.ok()) return s;
    }
    if (now >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "nccl: ", what, " on communicator ", options_.name,
          " was not accepted by NCCL before the enqueue deadline (are the "
          "other members calling it?)"));
    }
    if (spinning) {
      CpuRelax();
    } else if (waited < kYieldFor) {
      std::this_thread::yield();
    } else {
      absl::SleepFor(sleep);
      sleep = std::min(sleep * 2, kLongestSleep);
    }
  }
}

void NcclCommunicator::AbortLocked(const absl::Status& cause) {
  if (comm_ != nullptr) {
    DeviceGuard guard(options_.device);
    (void)Nccl().CommAbort(comm_);
    comm_ = nullptr;
  }
  ready_ = false;
  if (closed_.ok()) {
    closed_ = cause.ok()
                  ? absl::AbortedError(absl::StrCat(
                        "nccl: communicator ", options_.name, " was aborted"))
                  : cause;
  }
}

void NcclCommunicator::Abort(const absl::Status& cause) {
  absl::MutexLock lock(&mu_);
  AbortLocked(cause);
}

void NcclCommunicator::Close(absl::Duration timeout) {
  absl::MutexLock serial(&enqueue_mu_);
  const absl::Time deadline = MonotonicNow() + timeout;
  {
    absl::MutexLock lock(&mu_);
    if (comm_ == nullptr) return;
    if (!ready_) {
      AbortLocked(absl::CancelledError(
          absl::StrCat("nccl: communicator ", options_.name,
                       " was closed before it finished initializing")));
      return;
    }
    DeviceGuard guard(options_.device);
    NcclResult r = Nccl().CommFinalize(comm_);
    if (r != kNcclSuccess && r != kNcclInProgress) {
      AbortLocked(NcclStatus(r, "ncclCommFinalize", comm_));
      return;
    }
  }
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (comm_ == nullptr) return;
      NcclResult state = kNcclSuccess;
      NcclResult r = Nccl().CommGetAsyncError(comm_, &state);
      if (r == kNcclSuccess && state == kNcclSuccess) {
        DeviceGuard guard(options_.device);
        (void)Nccl().CommDestroy(comm_);
        comm_ = nullptr;
        ready_ = false;
        if (closed_.ok()) {
          closed_ = absl::FailedPreconditionError(absl::StrCat(
              "nccl: communicator ", options_.name, " was closed"));
        }
        return;
      }
      if (r != kNcclSuccess || state != kNcclInProgress ||
          MonotonicNow() >= deadline) {
        AbortLocked(absl::DeadlineExceededError(
            absl::StrCat("nccl: communicator ", options_.name,
                         " did not finalize in time; aborted")));
        return;
      }
    }
    absl::SleepFor(absl::Milliseconds(1));
  }
}

absl::Status NcclCommunicator::closed_status() const {
  absl::MutexLock lock(&mu_);
  return closed_;
}

bool NcclCommunicator::ready() const {
  absl::MutexLock lock(&mu_);
  return ready_ && closed_.ok();
}

}  // namespace rankd::dataplane::nccl
