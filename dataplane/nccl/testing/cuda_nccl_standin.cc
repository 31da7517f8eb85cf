// A CPU stand-in for the CUDA runtime and NCCL functions rankd calls
// (internal/native_library.h), built as one test-only shared library that
// tests name in $RANKD_CUDART_LIBRARY and $RANKD_NCCL_LIBRARY. It lets the
// NCCL backend's own sequencing run in CI on machines without a GPU; it is
// never the proof that the GPU path works (tests/gpu/ runs the same tests
// against the real libraries).
//
// What it imitates, and where it is stricter than the real thing:
//   - Devices: $RANKD_STANDIN_DEVICES (default 4) "GPUs" whose memory is
//     host memory, of which the process sees those CUDA_VISIBLE_DEVICES
//     lists (by index; it stops at the first entry that is not a new
//     index, as CUDA does): ordinal i is the i-th listed GPU, which PCI bus
//     ids, names and NCCL's duplicate-GPU check go by. Every device pointer
//     is checked against the live allocations (a bad one fails the call
//     with cudaErrorInvalidValue, where real CUDA may fault later). A
//     thread that never called cudaSetDevice uses device 0 and creates its
//     primary context on the first call that needs one, as the real
//     runtime does.
//   - Streams: one worker thread each, running queued work in order
//     (copies, memsets, host functions, event records and waits, NCCL
//     kernels). cudaFree waits for every stream of its device, as the real
//     call synchronizes the device. cudaMemcpy2DAsync refuses pitches above
//     cudaDevAttrMaxPitch (2^31 - 1 unless a test lowers it).
//   - Graph capture: between cudaStreamBeginCapture and
//     cudaStreamEndCapture the work queued on a stream (NCCL kernels
//     included) is recorded, not run; cudaStreamIsCapturing says so; an
//     event recorded there is captured (cudaEventQuery and
//     cudaEventSynchronize fail with cudaErrorCapturedEvent), and a stream
//     that waits for it joins the capture; cudaStreamSynchronize on a
//     capturing stream fails and invalidates the capture. Not modelled:
//     capture modes (what other threads may call meanwhile), the legacy
//     stream's implicit dependency on capturing blocking streams, joined
//     streams that never join back, and launching graphs.
//   - Memory pools: cudaMallocAsync memory belongs to its device's default
//     pool, cudaMallocFromPoolAsync memory to a pool cudaMemPoolCreate
//     made; either is readable by another device only after
//     cudaMemPoolSetAccess granted it. Each pool counts the attribute and
//     access changes made to it, and reports its release threshold and
//     access (cudaMemPoolGetAttribute, cudaMemPoolGetAccess).
//   - Errors on demand: tests make the next calls of an NCCL function
//     return a chosen ncclResult_t, or the next kernel fail asynchronously
//     (standin_control.h).
//   - NCCL: communicators of one unique id form a clique inside this
//     process (ranks are threads); init is non-blocking when asked
//     (ncclInProgress until every rank joined; two ranks on one GPU of one
//     host fail as NCCL's "Duplicate GPU detected", where a rank's host is
//     $NCCL_HOSTID when set, else the host name, as in NCCL). Launches follow
//     NCCL 2.28's group.cc: on a non-blocking communicator of 2+ ranks every
//     group end (and call outside a group) starts a thread that launches the
//     work and answers ncclInProgress, as ncclCommGetAsyncError does until that
//     thread queued the work; using the communicator before then is
//     ncclInvalidArgument, and one with an asynchronous error refuses new
//     work with it. A blocking communicator launches in the caller. Like
//     NCCL, peers connect on first use: the first launch waits (in the
//     caller or the launch thread) until every rank launched once. A
//     one-rank communicator launches at once. Collectives match by
//     their sequence number on the communicator; a kernel waits (forever,
//     like a real one) for all peers, reading peers' buffers directly as
//     NCCL's same-process P2P transport does, so pool memory a peer may
//     not access is an illegal-address fault (a sticky device error).
//     Mismatched collectives at one sequence number hang. Kernels run in
//     NCCL's order (OrderDomain): those of one communicator, and of every
//     communicator split from it with shared resources, one after another
//     in launch order across streams, so two ranks that launch two groups'
//     work in different orders deadlock, as on NCCL. ncclCommSplit as NCCL
//     2.28's (collective over the parent, color and key,
//     NCCL_SPLIT_NOCOLOR, the parent's splitShare deciding the order; not
//     modelled: a shared abort flag). $RANKD_STANDIN_NCCL_VERSION makes
//     ncclGetVersion answer an older NCCL (21700: no ncclCommSplit for
//     rankd). Sends rendezvous
//     with their receive; a byte-count mismatch is an asynchronous
//     ncclInvalidUsage (stricter: real NCCL truncates or hangs).
//     Copies between the device and pageable host memory count as host
//     waits (CUDA may synchronize for them; a copy to pageable memory
//     waits for its stream); cudaMallocHost memory is copied in stream
//     order.
//     ncclCommAbort and ncclCommDestroy make the communicator's kernels
//     leave without writing and then, like the real calls (which free
//     device memory), wait until no NCCL kernel runs on its device: a
//     kernel of another communicator that nobody aborts makes them wait. Groups
//     must hold calls of one communicator and stream. Reductions: sum and min
//     of the ten NCCL types rankd maps.
//   - Ranks in several processes: with $RANKD_STANDIN_CLIQUE_DIR set (a
//     relative path is taken under $TEST_TMPDIR), every communicator's ranks
//     meet in a directory of files there (testing/clique_directory.h), so
//     rank processes started by a test (tests/gpu/nccl_cluster_test) form
//     one clique. The same rules hold, except that peers' buffers are
//     copied rather than read in place (no pool-access faults), and a
//     failed file operation is an asynchronous ncclSystemError whose kernel
//     then waits until aborted. Kernels poll the directory every
//     millisecond.
//
// Depends only on the C++ standard library, getrusage and
// internal/native_abi.h (the same declarations rankd's loader uses,
// checked against NVIDIA's headers by native_abi_conformance_test).
// Test-control functions are declared in testing/standin_control.h. Only the C
// entry points are exported.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "dataplane/nccl/internal/native_abi.h"
#include "dataplane/nccl/testing/clique_directory.h"

#define STANDIN_API extern "C" __attribute__((visibility("default")))

namespace native = rankd::dataplane::nccl::internal;
using native::CudaError;
using native::NcclResult;
using rankd::dataplane::nccl::testing::CliqueDirectory;
using rankd::dataplane::nccl::testing::Contribution;

struct CUstream_st;
struct CUevent_st;
// A memory pool: a device's default one, or one cudaMemPoolCreate made.
// Never freed (test-only; a destroyed pool is only marked).
struct CUmemPoolHandle_st {
  int device = 0;  // the visible ordinal its memory is on
  bool is_default = false;
  bool destroyed = false;
  std::set<int> readers;  // devices that may access it (its own always)
  uint64_t release_threshold = 0;
  // cudaMemPoolSetAccess and cudaMemPoolSetAttribute calls on it.
  int64_t changes = 0;
};
// A captured sequence of work (cudaStreamEndCapture); never launched here.
struct CUgraph_st {
  std::vector<std::function<void()>> nodes;
};
struct ncclComm;

namespace {

// One lock and one condition variable for all stand-in state: simple and
// obviously free of lock-order problems; speed does not matter here. Never
// destroyed: stream workers still wait on them while the process exits.
std::mutex& g_mu = *new std::mutex();
std::condition_variable& g_cv = *new std::condition_variable();

int EnvInt(const char* name, int fallback, int lo, int hi) {
  const char* v = std::getenv(name);
  if (v == nullptr || v[0] == '\0') return fallback;
  int n = std::atoi(v);
  return std::clamp(n, lo, hi);
}

// One visible device. Indices into Devices() are the ordinals CUDA calls
// see; `physical` is the stand-in GPU behind one ($RANKD_STANDIN_DEVICES
// counts those), as CUDA_VISIBLE_DEVICES maps ordinals to GPUs.
struct Device {
  int physical = 0;
  bool primary_context = false;
  int running_kernels = 0;
  CudaError sticky_error = native::kCudaSuccess;
  CUmemPoolHandle_st* default_pool = nullptr;
};

// The physical GPUs this process sees, in ordinal order: all of them
// without CUDA_VISIBLE_DEVICES; else its comma-separated indices up to the
// first entry that is not a new index below `physical_count` (as CUDA
// stops at the first invalid entry; UUIDs and MIG names are not modelled).
std::vector<int> VisibleDevices(int physical_count) {
  std::vector<int> visible;
  const char* mask = std::getenv("CUDA_VISIBLE_DEVICES");
  if (mask == nullptr) {
    for (int i = 0; i < physical_count; ++i) visible.push_back(i);
    return visible;
  }
  std::string rest = mask;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    std::string entry = rest.substr(0, comma);
    rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
    entry.erase(0, entry.find_first_not_of(' '));
    entry.erase(entry.find_last_not_of(' ') + 1);
    if (entry.empty() ||
        entry.find_first_not_of("0123456789") != std::string::npos) {
      break;
    }
    const int index = std::atoi(entry.c_str());
    if (index >= physical_count ||
        std::find(visible.begin(), visible.end(), index) != visible.end()) {
      break;
    }
    visible.push_back(index);
  }
  return visible;
}

std::vector<Device>& Devices() {
  static auto* devices = [] {
    const std::vector<int> visible =
        VisibleDevices(EnvInt("RANKD_STANDIN_DEVICES", 4, 0, 64));
    auto* d = new std::vector<Device>(visible.size());
    for (size_t i = 0; i < d->size(); ++i) {
      (*d)[i].physical = visible[i];
      auto* pool = new CUmemPoolHandle_st();
      pool->device = static_cast<int>(i);
      pool->is_default = true;
      pool->readers.insert(static_cast<int>(i));
      (*d)[i].default_pool = pool;
    }
    return d;
  }();
  return *devices;
}
int DeviceCount() { return static_cast<int>(Devices().size()); }
// Every pool, to check handles (g_mu held).
std::set<CUmemPoolHandle_st*>& PoolsLocked() {
  static auto* pools = [] {
    auto* p = new std::set<CUmemPoolHandle_st*>();
    for (Device& d : Devices()) p->insert(d.default_pool);
    return p;
  }();
  return *pools;
}
std::atomic<size_t> g_max_pitch{2147483647};
size_t MaxPitch() { return g_max_pitch.load(); }
std::atomic<int64_t> g_streams_created{0};
// rankd_standin_hold_next_event_record_until_abort (guarded by g_mu).
int g_hold_record_ms = 0;
uint64_t g_aborts = 0;

thread_local int t_device = -1;  // -1: never chosen (device 0)
thread_local CudaError t_last_error = native::kCudaSuccess;
// rankd_standin_thread_host_syncs: the calling thread's waits for device
// work (synchronize calls, events polled while not ready), and the event
// record it last found not ready (one wait however often it is polled).
thread_local int64_t t_host_syncs = 0;
thread_local std::weak_ptr<bool> t_polled_record;

CudaError Fail(CudaError e) {
  t_last_error = e;
  return e;
}

// The calling thread's device, creating its primary context (g_mu held).
int ContextDeviceLocked() {
  const int d = t_device < 0 ? 0 : t_device;
  if (d < DeviceCount()) Devices()[d].primary_context = true;
  return d;
}
int ContextDevice() {
  std::lock_guard<std::mutex> lock(g_mu);
  return ContextDeviceLocked();
}

// --- device memory ------------------------------------------------------

struct Allocation {
  size_t size;
  int device;
  CUmemPoolHandle_st* pool;  // null for cudaMalloc memory
};
std::map<uintptr_t, Allocation>& Allocations() {
  static auto* a = new std::map<uintptr_t, Allocation>();
  return *a;
}
std::atomic<int64_t> g_allocation_count{0};

// The allocation that covers [p, p + bytes), or null (g_mu held).
const Allocation* FindLocked(const void* p, size_t bytes) {
  auto& a = Allocations();
  const auto addr = reinterpret_cast<uintptr_t>(p);
  auto it = a.upper_bound(addr);
  if (it == a.begin()) return nullptr;
  --it;
  if (addr + bytes > it->first + it->second.size) return nullptr;
  if (bytes == 0 && addr >= it->first + it->second.size) return nullptr;
  return &it->second;
}
bool IsDeviceMemory(const void* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(g_mu);
  return FindLocked(p, bytes) != nullptr;
}

