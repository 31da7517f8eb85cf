#include "dataplane/nccl/nccl_comm.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "dataplane/nccl/cuda_handles.h"
#include "dataplane/nccl/nccl_types.h"
#include "local_cuda_config.h"

#if RANKD_HAVE_CUDA
#include <nccl.h>

static_assert(NCCL_UNIQUE_ID_BYTES ==
                  rankd::dataplane::nccl::kNcclUniqueIdBytes,
              "ncclUniqueId size");
static_assert(ncclSuccess == rankd::dataplane::nccl::kNcclSuccess);
static_assert(ncclInProgress == rankd::dataplane::nccl::kNcclInProgress);
static_assert(NCCL_VERSION_CODE ==
                  rankd::dataplane::nccl::NcclVersionCode(
                      NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH),
              "NcclVersionCode must match NCCL_VERSION");
#endif

namespace rankd::dataplane::nccl {

#if RANKD_HAVE_CUDA

int NcclBuildVersion() { return NCCL_VERSION_CODE; }

int NcclRuntimeVersion() {
  static const int version = [] {
    int v = 0;
    if (ncclGetVersion(&v) != ncclSuccess) return 0;
    return v;
  }();
  return version;
}

bool ScalableInitSupported() {
#if NCCL_VERSION_CODE >= 22304
  return NcclRuntimeVersion() >= kNcclScalableInitVersion;
#else
  return false;
#endif
}

absl::StatusOr<std::string> NewNcclUniqueId() {
  ncclUniqueId id;
  ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) return NcclStatus(r, "ncclGetUniqueId");
  return std::string(id.internal, sizeof(id.internal));
}

