#include "dataplane/nccl/internal/native_library.h"

#include <dlfcn.h>
#include <glob.h>
#include <link.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace rankd::dataplane::nccl::internal {
namespace {

// What to open and where to look (see the header for the order).
struct LibrarySpec {
  const char* what;     // "CUDA runtime"
  const char* env_var;  // explicit file
  std::vector<std::string> sonames;
  std::vector<std::string> dirs;
};

struct OpenedLibrary {
  void* handle = nullptr;
  std::string path;
};

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

std::string LoadedPath(void* handle, const std::string& fallback) {
  link_map* map = nullptr;
  if (::dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr &&
      map->l_name != nullptr && map->l_name[0] != '\0') {
    return map->l_name;
  }
  return fallback;
}

// The NVIDIA wheel folders named `subdirs` of every Python install found.
std::vector<std::string> WheelDirs(const std::vector<std::string>& subdirs) {
  std::vector<std::string> prefixes = {"/usr/local/lib", "/usr/lib"};
  if (std::string venv = Env("VIRTUAL_ENV"); !venv.empty()) {
    prefixes.push_back(venv + "/lib");
  }
  if (std::string home = Env("HOME"); !home.empty()) {
    prefixes.push_back(home + "/.local/lib");
  }
  std::vector<std::string> dirs;
  for (const std::string& prefix : prefixes) {
    for (const char* packages : {"site-packages", "dist-packages"}) {
      for (const std::string& sub : subdirs) {
        const std::string pattern = absl::StrCat(prefix, "/python3*/", packages,
                                                 "/nvidia/", sub, "/lib");
        glob_t found{};
        if (::glob(pattern.c_str(), GLOB_ONLYDIR, nullptr, &found) == 0) {
          for (size_t i = 0; i < found.gl_pathc; ++i) {
            dirs.push_back(found.gl_pathv[i]);
          }
        }
        ::globfree(&found);
      }
    }
  }
  return dirs;
}

std::vector<std::string> CudaHomeDirs(const char* extra_home_var) {
  std::vector<std::string> dirs;
  if (extra_home_var != nullptr) {
    if (std::string home = Env(extra_home_var); !home.empty()) {
      dirs.push_back(home + "/lib");
      dirs.push_back(home + "/lib64");
    }
  }
  for (const std::string& home :
       {Env("CUDA_HOME"), std::string("/usr/local/cuda")}) {
    if (home.empty()) continue;
    for (const char* sub : {"/lib64", "/lib", "/targets/x86_64-linux/lib"}) {
      const std::string dir = home + sub;
      if (std::find(dirs.begin(), dirs.end(), dir) == dirs.end()) {
        dirs.push_back(dir);
      }
    }
  }
  return dirs;
}

// Opens the first candidate that exists and loads; otherwise Unavailable
// naming every place that was searched and why an existing file failed.
absl::StatusOr<OpenedLibrary> OpenLibrary(const LibrarySpec& spec) {
  std::vector<std::string> failures;
  auto try_open = [&](const std::string& name) -> void* {
    ::dlerror();
    void* handle = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* error = ::dlerror();
      failures.push_back(
          absl::StrCat(name, ": ", error ? error : "dlopen failed"));
    }
    return handle;
  };
  // A file named explicitly is the one to use: no fallback to another.
  if (std::string file = Env(spec.env_var); !file.empty()) {
    if (void* h = try_open(file)) return OpenedLibrary{h, LoadedPath(h, file)};
    return absl::UnavailableError(absl::StrCat(
        spec.what, " not loaded: $", spec.env_var, " names ", failures.back()));
  }
  for (const std::string& soname : spec.sonames) {
    // A bare soname goes through the loader's own search; "not found" is
    // expected there, any other error (a broken install) is worth saying.
    ::dlerror();
    if (void* h = ::dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      return OpenedLibrary{h, LoadedPath(h, soname)};
    }
    const char* error = ::dlerror();
    if (error != nullptr &&
        !absl::StrContains(error, "No such file or directory")) {
      failures.push_back(absl::StrCat(soname, ": ", error));
    }
  }
  std::vector<std::string> searched;
  for (const std::string& dir : spec.dirs) {
    searched.push_back(dir);
    for (const std::string& soname : spec.sonames) {
      const std::string path = absl::StrCat(dir, "/", soname);
      if (::access(path.c_str(), F_OK) != 0) continue;
      if (void* h = try_open(path))
        return OpenedLibrary{h, LoadedPath(h, path)};
    }
  }
  const std::string ld_path = Env("LD_LIBRARY_PATH");
  std::string message = absl::StrCat(
      spec.what, " not found: no ", absl::StrJoin(spec.sonames, " or "),
      " through $", spec.env_var,
      " (unset), the dynamic loader (LD_LIBRARY_PATH=",
      ld_path.empty() ? "<unset>" : ld_path, "), or in ",
      absl::StrJoin(searched, ", "),
      " or the NVIDIA wheel folders of Python's site-packages");
  if (!failures.empty()) {
    absl::StrAppend(&message,
                    "; could not load: ", absl::StrJoin(failures, "; "));
  }
  return absl::UnavailableError(message);
}