void* NewDeviceMemory(size_t bytes, int device, CUmemPoolHandle_st* pool) {
  void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (p == nullptr) return nullptr;
  std::lock_guard<std::mutex> lock(g_mu);
  Allocations()[reinterpret_cast<uintptr_t>(p)] = {bytes, device, pool};
  g_allocation_count.fetch_add(1);
  return p;
}

bool FreeDeviceMemory(void* p) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (Allocations().erase(reinterpret_cast<uintptr_t>(p)) == 0) return false;
  }
  std::free(p);
  return true;
}

}  // namespace

// --- streams and events -------------------------------------------------

// A graph capture under way (cudaStreamBeginCapture): the work queued on
// its streams is recorded, not run, as CUDA records it into a graph.
struct Capture {
  CUstream_st* origin = nullptr;  // where it began and must end
  int status = native::kCudaStreamCaptureStatusActive;
  std::vector<std::function<void()>> recorded;
};

struct CUstream_st {
  int device = 0;
  uint64_t serial = 0;                      // unique for the process's life
  std::deque<std::function<void()>> queue;  // guarded by g_mu
  uint64_t queued = 0;                      // guarded by g_mu
  uint64_t finished = 0;                    // guarded by g_mu
  bool destroyed = false;                   // guarded by g_mu
  // Set while it takes part in a capture (began it, or joined it by
  // waiting for an event recorded inside it); guarded by g_mu.
  std::shared_ptr<Capture> capture;
  // Wakes the stream's worker alone (with g_mu): new work or destruction.
  // The rest of the stand-in waits on g_cv, which wakes every waiter, so
  // that a launch would wake every idle stream of the process.
  std::condition_variable work_cv;
};

struct CUevent_st {
  int device = 0;
  std::shared_ptr<bool> done;  // null until recorded; guarded by g_mu
  // Set when last recorded inside a capture; guarded by g_mu.
  std::shared_ptr<Capture> capture;
};

namespace {

std::set<CUstream_st*>& Streams() {
  static auto* s = new std::set<CUstream_st*>();
  return *s;
}

// Runs a stream's work in order; deletes the stream once it was destroyed
// and drained.
void StreamWorker(CUstream_st* s) {
  t_device = s->device;
  std::unique_lock<std::mutex> lock(g_mu);
  while (true) {
    s->work_cv.wait(lock, [s] { return s->destroyed || !s->queue.empty(); });
    if (s->queue.empty()) break;
    std::function<void()> work = std::move(s->queue.front());
    s->queue.pop_front();
    lock.unlock();
    work();
    lock.lock();
    ++s->finished;
    g_cv.notify_all();
  }
  Streams().erase(s);
  delete s;
}

CUstream_st* NewStream(int device) {
  const int64_t serial = g_streams_created.fetch_add(1) + 1;
  auto* s = new CUstream_st();
  s->serial = static_cast<uint64_t>(serial);
  s->device = device;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    Streams().insert(s);
  }
  std::thread(StreamWorker, s).detach();
  return s;
}

// The legacy default stream of the calling thread's device.
CUstream_st* DefaultStream() {
  static std::mutex mu;
  static auto* per_device = new std::map<int, CUstream_st*>();
  const int device = ContextDevice();
  std::lock_guard<std::mutex> lock(mu);
  CUstream_st*& s = (*per_device)[device];
  if (s == nullptr) s = NewStream(device);
  return s;
}
CUstream_st* Resolve(CUstream_st* s) {
  return s == nullptr ? DefaultStream() : s;
}

// Queues `work` on `s`, or records it when `s` is capturing (g_mu held).
void EnqueueLocked(CUstream_st* s, std::function<void()> work) {
  if (s->capture != nullptr) {
    s->capture->recorded.push_back(std::move(work));
    return;
  }
  s->queue.push_back(std::move(work));
  ++s->queued;
  s->work_cv.notify_one();
}
void Enqueue(CUstream_st* s, std::function<void()> work) {
  std::lock_guard<std::mutex> lock(g_mu);
  EnqueueLocked(s, std::move(work));
}

// Waits until every stream of `device` ran what was queued so far.
void SynchronizeDevice(int device) {
  std::unique_lock<std::mutex> lock(g_mu);
  // By serial number: a destroyed stream's address may be reused.
  std::map<uint64_t, uint64_t> targets;
  for (CUstream_st* s : Streams()) {
    if (s->device == device) targets[s->serial] = s->queued;
  }
  g_cv.wait(lock, [&] {
    for (CUstream_st* s : Streams()) {
      auto it = targets.find(s->serial);
      if (it != targets.end() && s->finished < it->second) return false;
    }
    return true;
  });
}

const char* CudaErrorName(CudaError e) {
  switch (e) {
    case native::kCudaSuccess:
      return "cudaSuccess";
    case native::kCudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case native::kCudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case native::kCudaErrorInvalidPitchValue:
      return "cudaErrorInvalidPitchValue";
    case native::kCudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case native::kCudaErrorNoDevice:
      return "cudaErrorNoDevice";
    case native::kCudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    case native::kCudaErrorNotReady:
      return "cudaErrorNotReady";
    case native::kCudaErrorIllegalAddress:
      return "cudaErrorIllegalAddress";
    default:
      return "cudaErrorUnknown";
  }
}

}  // namespace

// --- CUDA runtime: devices ---------------------------------------------

STANDIN_API CudaError cudaGetDeviceCount(int* count) {
  if (count == nullptr) return Fail(native::kCudaErrorInvalidValue);
  *count = DeviceCount();
  return DeviceCount() == 0 ? Fail(native::kCudaErrorNoDevice)
                            : native::kCudaSuccess;
}
STANDIN_API CudaError cudaGetDevice(int* device) {
  if (device == nullptr) return Fail(native::kCudaErrorInvalidValue);
  *device = t_device < 0 ? 0 : t_device;
  return native::kCudaSuccess;
}
STANDIN_API CudaError cudaSetDevice(int device) {
  if (device < 0 || device >= DeviceCount()) {
    return Fail(native::kCudaErrorInvalidDevice);
  }
  t_device = device;
  (void)ContextDevice();
  return native::kCudaSuccess;
}
STANDIN_API CudaError cudaDeviceGetAttribute(int* value, int attr, int device) {
  if (value == nullptr || device < 0 || device >= DeviceCount()) {
    return Fail(native::kCudaErrorInvalidValue);
  }
  switch (attr) {
    case native::kCudaDevAttrComputeCapabilityMajor:
      *value = 9;
      break;
    case native::kCudaDevAttrComputeCapabilityMinor:
      *value = 0;
      break;
    case native::kCudaDevAttrMemoryPoolsSupported:
      *value = 1;
      break;
    case native::kCudaDevAttrMaxPitch:
      *value = static_cast<int>(MaxPitch());
      break;
    default:
      return Fail(native::kCudaErrorInvalidValue);
  }
  return native::kCudaSuccess;
}
STANDIN_API CudaError cudaDeviceGetPCIBusId(char* id, int len, int device) {
  if (id == nullptr || len <= 0 || device < 0 || device >= DeviceCount()) {
    return Fail(native::kCudaErrorInvalidValue);
  }
  std::snprintf(id, len, "0000:%02x:00.0", Devices()[device].physical + 1);
  return native::kCudaSuccess;
}
STANDIN_API CudaError cudaDriverGetVersion(int* v) {
  if (v == nullptr) return Fail(native::kCudaErrorInvalidValue);
  *v = 13000;
  return native::kCudaSuccess;
}
STANDIN_API CudaError cudaRuntimeGetVersion(int* v) {
  if (v == nullptr) return Fail(native::kCudaErrorInvalidValue);
  *v = 13000;
  return native::kCudaSuccess;
}
STANDIN_API CudaError cudaGetLastError() {
  CudaError e = t_last_error;
  t_last_error = native::kCudaSuccess;
  return e;
}
STANDIN_API const char* cudaGetErrorName(CudaError e) {
  return CudaErrorName(e);
}
STANDIN_API const char* cudaGetErrorString(CudaError e) {
  switch (e) {
    case native::kCudaSuccess:
      return "no error";
    case native::kCudaErrorIllegalAddress:
      return "an illegal memory access was encountered";
    case native::kCudaErrorNotReady:
      return "device not ready";
    default:
      return "stand-in error (see its name)";
  }
}
STANDIN_API CudaError cudaDeviceCanAccessPeer(int* can, int device, int peer) {
  if (can == nullptr || device < 0 || device >= DeviceCount() || peer < 0 ||
      peer >= DeviceCount()) {
    return Fail(native::kCudaErrorInvalidDevice);
  }
  *can = device != peer ? 1 : 0;
  return native::kCudaSuccess;
}
STANDIN_API CudaError cudaDeviceGetDefaultMemPool(native::CudaMemPool* pool,
                                                  int device) {
  if (pool == nullptr || device < 0 || device >= DeviceCount()) {
    return Fail(native::kCudaErrorInvalidValue);
  }
  *pool = Devices()[device].default_pool;
  return native::kCudaSuccess;
}
namespace {
// Whether `pool` is a live pool (g_mu held).
bool LivePoolLocked(const CUmemPoolHandle_st* pool) {
  return pool != nullptr &&
         PoolsLocked().count(const_cast<CUmemPoolHandle_st*>(pool)) != 0 &&
         !pool->destroyed;
}
}  // namespace
STANDIN_API CudaError
cudaMemPoolSetAccess(native::CudaMemPool pool,
                     const native::CudaMemAccessDesc* descs, size_t count) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!LivePoolLocked(pool) || (descs == nullptr && count > 0)) {
    return Fail(native::kCudaErrorInvalidValue);
  }
  ++pool->changes;
  for (size_t i = 0; i < count; ++i) {
    const auto& d = descs[i];
    if (d.location.type != native::kCudaMemLocationTypeDevice ||
        d.location.id < 0 || d.location.id >= DeviceCount()) {
      return Fail(native::kCudaErrorInvalidValue);
    }
    if (d.flags == native::kCudaMemAccessFlagsProtReadWrite) {
      pool->readers.insert(d.location.id);
    } else if (d.location.id != pool->device) {
      pool->readers.erase(d.location.id);
    }
  }
  return native::kCudaSuccess;
}
STANDIN_API CudaError cudaMemPoolSetAttribute(native::CudaMemPool pool,
                                              int attr, void* value) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!LivePoolLocked(pool) || value == nullptr ||
      attr != native::kCudaMemPoolAttrReleaseThreshold) {
    return Fail(native::kCudaErrorInvalidValue);
  }
  ++pool->changes;
  pool->release_threshold = *static_cast<const uint64_t*>(value);
  return native::kCudaSuccess;
}
STANDIN_API CudaError cudaMemPoolGetAttribute(native::CudaMemPool pool,
                                              int attr, void* value) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!LivePoolLocked(pool) || value == nullptr ||
      attr != native::kCudaMemPoolAttrReleaseThreshold) {
    return Fail(native::kCudaErrorInvalidValue);
  }
  *static_cast<uint64_t*>(value) = pool->release_threshold;
  return native::kCudaSuccess;
}
STANDIN_API CudaError cudaMemPoolGetAccess(int* flags, native::CudaMemPool pool,
                                           native::CudaMemLocation* location) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (flags == nullptr || location == nullptr || !LivePoolLocked(pool) ||
      location->type != native::kCudaMemLocationTypeDevice ||
      location->id < 0 || location->id >= DeviceCount()) {
    return Fail(native::kCudaErrorInvalidValue);
  }
  *flags = pool->readers.count(location->id) != 0
               ? native::kCudaMemAccessFlagsProtReadWrite
               : native::kCudaMemAccessFlagsProtNone;
  return native::kCudaSuccess;
}
STANDIN_API CudaError cudaMemPoolCreate(native::CudaMemPool* pool,
                                        const native::CudaMemPoolProps* props) {
  if (pool == nullptr || props == nullptr ||
      props->alloc_type != native::kCudaMemAllocationTypePinned ||
      props->handle_types != native::kCudaMemHandleTypeNone ||
      props->location.type != native::kCudaMemLocationTypeDevice ||
      props->location.id < 0 || props->location.id >= DeviceCount()) {
    return Fail(native::kCudaErrorInvalidValue);
  }
  auto* created = new CUmemPoolHandle_st();
  created->device = props->location.id;
  created->readers.insert(props->location.id);
  std::lock_guard<std::mutex> lock(g_mu);
  PoolsLocked().insert(created);
  *pool = created;
  return native::kCudaSuccess;
}
STANDIN_API CudaError cudaMemPoolDestroy(native::CudaMemPool pool) {
  std::lock_guard<std::mutex> lock(g_mu);
  // A device's default pool cannot be destroyed.
  if (!LivePoolLocked(pool) || pool->is_default) {
    return Fail(native::kCudaErrorInvalidValue);
  }
  pool->destroyed = true;
  return native::kCudaSuccess;
}

