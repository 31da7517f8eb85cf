#include "common/mapping_guard.h"

#include <signal.h>
#include <sys/mman.h>

#include <atomic>
#include <cstdint>
#include <mutex>

namespace rankd {
namespace {

struct Entry {
  // 0 when the entry is free. `bytes` is written before `base` is
  // published, and cleared after `base` is.
  std::atomic<uintptr_t> base{0};
  std::atomic<size_t> bytes{0};
  std::atomic<bool> broken{false};
};

Entry g_entries[MappingGuard::kMaxGuardedMappings];
std::once_flag g_installed;
struct sigaction g_previous;

void OnSigbus(int signal, siginfo_t* info, void* context) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(info->si_addr);
  for (Entry& e : g_entries) {
    const uintptr_t base = e.base.load(std::memory_order_acquire);
    const size_t bytes = e.bytes.load(std::memory_order_acquire);
    if (base == 0 || addr < base || addr - base >= bytes) continue;
    // Same address, same size, now private zeroed memory: the faulting
    // access is retried on it when the handler returns.
    void* replaced =
        ::mmap(reinterpret_cast<void*>(base), bytes, PROT_READ | PROT_WRITE,
               MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (replaced != MAP_FAILED) {
      e.broken.store(true, std::memory_order_release);
      return;
    }
    break;
  }
  // Not ours (or the replacement failed): fault as if unguarded.
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction != nullptr) {
      return g_previous.sa_sigaction(signal, info, context);
    }
  } else if (g_previous.sa_handler != SIG_DFL &&
             g_previous.sa_handler != SIG_IGN) {
    return g_previous.sa_handler(signal);
  }
  ::signal(SIGBUS, SIG_DFL);
  ::raise(SIGBUS);
}

void Install() {
  struct sigaction action = {};
  action.sa_sigaction = OnSigbus;
  action.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGBUS, &action, &g_previous);
}

}  // namespace

int MappingGuard::Guard(void* base, size_t bytes) {
  std::call_once(g_installed, Install);
  static std::mutex claim;  // only claiming a free entry needs it
  std::lock_guard<std::mutex> lock(claim);
  for (size_t i = 0; i < kMaxGuardedMappings; ++i) {
    Entry& e = g_entries[i];
    if (e.base.load(std::memory_order_relaxed) != 0) continue;
    e.broken.store(false, std::memory_order_relaxed);
    e.bytes.store(bytes, std::memory_order_release);
    e.base.store(reinterpret_cast<uintptr_t>(base), std::memory_order_release);
    return static_cast<int>(i);
  }
  return -1;
}

bool MappingGuard::Broken(int handle) {
  return handle >= 0 &&
         g_entries[handle].broken.load(std::memory_order_acquire);
}

void MappingGuard::Release(int handle) {
  if (handle < 0) return;
  g_entries[handle].base.store(0, std::memory_order_release);
  g_entries[handle].bytes.store(0, std::memory_order_release);
}

}  // namespace rankd
