#!/usr/bin/env bash
# Bootstrap time: rankd vs torch.distributed (Gloo), same run.
#
# rankd: from the moment the daemons are started until every rank holds its
# descriptor with the whole world joined. The rank processes
# (bench/bootstrap_rank.cc) are started first and wait for a shared start
# time; at that time this script starts the daemons (NNODES on loopback,
# the first one the coordinator) and the ranks connect (retrying until
# their daemon listens) and Join with wait_for_world.
# torch: from the same kind of start time until every rank's
# dist.init_process_group("gloo", tcp://127.0.0.1) returned (rank 0 hosts
# the TCPStore); the ranks are forked after `import torch`
# (bench/torch_bootstrap.py). Both clocks are CLOCK_REALTIME on this machine.
#
# Sizes and layouts: 2 ranks = 1 daemon x 2, 8 = 2 x 4, 16 = 4 x 4 (at most
# 4 ranks per daemon). Each size runs REPEAT times per system, alternating;
# reported: median, min and max over the repetitions, and the ratio of the
# medians. Rewrites the "bootstrap latest" section of bench/RESULTS.md
# (bench/summarize_bootstrap.py).
#
# --daemons=running measures what a deployment sees whose daemons run
# before its ranks start (a Kubernetes sidecar, rankrun): the daemons are
# started and ready before the start time, and the time is the ranks' own,
# from the start time to every rank holding its descriptor; torch's
# counterpart is a TCPStore already hosted by the launcher, as torchrun's
# agent does, with each rank connecting to it and calling
# init_process_group(store=...). It has its own section in RESULTS.
#
# usage: bench/run_bootstrap.sh [--sizes=2,8,16] [--repeat=N]
#          [--daemons=start|running] [--results=PATH | --no_results]
#          [--note=TEXT] [--keep=DIR] [--skip_setup]
# Environment defaults: SIZES (2,8,16), REPEAT (5), DAEMONS (start), RESULTS
# (bench/RESULTS.md), BAZEL_COMPILATION_MODE (opt).
#
# It stops only what it started, by pid (TERM, then KILL after 5 s), and
# removes its temp folder, on success, failure or interruption.
set -euo pipefail
cd "$(dirname "$0")/.."

SIZES=${SIZES:-2,8,16}
REPEAT=${REPEAT:-5}
DAEMONS=${DAEMONS:-start}
RESULTS=${RESULTS:-bench/RESULTS.md}
MODE=${BAZEL_COMPILATION_MODE:-opt}
NOTE=""
KEEP=""
SETUP=1
ORIG_ARGS=("$@")

die() { echo "run_bootstrap: $*" >&2; exit 1; }
for arg in "$@"; do
  case "$arg" in
    --sizes=*) SIZES=${arg#*=} ;;
    --repeat=*) REPEAT=${arg#*=} ;;
    --daemons=start|--daemons=running) DAEMONS=${arg#*=} ;;
    --results=*) RESULTS=${arg#*=} ;;
    --no_results) RESULTS="" ;;
    --note=*) NOTE=${arg#*=} ;;
    --keep=*) KEEP=${arg#*=} ;;
    --skip_setup) SETUP=0 ;;
    -h|--help) sed -n "2,37p" "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$arg' (see --help)" ;;
  esac
done
[[ $REPEAT =~ ^[0-9]+$ ]] && ((REPEAT >= 1)) || die "repeat must be a number >= 1"
[[ $DAEMONS == start || $DAEMONS == running ]] || die "daemons must be start or running, got '$DAEMONS'"
IFS=, read -r -a SIZE_LIST <<<"$SIZES"
for n in "${SIZE_LIST[@]}"; do
  [[ $n =~ ^[0-9]+$ ]] && ((n >= 2)) || die "sizes must be numbers >= 2, got '$n'"
  ((n <= 4 || n % 4 == 0)) || die "size $n: above 4 ranks, a multiple of 4 (4 per daemon)"
done
TORCH_PY=/usr/bin/python3

# bench_lib: setup, build, ports for up to 4 daemons and torch's store;
# this script starts the daemons itself (launch_daemons, no readiness wait).
NNODES=4
NPROC_PER_NODE=4
BENCH_TARGET=bootstrap_rank
START_DAEMONS=0
source bench/bench_lib.sh
TORCH_PORT=${PORTS[4]}

# Sleeps until CLOCK_REALTIME nanoseconds $1.
sleep_until_ns() {
  local left=$(($1 - $(date +%s%N)))
  ((left <= 0)) || sleep "$(awk -v ns="$left" 'BEGIN { printf "%.6f", ns / 1e9 }')"
}