// --- CUDA runtime: streams and events ------------------------------------

STANDIN_API CudaError cudaStreamCreateWithFlags(native::CudaStream* stream,
                                                unsigned /*flags*/) {
  if (stream == nullptr) return Fail(native::kCudaErrorInvalidValue);
  *stream = NewStream(ContextDevice());
  return native::kCudaSuccess;
}
STANDIN_API CudaError cudaStreamDestroy(native::CudaStream s) {
  if (s == nullptr) return Fail(native::kCudaErrorInvalidResourceHandle);
  std::lock_guard<std::mutex> lock(g_mu);
  s->destroyed = true;
  s->work_cv.notify_one();
  return native::kCudaSuccess;
}
STANDIN_API CudaError cudaStreamSynchronize(native::CudaStream stream) {
  ++t_host_syncs;
  CUstream_st* s = Resolve(stream);
  std::unique_lock<std::mutex> lock(g_mu);
  if (s->capture != nullptr) {  // not allowed while capturing: invalidates
    s->capture->status = native::kCudaStreamCaptureStatusInvalidated;
    lock.unlock();
    return Fail(native::kCudaErrorStreamCaptureUnsupported);
  }
  const uint64_t target = s->queued;
  g_cv.wait(lock, [&] { return s->finished >= target; });
  CudaError sticky = Devices()[s->device].sticky_error;
  lock.unlock();
  return sticky == native::kCudaSuccess ? sticky : Fail(sticky);
}
STANDIN_API CudaError cudaLaunchHostFunc(native::CudaStream stream,
                                         native::CudaHostFn fn, void* arg) {
  if (fn == nullptr) return Fail(native::kCudaErrorInvalidValue);
  (void)ContextDevice();
  Enqueue(Resolve(stream), [fn, arg] { fn(arg); });
  return native::kCudaSuccess;
}
STANDIN_API CudaError cudaEventCreateWithFlags(native::CudaEvent* event,
                                               unsigned /*flags*/) {
  if (event == nullptr) return Fail(native::kCudaErrorInvalidValue);
  auto* e = new CUevent_st();
  e->device = ContextDevice();
  *event = e;
  return native::kCudaSuccess;
}
STANDIN_API CudaError cudaEventDestroy(native::CudaEvent e) {
  if (e == nullptr) return Fail(native::kCudaErrorInvalidResourceHandle);
  std::lock_guard<std::mutex> lock(g_mu);
  delete e;
  return native::kCudaSuccess;
}
STANDIN_API CudaError cudaEventRecord(native::CudaEvent e,
                                      native::CudaStream stream) {
  if (e == nullptr) return Fail(native::kCudaErrorInvalidResourceHandle);
  CUstream_st* s = Resolve(stream);
  // An event records only on a stream of its own device.
  if (s->device != e->device) {
    return Fail(native::kCudaErrorInvalidResourceHandle);
  }
  auto done = std::make_shared<bool>(false);
  {
    std::unique_lock<std::mutex> lock(g_mu);
    ContextDeviceLocked();
    if (s->capture != nullptr) {  // captured: a graph node, never reached
      e->capture = s->capture;
      e->done = nullptr;
      return native::kCudaSuccess;
    }
    if (g_hold_record_ms > 0) {
      const int ms = g_hold_record_ms;
      const uint64_t aborts = g_aborts;
      g_hold_record_ms = 0;
      g_cv.wait_for(lock, std::chrono::milliseconds(ms),
                    [&] { return g_aborts > aborts; });
    }
    e->capture = nullptr;
    e->done = done;
  }
  Enqueue(s, [done] {
    std::lock_guard<std::mutex> lock(g_mu);
    *done = true;
  });
  return native::kCudaSuccess;
}
STANDIN_API CudaError cudaEventQuery(native::CudaEvent e) {
  if (e == nullptr) return Fail(native::kCudaErrorInvalidResourceHandle);
  std::lock_guard<std::mutex> lock(g_mu);
  ContextDeviceLocked();
  if (e->capture != nullptr) return Fail(native::kCudaErrorCapturedEvent);
  CudaError sticky = Devices()[e->device].sticky_error;
  if (sticky != native::kCudaSuccess) return Fail(sticky);
  if (e->done == nullptr || *e->done) return native::kCudaSuccess;
  if (t_polled_record.lock() != e->done) {
    t_polled_record = e->done;
    ++t_host_syncs;
  }
  return native::kCudaErrorNotReady;
}
STANDIN_API CudaError cudaEventSynchronize(native::CudaEvent e) {
  if (e == nullptr) return Fail(native::kCudaErrorInvalidResourceHandle);
  ++t_host_syncs;
  std::unique_lock<std::mutex> lock(g_mu);
  ContextDeviceLocked();
  if (e->capture != nullptr) return Fail(native::kCudaErrorCapturedEvent);
  std::shared_ptr<bool> done = e->done;
  const int device = e->device;
  g_cv.wait(lock, [&] { return done == nullptr || *done; });
  CudaError sticky = Devices()[device].sticky_error;
  lock.unlock();
  return sticky == native::kCudaSuccess ? sticky : Fail(sticky);
}
STANDIN_API CudaError cudaStreamWaitEvent(native::CudaStream stream,
                                          native::CudaEvent e,
                                          unsigned /*flags*/) {
  if (e == nullptr) return Fail(native::kCudaErrorInvalidResourceHandle);
  CUstream_st* s = Resolve(stream);
  std::lock_guard<std::mutex> lock(g_mu);
  ContextDeviceLocked();
  if (e->capture != nullptr) {
    // Waiting for work recorded inside a capture joins that capture, as
    // in CUDA (cross-stream capture); two captures never merge.
    if (s->capture != nullptr && s->capture != e->capture) {
      return Fail(native::kCudaErrorIllegalState);
    }
    s->capture = e->capture;
    return native::kCudaSuccess;
  }
  std::shared_ptr<bool> done = e->done;
  if (done == nullptr) return native::kCudaSuccess;
  EnqueueLocked(s, [done] {
    std::unique_lock<std::mutex> lock(g_mu);
    g_cv.wait(lock, [&] { return *done; });
  });
  return native::kCudaSuccess;
}
STANDIN_API CudaError cudaStreamBeginCapture(native::CudaStream stream,
                                             int mode) {
  // The legacy default stream cannot capture.
  if (stream == nullptr)
    return Fail(native::kCudaErrorStreamCaptureUnsupported);
  if (mode != native::kCudaStreamCaptureModeGlobal &&
      mode != native::kCudaStreamCaptureModeThreadLocal &&
      mode != native::kCudaStreamCaptureModeRelaxed) {
    return Fail(native::kCudaErrorInvalidValue);
  }
  std::lock_guard<std::mutex> lock(g_mu);
  if (stream->capture != nullptr) return Fail(native::kCudaErrorIllegalState);
  stream->capture = std::make_shared<Capture>();
  stream->capture->origin = stream;
  return native::kCudaSuccess;
}
STANDIN_API CudaError cudaStreamEndCapture(native::CudaStream stream,
                                           native::CudaGraph* graph) {
  if (stream == nullptr || graph == nullptr) {
    return Fail(native::kCudaErrorInvalidValue);
  }
  std::lock_guard<std::mutex> lock(g_mu);
  std::shared_ptr<Capture> capture = stream->capture;
  if (capture == nullptr) return Fail(native::kCudaErrorIllegalState);
  if (capture->origin != stream) {
    capture->status = native::kCudaStreamCaptureStatusInvalidated;
    return Fail(native::kCudaErrorStreamCaptureUnmatched);
  }
  // Every stream that joined leaves with it (CUDA would refuse a capture
  // whose joined streams were not joined back: not modelled).
  for (CUstream_st* s : Streams()) {
    if (s->capture == capture) s->capture = nullptr;
  }
  *graph = nullptr;
  if (capture->status != native::kCudaStreamCaptureStatusActive) {
    return Fail(native::kCudaErrorStreamCaptureInvalidated);
  }
  *graph = new CUgraph_st{std::move(capture->recorded)};
  return native::kCudaSuccess;
}
STANDIN_API CudaError cudaStreamIsCapturing(native::CudaStream stream,
                                            int* status) {
  if (status == nullptr) return Fail(native::kCudaErrorInvalidValue);
  CUstream_st* s = Resolve(stream);
  std::lock_guard<std::mutex> lock(g_mu);
  *status = s->capture == nullptr ? native::kCudaStreamCaptureStatusNone
                                  : s->capture->status;
  return native::kCudaSuccess;
}
STANDIN_API CudaError cudaGraphDestroy(native::CudaGraph graph) {
  if (graph == nullptr) return Fail(native::kCudaErrorInvalidValue);
  delete graph;
  return native::kCudaSuccess;
}

// --- CUDA runtime: memory ----------------------------------------------