// Resolves `name` into `*fn`; records it as missing when absent.
template <typename Fn>
void Resolve(void* handle, const char* name, Fn* fn,
             std::vector<std::string>* missing) {
  *fn = reinterpret_cast<Fn>(::dlsym(handle, name));
  if (*fn == nullptr && missing != nullptr) missing->push_back(name);
}

absl::Status MissingFunctions(const char* what, const std::string& path,
                              const std::vector<std::string>& missing) {
  if (missing.empty()) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(what, " at ", path, " lacks ",
                                             absl::StrJoin(missing, ", "),
                                             " (too old for rankd?)"));
}

// Fills `api` from the runtime opened at `path`; Unavailable naming what is
// missing.
absl::Status ResolveCudaRuntime(void* h, const std::string& path,
                                CudaRuntimeApi* api) {
  api->path = path;
  std::vector<std::string> missing;
  Resolve(h, "cudaGetDeviceCount", &api->GetDeviceCount, &missing);
  Resolve(h, "cudaGetDevice", &api->GetDevice, &missing);
  Resolve(h, "cudaSetDevice", &api->SetDevice, &missing);
  Resolve(h, "cudaDeviceGetAttribute", &api->DeviceGetAttribute, &missing);
  Resolve(h, "cudaDeviceGetPCIBusId", &api->DeviceGetPCIBusId, &missing);
  Resolve(h, "cudaDriverGetVersion", &api->DriverGetVersion, &missing);
  Resolve(h, "cudaRuntimeGetVersion", &api->RuntimeGetVersion, &missing);
  Resolve(h, "cudaGetLastError", &api->GetLastError, &missing);
  Resolve(h, "cudaGetErrorName", &api->GetErrorName, &missing);
  Resolve(h, "cudaGetErrorString", &api->GetErrorString, &missing);
  Resolve(h, "cudaStreamCreateWithFlags", &api->StreamCreateWithFlags,
          &missing);
  Resolve(h, "cudaStreamDestroy", &api->StreamDestroy, &missing);
  Resolve(h, "cudaStreamSynchronize", &api->StreamSynchronize, &missing);
  Resolve(h, "cudaStreamWaitEvent", &api->StreamWaitEvent, &missing);
  Resolve(h, "cudaLaunchHostFunc", &api->LaunchHostFunc, &missing);
  Resolve(h, "cudaEventCreateWithFlags", &api->EventCreateWithFlags, &missing);
  Resolve(h, "cudaEventDestroy", &api->EventDestroy, &missing);
  Resolve(h, "cudaEventRecord", &api->EventRecord, &missing);
  Resolve(h, "cudaEventQuery", &api->EventQuery, &missing);
  Resolve(h, "cudaEventSynchronize", &api->EventSynchronize, &missing);
  Resolve(h, "cudaMalloc", &api->Malloc, &missing);
  Resolve(h, "cudaFree", &api->Free, &missing);
  Resolve(h, "cudaMallocAsync", &api->MallocAsync, &missing);
  Resolve(h, "cudaFreeAsync", &api->FreeAsync, &missing);
  Resolve(h, "cudaMallocHost", &api->MallocHost, &missing);
  Resolve(h, "cudaMemcpyAsync", &api->MemcpyAsync, &missing);
  Resolve(h, "cudaMemcpy2DAsync", &api->Memcpy2DAsync, &missing);
  Resolve(h, "cudaMemsetAsync", &api->MemsetAsync, &missing);
  Resolve(h, "cudaDeviceCanAccessPeer", &api->DeviceCanAccessPeer, &missing);
  Resolve(h, "cudaDeviceGetDefaultMemPool", &api->DeviceGetDefaultMemPool,
          &missing);
  Resolve(h, "cudaMemPoolSetAccess", &api->MemPoolSetAccess, &missing);
  Resolve(h, "cudaMemPoolSetAttribute", &api->MemPoolSetAttribute, &missing);
  Resolve(h, "cudaMemPoolGetAttribute", &api->MemPoolGetAttribute, &missing);
  Resolve(h, "cudaMemPoolGetAccess", &api->MemPoolGetAccess, &missing);
  Resolve(h, "cudaMemPoolCreate", &api->MemPoolCreate, &missing);
  Resolve(h, "cudaMemPoolDestroy", &api->MemPoolDestroy, &missing);
  Resolve(h, "cudaMallocFromPoolAsync", &api->MallocFromPoolAsync, &missing);
  Resolve(h, "cudaStreamIsCapturing", &api->StreamIsCapturing, &missing);
  Resolve(h, "cudaStreamBeginCapture", &api->StreamBeginCapture, &missing);
  Resolve(h, "cudaStreamEndCapture", &api->StreamEndCapture, &missing);
  Resolve(h, "cudaGraphDestroy", &api->GraphDestroy, &missing);
  if (absl::Status s = MissingFunctions("the CUDA runtime", api->path, missing);
      !s.ok()) {
    return s;
  }
  api->runtime_version = 0;
  if (api->RuntimeGetVersion(&api->runtime_version) != kCudaSuccess) {
    api->runtime_version = 0;
  }
  return absl::OkStatus();
}