run_rankd() {  # size repetition
  local size=$1 i=$2 dir n l r start
  NPROC_PER_NODE=$((size < 4 ? size : 4))
  NNODES=$((size / NPROC_PER_NODE))
  dir=$TMP/rankd-$size-$i
  mkdir -p "$dir"
  rm -f "$TMP"/node*.sock
  if [[ $DAEMONS == running ]]; then
    launch_daemons
    await_daemons
    # Room for every rank process to start before the start time.
    start=$(($(date +%s%N) + 300000000 + size * 40000000))
  else
    start=$(($(date +%s%N) + 300000000))   # the ranks start first
  fi
  RANK_PIDS=()
  for ((n = 0; n < NNODES; n++)); do
    for ((l = 0; l < NPROC_PER_NODE; l++)); do
      r=$((n * NPROC_PER_NODE + l))
      RANKD_RANK_TOKEN=$(rank_token "$n" "$r") \
      timeout -k 5 90 "$RANK_BENCH" --target="unix://$TMP/node$n.sock" \
        --job_id=$JOB --local_rank=$l --world_size="$size" --join_wait_ms=60000 \
        --start_ns="$start" --out="$dir/rankd.rank$r.txt" \
        >"$TMP/rank$r.log" 2>&1 &
      PIDS+=($!)
      RANK_PIDS+=($!)
    done
  done
  if [[ $DAEMONS == start ]]; then
    sleep_until_ns "$start"
    launch_daemons
  fi
  wait_ranks
  stop_all
}

run_torch() {  # size repetition
  local size=$1 i=$2 dir rc=0 store=rank0
  [[ $DAEMONS == start ]] || store=running
  dir=$TMP/torch-$size-$i
  mkdir -p "$dir"
  # Forking the ranks (torch already imported) takes well under this.
  "$TORCH_PY" bench/torch_bootstrap.py --world="$size" --port="$TORCH_PORT" \
    --start_ns="$(($(date +%s%N) + 1500000000))" --out_dir="$dir" \
    --timeout_s=90 --store=$store >"$TMP/torch.log" 2>&1 &
  PIDS+=($!)
  wait "$!" || rc=$?
  forget "$!"
  ((rc == 0)) || { tail -20 "$TMP/torch.log" >&2; die "torch run failed ($rc)"; }
}

for size in "${SIZE_LIST[@]}"; do
  for ((i = 0; i < REPEAT; i++)); do
    echo "size $size, repetition $((i + 1))/$REPEAT: rankd, torch ..." >&2
    run_rankd "$size" "$i"
    run_torch "$size" "$i"
  done
done

# --- Summary. ---------------------------------------------------------------
cmd="bench/run_bootstrap.sh"
for a in "${ORIG_ARGS[@]}"; do cmd+=" $(printf '%q' "$a")"; done
for v in SIZES REPEAT DAEMONS RESULTS BAZEL_COMPILATION_MODE; do
  if env | grep -q "^$v="; then cmd="$v=$(printf '%q' "${!v}") $cmd"; fi
done
cpu=$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
mem=$(awk '/^MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)
rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || rev+=" (with uncommitted changes)"
meta=(
  --meta "date=$(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  --meta "machine=$(nproc) CPUs, $cpu, $mem"
  --meta "kernel=$(uname -sr)"
  --meta "load average (1, 5, 15 min)=before the run: $LOAD_BEFORE; after: $(cut -d' ' -f1-3 /proc/loadavg)"
  --meta "layouts=2 ranks: 1 daemon x 2; 8: 2 x 4; 16: 4 x 4 (loopback; ranks on Unix sockets, daemons on 127.0.0.1 TCP)"
)
if [[ $DAEMONS == start ]]; then
  meta+=(
    --meta "rankd=git $rev, bazel -c $MODE; daemons started at the start time, ranks (bench/bootstrap_rank.cc) connect and Join with wait_for_world"
    --meta "torch=$TORCH_VERSION (Debian python3-torch), init_process_group(gloo, tcp://127.0.0.1), ranks forked after import torch"
  )
else
  meta+=(
    --meta "rankd=git $rev, bazel -c $MODE; daemons running and ready before the start time, ranks (bench/bootstrap_rank.cc) connect and Join with wait_for_world"
    --meta "torch=$TORCH_VERSION (Debian python3-torch), TCPStore hosted by the launcher before the start time, ranks connect to it and call init_process_group(gloo, store=...), forked after import torch"
  )
fi
meta+=(
  --meta "repetitions=$REPEAT per size and system, alternating"
  --meta "command=$cmd"
)
[[ -z "$NOTE" ]] || meta+=(--meta "note=$NOTE")
results_args=()
[[ -z "$RESULTS" ]] || results_args=(--results "$RESULTS")
echo
$TORCH_PY bench/summarize_bootstrap.py --dir="$TMP" --sizes="$SIZES" \
  --repeat="$REPEAT" --daemons="$DAEMONS" "${results_args[@]}" "${meta[@]}"
