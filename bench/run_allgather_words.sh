#!/usr/bin/env bash
# all_gather_words round latency: rankd vs torch.distributed (Gloo), same run.
#
# Starts a real rankd job on loopback (NNODES daemons, NPROC_PER_NODE rank
# processes each, ranks on Unix sockets, daemons on 127.0.0.1 TCP ports),
# runs WARMUP untimed + ROUNDS timed all_gather_words rounds of a WORDS-word
# frame in every rank (bench/allgather_words_bench.cc), then runs the same
# exchange with torch.distributed from Debian's python3-torch: the same
# number of processes, Gloo, TCPStore on 127.0.0.1, all_gather of an int32
# tensor of WORDS elements, same warmup and rounds (bench/torch_allgather.py).
# Then the physical floor, the same frame and rounds between two processes:
# a Unix-socket, a futex and a busy-poll ping-pong (bench/floor_pingpong.cc;
# not pinned, like the rankd and torch processes). Prints p50/p99 round latency for all,
# the ratio rankd/torch and how far rankd is above the floor, and
# rewrites the "latest run" section of bench/RESULTS.md (plus one history
# row) with the date, machine, command and numbers (bench/summarize.py), and
# draws the round-latency distributions of rankd, torch and the floor into
# bench/plots/allgather_words_<NNODES>x<NPROC_PER_NODE>.svg.
#
# usage: bench/run_allgather_words.sh [--warmup=N] [--rounds=N] [--words=N]
#          [--nnodes=N] [--nproc_per_node=N] [--pace_us=N]
#          [--results=PATH | --no_results] [--note=TEXT] [--keep=DIR]
#          [--skip_setup] [--path=client|sync_stub]
# --pace_us=N makes every rank of all three (rankd, torch, the floor's
# pinger) pause N µs after each round, as a serving engine does its step's
# work between rounds; such a run draws its own plot (..._pace<N>us.svg).
# Each flag has an environment default: WARMUP (200), ROUNDS (2000),
# WORDS (4), NNODES (4), NPROC_PER_NODE (4), PACE_US (0), RESULTS (bench/RESULTS.md),
# BAZEL_COMPILATION_MODE (opt). --keep=DIR copies the raw per-rank samples
# and the daemon/rank logs to DIR. --skip_setup skips tools/setup.sh --bench.
# --path=sync_stub is a diagnostic: ranks send the same RPC through gRPC's
# synchronous stub instead of the client library (see allgather_words_bench.cc).
#
# It stops only what it started, by pid (TERM, then KILL after 5 s), and
# removes its temp folder, on success, failure or interruption.
set -euo pipefail
cd "$(dirname "$0")/.."

WARMUP=${WARMUP:-200}
ROUNDS=${ROUNDS:-2000}
WORDS=${WORDS:-4}
NNODES=${NNODES:-4}
NPROC_PER_NODE=${NPROC_PER_NODE:-4}
PACE_US=${PACE_US:-0}
RESULTS=${RESULTS:-bench/RESULTS.md}
MODE=${BAZEL_COMPILATION_MODE:-opt}
NOTE=""
KEEP=""
SETUP=1
RANK_PATH=client
ORIG_ARGS=("$@")

die() { echo "run_allgather_words: $*" >&2; exit 1; }
for arg in "$@"; do
  case "$arg" in
    --warmup=*) WARMUP=${arg#*=} ;;
    --rounds=*) ROUNDS=${arg#*=} ;;
    --words=*) WORDS=${arg#*=} ;;
    --nnodes=*) NNODES=${arg#*=} ;;
    --nproc_per_node=*) NPROC_PER_NODE=${arg#*=} ;;
    --pace_us=*) PACE_US=${arg#*=} ;;
    --results=*) RESULTS=${arg#*=} ;;
    --no_results) RESULTS="" ;;
    --note=*) NOTE=${arg#*=} ;;
    --keep=*) KEEP=${arg#*=} ;;
    --skip_setup) SETUP=0 ;;
    --path=client|--path=sync_stub) RANK_PATH=${arg#*=} ;;
    -h|--help) sed -n "2,35p" "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$arg' (see --help)" ;;
  esac
done
for v in WARMUP ROUNDS WORDS NNODES NPROC_PER_NODE PACE_US; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a number, got '${!v}'"
done
if ((PACE_US > 0)); then
  NOTE="paced: ${PACE_US} us between rounds${NOTE:+; $NOTE}"
  PLOT_SUFFIX=_pace${PACE_US}us
else
  PLOT_SUFFIX=""
fi
((ROUNDS >= 1 && WORDS >= 1 && NNODES >= 1 && NPROC_PER_NODE >= 1)) ||
  die "rounds, words, nnodes and nproc_per_node must be at least 1"
WORLD=$((NNODES * NPROC_PER_NODE))
TORCH_PY=/usr/bin/python3   # Debian's torch is importable only by it

BENCH_TARGET=allgather_words_bench
EXTRA_BENCH_TARGETS=//bench:floor_pingpong
source bench/bench_lib.sh  # the repository root is the working folder
echo "rankd: $NNODES daemons ready; running $WORLD ranks x ($WARMUP warmup + $ROUNDS rounds) ..." >&2

