#!/usr/bin/env bash
# Soak: a long run of all_gather_words rounds plus key-value traffic against
# real daemons, sampling every daemon's resident memory (VmRSS) once a second
# (docs/operations.md, "Drills"). Growth must be flat: a leak of one object
# per round shows as megabytes over 100,000 rounds.
#
# Starts NNODES daemons on loopback and NPROC_PER_NODE ranks each
# (bench/soak_bench.cc: every result checked word by word; every KV_EVERY
# rounds a set, a checked get of a neighbour's key, a delete and an add),
# then prints, per daemon, RSS once the ranks have joined, after the first
# 5 % of rounds (the start: pools and caches are warm), at the end, and the
# growth from start to end; and rewrites the "Soak" section of
# bench/RESULTS.md with the date, machine, command and numbers.
#
# usage: bench/run_soak.sh [--rounds=N] [--kv_every=N] [--nnodes=N]
#          [--nproc_per_node=N] [--results=PATH | --no_results] [--keep=DIR]
#          [--skip_setup]
# Environment defaults: ROUNDS (100000), KV_EVERY (10), NNODES (2),
# NPROC_PER_NODE (2), RESULTS (bench/RESULTS.md), BAZEL_COMPILATION_MODE
# (opt).
#
# It stops only what it started, by pid, and removes its temp folder.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-100000}
KV_EVERY=${KV_EVERY:-10}
NNODES=${NNODES:-2}
NPROC_PER_NODE=${NPROC_PER_NODE:-2}
RESULTS=${RESULTS:-bench/RESULTS.md}
MODE=${BAZEL_COMPILATION_MODE:-opt}
KEEP=""
SETUP=1
ORIG_ARGS=("$@")

die() { echo "run_soak: $*" >&2; exit 1; }
for arg in "$@"; do
  case "$arg" in
    --rounds=*) ROUNDS=${arg#*=} ;;
    --kv_every=*) KV_EVERY=${arg#*=} ;;
    --nnodes=*) NNODES=${arg#*=} ;;
    --nproc_per_node=*) NPROC_PER_NODE=${arg#*=} ;;
    --results=*) RESULTS=${arg#*=} ;;
    --no_results) RESULTS="" ;;
    --keep=*) KEEP=${arg#*=} ;;
    --skip_setup) SETUP=0 ;;
    -h|--help) sed -n "2,22p" "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$arg' (see --help)" ;;
  esac
done
for v in ROUNDS KV_EVERY NNODES NPROC_PER_NODE; do
  [[ ${!v} =~ ^[0-9]+$ ]] && ((${!v} >= 1)) || die "$v must be a number >= 1, got '${!v}'"
done
WORLD=$((NNODES * NPROC_PER_NODE))
TORCH_PY=/usr/bin/python3   # Debian's python3, for bench_lib.sh and the summary
NEED_TORCH=0                # the soak has no torch peer
PROGRESS_EVERY=$(( ROUNDS >= 100 ? ROUNDS / 100 : 1 ))

BENCH_TARGET=soak_bench
source bench/bench_lib.sh  # the repository root is the working folder
echo "soak: $NNODES daemons ready; $WORLD ranks x $ROUNDS rounds, key-value traffic every $KV_EVERY ..." >&2

rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
RUN_LIMIT=$((300 + ROUNDS / 50))   # seconds; generous
RANK_PIDS=()
for ((n = 0; n < NNODES; n++)); do
  for ((l = 0; l < NPROC_PER_NODE; l++)); do
    r=$((n * NPROC_PER_NODE + l))
    RANKD_RANK_TOKEN=$(rank_token "$n" "$r") \
    timeout -k 5 "$RUN_LIMIT" "$RANK_BENCH" --target="unix://$TMP/node$n.sock" \
      --job_id=$JOB --local_rank=$l --world_size=$WORLD --rounds="$ROUNDS" \
      --kv_every="$KV_EVERY" --progress_every="$PROGRESS_EVERY" \
      >"$TMP/rank$r.log" 2>&1 &
    PIDS+=($!)
    RANK_PIDS+=($!)
  done
done

# One sample: seconds since the ranks started, round $1, each daemon's RSS.
started=$SECONDS
sample() {
  local line="$((SECONDS - started)) $1" pid
  for pid in "${DAEMON_PIDS[@]}"; do line+=" $(rss_kb "$pid")"; done
  echo "$line" >>"$TMP/samples.txt"
}
# Once a second after rank 0 joined, at its last PROGRESS round.
while kill -0 "${RANK_PIDS[0]}" 2>/dev/null; do
  if grep -q '^JOINED' "$TMP/rank0.log" 2>/dev/null; then
    round=$(grep -o 'PROGRESS round=[0-9]*' "$TMP/rank0.log" | tail -1 | cut -d= -f2 || true)
    sample "${round:-0}"
  fi
  sleep 1
done
wait_ranks
sample "$ROUNDS"  # after the last round
stop_all

cmd="bench/run_soak.sh"
for a in "${ORIG_ARGS[@]}"; do cmd+=" $(printf '%q' "$a")"; done
rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || rev+=" (with uncommitted changes)"
results_args=()
[[ -z "$RESULTS" ]] || results_args=(--results "$RESULTS")
$TORCH_PY bench/summarize_soak.py --samples="$TMP/samples.txt" --rounds="$ROUNDS" \
  --rank_logs="$TMP" --world="$WORLD" "${results_args[@]}" \
  --meta "date=$(date -u '+%Y-%m-%d %H:%M:%S UTC')" \
  --meta "machine=$(nproc) CPUs, $(awk '/^MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)" \
  --meta "layout=$NNODES daemons x $NPROC_PER_NODE ranks = $WORLD ranks, loopback" \
  --meta "traffic=$ROUNDS all_gather_words rounds of 4 words; every $KV_EVERY rounds per rank: set (256 B), get, delete, add" \
  --meta "rankd=git $rev, bazel -c $MODE" \
  --meta "command=$cmd"