STANDIN_API CudaError cudaMalloc(void** p, size_t bytes) {
  if (p == nullptr) return Fail(native::kCudaErrorInvalidValue);
  *p = NewDeviceMemory(bytes, ContextDevice(), nullptr);
  return *p == nullptr ? Fail(native::kCudaErrorMemoryAllocation)
                       : native::kCudaSuccess;
}
STANDIN_API CudaError cudaFree(void* p) {
  if (p == nullptr) return native::kCudaSuccess;
  int device;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    const Allocation* a = FindLocked(p, 0);
    if (a == nullptr) return Fail(native::kCudaErrorInvalidValue);
    device = a->device;
  }
  SynchronizeDevice(device);  // cudaFree synchronizes the device
  return FreeDeviceMemory(p) ? native::kCudaSuccess
                             : Fail(native::kCudaErrorInvalidValue);
}
STANDIN_API CudaError cudaMallocAsync(void** p, size_t bytes,
                                      native::CudaStream stream) {
  if (p == nullptr) return Fail(native::kCudaErrorInvalidValue);
  (void)ContextDevice();
  const int device = Resolve(stream)->device;
  *p = NewDeviceMemory(bytes, device, Devices()[device].default_pool);
  return *p == nullptr ? Fail(native::kCudaErrorMemoryAllocation)
                       : native::kCudaSuccess;
}
STANDIN_API CudaError cudaMallocFromPoolAsync(void** p, size_t bytes,
                                              native::CudaMemPool pool,
                                              native::CudaStream stream) {
  if (p == nullptr) return Fail(native::kCudaErrorInvalidValue);
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (!LivePoolLocked(pool)) return Fail(native::kCudaErrorInvalidValue);
  }
  (void)ContextDevice();
  (void)Resolve(stream);
  *p = NewDeviceMemory(bytes, pool->device, pool);
  return *p == nullptr ? Fail(native::kCudaErrorMemoryAllocation)
                       : native::kCudaSuccess;
}
STANDIN_API CudaError cudaFreeAsync(void* p, native::CudaStream stream) {
  if (p == nullptr) return native::kCudaSuccess;
  if (!IsDeviceMemory(p, 0)) return Fail(native::kCudaErrorInvalidValue);
  (void)ContextDevice();
  Enqueue(Resolve(stream), [p] { (void)FreeDeviceMemory(p); });
  return native::kCudaSuccess;
}
// Page-locked host memory (cudaMallocHost): start -> size, guarded by g_mu.
// Never freed (rankd never frees it; cudaFreeHost is not modelled).
std::map<uintptr_t, size_t>& PinnedHost() {
  static auto* p = new std::map<uintptr_t, size_t>();
  return *p;
}
bool IsPinnedHost(const void* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(g_mu);
  const auto addr = reinterpret_cast<uintptr_t>(p);
  auto it = PinnedHost().upper_bound(addr);
  if (it == PinnedHost().begin()) return false;
  --it;
  return addr + bytes <= it->first + it->second;
}
STANDIN_API CudaError cudaMallocHost(void** p, size_t bytes) {
  if (p == nullptr) return Fail(native::kCudaErrorInvalidValue);
  (void)ContextDevice();
  *p = std::aligned_alloc(256, (std::max<size_t>(bytes, 1) + 255) / 256 * 256);
  if (*p == nullptr) return Fail(native::kCudaErrorMemoryAllocation);
  std::lock_guard<std::mutex> lock(g_mu);
  PinnedHost()[reinterpret_cast<uintptr_t>(*p)] = bytes;
  return native::kCudaSuccess;
}
// Copies between device and pageable host memory are what CUDA documents
// ("API synchronization behavior"): from pageable memory the source is
// staged at the call (so it may be reused at once), and "the driver may
// synchronize with the stream" to do so; to pageable memory the call
// "returns only once the copy has completed". Both count as a host
// synchronization of the calling thread (rankd_standin_thread_host_syncs),
// and a copy to pageable memory waits for its stream. Page-locked memory
// (cudaMallocHost) is copied in stream order without either.
STANDIN_API CudaError cudaMemcpyAsync(void* dst, const void* src, size_t bytes,
                                      int kind, native::CudaStream stream) {
  if (bytes == 0) return native::kCudaSuccess;
  const bool dst_device = kind == native::kCudaMemcpyHostToDevice ||
                          kind == native::kCudaMemcpyDeviceToDevice;
  const bool src_device = kind == native::kCudaMemcpyDeviceToHost ||
                          kind == native::kCudaMemcpyDeviceToDevice;
  if (dst == nullptr || src == nullptr || (!dst_device && !src_device) ||
      (dst_device && !IsDeviceMemory(dst, bytes)) ||
      (src_device && !IsDeviceMemory(src, bytes))) {
    return Fail(native::kCudaErrorInvalidValue);
  }
  (void)ContextDevice();
  CUstream_st* s = Resolve(stream);
  if (kind == native::kCudaMemcpyHostToDevice && !IsPinnedHost(src, bytes)) {
    ++t_host_syncs;
    auto staged = std::make_shared<std::vector<char>>(
        static_cast<const char*>(src), static_cast<const char*>(src) + bytes);
    Enqueue(s, [=] { std::memmove(dst, staged->data(), bytes); });
    return native::kCudaSuccess;
  }
  if (kind == native::kCudaMemcpyDeviceToHost && !IsPinnedHost(dst, bytes)) {
    ++t_host_syncs;
    std::unique_lock<std::mutex> lock(g_mu);
    EnqueueLocked(s, [=] { std::memmove(dst, src, bytes); });
    if (s->capture == nullptr) {
      const uint64_t target = s->queued;
      g_cv.wait(lock, [&] { return s->finished >= target; });
    }
    return native::kCudaSuccess;
  }
  Enqueue(s, [=] { std::memmove(dst, src, bytes); });
  return native::kCudaSuccess;
}
STANDIN_API CudaError cudaMemcpy2DAsync(void* dst, size_t dpitch,
                                        const void* src, size_t spitch,
                                        size_t width, size_t height, int kind,
                                        native::CudaStream stream) {
  if (width == 0 || height == 0) return native::kCudaSuccess;
  if (dpitch > MaxPitch() || spitch > MaxPitch()) {
    return Fail(native::kCudaErrorInvalidPitchValue);
  }
  if (width > dpitch || width > spitch ||
      kind != native::kCudaMemcpyDeviceToDevice ||
      !IsDeviceMemory(dst, dpitch * (height - 1) + width) ||
      !IsDeviceMemory(src, spitch * (height - 1) + width)) {
    return Fail(native::kCudaErrorInvalidValue);
  }
  (void)ContextDevice();
  Enqueue(Resolve(stream), [=] {
    for (size_t row = 0; row < height; ++row) {
      std::memmove(static_cast<char*>(dst) + row * dpitch,
                   static_cast<const char*>(src) + row * spitch, width);
    }
  });
  return native::kCudaSuccess;
}
STANDIN_API CudaError cudaMemsetAsync(void* dst, int value, size_t bytes,
                                      native::CudaStream stream) {
  if (bytes == 0) return native::kCudaSuccess;
  if (!IsDeviceMemory(dst, bytes)) return Fail(native::kCudaErrorInvalidValue);
  (void)ContextDevice();
  Enqueue(Resolve(stream), [=] { std::memset(dst, value, bytes); });
  return native::kCudaSuccess;
}

// --- CUDA driver (the few rankd names devices with) ----------------------

STANDIN_API native::CuResult cuInit(unsigned /*flags*/) { return 0; }
STANDIN_API native::CuResult cuDeviceGet(native::CuDevice* d, int ordinal) {
  if (d == nullptr || ordinal < 0 || ordinal >= DeviceCount()) return 101;
  *d = ordinal;
  return 0;
}
STANDIN_API native::CuResult cuDeviceGetName(char* name, int len,
                                             native::CuDevice d) {
  if (name == nullptr || len <= 0 || d < 0 || d >= DeviceCount()) return 101;
  std::snprintf(name, len, "rankd CPU stand-in GPU %d", Devices()[d].physical);
  return 0;
}
STANDIN_API native::CuResult cuDevicePrimaryCtxGetState(native::CuDevice d,
                                                        unsigned* flags,
                                                        int* active) {
  if (flags == nullptr || active == nullptr || d < 0 || d >= DeviceCount()) {
    return 101;
  }
  std::lock_guard<std::mutex> lock(g_mu);
  *flags = 0;
  *active = Devices()[d].primary_context ? 1 : 0;
  return 0;
}

// --- NCCL -----------------------------------------------------------------

