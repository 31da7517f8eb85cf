#include "dataplane/nccl/testing/standin_control.h"

#include <dlfcn.h>

#include <cstdlib>

namespace rankd::dataplane::nccl::testing {
namespace {

template <typename Fn>
bool Find(void* handle, const char* name, Fn* fn) {
  *fn = reinterpret_cast<Fn>(::dlsym(handle, name));
  return *fn != nullptr;
}

const StandinControl* Resolve() {
  const char* file = std::getenv("RANKD_NCCL_LIBRARY");
  if (file == nullptr || file[0] == '\0') return nullptr;
  void* handle = ::dlopen(file, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return nullptr;
  int (*version)() = nullptr;
  if (!Find(handle, "rankd_standin_version", &version) || version() != 1) {
    return nullptr;
  }
  static StandinControl control;
  bool ok =
      Find(handle, "rankd_standin_primary_context_active",
           &control.primary_context_active) &&
      Find(handle, "rankd_standin_running_kernels", &control.running_kernels) &&
      Find(handle, "rankd_standin_hold_next_event_record_until_abort",
           &control.hold_next_event_record_until_abort) &&
      Find(handle, "rankd_standin_set_max_pitch", &control.set_max_pitch) &&
      Find(handle, "rankd_standin_streams_created", &control.streams_created) &&
      Find(handle, "rankd_standin_allocations", &control.allocations) &&
      Find(handle, "rankd_standin_pool_access", &control.pool_access) &&
      Find(handle, "rankd_standin_default_pool_changes",
           &control.default_pool_changes) &&
      Find(handle, "rankd_standin_physical_device", &control.physical_device) &&
      Find(handle, "rankd_standin_fail_nccl_calls", &control.fail_nccl_calls) &&
      Find(handle, "rankd_standin_fail_next_kernel",
           &control.fail_next_kernel) &&
      Find(handle, "rankd_standin_thread_launch_waits",
           &control.thread_launch_waits) &&
      Find(handle, "rankd_standin_thread_host_syncs",
           &control.thread_host_syncs);
  return ok ? &control : nullptr;
}

}  // namespace

const StandinControl* Standin() {
  static const StandinControl* const control = Resolve();
  return control;
}

}  // namespace rankd::dataplane::nccl::testing
