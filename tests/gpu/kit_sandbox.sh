#!/usr/bin/env bash
# Runs a command as a GPU host without development packages would: in a
# private mount namespace where the system library folder holds only glibc,
# libstdc++ and libgcc, and every folder with a CUDA runtime or NCCL is
# hidden. A kit binary that starts there needs nothing but the kit's own
# libraries. The namespace ends with the command; nothing on the machine
# changes. Needs root (unshare --mount).
#
# Usage: tests/gpu/kit_sandbox.sh COMMAND [ARGS...]   (COMMAND: an absolute
# path; only the C and C++ runtime are left to load it with)
set -euo pipefail
if [[ "${KIT_SANDBOX_INSIDE:-}" != 1 ]]; then
  KIT_SANDBOX_INSIDE=1 exec unshare --mount --propagation private -- "$0" "$@"
fi
unset KIT_SANDBOX_INSIDE

libdir=/usr/lib/x86_64-linux-gnu
keep=(ld-linux-x86-64.so.2 libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2
      librt.so.1 libresolv.so.2 libutil.so.1 libstdc++.so.6 libgcc_s.so.1)
# Folders that hold a CUDA runtime or NCCL, found before anything is
# hidden: the loader's cache, and where rankd itself looks (the CUDA homes,
# the NVIDIA wheel folders of Python installs).
cuda_dirs=$({
  ldconfig -p | awk '$1 ~ /^lib(cudart|nccl|cuda)\.so/ { print $NF }' | xargs -r -d '\n' -n1 dirname
  for d in /usr/local/cuda*/{lib,lib64,targets/x86_64-linux/lib} \
           ${CUDA_HOME:+"$CUDA_HOME"/{lib,lib64,targets/x86_64-linux/lib}} \
           {/usr/local/lib,/usr/lib,${HOME:-/root}/.local/lib}/python3*/{site,dist}-packages/nvidia; do
    [[ -d "$d" ]] && readlink -f "$d"
  done
} | sort -u | grep -v -x "$libdir" || true)

staging=/mnt
mount -t tmpfs -o size=64m rankd-kit-sandbox "$staging"
for lib in "${keep[@]}"; do
  [[ -e "$libdir/$lib" ]] && cp -L "$libdir/$lib" "$staging/$lib"
done
while IFS= read -r d; do
  [[ -n "$d" && -d "$d" ]] && mount -t tmpfs -o size=1m rankd-kit-hidden "$d"
done <<<"$cuda_dirs"
# Last: after this only the kept libraries exist, so only builtins and the
# final exec run.
mount --bind "$staging" "$libdir"
exec "$@"