namespace {

size_t TypeSize(int type) {
  switch (type) {
    case 0:
    case 1:
      return 1;  // int8, uint8
    case 6:
    case 9:
      return 2;  // float16, bfloat16
    case 2:
    case 3:
    case 7:
      return 4;  // int32, uint32, float32
    case 4:
    case 5:
    case 8:
      return 8;  // int64, uint64, float64
    default:
      return 0;
  }
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal
      exp = 127 - 15 + 1;
      while ((mant & 0x400) == 0) {
        mant <<= 1;
        --exp;
      }
      bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
uint16_t FloatToHalf(float f) {  // round to nearest even; no subnormals out
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = (x >> 16) & 0x8000;
  const int exp = static_cast<int>((x >> 23) & 0xff) - 127 + 15;
  uint32_t mant = x & 0x7fffff;
  if (((x >> 23) & 0xff) == 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  if (exp >= 31) return sign | 0x7c00;
  if (exp <= 0) return sign;
  uint32_t h = (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  const uint32_t rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;
  return static_cast<uint16_t>(sign | h);
}
float Bf16ToFloat(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
uint16_t FloatToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  x += 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

template <typename T>
void Combine(void* acc, const void* in, size_t n, bool min) {
  auto* a = static_cast<T*>(acc);
  const auto* b = static_cast<const T*>(in);
  for (size_t i = 0; i < n; ++i)
    a[i] = min ? std::min(a[i], b[i]) : a[i] + b[i];
}
template <float (*To)(uint16_t), uint16_t (*From)(float)>
void Combine16(void* acc, const void* in, size_t n, bool min) {
  auto* a = static_cast<uint16_t*>(acc);
  const auto* b = static_cast<const uint16_t*>(in);
  for (size_t i = 0; i < n; ++i) {
    const float x = To(a[i]), y = To(b[i]);
    a[i] = From(min ? std::min(x, y) : x + y);
  }
}
void Reduce(int type, bool min, void* acc, const void* in, size_t n) {
  switch (type) {
    case 0:
      Combine<int8_t>(acc, in, n, min);
      break;
    case 1:
      Combine<uint8_t>(acc, in, n, min);
      break;
    case 2:
      Combine<int32_t>(acc, in, n, min);
      break;
    case 3:
      Combine<uint32_t>(acc, in, n, min);
      break;
    case 4:
      Combine<int64_t>(acc, in, n, min);
      break;
    case 5:
      Combine<uint64_t>(acc, in, n, min);
      break;
    case 6:
      Combine16<HalfToFloat, FloatToHalf>(acc, in, n, min);
      break;
    case 7:
      Combine<float>(acc, in, n, min);
      break;
    case 8:
      Combine<double>(acc, in, n, min);
      break;
    case 9:
      Combine16<Bf16ToFloat, FloatToBf16>(acc, in, n, min);
      break;
  }
}

enum class OpKind { kAllReduce, kAllGather, kBroadcast, kSend, kRecv };

struct PendingOp {
  OpKind kind;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  int type = 0;
  int red_op = 0;
  int root = 0;  // broadcast root, or the send/receive peer
  uint64_t seq = 0;
};

struct CommState;

// One collective's meeting point: every rank's buffers, filled on arrival.
struct Slot {
  OpKind kind;
  size_t count;
  int type, red_op, root;
  bool mismatch = false;
  std::vector<const PendingOp*> ops;  // by rank; null until arrived
  std::vector<CommState*> comms;      // by rank
  int arrived = 0, departed = 0;
  bool computing = false;  // the last rank moves the bytes without g_mu
  bool done = false;
};

// A posted send, waiting for its receive.
struct Message {
  const void* data;
  size_t bytes;
  int sender_device;
  bool consumed = false;
  bool copying = false;  // a receiver reads `data` without g_mu
};

struct Clique {
  int nranks = 0;
  std::string id;  // the unique id's bytes (a split derives its child's)
  // ncclCommSplit rounds of an in-process clique: round -> rank -> (color,
  // key). A directory clique posts them as contributions instead.
  std::map<uint64_t, std::map<int, std::pair<int, int>>> split_boards;
  // Set when $RANKD_STANDIN_CLIQUE_DIR is: ranks may be in other processes
  // and meet there; slots and channels are then unused, and members holds
  // this process's ranks only.
  std::unique_ptr<CliqueDirectory> directory;
  std::vector<std::shared_ptr<CommState>> members;  // by rank
  int joined = 0;
  std::map<uint64_t, Slot> slots;
  std::map<std::pair<int, int>, std::deque<std::shared_ptr<Message>>> channels;
};

// The order NCCL 2.28 gives kernels (enqueue.cc, ncclLaunchPrepare and
// ncclLaunchFinish): a launch makes its stream wait for the communicator's
// device stream (comm->sharedRes->deviceStream), which then waits for the
// launch. So the kernels of one communicator, and of every communicator
// sharing its resources (ncclCommSplit of a parent whose splitShare is 1),
// run one after another in launch order, whatever streams they are on.
struct OrderDomain {
  uint64_t next_ticket = 0;
  std::set<uint64_t> outstanding;  // launched, not finished (or dropped)
};
constexpr uint64_t kNoTicket = ~uint64_t{0};

struct CommState {
  std::shared_ptr<Clique> clique;
  std::shared_ptr<OrderDomain> domain = std::make_shared<OrderDomain>();
  // config.splitShare (unset: 0): whether communicators split from this
  // one share its resources, and so its order.
  bool split_share = false;
  uint64_t splits = 0;  // ncclCommSplit calls on this communicator
  uint64_t serial = 0;  // unique for the process's life
  int rank = 0, nranks = 0, device = 0;
  int physical = 0;  // the GPU behind `device`
  // Where the rank runs, as NCCL tells duplicates apart: its host
  // ($NCCL_HOSTID, else the host name) and GPU (Placement()).
  std::string placement;
  bool blocking = true;
  bool init_done = false;
  bool aborted = false;
  bool finalizing = false;
  bool connected = false;
  int launches = 0;
  uint64_t next_seq = 0;
  // Messages sent to and received from each peer (directory cliques).
  std::map<int, uint64_t> sent_to, received_from;
  int queued = 0;   // kernels queued, not yet started
  int running = 0;  // kernels inside
  int jobs = 0;     // non-blocking group ends still launching (Launch)
  NcclResult async = native::kNcclInProgress;
  std::string last_error;
};

}  // namespace

struct ncclComm {
  std::shared_ptr<CommState> state;
};

namespace {

std::map<std::string, std::weak_ptr<Clique>>& Cliques() {
  static auto* c = new std::map<std::string, std::weak_ptr<Clique>>();
  return *c;
}

thread_local int t_group_depth = 0;
thread_local std::vector<std::pair<ncclComm*, CUstream_st*>> t_group_targets;
thread_local std::vector<PendingOp> t_group_ops;
thread_local NcclResult t_group_error = native::kNcclSuccess;
thread_local std::string t_nccl_error;

const char* NcclResultName(NcclResult r) {
  switch (r) {
    case native::kNcclSuccess:
      return "ncclSuccess";
    case native::kNcclUnhandledCudaError:
      return "ncclUnhandledCudaError";
    case native::kNcclSystemError:
      return "ncclSystemError";
    case native::kNcclInternalError:
      return "ncclInternalError";
    case native::kNcclInvalidArgument:
      return "ncclInvalidArgument";
    case native::kNcclInvalidUsage:
      return "ncclInvalidUsage";
    case native::kNcclRemoteError:
      return "ncclRemoteError";
    case native::kNcclInProgress:
      return "ncclInProgress";
    default:
      return "an unknown ncclResult_t";
  }
}

// rankd_standin_fail_nccl_calls: per function name, the result and how
// many more calls return it (guarded by g_mu).
struct Injection {
  NcclResult result = native::kNcclSuccess;
  int remaining = 0;
};
std::map<std::string, Injection>& Injections() {
  static auto* i = new std::map<std::string, Injection>();
  return *i;
}
// How many functions have an injection armed (written with g_mu held).
std::atomic<int> g_injections_armed{0};
// rankd_standin_fail_next_kernel (guarded by g_mu).
NcclResult g_fail_next_kernel = native::kNcclSuccess;

// The injected result of this call of `function`, or ncclSuccess (then
// the call runs as usual). An injected call does nothing else, and
// ncclGetLastError says it was injected.
NcclResult Injected(const char* function) {
  // Unlocked when nothing is injected, so that polling takes no lock a
  // launch thread holds (the launch-wait counts would see it as a block).
  if (g_injections_armed.load(std::memory_order_acquire) == 0) {
    return native::kNcclSuccess;
  }
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = Injections().find(function);
  if (it == Injections().end() || it->second.remaining <= 0) {
    return native::kNcclSuccess;
  }
  const NcclResult r = it->second.result;
  if (--it->second.remaining == 0) {
    Injections().erase(it);
    g_injections_armed.store(static_cast<int>(Injections().size()));
  }
  t_nccl_error = std::string("stand-in: injected ") + NcclResultName(r) +
                 " in " + function;
  return r;
}

// What rankd_standin_thread_launch_waits reports for the calling thread:
// its launches that answered ncclInProgress, and how often it blocked (a
// voluntary context switch: a sleep, a contended lock) between such a
// launch and the ncclCommGetAsyncError that saw the work enqueued, outside
// the stand-in's own calls; "early" when it had waited less than
// kEarlyBlock since the launch when it left the stand-in to block. A
// caller that spins or yields first blocks only in long waits (a loaded
// machine can make NCCL's thread wait milliseconds for a CPU); one that
// sleeps between polls blocks early in every launch.
constexpr auto kEarlyBlock = std::chrono::milliseconds(1);
thread_local int64_t t_in_progress_launches = 0;
thread_local int64_t t_launch_blocks = 0;
thread_local int64_t t_early_launch_blocks = 0;
thread_local uint64_t t_awaited_comm = 0;       // CommState::serial; 0: none
thread_local int64_t t_switches_at_return = 0;  // when it left the stand-in
thread_local std::chrono::steady_clock::time_point t_launched, t_returned;
std::atomic<uint64_t> g_comm_serials{0};

int64_t VoluntarySwitches() {
  rusage usage{};
  getrusage(RUSAGE_THREAD, &usage);
  return usage.ru_nvcsw;
}

NcclResult CommError(CommState* c, NcclResult r, std::string text) {
  if (c != nullptr) c->last_error = text;
  t_nccl_error = std::move(text);
  return r;
}

// Whether rank `reader`'s device may read `p` (g_mu held): memory of a
// default pool is readable by the devices granted access only.
bool Readable(int reader_device, const void* p, size_t bytes) {
  if (bytes == 0) return true;
  const Allocation* a = FindLocked(p, bytes);
  if (a == nullptr) return false;
  if (a->pool == nullptr || a->device == reader_device) return true;
  return a->pool->readers.count(reader_device) != 0;
}

// An illegal-address fault on `c`'s device (g_mu held).
void Fault(CommState* c, const std::string& what) {
  Devices()[c->device].sticky_error = native::kCudaErrorIllegalAddress;
  c->async = native::kNcclUnhandledCudaError;
  c->last_error =
      "Cuda failure 'an illegal memory access was encountered' (" + what + ")";
}

// What a collective writes to every rank's output, from every rank's input
// (by rank; a broadcast reads only the root's).
std::vector<char> Result(OpKind kind, int type, int red_op, int root,
                         size_t count, const std::vector<const void*>& inputs) {
  const size_t bytes = count * TypeSize(type);
  const int n = static_cast<int>(inputs.size());
  std::vector<char> out;
  switch (kind) {
    case OpKind::kAllReduce:
      out.assign(static_cast<const char*>(inputs[0]),
                 static_cast<const char*>(inputs[0]) + bytes);
      for (int p = 1; p < n; ++p) {
        Reduce(type, red_op == native::kNcclMin, out.data(), inputs[p], count);
      }
      break;
    case OpKind::kAllGather:
      out.resize(bytes * n);
      for (int p = 0; p < n; ++p) {
        std::memcpy(out.data() + p * bytes, inputs[p], bytes);
      }
      break;
    case OpKind::kBroadcast:
      out.assign(static_cast<const char*>(inputs[root]),
                 static_cast<const char*>(inputs[root]) + bytes);
      break;
    default:
      break;
  }
  return out;
}

// Computes a complete slot's outputs for every rank (g_mu held through
// `lock`; the bytes move without it, as a device moves them without the
// host, so that other ranks' calls are not held up by a large collective).
void Compute(std::unique_lock<std::mutex>& lock, Slot& slot) {
  const size_t bytes = slot.count * TypeSize(slot.type);
  const int n = static_cast<int>(slot.ops.size());
  std::vector<bool> faulted(n, false);
  for (int r = 0; r < n; ++r) {
    const int reader = slot.comms[r]->device;
    for (int p = 0; p < n; ++p) {
      const bool needed = slot.kind != OpKind::kBroadcast || p == slot.root;
      if (needed && !Readable(reader, slot.ops[p]->send, bytes)) {
        Fault(slot.comms[r], "stand-in: rank " + std::to_string(r) +
                                 " on device " + std::to_string(reader) +
                                 " read rank " + std::to_string(p) +
                                 "'s buffer, pool memory of another device "
                                 "not made accessible by cudaMemPoolSetAccess");
        faulted[r] = true;
        break;
      }
    }
  }
  std::vector<const void*> inputs;
  for (const PendingOp* op : slot.ops) inputs.push_back(op->send);
  lock.unlock();
  const std::vector<char> out =
      Result(slot.kind, slot.type, slot.red_op, slot.root, slot.count, inputs);
  for (int r = 0; r < n; ++r) {
    if (!faulted[r] && !out.empty()) {
      std::memcpy(slot.ops[r]->recv, out.data(), out.size());
    }
  }
  lock.lock();
}

// A failed file operation of a directory clique: an asynchronous system
// error on `c` (g_mu held).
void DirectoryError(CommState* c, const std::string& what) {
  c->async = native::kNcclSystemError;
  c->last_error = "stand-in: clique directory: cannot " + what;
}

// Polls `ready` every millisecond (and whenever g_cv is notified) until it
// holds or `c` is aborted; false when aborted (g_mu held through `lock`).
template <typename Ready>
bool PollUntil(std::unique_lock<std::mutex>& lock, CommState* c, Ready ready) {
  while (!c->aborted) {
    if (ready()) return true;
    g_cv.wait_for(lock, std::chrono::milliseconds(1));
  }
  return false;
}

// A kernel whose file operation failed reports it and then waits, like a
// stuck kernel, until its communicator is aborted: it never completes as if
// it had worked.
void FailUntilAborted(std::unique_lock<std::mutex>& lock, CommState* c,
                      const std::string& what) {
  DirectoryError(c, what);
  PollUntil(lock, c, [] { return false; });
}

// Participate() for a directory clique: publishes this rank's input, waits
// until every rank published the same call at this sequence number (a
// mismatch hangs, as in NCCL), and computes its own output from the copies.
bool ParticipateAcross(std::unique_lock<std::mutex>& lock, CommState* c,
                       const PendingOp& op) {
  CliqueDirectory& directory = *c->clique->directory;
  const size_t bytes = op.count * TypeSize(op.type);
  Contribution mine;
  mine.signature = std::to_string(static_cast<int>(op.kind)) + " " +
                   std::to_string(op.count) + " " + std::to_string(op.type) +
                   " " + std::to_string(op.red_op) + " " +
                   std::to_string(op.root);
  if (op.kind != OpKind::kBroadcast || op.root == c->rank) {
    const char* send = static_cast<const char*>(op.send);
    mine.data.assign(send, send + bytes);
  }
  if (!directory.Post(op.seq, c->rank, mine)) {
    FailUntilAborted(lock, c, "publish collective " + std::to_string(op.seq));
    return false;
  }
  // Read once everything is there; a mismatch then hangs, as in NCCL.
  std::vector<Contribution> all;
  bool complete =
      PollUntil(lock, c, [&] { return directory.AllPosted(op.seq); }) &&
      directory.Collect(op.seq, &all);
  for (const Contribution& peer : all) {
    if (complete && peer.signature != mine.signature) {
      complete = PollUntil(lock, c, [] { return false; });
    }
  }
  if (!complete) {  // leave: the peers wait for this rank forever
    directory.Withdraw(op.seq, c->rank);
    return false;
  }
  std::vector<const void*> inputs;
  for (const Contribution& peer : all) inputs.push_back(peer.data.data());
  const std::vector<char> out =
      Result(op.kind, op.type, op.red_op, op.root, op.count, inputs);
  if (!out.empty()) std::memcpy(op.recv, out.data(), out.size());
  return true;
}

// One collective inside a kernel of rank `c` (g_mu held through `lock`).
// False when the communicator was aborted before it completed.
bool Participate(std::unique_lock<std::mutex>& lock, CommState* c,
                 const PendingOp& op) {
  Clique& q = *c->clique;
  if (q.directory != nullptr) return ParticipateAcross(lock, c, op);
  auto [it, fresh] = q.slots.try_emplace(op.seq);
  Slot& slot = it->second;
  if (fresh) {
    slot.kind = op.kind;
    slot.count = op.count;
    slot.type = op.type;
    slot.red_op = op.red_op;
    slot.root = op.root;
    slot.ops.assign(q.nranks, nullptr);
    slot.comms.assign(q.nranks, nullptr);
  } else if (slot.kind != op.kind || slot.count != op.count ||
             slot.type != op.type || slot.red_op != op.red_op ||
             slot.root != op.root) {
    slot.mismatch = true;  // like NCCL: nobody is told; everyone waits
  }
  slot.ops[c->rank] = &op;
  slot.comms[c->rank] = c;
  ++slot.arrived;
  if (slot.arrived == q.nranks && !slot.mismatch) {
    // Every rank's buffers stay put meanwhile: none leaves while computing.
    slot.computing = true;
    Compute(lock, slot);
    slot.computing = false;
    slot.done = true;
    g_cv.notify_all();
  }
  g_cv.wait(lock, [&] { return slot.done || (c->aborted && !slot.computing); });
  if (!slot.done) {  // leave: the peers wait for this rank forever
    slot.ops[c->rank] = nullptr;
    slot.comms[c->rank] = nullptr;
    --slot.arrived;
    return false;
  }
  if (++slot.departed == q.nranks) q.slots.erase(it);
  return true;
}

// A receive's bytes arrived: whether they may be copied; reports why not
// (g_mu held).
bool Deliverable(CommState* c, const PendingOp& op, size_t sent_bytes,
                 bool readable) {
  const size_t bytes = op.count * TypeSize(op.type);
  if (sent_bytes != bytes) {
    c->async = native::kNcclInvalidUsage;
    c->last_error = "stand-in: rank " + std::to_string(c->rank) + " received " +
                    std::to_string(bytes) + " bytes from " +
                    std::to_string(op.root) + ", which sent " +
                    std::to_string(sent_bytes);
  } else if (!readable) {
    Fault(c,
          "stand-in: received from another device's pool memory not "
          "made accessible by cudaMemPoolSetAccess");
  } else {
    return true;
  }
  return false;
}

// The kernel of one launch: posts its sends, runs its collectives, takes
// its receives, waits until its sends were taken. Leaves early, writing
// nothing more, once the communicator is aborted.
void RunKernel(const std::shared_ptr<CommState>& cs,
               const std::shared_ptr<std::vector<PendingOp>>& ops,
               uint64_t ticket) {
  CommState* c = cs.get();
  std::unique_lock<std::mutex> lock(g_mu);
  // Behind every earlier launch of its order domain (OrderDomain), as the
  // real kernel waits for the device stream; an aborted communicator's
  // kernel leaves at once. Its ticket goes when it leaves (lock held).
  struct Ticket {
    OrderDomain& domain;
    uint64_t ticket;
    ~Ticket() {
      if (ticket == kNoTicket) return;
      domain.outstanding.erase(ticket);
      g_cv.notify_all();
    }
  } held{*c->domain, ticket};
  if (ticket != kNoTicket) {
    g_cv.wait(lock, [&] {
      return c->aborted || *c->domain->outstanding.begin() == ticket;
    });
  }
  --c->queued;
  if (c->aborted) return;
  Device& device = Devices()[c->device];
  ++device.running_kernels;
  ++c->running;
  if (g_fail_next_kernel != native::kNcclSuccess) {
    // An injected asynchronous failure: reported through
    // ncclCommGetAsyncError; the kernel then stays until aborted, as a
    // failed NCCL kernel does, and writes nothing.
    c->async = g_fail_next_kernel;
    c->last_error = std::string("stand-in: injected asynchronous ") +
                    NcclResultName(g_fail_next_kernel);
    g_fail_next_kernel = native::kNcclSuccess;
    PollUntil(lock, c, [] { return false; });
    --c->running;
    --device.running_kernels;
    g_cv.notify_all();
    return;
  }
  Clique& q = *c->clique;
  CliqueDirectory* directory = q.directory.get();
  std::vector<std::shared_ptr<Message>> sent;    // in process
  std::vector<std::pair<int, uint64_t>> posted;  // directory: (peer, n)
  bool ok = true;
  for (const PendingOp& op : *ops) {
    if (op.kind != OpKind::kSend) continue;
    const size_t bytes = op.count * TypeSize(op.type);
    if (directory != nullptr) {
      const uint64_t n = c->sent_to[op.root]++;
      const char* data = static_cast<const char*>(op.send);
      if (!directory->Send(c->rank, op.root, n,
                           std::vector<char>(data, data + bytes))) {
        FailUntilAborted(lock, c, "send to rank " + std::to_string(op.root));
        ok = false;
        break;
      }
      posted.emplace_back(op.root, n);
      continue;
    }
    auto m = std::make_shared<Message>(Message{op.send, bytes, c->device});
    q.channels[{c->rank, op.root}].push_back(m);
    sent.push_back(m);
  }
  g_cv.notify_all();
  for (const PendingOp& op : *ops) {
    if (!ok) break;
    if (op.kind == OpKind::kSend || op.kind == OpKind::kRecv) continue;
    ok = Participate(lock, c, op);
  }
  for (const PendingOp& op : *ops) {
    if (!ok) break;
    if (op.kind != OpKind::kRecv) continue;
    if (directory != nullptr) {
      const uint64_t n = c->received_from[op.root];
      std::vector<char> data;
      ok = PollUntil(lock, c, [&] {
        return directory->Receive(op.root, c->rank, n, &data);
      });
      if (!ok) break;
      ++c->received_from[op.root];
      if (Deliverable(c, op, data.size(), true)) {
        std::memcpy(op.recv, data.data(), data.size());
      }
      continue;
    }
    auto& channel = q.channels[{op.root, c->rank}];
    g_cv.wait(lock, [&] { return !channel.empty() || c->aborted; });
    if (c->aborted) {
      ok = false;
      break;
    }
    std::shared_ptr<Message> m = channel.front();
    channel.pop_front();
    if (Deliverable(
            c, op, m->bytes,
            Readable(c->device, m->data, op.count * TypeSize(op.type)))) {
      // Without g_mu (the sender's kernel waits for `consumed`, and an
      // aborted one for `copying`, so its buffer stays).
      m->copying = true;
      lock.unlock();
      std::memcpy(op.recv, m->data, m->bytes);
      lock.lock();
      m->copying = false;
    }
    m->consumed = true;
    g_cv.notify_all();
  }
  if (ok) {
    PollUntil(lock, c, [&] {
      for (const auto& m : sent) {
        if (!m->consumed) return false;
      }
      for (const auto& [peer, n] : posted) {
        if (!directory->Taken(c->rank, peer, n)) return false;
      }
      return true;
    });
  }
  if (c->aborted) {  // withdraw what nobody took: its memory may go away
    g_cv.wait(lock, [&] {
      for (const auto& m : sent) {
        if (m->copying) return false;
      }
      return true;
    });
    for (auto& [key, channel] : q.channels) {
      channel.erase(std::remove_if(channel.begin(), channel.end(),
                                   [&](const std::shared_ptr<Message>& m) {
                                     return std::find(sent.begin(), sent.end(),
                                                      m) != sent.end();
                                   }),
                    channel.end());
    }
    for (const auto& [peer, n] : posted) directory->Unsend(c->rank, peer, n);
  }
  --c->running;
  --device.running_kernels;
  g_cv.notify_all();
}

NcclResult Validate(ncclComm* comm, CUstream_st* stream, PendingOp& op) {
  if (comm == nullptr || comm->state == nullptr) {
    return CommError(nullptr, native::kNcclInvalidArgument, "null comm");
  }
  CommState* c = comm->state.get();
  std::lock_guard<std::mutex> lock(g_mu);
  if (!c->init_done || c->aborted || c->finalizing) {
    return CommError(c, native::kNcclInvalidUsage,
                     "communicator is not ready (initializing, finalizing "
                     "or aborted)");
  }
  // ncclCommEnsureReady: a non-blocking communicator is used only once
  // its previous call finished, and one with an error refuses with it.
  if (c->async == native::kNcclInProgress) {
    return CommError(c, native::kNcclInvalidArgument,
                     "Attempt to use communicator before the previous "
                     "operation returned ncclSuccess");
  }
  if (c->async != native::kNcclSuccess) return c->async;
  const size_t size = TypeSize(op.type);
  if (size == 0) return CommError(c, native::kNcclInvalidArgument, "bad type");
  if (op.kind == OpKind::kAllReduce && op.red_op != native::kNcclSum &&
      op.red_op != native::kNcclMin) {
    return CommError(c, native::kNcclInvalidArgument,
                     "stand-in: only sum and min reduce");
  }
  if ((op.kind == OpKind::kBroadcast || op.kind == OpKind::kSend ||
       op.kind == OpKind::kRecv) &&
      (op.root < 0 || op.root >= c->nranks)) {
    return CommError(c, native::kNcclInvalidArgument, "peer/root out of range");
  }
  const size_t bytes = op.count * size;
  const size_t recv_bytes =
      op.kind == OpKind::kAllGather ? bytes * c->nranks : bytes;
  const bool sends = op.kind != OpKind::kRecv &&
                     (op.kind != OpKind::kBroadcast || op.root == c->rank);
  const bool receives = op.kind != OpKind::kSend;
  if (bytes > 0 && ((sends && FindLocked(op.send, bytes) == nullptr) ||
                    (receives && FindLocked(op.recv, recv_bytes) == nullptr))) {
    return CommError(c, native::kNcclInvalidArgument,
                     "stand-in: a buffer is not device memory of its size");
  }
  if (stream != nullptr && stream->device != c->device) {
    return CommError(c, native::kNcclInvalidArgument,
                     "stand-in: the stream is on device " +
                         std::to_string(stream->device) +
                         ", the communicator on " + std::to_string(c->device));
  }
  return native::kNcclSuccess;
}

// Whether every rank of `c`'s clique launched once, so that its peers are
// connected (g_mu held).
bool ConnectedLocked(CommState* c) {
  if (!c->connected && c->clique->directory != nullptr) {
    c->connected = c->clique->directory->AllLaunched();
  }
  return c->connected;
}

// What ncclGroupEnd (or a call outside a group) does with the calls of one
// communicator and stream, as NCCL 2.28 does (group.cc, enqueue.cc):
//   - one rank: the work is queued at once (NCCL copies locally);
//   - blocking: the caller connects the peers on first use (waits until
//     every rank launched once, or the communicator is aborted) and queues
//     the work before it returns ncclSuccess;
//   - non-blocking: a new thread does that (ncclGroupEnd's per-call
//     pthread_create), and the call answers ncclInProgress, as does
//     ncclCommGetAsyncError, until the work is queued.
NcclResult Launch(ncclComm* comm, CUstream_st* stream,
                  std::vector<PendingOp> ops) {
  std::shared_ptr<CommState> cs = comm->state;
  CUstream_st* s = Resolve(stream);
  std::unique_lock<std::mutex> lock(g_mu);
  for (PendingOp& op : ops) {
    if (op.kind != OpKind::kSend && op.kind != OpKind::kRecv) {
      op.seq = cs->next_seq++;
    }
  }
  auto shared_ops = std::make_shared<std::vector<PendingOp>>(std::move(ops));
  // The kernel takes its place in its order domain when it is queued
  // (g_mu held), which is when NCCL launches it.
  auto queue_kernel = [cs, shared_ops, s] {
    const uint64_t ticket = cs->domain->next_ticket++;
    cs->domain->outstanding.insert(ticket);
    ++cs->queued;
    EnqueueLocked(
        s, [cs, shared_ops, ticket] { RunKernel(cs, shared_ops, ticket); });
  };
  if (s->capture != nullptr) {
    // On a capturing stream the kernel is recorded into the graph, as
    // NCCL's launch is captured: it does not run, nor count as queued.
    EnqueueLocked(s,
                  [cs, shared_ops] { RunKernel(cs, shared_ops, kNoTicket); });
    return native::kNcclSuccess;
  }
  ++cs->launches;
  if (!cs->connected && cs->clique->directory == nullptr) {
    bool all = true;
    for (const auto& m : cs->clique->members) all = all && m->launches > 0;
    if (all) {
      for (const auto& m : cs->clique->members) m->connected = true;
      g_cv.notify_all();
    }
  }
  if (!cs->connected && cs->clique->directory != nullptr && cs->launches == 1 &&
      !cs->clique->directory->MarkLaunched(cs->rank)) {
    DirectoryError(cs.get(), "record the first launch");
    return cs->async;
  }
  if (cs->nranks == 1 || cs->blocking) {
    if (!PollUntil(lock, cs.get(), [&] { return ConnectedLocked(cs.get()); })) {
      return CommError(cs.get(), native::kNcclInternalError,
                       "stand-in: aborted while connecting to the peers");
    }
    queue_kernel();
    return native::kNcclSuccess;
  }
  cs->async = native::kNcclInProgress;
  ++cs->jobs;
  std::thread([cs, queue_kernel = std::move(queue_kernel)]() mutable {
    std::unique_lock<std::mutex> lock(g_mu);
    if (PollUntil(lock, cs.get(), [&] { return ConnectedLocked(cs.get()); })) {
      queue_kernel();
      if (cs->async == native::kNcclInProgress) {
        cs->async = native::kNcclSuccess;
      }
    }
    --cs->jobs;
    g_cv.notify_all();
  }).detach();
  lock.unlock();
  ++t_in_progress_launches;
  t_awaited_comm = cs->serial;
  t_switches_at_return = VoluntarySwitches();
  t_launched = t_returned = std::chrono::steady_clock::now();
  return native::kNcclInProgress;
}

NcclResult Submit(const char* function, ncclComm* comm, CUstream_st* stream,
                  PendingOp op) {
  NcclResult r = Injected(function);
  if (r == native::kNcclSuccess) r = Validate(comm, stream, op);
  if (t_group_depth > 0) {
    if (r != native::kNcclSuccess) {
      if (t_group_error == native::kNcclSuccess) t_group_error = r;
      return r;
    }
    if (!t_group_targets.empty() && (t_group_targets[0].first != comm ||
                                     t_group_targets[0].second != stream)) {
      t_group_error = native::kNcclInvalidUsage;
      return CommError(comm->state.get(), native::kNcclInvalidUsage,
                       "stand-in: a group spans one communicator and stream");
    }
    t_group_targets.emplace_back(comm, stream);
    t_group_ops.push_back(op);
    return native::kNcclSuccess;
  }
  if (r != native::kNcclSuccess) return r;
  return Launch(comm, stream, {op});
}

// Every rank's placement, by rank, once all joined; empty before (g_mu
// held).
std::vector<std::string> JoinedPlacements(const Clique& q) {
  if (q.directory != nullptr) return q.directory->JoinedPlacements();
  if (q.joined < q.nranks) return {};
  std::vector<std::string> placements;
  for (const auto& member : q.members) placements.push_back(member->placement);
  return placements;
}

// Where a rank on stand-in GPU `physical` runs: "<host>/<gpu>". NCCL
// takes two ranks for one GPU when their host hashes (NCCL_HOSTID, else
// the host name; read at init) and bus ids match; one NCCL_HOSTID per
// process is how the GPU kit runs several ranks on one GPU.
std::string Placement(int physical) {
  std::string host;
  if (const char* id = std::getenv("NCCL_HOSTID"); id != nullptr && *id) {
    host = id;
  } else {
    char name[256] = {};
    gethostname(name, sizeof(name) - 1);
    host = name;
  }
  return host + "/" + std::to_string(physical);
}

// A config's blocking flag (unset: blocking, NCCL's default).
bool ConfigBlocking(const native::NcclConfig* config) {
  return config == nullptr || config->blocking == native::kNcclConfigUndefInt ||
         config->blocking != 0;
}

// A config's splitShare, where its version has one (unset: 0, NCCL's
// default).
bool ConfigSplitShare(const native::NcclConfig* config) {
  if (config == nullptr ||
      config->version < native::kNcclConfigVersionSplitShare ||
      config->size < sizeof(native::NcclConfigWithSplitShare)) {
    return false;
  }
  const auto* full =
      reinterpret_cast<const native::NcclConfigWithSplitShare*>(config);
  return full->split_share == 1;
}

// Joins rank `rank` of the clique of unique id `id` on `device` (g_mu held
// through `lock`). With `wait`, returns once every rank joined (init
// done); otherwise at once with ncclInProgress (a non-blocking init).
NcclResult JoinCliqueLocked(std::unique_lock<std::mutex>& lock, ncclComm** out,
                            int nranks, const native::NcclUniqueId& id,
                            int rank, int device, bool blocking, bool wait,
                            std::shared_ptr<CommState>* joined = nullptr) {
  auto cs = std::make_shared<CommState>();
  cs->serial = g_comm_serials.fetch_add(1) + 1;
  cs->device = device;
  cs->physical =
      cs->device < DeviceCount() ? Devices()[cs->device].physical : cs->device;
  cs->placement = Placement(cs->physical);
  std::string key(id.internal, sizeof(id.internal));
  std::shared_ptr<Clique> q = Cliques()[key].lock();
  if (q == nullptr) {
    q = std::make_shared<Clique>();
    q->nranks = nranks;
    q->id = key;
    q->members.resize(nranks);
    const char* root = std::getenv("RANKD_STANDIN_CLIQUE_DIR");
    if (root != nullptr && root[0] != '\0') {
      std::string error;
      q->directory = CliqueDirectory::Open(root, id.internal,
                                           sizeof(id.internal), nranks, &error);
      if (q->directory == nullptr) {
        return CommError(nullptr, native::kNcclSystemError, error);
      }
    }
    Cliques()[key] = q;
  }
  if (q->nranks != nranks || q->members[rank] != nullptr) {
    return CommError(nullptr, native::kNcclInvalidUsage,
                     "stand-in: unique id reused or rank taken");
  }
  cs->clique = q;
  cs->rank = rank;
  cs->nranks = nranks;
  cs->blocking = blocking;
  if (q->directory != nullptr && !q->directory->Join(rank, cs->placement)) {
    return CommError(nullptr, native::kNcclSystemError,
                     "stand-in: clique directory: cannot record the join");
  }
  q->members[rank] = cs;
  ++q->joined;
  g_cv.notify_all();
  if (joined != nullptr) *joined = cs;
  *out = new ncclComm{cs};
  if (!wait) return native::kNcclInProgress;
  PollUntil(lock, cs.get(), [&] { return !JoinedPlacements(*q).empty(); });
  cs->init_done = true;
  cs->async = native::kNcclSuccess;
  return native::kNcclSuccess;
}

NcclResult JoinClique(ncclComm** out, int nranks,
                      const native::NcclUniqueId& id, int rank,
                      native::NcclConfig* config) {
  if (out == nullptr || nranks < 1 || rank < 0 || rank >= nranks) {
    return CommError(nullptr, native::kNcclInvalidArgument, "bad rank or size");
  }
  const bool blocking = ConfigBlocking(config);
  std::unique_lock<std::mutex> lock(g_mu);
  std::shared_ptr<CommState> cs;
  NcclResult r =
      JoinCliqueLocked(lock, out, nranks, id, rank, ContextDeviceLocked(),
                       blocking, blocking, &cs);
  if (cs != nullptr) cs->split_share = ConfigSplitShare(config);
  return r;
}

// Settles a non-blocking init once every rank joined (g_mu held).
void SettleInit(CommState* c) {
  if (c->init_done || c->aborted) return;
  Clique& q = *c->clique;
  const std::vector<std::string> placements = JoinedPlacements(q);
  if (placements.empty()) return;
  c->init_done = true;
  c->async = native::kNcclSuccess;
  for (int r = 0; r < q.nranks; ++r) {
    if (r != c->rank && placements[r] == c->placement) {
      c->async = native::kNcclInvalidUsage;
      c->last_error = "Duplicate GPU detected : rank " +
                      std::to_string(c->rank) + " and rank " +
                      std::to_string(r) + " both on CUDA device " +
                      std::to_string(c->physical);
    }
  }
}

// Marks `c` aborted: its kernels leave; a queued one never starts work.
void Revoke(CommState* c) {
  std::lock_guard<std::mutex> lock(g_mu);
  c->aborted = true;
  ++g_aborts;
  g_cv.notify_all();
}

}  // namespace

STANDIN_API NcclResult ncclGetVersion(int* v) {
  if (v == nullptr) return native::kNcclInvalidArgument;
  // $RANKD_STANDIN_NCCL_VERSION (a bench's lever): answer as an older NCCL,
  // e.g. 21700 for one without ncclCommSplit.
  *v = EnvInt("RANKD_STANDIN_NCCL_VERSION", 22800, 21400, 22800);
  return native::kNcclSuccess;
}
STANDIN_API NcclResult ncclGetUniqueId(native::NcclUniqueId* id) {
  if (id == nullptr) return native::kNcclInvalidArgument;
  if (NcclResult r = Injected("ncclGetUniqueId"); r != native::kNcclSuccess) {
    return r;
  }
  static std::mutex mu;
  static std::mt19937_64 rng(std::random_device{}());
  std::lock_guard<std::mutex> lock(mu);
  for (size_t i = 0; i < sizeof(id->internal); i += 8) {
    uint64_t v = rng();
    std::memcpy(id->internal + i, &v, 8);
  }
  return native::kNcclSuccess;
}
STANDIN_API NcclResult ncclCommInitRankConfig(ncclComm** comm, int nranks,
                                              native::NcclUniqueId id, int rank,
                                              native::NcclConfig* config) {
  if (NcclResult r = Injected("ncclCommInitRankConfig");
      r != native::kNcclSuccess) {
    return r;
  }
  return JoinClique(comm, nranks, id, rank, config);
}
STANDIN_API NcclResult ncclCommInitRankScalable(ncclComm** comm, int nranks,
                                                int rank, int nids,
                                                native::NcclUniqueId* ids,
                                                native::NcclConfig* config) {
  if (NcclResult r = Injected("ncclCommInitRankScalable");
      r != native::kNcclSuccess) {
    return r;
  }
  if (nids < 1 || ids == nullptr) return native::kNcclInvalidArgument;
  return JoinClique(comm, nranks, ids[0], rank, config);
}
namespace {

// Where a directory clique posts its split rounds (clique_directory.h
// "op.<seq>"), far above any collective's sequence number.
constexpr uint64_t kSplitSeqBase = uint64_t{1} << 62;

uint64_t Fnv1a(const std::string& bytes, uint64_t h) {
  for (unsigned char b : bytes) {
    h ^= b;
    h *= 1099511628211ull;
  }
  return h;
}

// Every rank's (color, key) of split `round` of `c`'s clique, by rank, once
// all posted (g_mu held); false while one is missing.
bool SplitBoard(CommState* c, uint64_t round,
                std::vector<std::pair<int, int>>* board) {
  Clique& q = *c->clique;
  board->clear();
  if (q.directory != nullptr) {
    std::vector<Contribution> all;
    if (!q.directory->AllPosted(kSplitSeqBase + round) ||
        !q.directory->Collect(kSplitSeqBase + round, &all)) {
      return false;
    }
    for (const Contribution& peer : all) {
      std::pair<int, int> ck{native::kNcclSplitNoColor, 0};
      if (peer.data.size() == sizeof(int) * 2) {
        std::memcpy(&ck.first, peer.data.data(), sizeof(int));
        std::memcpy(&ck.second, peer.data.data() + sizeof(int), sizeof(int));
      }
      board->push_back(ck);
    }
    return true;
  }
  const auto& posted = q.split_boards[round];
  if (static_cast<int>(posted.size()) < q.nranks) return false;
  for (const auto& [rank, ck] : posted) board->push_back(ck);
  return true;
}

// The rest of ncclCommSplit once rank `parent->rank` posted its color and
// key (g_mu held through `lock`): waits for every rank's, then joins the
// child clique of its color (ranked by key, then parent rank) and waits
// until all of that clique joined, as NCCL's split job initializes the
// child whole before it writes `*newcomm`.
NcclResult FinishSplit(std::unique_lock<std::mutex>& lock,
                       const std::shared_ptr<CommState>& parent, uint64_t round,
                       int color, bool child_blocking, bool child_split_share,
                       ncclComm** newcomm) {
  std::vector<std::pair<int, int>> board;
  if (!PollUntil(lock, parent.get(),
                 [&] { return SplitBoard(parent.get(), round, &board); })) {
    return CommError(parent.get(), native::kNcclInternalError,
                     "stand-in: aborted while splitting");
  }
  if (color == native::kNcclSplitNoColor) return native::kNcclSuccess;
  std::vector<std::pair<int, int>> members;  // (key, parent rank)
  for (int r = 0; r < static_cast<int>(board.size()); ++r) {
    if (board[r].first == color) members.emplace_back(board[r].second, r);
  }
  std::sort(members.begin(), members.end());
  int my_rank = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i].second == parent->rank) my_rank = static_cast<int>(i);
  }
  // The child's id: the parent's, its first 16 bytes (which name a
  // directory clique) a hash of the parent's id, the round and the color.
  const std::string tag = parent->clique->id + "/split/" +
                          std::to_string(round) + "/" + std::to_string(color);
  native::NcclUniqueId id;
  std::memcpy(id.internal, parent->clique->id.data(), sizeof(id.internal));
  const uint64_t h1 = Fnv1a(tag, 1469598103934665603ull);
  const uint64_t h2 = Fnv1a(tag, h1 ^ 0x9e3779b97f4a7c15ull);
  std::memcpy(id.internal, &h1, 8);
  std::memcpy(id.internal + 8, &h2, 8);
  ncclComm* child = nullptr;
  std::shared_ptr<CommState> cs;
  NcclResult r =
      JoinCliqueLocked(lock, &child, static_cast<int>(members.size()), id,
                       my_rank, parent->device, child_blocking,
                       /*wait=*/false, &cs);
  if (r != native::kNcclInProgress) return r;
  // An abort of the parent ends the child's init too (NCCL's
  // childAbortFlag, or the shared abort flag).
  if (!PollUntil(lock, parent.get(),
                 [&] { return !JoinedPlacements(*cs->clique).empty(); })) {
    cs->aborted = true;
    g_cv.notify_all();
    return CommError(parent.get(), native::kNcclInternalError,
                     "stand-in: aborted while the split child initialized");
  }
  SettleInit(cs.get());
  if (cs->async != native::kNcclSuccess) return cs->async;
  cs->split_share = child_split_share;
  // Sharing resources shares the device stream, and so the order.
  if (parent->split_share) cs->domain = parent->domain;
  __atomic_store_n(newcomm, child, __ATOMIC_RELEASE);
  return native::kNcclSuccess;
}

}  // namespace

// As NCCL 2.28's (init.cc, ncclCommInitChildComm): collective over every
// rank of `comm`; a rank with NCCL_SPLIT_NOCOLOR gets no communicator;
// `*newcomm` stays null until the child is initialized; the parent must be
// ready (ncclCommEnsureReady) and, when non-blocking, answers
// ncclInProgress (from this call and from ncclCommGetAsyncError) while a
// thread of its own does the split. Whether the child shares resources
// (and so kernel order: OrderDomain) is the parent's config.splitShare; a
// null `config` gives the child the parent's.
STANDIN_API NcclResult ncclCommSplit(ncclComm* comm, int color, int key,
                                     ncclComm** newcomm,
                                     native::NcclConfig* config) {
  if (NcclResult r = Injected("ncclCommSplit"); r != native::kNcclSuccess) {
    return r;
  }
  if (comm == nullptr || comm->state == nullptr || newcomm == nullptr ||
      (color < 0 && color != native::kNcclSplitNoColor)) {
    return CommError(nullptr, native::kNcclInvalidArgument,
                     "ncclCommSplit: bad communicator, color or newcomm");
  }
  std::shared_ptr<CommState> parent = comm->state;
  std::unique_lock<std::mutex> lock(g_mu);
  SettleInit(parent.get());
  if (!parent->init_done || parent->aborted || parent->finalizing) {
    return CommError(parent.get(), native::kNcclInvalidUsage,
                     "communicator is not ready (initializing, finalizing "
                     "or aborted)");
  }
  if (parent->async == native::kNcclInProgress) {
    return CommError(parent.get(), native::kNcclInvalidArgument,
                     "Attempt to use communicator before the previous "
                     "operation returned ncclSuccess");
  }
  if (parent->async != native::kNcclSuccess) return parent->async;
  *newcomm = nullptr;
  const uint64_t round = parent->splits++;
  const bool child_blocking =
      config != nullptr ? ConfigBlocking(config) : parent->blocking;
  const bool child_split_share =
      config != nullptr ? ConfigSplitShare(config) : parent->split_share;
  Clique& q = *parent->clique;
  if (q.directory != nullptr) {
    Contribution mine;
    mine.signature = "split";
    mine.data.resize(sizeof(int) * 2);
    std::memcpy(mine.data.data(), &color, sizeof(int));
    std::memcpy(mine.data.data() + sizeof(int), &key, sizeof(int));
    if (!q.directory->Post(kSplitSeqBase + round, parent->rank, mine)) {
      return CommError(parent.get(), native::kNcclSystemError,
                       "stand-in: clique directory: cannot post a split");
    }
  } else {
    q.split_boards[round][parent->rank] = {color, key};
  }
  g_cv.notify_all();
  if (parent->blocking) {
    return FinishSplit(lock, parent, round, color, child_blocking,
                       child_split_share, newcomm);
  }
  parent->async = native::kNcclInProgress;
  ++parent->jobs;
  std::thread([parent, round, color, child_blocking, child_split_share,
               newcomm] {
    std::unique_lock<std::mutex> lock(g_mu);
    NcclResult r = FinishSplit(lock, parent, round, color, child_blocking,
                               child_split_share, newcomm);
    if (parent->async == native::kNcclInProgress) parent->async = r;
    --parent->jobs;
    g_cv.notify_all();
  }).detach();
  return native::kNcclInProgress;
}

STANDIN_API NcclResult ncclCommGetAsyncError(ncclComm* comm,
                                             NcclResult* state) {
  if (comm == nullptr || state == nullptr) return native::kNcclInvalidArgument;
  CommState* c = comm->state.get();
  // Counted first: the caller's blocks are those outside the stand-in.
  const bool awaited = t_awaited_comm != 0 && t_awaited_comm == c->serial;
  if (awaited) {
    const int64_t blocks = VoluntarySwitches() - t_switches_at_return;
    t_launch_blocks += blocks;
    if (t_returned - t_launched < kEarlyBlock) t_early_launch_blocks += blocks;
  }
  if (NcclResult r = Injected("ncclCommGetAsyncError");
      r != native::kNcclSuccess) {
    return r;
  }
  {
    std::lock_guard<std::mutex> lock(g_mu);
    SettleInit(c);
    // A launch's progress is its group job's (Launch); a finalize's is
    // the end of the communicator's kernels.
    if (c->init_done && c->async == native::kNcclInProgress && c->finalizing &&
        c->queued == 0 && c->running == 0 && c->jobs == 0) {
      c->async = native::kNcclSuccess;
    }
    *state = c->async;
  }
  if (awaited && *state != native::kNcclInProgress) t_awaited_comm = 0;
  if (awaited) {
    t_switches_at_return = VoluntarySwitches();
    t_returned = std::chrono::steady_clock::now();
  }
  return native::kNcclSuccess;
}
STANDIN_API NcclResult ncclCommFinalize(ncclComm* comm) {
  if (comm == nullptr) return native::kNcclInvalidArgument;
  if (NcclResult r = Injected("ncclCommFinalize"); r != native::kNcclSuccess) {
    return r;
  }
  CommState* c = comm->state.get();
  std::unique_lock<std::mutex> lock(g_mu);
  c->finalizing = true;
  if (c->async == native::kNcclSuccess) c->async = native::kNcclInProgress;
  if (!c->blocking) return native::kNcclInProgress;
  g_cv.wait(lock,
            [&] { return c->queued == 0 && c->running == 0 && c->jobs == 0; });
  c->async = native::kNcclSuccess;
  return native::kNcclSuccess;
}
namespace {

// ncclCommDestroy and ncclCommAbort: the communicator's kernels leave; then,
// as NCCL frees its device memory (and cudaFree waits for every kernel on
// the device, other communicators' too), wait until none runs there.
NcclResult TearDown(ncclComm* comm) {
  if (comm == nullptr) return native::kNcclInvalidArgument;
  std::shared_ptr<CommState> c = comm->state;
  Revoke(c.get());
  {
    std::unique_lock<std::mutex> lock(g_mu);
    // Like ncclCommAbort, which joins the group job still launching.
    g_cv.wait(lock, [&] {
      return c->jobs == 0 && Devices()[c->device].running_kernels == 0;
    });
  }
  delete comm;
  return native::kNcclSuccess;
}

}  // namespace

STANDIN_API NcclResult ncclCommDestroy(ncclComm* comm) {
  return TearDown(comm);
}
STANDIN_API NcclResult ncclCommAbort(ncclComm* comm) { return TearDown(comm); }
STANDIN_API const char* ncclGetErrorString(NcclResult r) {
  switch (r) {
    case native::kNcclSuccess:
      return "no error";
    case native::kNcclUnhandledCudaError:
      return "unhandled cuda error";
    case native::kNcclSystemError:
      return "unhandled system error";
    case native::kNcclInternalError:
      return "internal error";
    case native::kNcclInvalidArgument:
      return "invalid argument";
    case native::kNcclInvalidUsage:
      return "invalid usage";
    case native::kNcclRemoteError:
      return "remote process exited or there was a network error";
    case native::kNcclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}
STANDIN_API const char* ncclGetLastError(ncclComm* comm) {
  thread_local std::string copy;
  std::lock_guard<std::mutex> lock(g_mu);
  copy = comm != nullptr && comm->state != nullptr &&
                 !comm->state->last_error.empty()
             ? comm->state->last_error
             : t_nccl_error;
  return copy.c_str();
}
STANDIN_API NcclResult ncclAllReduce(const void* send, void* recv, size_t count,
                                     int type, int op, ncclComm* comm,
                                     native::CudaStream s) {
  PendingOp p{OpKind::kAllReduce, send, recv, count, type, op};
  return Submit("ncclAllReduce", comm, s, p);
}
STANDIN_API NcclResult ncclAllGather(const void* send, void* recv, size_t count,
                                     int type, ncclComm* comm,
                                     native::CudaStream s) {
  PendingOp p{OpKind::kAllGather, send, recv, count, type};
  return Submit("ncclAllGather", comm, s, p);
}
STANDIN_API NcclResult ncclBroadcast(const void* send, void* recv, size_t count,
                                     int type, int root, ncclComm* comm,
                                     native::CudaStream s) {
  PendingOp p{OpKind::kBroadcast, send, recv, count, type, 0, root};
  return Submit("ncclBroadcast", comm, s, p);
}
STANDIN_API NcclResult ncclSend(const void* send, size_t count, int type,
                                int peer, ncclComm* comm,
                                native::CudaStream s) {
  PendingOp p{OpKind::kSend, send, nullptr, count, type, 0, peer};
  return Submit("ncclSend", comm, s, p);
}
STANDIN_API NcclResult ncclRecv(void* recv, size_t count, int type, int peer,
                                ncclComm* comm, native::CudaStream s) {
  PendingOp p{OpKind::kRecv, nullptr, recv, count, type, 0, peer};
  return Submit("ncclRecv", comm, s, p);
}
STANDIN_API NcclResult ncclGroupStart() {
  if (NcclResult r = Injected("ncclGroupStart"); r != native::kNcclSuccess) {
    return r;
  }
  if (t_group_depth++ == 0) {
    t_group_targets.clear();
    t_group_ops.clear();
    t_group_error = native::kNcclSuccess;
  }
  return native::kNcclSuccess;
}
STANDIN_API NcclResult ncclGroupEnd() {
  if (t_group_depth == 0) return native::kNcclInvalidUsage;
  if (--t_group_depth > 0) return native::kNcclSuccess;
  std::vector<PendingOp> ops;
  ops.swap(t_group_ops);
  auto targets = std::move(t_group_targets);
  t_group_targets.clear();
  if (t_group_error != native::kNcclSuccess) return t_group_error;
  // Injected after the group closed: its calls are dropped, as NCCL drops
  // a group whose end failed.
  if (NcclResult r = Injected("ncclGroupEnd"); r != native::kNcclSuccess) {
    return r;
  }
  if (ops.empty()) return native::kNcclSuccess;
  return Launch(targets[0].first, targets[0].second, std::move(ops));
}

// --- test control (standin_control.h) -----------------------------------

STANDIN_API int rankd_standin_version(void) { return 1; }
STANDIN_API int rankd_standin_primary_context_active(int device) {
  std::lock_guard<std::mutex> lock(g_mu);
  return device >= 0 && device < DeviceCount() &&
                 Devices()[device].primary_context
             ? 1
             : 0;
}
STANDIN_API int rankd_standin_running_kernels(int device) {
  std::lock_guard<std::mutex> lock(g_mu);
  return device >= 0 && device < DeviceCount()
             ? Devices()[device].running_kernels
             : 0;
}
STANDIN_API void rankd_standin_hold_next_event_record_until_abort(
    int timeout_ms) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_hold_record_ms = timeout_ms;
}
STANDIN_API void rankd_standin_set_max_pitch(int64_t bytes) {
  g_max_pitch.store(bytes > 0 ? static_cast<size_t>(bytes) : 2147483647);
}
STANDIN_API int64_t rankd_standin_streams_created(void) {
  return g_streams_created.load();
}
STANDIN_API int64_t rankd_standin_allocations(void) {
  return g_allocation_count.load();
}
STANDIN_API int64_t rankd_standin_default_pool_changes(int device) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (device < 0 || device >= DeviceCount()) return -1;
  return Devices()[device].default_pool->changes;
}
STANDIN_API int rankd_standin_physical_device(int device) {
  if (device < 0 || device >= DeviceCount()) return -1;
  return Devices()[device].physical;
}
STANDIN_API void rankd_standin_fail_nccl_calls(const char* function, int result,
                                               int count) {
  if (function == nullptr) return;
  std::lock_guard<std::mutex> lock(g_mu);
  if (count <= 0 || result == native::kNcclSuccess) {
    Injections().erase(function);
  } else {
    Injections()[function] = {result, count};
  }
  g_injections_armed.store(static_cast<int>(Injections().size()));
}
STANDIN_API void rankd_standin_fail_next_kernel(int result) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_fail_next_kernel = result;
}
STANDIN_API int rankd_standin_pool_access(int owner, int peer) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (owner < 0 || owner >= DeviceCount()) return 0;
  return Devices()[owner].default_pool->readers.count(peer) != 0 ? 1 : 0;
}
STANDIN_API void rankd_standin_thread_launch_waits(
    int64_t* in_progress_launches, int64_t* blocks, int64_t* early_blocks) {
  if (in_progress_launches != nullptr) {
    *in_progress_launches = t_in_progress_launches;
  }
  if (blocks != nullptr) *blocks = t_launch_blocks;
  if (early_blocks != nullptr) *early_blocks = t_early_launch_blocks;
}
STANDIN_API int64_t rankd_standin_thread_host_syncs(void) {
  return t_host_syncs;
}
