#!/usr/bin/env bash
# Per-operation overhead of each binding over the C++ API: the same small
# all_reduce_sum loop (f32[4], Gloo, world scope, submit then wait, OPS timed
# operations after a warmup) through the C++ API (bench/bindings/
# bindings_bench.cc, the baseline), the C ABI (bindings_bench.c over
# librankd.so), Python (bindings_bench.py over the rankd package, Debian's
# /usr/bin/python3, out= a preallocated array) and Rust
# (rust/examples/bindings_bench.rs over the rankd crate), in one run.
#
# Two layouts, each rank pinned to its own core (taskset; the last cores,
# so that in 1 x 1 the daemon keeps core 0): 1 x 1 (a world of one rank: the
# operation runs the whole rankd layer but no Gloo exchange, so its latency
# is the binding plus the layer, with no network noise; this is where the
# overhead is measured) and 1 x 2 (one daemon, two ranks: a real exchange
# over loopback TCP). Every job runs on a fresh daemon (one job per daemon).
# The bindings take turns in BLOCKS blocks (cpp, c, python, rust, cpp, ...)
# so that slow drifts of a shared machine's load hit them alike; each
# binding's p50 is the median of its blocks' p50s. Overhead = p50(binding) -
# p50(cpp), same layout, same run. Writes the "Bindings" section of
# bench/RESULTS.md (bench/summarize_bindings.py) unless --no_results.
#
# Pinning matters on a VM: unpinned, the 1 x 1 operation's hand-offs between
# the caller's thread and the session's executor cross cores and take ~60 us
# instead of ~8 us, with run-to-run noise of +-10 us, larger than the
# overheads measured; pinned, both threads share the rank's core.
#
# usage: bench/run_bindings.sh [--ops=N] [--warmup=N] [--blocks=N]
#          [--bindings=cpp,c,python,rust] [--results=PATH | --no_results]
#          [--keep=DIR] [--skip_setup] [--no_pin]
# Defaults: OPS 20000, WARMUP 2000, BLOCKS 3, every binding (rust needs
# /usr/bin/cargo; tools/setup.sh installs it).
# It stops only what it started, by pid, and removes its temp folder.
set -euo pipefail
cd "$(dirname "$0")/.."

OPS=${OPS:-20000}
WARMUP=${WARMUP:-2000}
BLOCKS=${BLOCKS:-3}
BINDINGS=${BINDINGS:-cpp,c,python,rust}
RESULTS=${RESULTS:-bench/RESULTS.md}
MODE=opt KEEP="" SETUP=1 NNODES=1 NPROC_PER_NODE=1 PIN=1
TORCH_PY=/usr/bin/python3 NEED_TORCH=0 BENCH_TARGET=bindings_bench
ORIG_ARGS=("$@")
die() { echo "run_bindings: $*" >&2; exit 1; }
for arg in "$@"; do
  case "$arg" in
    --ops=*) OPS=${arg#*=} ;;
    --warmup=*) WARMUP=${arg#*=} ;;
    --blocks=*) BLOCKS=${arg#*=} ;;
    --bindings=*) BINDINGS=${arg#*=} ;;
    --results=*) RESULTS=${arg#*=} ;;
    --no_results) RESULTS="" ;;
    --keep=*) KEEP=${arg#*=} ;;
    --skip_setup) SETUP=0 ;;
    --no_pin) PIN=0 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) die "unknown option $arg (see --help)" ;;
  esac
done
for v in OPS WARMUP BLOCKS; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "--${v,,}=${!v}: must be a positive integer"
done
CPUS=$(nproc)
if ((PIN)) && { ! command -v taskset >/dev/null || ((CPUS < 2)); }; then
  die "pinning needs taskset and 2 or more CPUs (or pass --no_pin)"
fi
pin_of() {  # rank world -> the command prefix that pins it, or nothing
  ((PIN)) && echo "taskset -c $(( (CPUS - $2 + $1) % CPUS ))"
}
IFS=, read -r -a bindings <<<"$BINDINGS"
for b in "${bindings[@]}"; do
  [[ $b == cpp || $b == c || $b == python || $b == rust ]] ||
    die "--bindings: unknown binding '$b' (cpp, c, python, rust)"
done

source bench/bench_lib.sh  # setup, build, daemons (one job per start), cleanup
stop_all
bazel build -c opt //bench:bindings_bench_c //capi:librankd.so >&2
C_BENCH=$BIN/bench/bindings_bench_c
LIBRARY=$BIN/capi/librankd.so
RUST_BENCH=""
if [[ ,$BINDINGS, == *,rust,* ]]; then
  [[ -x /usr/bin/cargo ]] || die "/usr/bin/cargo not found (tools/setup.sh installs it)"
  echo "building the Rust example (cargo --release) ..." >&2
  (cd rust && RANKD_LIB_DIR=$BIN/capi CARGO_TARGET_DIR=$TMP/cargo \
     /usr/bin/cargo build --offline --release --example bindings_bench >&2)
  RUST_BENCH=$TMP/cargo/release/examples/bindings_bench
fi

command_of() {  # binding -> the rank's command line
  case "$1" in
    cpp) echo "$RANK_BENCH" ;;
    c) echo "$C_BENCH" ;;
    python) echo "$TORCH_PY bench/bindings/bindings_bench.py" ;;
    rust) echo "$RUST_BENCH" ;;
  esac
}

lines=$TMP/results.txt
: >"$lines"
for ((block = 0; block < BLOCKS; block++)); do
  for world in 1 2; do
    for b in "${bindings[@]}"; do
      NPROC_PER_NODE=$world
      start_daemons
      RANK_PIDS=()
      for ((r = 0; r < world; r++)); do
        RANKD_RANK_TOKEN=$(rank_token 0 "$r") \
        RANKD_TARGET=unix://$TMP/node0.sock RANKD_JOB_ID=$JOB RANKD_LOCAL_RANK=$r \
          RANKD_LIBRARY=$LIBRARY PYTHONPATH=python LD_LIBRARY_PATH=$BIN/capi \
          $(pin_of "$r" "$world") $(command_of "$b") "$OPS" "$WARMUP" >"$TMP/rank$r.log" 2>&1 &
        PIDS+=($!)
        RANK_PIDS+=($!)
      done
      wait_ranks
      grep -h '^BINDING ' "$TMP/rank0.log" | sed "s/^/block $block /" | tee -a "$lines" >&2
      stop_all
    done
  done
done

if [[ -n "$RESULTS" ]]; then
  $TORCH_PY bench/summarize_bindings.py "$lines" "$RESULTS" \
    "bench/run_bindings.sh ${ORIG_ARGS[*]}" "$LOAD_BEFORE"
else
  $TORCH_PY bench/summarize_bindings.py "$lines" "" "" "$LOAD_BEFORE"
fi