// Whether the installed driver is older than `api`'s runtime needs
// (cudaDriverGetVersion: the newest CUDA the driver supports; 0 without
// a driver, which is not "older").
bool DriverTooOld(const CudaRuntimeApi& api) {
  int driver = 0;
  if (api.DriverGetVersion(&driver) != kCudaSuccess) {
    (void)api.GetLastError();
    return false;
  }
  return driver > 0 && driver / 1000 < api.runtime_version / 1000;
}

absl::StatusOr<const CudaRuntimeApi*> OpenCudaRuntime() {
  std::vector<std::string> dirs = CudaHomeDirs(nullptr);
  for (std::string& d : WheelDirs({"cu13", "cu12", "cuda_runtime"})) {
    dirs.push_back(std::move(d));
  }
  auto lib = OpenLibrary({"CUDA runtime",
                          "RANKD_CUDART_LIBRARY",
                          {"libcudart.so.13", "libcudart.so.12"},
                          dirs});
  if (!lib.ok()) return lib.status();
  // Never destroyed: sessions may still call CUDA during static teardown.
  static CudaRuntimeApi& api = *new CudaRuntimeApi();
  if (absl::Status s = ResolveCudaRuntime(lib->handle, lib->path, &api);
      !s.ok()) {
    return s;
  }
  // A host with both runtimes (say PyTorch's CUDA 13 wheels) and a driver
  // that only supports CUDA 12 can still run: take the older runtime,
  // unless a file was named explicitly.
  if (Env("RANKD_CUDART_LIBRARY").empty() && DriverTooOld(api)) {
    auto older = OpenLibrary(
        {"CUDA runtime", "RANKD_CUDART_LIBRARY", {"libcudart.so.12"}, dirs});
    CudaRuntimeApi candidate{};
    if (older.ok() && older->path != api.path &&
        ResolveCudaRuntime(older->handle, older->path, &candidate).ok() &&
        !DriverTooOld(candidate)) {
      api = candidate;
    }
  }
  // The driver names devices; it is optional (the runtime works without
  // these three, and on machines without a driver it is absent).
  void* driver = ::dlsym(lib->handle, "cuInit") != nullptr
                     ? lib->handle
                     : ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (driver != nullptr) {
    Resolve(driver, "cuInit", &api.CuInit, nullptr);
    Resolve(driver, "cuDeviceGet", &api.CuDeviceGet, nullptr);
    Resolve(driver, "cuDeviceGetName", &api.CuDeviceGetName, nullptr);
    Resolve(driver, "cuDevicePrimaryCtxGetState",
            &api.CuDevicePrimaryCtxGetState, nullptr);
  }
  return &api;
}

