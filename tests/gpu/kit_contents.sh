# What the GPU run kit holds (sourced by make_kit.sh, assemble_kit.sh and
# run.sh): binaries by their bazel-bin path, the Python package and its
# tests by their source path, and the libraries the GPU host must provide
# itself.

# Bazel targets of the kit.
KIT_TARGETS=(
  //daemon:rankd //client:rankctl //examples:serving
  //dataplane/nccl:nccl_types_test //dataplane/nccl:unique_id_broker_test
  //dataplane/nccl:native_library_test //dataplane/nccl:nccl_fail_closed_test
  //dataplane/nccl:nccl_gpu_test //dataplane/nccl:libcuda_nccl_standin.so
  //tests/gpu:nccl_cluster_test //tests/gpu:nccl_worker
  //capi:librankd.so //capi:c_nccl_rank
  //capi:capi_nccl_gpu_test //dataplane/conformance:nccl_conformance_gpu_test
)
# The same, as paths under bazel-bin (and under the kit's bin/).
KIT_BINARIES=()
for _t in "${KIT_TARGETS[@]}"; do
  _t=${_t#//}
  KIT_BINARIES+=("${_t/://}")
done
unset _t

# Source folders copied whole (their *.py files) to the kit's python/: the
# rankd package (over bin/capi/librankd.so) and its tests, of which the GPU
# runner runs python/tests/torch_nccl.py and torch_dist_nccl.py.
KIT_PYTHON_DIRS=(python/rankd python/tests)

# Shared libraries the kit never ships: glibc's, the C++ runtime (any host
# with a glibc as new as Debian 12's has them), the CUDA driver, the CUDA
# runtime and NCCL (the host's own: rankd opens them at run time).
KIT_HOST_LIBRARIES_RE='^(linux-vdso\.so|ld-linux-x86-64\.so|libc\.so|libm\.so|libpthread\.so|libdl\.so|librt\.so|libresolv\.so|libutil\.so|libanl\.so|libstdc\+\+\.so|libgcc_s\.so|libcuda\.so|libcudart\.so|libnccl\.so)'

# The kit's size limit: it travels to the GPU host inside a copy of at
# most 64 MiB that also holds the tracked tree (about 4 MiB). The
# environment may lower it (the kit test checks that the limit is
# enforced).
KIT_MAX_BYTES=${KIT_MAX_BYTES:-$((56 * 1024 * 1024))}