# CPU time (user + system, all threads) of the given daemons (default: all),
# in microseconds. The first daemon is the coordinator.
daemon_cpu_us() {
  local tck total=0 pid
  tck=$(getconf CLK_TCK)
  for pid in "${@:-${DAEMON_PIDS[@]}}"; do
    total=$((total + $(awk '{print $14 + $15}' "/proc/$pid/stat")))
  done
  echo $((total * 1000000 / tck))
}
DAEMON_CPU_BEFORE=$(daemon_cpu_us)
COORDINATOR_CPU_BEFORE=$(daemon_cpu_us "${DAEMON_PIDS[0]}")

RUN_LIMIT=$((120 + (WARMUP + ROUNDS) / 20 + (WARMUP + ROUNDS) * PACE_US / 500000))   # seconds; generous
RANK_PIDS=()
for ((n = 0; n < NNODES; n++)); do
  for ((l = 0; l < NPROC_PER_NODE; l++)); do
    r=$((n * NPROC_PER_NODE + l))
    RANKD_RANK_TOKEN=$(rank_token "$n" "$r") \
    timeout -k 5 "$RUN_LIMIT" "$RANK_BENCH" --target="unix://$TMP/node$n.sock" \
      --job_id=$JOB --local_rank=$l --world_size=$WORLD --warmup="$WARMUP" \
      --rounds="$ROUNDS" --words="$WORDS" --out="$TMP/rankd.rank$r.txt" \
      --path="$RANK_PATH" --pace_us="$PACE_US" \
      >"$TMP/rank$r.log" 2>&1 &
    PIDS+=($!)
    RANK_PIDS+=($!)
  done
done
wait_ranks
DAEMON_CPU_US=$(($(daemon_cpu_us) - DAEMON_CPU_BEFORE))
COORDINATOR_CPU_US=$(($(daemon_cpu_us "${DAEMON_PIDS[0]}") - COORDINATOR_CPU_BEFORE))
stop_all   # the daemons; torch then has the machine to itself

# --- torch.distributed (Gloo). ---------------------------------------------
echo "torch $TORCH_VERSION: running $WORLD ranks x ($WARMUP warmup + $ROUNDS rounds) ..." >&2
timeout -k 5 "$((RUN_LIMIT + 10))" "$TORCH_PY" bench/torch_allgather.py \
  --world="$WORLD" --warmup="$WARMUP" --rounds="$ROUNDS" --words="$WORDS" \
  --pace_us="$PACE_US" --port="${PORTS[$NNODES]}" --out_dir="$TMP" --timeout_s="$RUN_LIMIT" \
  >"$TMP/torch.log" 2>&1 &
PIDS+=($!)
rc=0; wait "$!" || rc=$?
forget "$!"
if ((rc != 0)); then tail -20 "$TMP/torch.log" >&2; die "torch run failed ($rc)"; fi

# --- The physical floor (two processes, no rankd, no torch). ---------------
for mode in unix futex spin; do
  timeout -k 5 120 "$BIN/bench/floor_pingpong" --mode=$mode \
    --warmup="$WARMUP" --rounds="$ROUNDS" --words="$WORDS" --pace_us="$PACE_US" \
    --out="$TMP/floor_$mode.rank0.txt" >"$TMP/floor_$mode.log" 2>&1 ||
    die "floor_pingpong --mode=$mode failed: $(tail -3 "$TMP/floor_$mode.log")"
done

# --- Summary. ---------------------------------------------------------------
cmd="bench/run_allgather_words.sh"
for a in "${ORIG_ARGS[@]}"; do cmd+=" $(printf '%q' "$a")"; done
for v in WARMUP ROUNDS WORDS NNODES NPROC_PER_NODE PACE_US RESULTS BAZEL_COMPILATION_MODE; do
  if [[ -n "${!v+x}" ]] && env | grep -q "^$v="; then cmd="$v=$(printf '%q' "${!v}") $cmd"; fi
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
  --meta "layout=$NNODES daemons x $NPROC_PER_NODE ranks = $WORLD ranks, loopback (ranks on Unix sockets, daemons on 127.0.0.1 TCP)"
  --meta "frame=$WORDS uint32 words per rank (torch: int32 tensor of $WORDS elements)"
  --meta "rounds=$ROUNDS timed after $WARMUP warmup, every rank"
  --meta "rankd=git $rev, bazel -c $MODE, gRPC $(dpkg-query -W -f='${Version}' libgrpc++-dev 2>/dev/null || echo '?')"
  --meta "rank path=$RANK_PATH$([[ $RANK_PATH == client ]] && echo ' (rankd::Client::AllGatherWords, the product path)' || echo ' (DIAGNOSTIC: synchronous gRPC stub, not the client library)')"
  --meta "torch=$TORCH_VERSION (Debian python3-torch), Gloo over TCP on lo, TCPStore init"
  --meta "floor=bench/floor_pingpong.cc, two processes, not pinned: Unix socketpair, shared-memory futex and shared-memory busy-poll ping-pongs of the same frame"
  --meta "command=$cmd"
)
[[ -z "$NOTE" ]] || meta+=(--meta "note=$NOTE")
results_args=()
[[ -z "$RESULTS" ]] ||
  results_args=(--results "$RESULTS"
                --plot "bench/plots/allgather_words_${NNODES}x${NPROC_PER_NODE}${PLOT_SUFFIX}.svg")
echo
$TORCH_PY bench/summarize.py --dir="$TMP" --world="$WORLD" --rounds="$ROUNDS" \
  --daemon_cpu_us="$DAEMON_CPU_US" --daemon_rounds="$((WARMUP + ROUNDS))" \
  --coordinator_cpu_us="$COORDINATOR_CPU_US" \
  "${results_args[@]}" "${meta[@]}"