absl::StatusOr<const NcclApi*> OpenNccl() {
  std::vector<std::string> dirs = CudaHomeDirs("NCCL_HOME");
  dirs.push_back("/usr/lib/x86_64-linux-gnu");
  for (std::string& d : WheelDirs({"nccl", "cu13", "cu12"})) {
    dirs.push_back(std::move(d));
  }
  auto lib = OpenLibrary(
      {"NCCL", "RANKD_NCCL_LIBRARY", {"libnccl.so.2"}, std::move(dirs)});
  if (!lib.ok()) return lib.status();
  // Never destroyed (as above).
  static NcclApi& api = *new NcclApi();
  api.path = lib->path;
  void* h = lib->handle;
  std::vector<std::string> missing;
  Resolve(h, "ncclGetVersion", &api.GetVersion, &missing);
  Resolve(h, "ncclGetUniqueId", &api.GetUniqueId, &missing);
  Resolve(h, "ncclCommInitRankConfig", &api.CommInitRankConfig, &missing);
  Resolve(h, "ncclCommGetAsyncError", &api.CommGetAsyncError, &missing);
  Resolve(h, "ncclCommFinalize", &api.CommFinalize, &missing);
  Resolve(h, "ncclCommDestroy", &api.CommDestroy, &missing);
  Resolve(h, "ncclCommAbort", &api.CommAbort, &missing);
  Resolve(h, "ncclGetErrorString", &api.GetErrorString, &missing);
  Resolve(h, "ncclGetLastError", &api.GetLastError, &missing);
  Resolve(h, "ncclAllReduce", &api.AllReduce, &missing);
  Resolve(h, "ncclAllGather", &api.AllGather, &missing);
  Resolve(h, "ncclBroadcast", &api.Broadcast, &missing);
  Resolve(h, "ncclSend", &api.Send, &missing);
  Resolve(h, "ncclRecv", &api.Recv, &missing);
  Resolve(h, "ncclGroupStart", &api.GroupStart, &missing);
  Resolve(h, "ncclGroupEnd", &api.GroupEnd, &missing);
  // Optional: NCCL 2.23.4 and later.
  Resolve(h, "ncclCommInitRankScalable", &api.CommInitRankScalable, nullptr);
  // Optional: NCCL 2.18 and later.
  Resolve(h, "ncclCommSplit", &api.CommSplit, nullptr);
  if (absl::Status s = MissingFunctions("NCCL", api.path, missing); !s.ok()) {
    return s;
  }
  api.version = 0;
  if (api.GetVersion(&api.version) != kNcclSuccess) api.version = 0;
  if (api.version < 21400) {
    return absl::UnavailableError(absl::StrCat(
        "NCCL at ", api.path, " is version ", api.version,
        "; rankd needs 2.14 or later (non-blocking communicators)"));
  }
  return &api;
}

}  // namespace

absl::StatusOr<const CudaRuntimeApi*> LoadCudaRuntime() {
  // Never destroyed, like the tables it points to.
  static const auto* const loaded =
      new absl::StatusOr<const CudaRuntimeApi*>(OpenCudaRuntime());
  return *loaded;
}

absl::StatusOr<const NcclApi*> LoadNccl() {
  static const auto* const loaded =
      new absl::StatusOr<const NcclApi*>(OpenNccl());
  return *loaded;
}

}  // namespace rankd::dataplane::nccl::internal
