#!/usr/bin/env bash
# What a session's NCCL communicators cost (bench/nccl_comm_bench.cc says
# what is measured and how): Open time, communicators per rank and their
# kind, device memory, the lazy split of executor lanes, close time.
# Prints Markdown; bench/RESULTS.md ("NCCL communicators: init time and
# memory") records runs by hand.
#
# Against the CPU stand-in (the default): builds the bench and the stand-in
# (-c opt), runs the bench twice, as an NCCL with ncclCommSplit (2.28: one
# root, every scope split with shared resources) and as one without (2.17:
# one ncclCommInitRank per distinct member list). The stand-in keeps no
# communicator memory: the memory column needs a GPU. With --real: the
# host's CUDA runtime and NCCL, once. --bin=FILE runs a bench built
# elsewhere.
#
# usage: bench/run_nccl_comm.sh [--real] [--bin=FILE]
#          [bench flags: --ranks=N --tp=N --pp=N --ep=N --executors=N --repeats=N]
set -euo pipefail
cd "$(dirname "$0")/.."

REAL=0 BIN="" ARGS=()
for arg in "$@"; do
  case "$arg" in
    --real) REAL=1 ;;
    --bin=*) BIN=${arg#*=} ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) ARGS+=("$arg") ;;
  esac
done

if [[ -z "$BIN" ]]; then
  targets=(//bench:nccl_comm_bench)
  [[ $REAL == 0 ]] && targets+=(//dataplane/nccl:libcuda_nccl_standin.so)
  bazel build -c opt "${targets[@]}" >&2
  BIN=$(bazel info -c opt bazel-bin 2>/dev/null)/bench/nccl_comm_bench
  STANDIN=$(bazel info -c opt bazel-bin 2>/dev/null)/dataplane/nccl/libcuda_nccl_standin.so
fi
echo "host: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
if [[ $REAL == 1 ]]; then
  "$BIN" "${ARGS[@]}"
  exit
fi
export RANKD_CUDART_LIBRARY=$STANDIN RANKD_NCCL_LIBRARY=$STANDIN
echo "## stand-in as NCCL 2.28 (ncclCommSplit)"
"$BIN" "${ARGS[@]}"
echo
echo "## stand-in as NCCL 2.17 (no ncclCommSplit)"
RANKD_STANDIN_NCCL_VERSION=21700 "$BIN" "${ARGS[@]}"