absl::Status NcclStatus(int nccl_result, absl::string_view what,
                        NcclCommHandle comm) {
  auto result = static_cast<ncclResult_t>(nccl_result);
  std::string message = absl::StrCat("nccl: ", what, ": ",
                                     ncclGetErrorString(result), " (code ",
                                     nccl_result, ")");
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && last[0] != '\0') {
    absl::StrAppend(&message, "; last NCCL error: ", last);
  }
  switch (result) {
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return absl::InvalidArgumentError(message);
    case ncclRemoteError:
    case ncclSystemError:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

static_assert(static_cast<int>(NcclDataType::kInt8) == ncclInt8);
static_assert(static_cast<int>(NcclDataType::kUint8) == ncclUint8);
static_assert(static_cast<int>(NcclDataType::kInt32) == ncclInt32);
static_assert(static_cast<int>(NcclDataType::kUint32) == ncclUint32);
static_assert(static_cast<int>(NcclDataType::kInt64) == ncclInt64);
static_assert(static_cast<int>(NcclDataType::kUint64) == ncclUint64);
static_assert(static_cast<int>(NcclDataType::kFloat16) == ncclFloat16);
static_assert(static_cast<int>(NcclDataType::kFloat32) == ncclFloat32);
static_assert(static_cast<int>(NcclDataType::kFloat64) == ncclFloat64);
#if NCCL_VERSION_CODE >= 21000
static_assert(static_cast<int>(NcclDataType::kBfloat16) == ncclBfloat16);
#endif
static_assert(static_cast<int>(NcclRedOp::kSum) == ncclSum);
static_assert(static_cast<int>(NcclRedOp::kMin) == ncclMin);

int NcclAllReduce(const void* send, void* recv, size_t count,
                  NcclDataType type, NcclRedOp op, NcclCommHandle comm,
                  CudaStreamHandle stream) {
  return ncclAllReduce(send, recv, count, static_cast<ncclDataType_t>(type),
                       static_cast<ncclRedOp_t>(op), comm, stream);
}

int NcclAllGather(const void* send, void* recv, size_t send_count,
                  NcclDataType type, NcclCommHandle comm,
                  CudaStreamHandle stream) {
  return ncclAllGather(send, recv, send_count,
                       static_cast<ncclDataType_t>(type), comm, stream);
}

int NcclBroadcast(const void* send, void* recv, size_t count,
                  NcclDataType type, int root, NcclCommHandle comm,
                  CudaStreamHandle stream) {
  return ncclBroadcast(send, recv, count, static_cast<ncclDataType_t>(type),
                       root, comm, stream);
}

int NcclSend(const void* send, size_t count, NcclDataType type, int peer,
             NcclCommHandle comm, CudaStreamHandle stream) {
  return ncclSend(send, count, static_cast<ncclDataType_t>(type), peer, comm,
                  stream);
}

int NcclRecv(void* recv, size_t count, NcclDataType type, int peer,
             NcclCommHandle comm, CudaStreamHandle stream) {
  return ncclRecv(recv, count, static_cast<ncclDataType_t>(type), peer, comm,
                  stream);
}

int NcclGrouped(const std::function<int()>& calls) {
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) return r;
  int first = calls();
  ncclResult_t end = ncclGroupEnd();
  if (first != ncclSuccess && first != ncclInProgress) return first;
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
  std::vector<ncclUniqueId> ids(n);
  for (size_t i = 0; i < n; ++i) {
    if (options.unique_ids[i].size() != sizeof(ids[i].internal)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "nccl: communicator ", options.name, ": unique id ", i, " has ",
          options.unique_ids[i].size(), " bytes"));
    }
    std::memcpy(ids[i].internal, options.unique_ids[i].data(),
                sizeof(ids[i].internal));
  }
  if (n > 1 && !ScalableInitSupported()) {
    return absl::UnimplementedError(absl::StrCat(
        "nccl: communicator ", options.name, " was given ", n,
        " unique ids but this NCCL (", NcclRuntimeVersion(),
        ") has no ncclCommInitRankScalable"));
  }
  DeviceGuard guard(options.device);
  if (!guard.status().ok()) return guard.status();

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t r;
  const std::string what =
      absl::StrCat("init of communicator ", options.name, " (rank ",
                   options.rank, " of ", options.nranks, ", device ",
                   options.device, ")");
  if (n == 1) {
    r = ncclCommInitRankConfig(&comm, options.nranks, ids[0], options.rank,
                               &config);
  } else {
#if NCCL_VERSION_CODE >= 22304
    r = ncclCommInitRankScalable(&comm, options.nranks, options.rank,
                                 static_cast<int>(n), ids.data(), &config);
#else
    r = ncclInvalidUsage;
#endif
  }
  if (r != ncclSuccess && r != ncclInProgress) {
    absl::Status s = NcclStatus(r, what, comm);
    if (comm != nullptr) (void)ncclCommAbort(comm);
    return s;
  }
  std::unique_ptr<NcclCommunicator> c(new NcclCommunicator(std::move(options)));
  {
    absl::MutexLock lock(&c->mu_);
    c->comm_ = comm;
  }
  return c;
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
  ncclResult_t state = ncclSuccess;
  ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
  if (r != ncclSuccess) {
    return NcclStatus(r, absl::StrCat("ncclCommGetAsyncError on ", options_.name),
                      comm_);
  }
  if (state == ncclInProgress) return false;
  if (state == ncclSuccess) {
    ready_ = true;
    return true;
  }
  return NcclStatus(state,
                    absl::StrCat("init of communicator ", options_.name,
                                 " (rank ", options_.rank, " of ",
                                 options_.nranks, ")"),
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
    if (absl::Now() >= deadline) {
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
  ncclResult_t state = ncclSuccess;
  ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
  if (r != ncclSuccess) {
    return NcclStatus(r, absl::StrCat("ncclCommGetAsyncError on ", options_.name),
                      comm_);
  }
  if (state == ncclSuccess || state == ncclInProgress) return absl::OkStatus();
  return NcclStatus(
      state, absl::StrCat("asynchronous error on communicator ", options_.name),
      comm_);
}

absl::Status NcclCommunicator::Enqueue(
    absl::string_view what, const std::function<int(NcclCommHandle)>& body,
    absl::Time deadline, const std::function<absl::Status()>& interrupt,
    absl::Duration poll_interval) {
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
    if (r == ncclSuccess) return absl::OkStatus();
    if (r != ncclInProgress) return NcclStatus(r, what, comm_);
  }
  while (true) {
    if (interrupt) {
      absl::Status s = interrupt();
      if (!s.ok()) return s;
    }
    {
      absl::MutexLock lock(&mu_);
      if (!closed_.ok()) return closed_;
      ncclResult_t state = ncclSuccess;
      ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
      if (r != ncclSuccess) return NcclStatus(r, what, comm_);
      if (state == ncclSuccess) return absl::OkStatus();
      if (state != ncclInProgress) return NcclStatus(state, what, comm_);
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "nccl: ", what, " on communicator ", options_.name,
          " was not accepted by NCCL before the enqueue deadline (are the "
          "other members calling it?)"));
    }
    absl::SleepFor(poll_interval);
  }
}

void NcclCommunicator::AbortLocked(const absl::Status& cause) {
  if (comm_ != nullptr) {
    DeviceGuard guard(options_.device);
    (void)ncclCommAbort(comm_);
    comm_ = nullptr;
  }
  ready_ = false;
  if (closed_.ok()) {
    closed_ = cause.ok() ? absl::AbortedError(absl::StrCat(
                               "nccl: communicator ", options_.name,
                               " was aborted"))
                         : cause;
  }
}

