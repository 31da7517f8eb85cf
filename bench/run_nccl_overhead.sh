#!/usr/bin/env bash
# Host time per operation of rankd's NCCL layer against direct calls into
# the same CUDA runtime and NCCL, and the MoE-shaped all_to_all_v loop with
# its host waits per rank, after --moe_warmup untimed runs and in them
# (bench/nccl_overhead_bench.cc says what is measured and how). Prints
# Markdown tables; bench/RESULTS.md ("NCCL layer: host time per operation")
# records runs by hand.
#
# Against the CPU stand-in (the default; no GPU needed): builds the bench
# and dataplane/nccl:libcuda_nccl_standin.so (-c opt) and points rankd's
# loader at the stand-in ($RANKD_CUDART_LIBRARY, $RANKD_NCCL_LIBRARY).
# With --real: the host's CUDA runtime and NCCL, found as rankd finds them
# (docs/nccl.md; like tests/gpu/run.sh, the nvidia/*/lib folders of
# python3's site-packages are added to LD_LIBRARY_PATH), one rank per
# visible GPU up to --ranks. --bin=FILE runs a bench binary built
# elsewhere (no Bazel needed on the GPU host).
#
# usage: bench/run_nccl_overhead.sh [--real] [--bin=FILE]
#          [bench flags: --ranks=N --sizes=... --iters=... --blocks=N
#           --moe_steps=N --moe_warmup=N --moe_blocks=N ...]
# --moe_only: only the MoE-shaped loop (--ops= --modes=rankd,direct_nb and
# the smallest size that holds it), for a quick before/after of its host
# waits.
# Layout: one process, one thread per rank; the rank threads, NCCL's launch
# threads and (stand-in) the stream threads share the machine's CPUs, so
# note nproc and the load with the numbers (the script prints them).
set -euo pipefail
cd "$(dirname "$0")/.."

REAL=0 BIN="" ARGS=()
for arg in "$@"; do
  case "$arg" in
    --real) REAL=1 ;;
    --moe_only) ARGS+=(--ops= --modes=rankd,direct_nb --sizes=65536 --iters=1) ;;
    --bin=*) BIN=${arg#*=} ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) ARGS+=("$arg") ;;
  esac
done

if [[ -z "$BIN" ]]; then
  targets=(//bench:nccl_overhead_bench)
  [[ $REAL == 0 ]] && targets+=(//dataplane/nccl:libcuda_nccl_standin.so)
  bazel build -c opt "${targets[@]}" >&2
  BIN=$(bazel info -c opt bazel-bin 2>/dev/null)/bench/nccl_overhead_bench
  STANDIN=$(bazel info -c opt bazel-bin 2>/dev/null)/dataplane/nccl/libcuda_nccl_standin.so
else
  STANDIN=$(dirname "$BIN")/../dataplane/nccl/libcuda_nccl_standin.so
fi

if [[ $REAL == 0 ]]; then
  export RANKD_CUDART_LIBRARY=$STANDIN RANKD_NCCL_LIBRARY=$STANDIN
  export RANKD_STANDIN_DEVICES=${RANKD_STANDIN_DEVICES:-4}
else
  unset RANKD_CUDART_LIBRARY RANKD_NCCL_LIBRARY
  extra=$(python3 - <<'EOF' 2>/dev/null || true
import glob, site, sys
dirs = []
for base in site.getsitepackages() + [site.getusersitepackages()]:
    for sub in ("cu13", "cu12", "cuda_runtime", "nccl"):
        dirs += glob.glob(f"{base}/nvidia/{sub}/lib")
print(":".join(dirs))
EOF
)
  [[ -n "$extra" ]] && export LD_LIBRARY_PATH=$extra${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
fi

echo "Command: bench/run_nccl_overhead.sh $*"
echo "Date: $(date -u '+%Y-%m-%d %H:%M:%S UTC'); commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'); CPUs: $(nproc); load: $(cut -d' ' -f1-3 /proc/loadavg)"
exec "$BIN" "${ARGS[@]}"