void NcclCommunicator::Abort(const absl::Status& cause) {
  absl::MutexLock lock(&mu_);
  AbortLocked(cause);
}

void NcclCommunicator::Close(absl::Duration timeout) {
  absl::MutexLock serial(&enqueue_mu_);
  const absl::Time deadline = absl::Now() + timeout;
  {
    absl::MutexLock lock(&mu_);
    if (comm_ == nullptr) return;
    if (!ready_) {
      AbortLocked(absl::CancelledError(absl::StrCat(
          "nccl: communicator ", options_.name,
          " was closed before it finished initializing")));
      return;
    }
    DeviceGuard guard(options_.device);
    ncclResult_t r = ncclCommFinalize(comm_);
    if (r != ncclSuccess && r != ncclInProgress) {
      AbortLocked(NcclStatus(r, "ncclCommFinalize", comm_));
      return;
    }
  }
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (comm_ == nullptr) return;
      ncclResult_t state = ncclSuccess;
      ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
      if (r == ncclSuccess && state == ncclSuccess) {
        DeviceGuard guard(options_.device);
        (void)ncclCommDestroy(comm_);
        comm_ = nullptr;
        ready_ = false;
        if (closed_.ok()) {
          closed_ = absl::FailedPreconditionError(absl::StrCat(
              "nccl: communicator ", options_.name, " was closed"));
        }
        return;
      }
      if (r != ncclSuccess || state != ncclInProgress ||
          absl::Now() >= deadline) {
        AbortLocked(absl::DeadlineExceededError(absl::StrCat(
            "nccl: communicator ", options_.name,
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

#else  // !RANKD_HAVE_CUDA

namespace {
absl::Status NoNccl(absl::string_view what) {
  return absl::UnavailableError(
      absl::StrCat("nccl: ", what, ": ", CudaUnavailableReason()));
}
}  // namespace

int NcclAllReduce(const void*, void*, size_t, NcclDataType, NcclRedOp,
                  NcclCommHandle, CudaStreamHandle) {
  return kNcclUnavailable;
}
int NcclAllGather(const void*, void*, size_t, NcclDataType, NcclCommHandle,
                  CudaStreamHandle) {
  return kNcclUnavailable;
}
int NcclBroadcast(const void*, void*, size_t, NcclDataType, int,
                  NcclCommHandle, CudaStreamHandle) {
  return kNcclUnavailable;
}
int NcclSend(const void*, size_t, NcclDataType, int, NcclCommHandle,
             CudaStreamHandle) {
  return kNcclUnavailable;
}
int NcclRecv(void*, size_t, NcclDataType, int, NcclCommHandle,
             CudaStreamHandle) {
  return kNcclUnavailable;
}
int NcclGrouped(const std::function<int()>&) { return kNcclUnavailable; }

int NcclBuildVersion() { return 0; }
int NcclRuntimeVersion() { return 0; }
bool ScalableInitSupported() { return false; }
absl::StatusOr<std::string> NewNcclUniqueId() {
  return NoNccl("ncclGetUniqueId");
}
absl::Status NcclStatus(int nccl_result, absl::string_view what,
                        NcclCommHandle) {
  return absl::UnavailableError(absl::StrCat("nccl: ", what, ": result ",
                                             nccl_result, "; ",
                                             CudaUnavailableReason()));
}
absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::StartInit(
    Options) {
  return NoNccl("ncclCommInitRankConfig");
}
NcclCommunicator::~NcclCommunicator() = default;
absl::StatusOr<bool> NcclCommunicator::PollReady() {
  return NoNccl("ncclCommGetAsyncError");
}
absl::Status NcclCommunicator::AwaitReady(absl::Time,
                                          const std::function<absl::Status()>&,
                                          absl::Duration) {
  return NoNccl("ncclCommGetAsyncError");
}
absl::Status NcclCommunicator::CheckAsyncError() {
  return NoNccl("ncclCommGetAsyncError");
}
absl::Status NcclCommunicator::Enqueue(absl::string_view what,
                                       const std::function<int(NcclCommHandle)>&,
                                       absl::Time,
                                       const std::function<absl::Status()>&,
                                       absl::Duration) {
  return NoNccl(what);
}
void NcclCommunicator::AbortLocked(const absl::Status&) {}
void NcclCommunicator::Abort(const absl::Status&) {}
void NcclCommunicator::Close(absl::Duration) {}
absl::Status NcclCommunicator::closed_status() const {
  return NoNccl("communicator");
}
bool NcclCommunicator::ready() const { return false; }

#endif  // RANKD_HAVE_CUDA

}  // namespace rankd::dataplane::nccl
