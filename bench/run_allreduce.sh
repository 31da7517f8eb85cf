#!/usr/bin/env bash
# all_reduce_sum bus bandwidth on the Gloo backend: rankd vs torch.distributed
# (Gloo), and rankd's per-operation overhead over a direct Gloo call, same run.
#
# Starts a real rankd job on loopback (NNODES daemons, NPROC_PER_NODE rank
# processes each; default 1 x 4: ranks reach their daemon on a Unix socket,
# Gloo's data moves over 127.0.0.1 TCP between the rank processes), and in
# every rank (bench/allreduce_bench.cc) runs, for each size, these modes
# taking turns in 4 blocks of timed operations (so that each sees the same
# background load): rankd (GlooSession::AllReduceSum on the world, default
# options, donated input: in place like torch), direct (gloo::allreduce on a
# context the rank connects itself, same algorithm and kernel, no rankd
# layer), and three diagnostics: rankd_copy (input kept: out of place),
# rankd_verify (a session with the opt-in verify_agreement on) and
# rankd_local (the layer alone: all_reduce_sum on a one-member group, no
# Gloo call). Then it stops the daemons and runs
# torch.distributed from Debian's python3-torch: the same number of
# processes, Gloo, TCPStore on 127.0.0.1, dist.all_reduce of float32 tensors
# of the same sizes with the same warmup and timed counts
# (bench/torch_allreduce.py). Never both at once: the run alternates
# PHASES times (rankd, torch, rankd, torch, ...), each phase timing its share
# of the operations, so that slow drifts of a shared machine's load hit both
# systems alike. It prints per-size bus
# bandwidth (2(n-1)/n x bytes / time per operation), the ratio rankd/torch,
# the per-operation overhead vs direct Gloo, and rewrites the "latest run"
# section of bench/RESULTS.md's all_reduce_sum part (plus one history row)
# (bench/summarize_allreduce.py).
#
# usage: bench/run_allreduce.sh [--sizes=B,B,...] [--bytes_per_size=B]
#          [--min_iters=N] [--max_iters=N] [--modes=rankd,direct,...]
#          [--phases=N]
#          [--nnodes=N] [--nproc_per_node=N] [--results=PATH | --no_results]
#          [--note=TEXT] [--keep=DIR] [--skip_setup] [--skip_torch]
#          [--rank_env=NAME=VALUE ...] [--pin] [--blocks=N]
# Environment defaults: SIZES (16 B, then 1 KiB to 64 MiB in powers of 4),
# BYTES_PER_SIZE (256 MiB: timed iterations = BYTES_PER_SIZE / size, clamped
# to [MIN_ITERS (32), MAX_ITERS (200)]; warmup = iterations / 10, clamped to
# [2, 50]), MODES (rankd,direct,rankd_copy,rankd_verify,rankd_local; rankd_local
# runs on rank 0 only), PHASES (2), NNODES (1), NPROC_PER_NODE (4), RESULTS
# (bench/RESULTS.md), BAZEL_COMPILATION_MODE (opt).
# --keep=DIR copies the raw per-rank samples and logs to DIR. --skip_torch
# (diagnostic) runs rankd only and writes no results. --rank_env (diagnostic,
# repeatable) sets an environment variable for the rankd rank processes only,
# e.g. GLIBC_TUNABLES=glibc.malloc.hugetlb=1; it is recorded with the run.
# --blocks=N (default 4) splits each size's timed operations into N blocks,
# the modes taking turns block by block; N at least the operation count
# makes them take turns operation by operation, so that every mode meets the
# same machine state (the fairest same-run comparison on a noisy host; the
# "Paired by block" table then pairs single operations; each turn ends with
# one untimed, checked operation, so that doubles the work).
# RANK_BENCH_OVERRIDE=PATH (diagnostic) runs PATH as the rankd rank program
# instead of this build's (for example one built at another commit, for a
# same-run comparison of two builds; bench/bench_lib.sh).
# --pin binds rank r's process (all its threads), rankd's and torch's alike,
# to CPU r mod the CPU count (taskset / sched_setaffinity); the daemons are
# not pinned. With one rank per CPU (1 x 2 or 2 x 1 on 2 CPUs) the
# scheduler no longer moves a rank's threads between CPUs between
# operations (a diagnostic of the run-to-run spread on a shared VM).
#
# It stops only what it started, by pid (TERM, then KILL after 5 s), and
# removes its temp folder, on success, failure or interruption.
set -euo pipefail
cd "$(dirname "$0")/.."

SIZES=${SIZES:-16,1024,4096,16384,65536,262144,1048576,4194304,16777216,67108864}
BYTES_PER_SIZE=${BYTES_PER_SIZE:-268435456}
MIN_ITERS=${MIN_ITERS:-32}
MAX_ITERS=${MAX_ITERS:-200}
MODES=${MODES:-rankd,direct,rankd_copy,rankd_verify,rankd_local}
PHASES=${PHASES:-2}
NNODES=${NNODES:-1}
NPROC_PER_NODE=${NPROC_PER_NODE:-4}
RESULTS=${RESULTS:-bench/RESULTS.md}
MODE=${BAZEL_COMPILATION_MODE:-opt}
NOTE=""
KEEP=""
SETUP=1
TORCH=1
RANK_ENV=()
PIN=0
BLOCKS=4        # allreduce_bench.cc's --blocks default
ORIG_ARGS=("$@")

die() { echo "run_allreduce: $*" >&2; exit 1; }
for arg in "$@"; do
  case "$arg" in
    --sizes=*) SIZES=${arg#*=} ;;
    --bytes_per_size=*) BYTES_PER_SIZE=${arg#*=} ;;
    --min_iters=*) MIN_ITERS=${arg#*=} ;;
    --max_iters=*) MAX_ITERS=${arg#*=} ;;
    --modes=*) MODES=${arg#*=} ;;
    --phases=*) PHASES=${arg#*=} ;;
    --nnodes=*) NNODES=${arg#*=} ;;
    --nproc_per_node=*) NPROC_PER_NODE=${arg#*=} ;;
    --results=*) RESULTS=${arg#*=} ;;
    --no_results) RESULTS="" ;;
    --note=*) NOTE=${arg#*=} ;;
    --keep=*) KEEP=${arg#*=} ;;
    --skip_setup) SETUP=0 ;;
    --skip_torch) TORCH=0; RESULTS="" ;;
    --rank_env=*=*) RANK_ENV+=("${arg#*=}") ;;
    --pin) PIN=1 ;;
    --blocks=*) BLOCKS=${arg#*=} ;;
    -h|--help) sed -n "2,61p" "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$arg' (see --help)" ;;
  esac
done
for v in BYTES_PER_SIZE MIN_ITERS MAX_ITERS PHASES NNODES NPROC_PER_NODE BLOCKS; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a number, got '${!v}'"
done
((MIN_ITERS >= 1 && MAX_ITERS >= MIN_ITERS && NNODES >= 1 && NPROC_PER_NODE >= 1 && BLOCKS >= 1 &&
  PHASES >= 1 && MIN_ITERS >= PHASES)) ||
  die "need 1 <= phases <= min_iters <= max_iters, nnodes >= 1, nproc_per_node >= 1, blocks >= 1"
M='(rankd|direct|rankd_copy|rankd_verify|rankd_local)'
[[ $MODES =~ ^$M(,$M)*$ ]] ||
  die "--modes: a comma-separated list of rankd, direct, rankd_copy, rankd_verify, rankd_local"
[[ ,$MODES, == *,rankd,* ]] || ((!TORCH)) || die "--modes must include rankd (or use --skip_torch)"
WORLD=$((NNODES * NPROC_PER_NODE))
((WORLD >= 2)) || die "need at least 2 ranks"
TORCH_PY=/usr/bin/python3   # Debian's torch is importable only by it

# The schedule (bytes:warmup:iters,...), shared by both systems, and its
# share per phase.
SCHEDULE=""
declare -a PHASE_SCHEDULE=()
TOTAL_OPS=0
IFS=, read -r -a SIZE_LIST <<<"$SIZES"
for b in "${SIZE_LIST[@]}"; do
  [[ $b =~ ^[0-9]+$ ]] && ((b > 0 && b % 4 == 0)) ||
    die "sizes must be positive multiples of 4 bytes, got '$b'"
  n=$((BYTES_PER_SIZE / b))
  ((n < MIN_ITERS)) && n=$MIN_ITERS
  ((n > MAX_ITERS)) && n=$MAX_ITERS
  w=$((n / 10))
  ((w < 2)) && w=2
  ((w > 50)) && w=50
  SCHEDULE+="${SCHEDULE:+,}$b:$w:$n"
  TOTAL_OPS=$((TOTAL_OPS + n + w))
  # Each phase times its share of the n operations (and warms up again).
  for ((p = 0; p < PHASES; p++)); do
    share=$((n / PHASES + (p < n % PHASES ? 1 : 0)))
    PHASE_SCHEDULE[$p]+="${PHASE_SCHEDULE[$p]:+,}$b:$w:$share"
  done
done

BENCH_TARGET=allreduce_bench
source bench/bench_lib.sh  # the repository root is the working folder
echo "rankd: $NNODES daemon(s) ready; $WORLD ranks, modes $MODES, schedule $SCHEDULE in $PHASES phases ..." >&2

RUN_LIMIT=600   # seconds, per system and phase; generous
LOAD_MID=""
for ((phase = 0; phase < PHASES; phase++)); do
  ((phase == 0)) || start_daemons
  echo "phase $((phase + 1))/$PHASES: rankd ..." >&2
  RANK_PIDS=()
  for ((n = 0; n < NNODES; n++)); do
    for ((l = 0; l < NPROC_PER_NODE; l++)); do
      r=$((n * NPROC_PER_NODE + l))
      pin=()
      ((PIN)) && pin=(taskset -c "$((r % $(nproc)))")
      ${pin[@]+"${pin[@]}"} env ${RANK_ENV[@]+"${RANK_ENV[@]}"} \
        RANKD_RANK_TOKEN=$(rank_token "$n" "$r") \
        timeout -k 5 "$RUN_LIMIT" "$RANK_BENCH" --target="unix://$TMP/node$n.sock" \
        --job_id=$JOB --local_rank=$l --world_size=$WORLD \
        --schedule="${PHASE_SCHEDULE[$phase]}" --blocks=$BLOCKS \
        --block_offset=$((phase * BLOCKS)) \
        --modes="$MODES" --out="$TMP/rankd.rank$r.txt" \
        >>"$TMP/rank$r.log" 2>&1 &
      PIDS+=($!)
      RANK_PIDS+=($!)
    done
  done
  wait_ranks
  LOAD_MID+="${LOAD_MID:+; }$(cut -d' ' -f1-3 /proc/loadavg)"
  stop_all   # the daemons; torch then has the machine to itself

  # --- torch.distributed (Gloo), the same share. ---------------------------
  if ((TORCH)); then
    echo "phase $((phase + 1))/$PHASES: torch $TORCH_VERSION ..." >&2
    timeout -k 5 "$((RUN_LIMIT + 10))" "$TORCH_PY" bench/torch_allreduce.py \
      --world="$WORLD" --schedule="${PHASE_SCHEDULE[$phase]}" \
      --port="${PORTS[$NNODES]}" --block="$phase" \
      --out_dir="$TMP" --timeout_s="$RUN_LIMIT" $( ((PIN)) && echo --pin) \
      >>"$TMP/torch.log" 2>&1 &
    PIDS+=($!)
    rc=0; wait "$!" || rc=$?
    forget "$!"
    if ((rc != 0)); then tail -20 "$TMP/torch.log" >&2; die "torch run failed ($rc)"; fi
  fi
done

# --- Summary. ---------------------------------------------------------------
cmd="bench/run_allreduce.sh"
for a in "${ORIG_ARGS[@]}"; do cmd+=" $(printf '%q' "$a")"; done
for v in SIZES BYTES_PER_SIZE MIN_ITERS MAX_ITERS MODES PHASES NNODES NPROC_PER_NODE RESULTS BAZEL_COMPILATION_MODE; do
  if env | grep -q "^$v="; then cmd="$v=$(printf '%q' "${!v}") $cmd"; fi
done
cpu=$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
mem=$(awk '/^MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)
rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || rev+=" (with uncommitted changes)"
[[ -z $(git status --porcelain --untracked-files=normal -- bench 2>/dev/null) ]] ||
  rev+=" (bench/ has uncommitted files)"
meta=(
  --meta "date=$(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  --meta "machine=$(nproc) CPUs, $cpu, $mem"
  --meta "kernel=$(uname -sr)"
  --meta "load average (1, 5, 15 min)=before the run: $LOAD_BEFORE; after each rankd phase: $LOAD_MID; at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
  --meta "layout=$NNODES daemon(s) x $NPROC_PER_NODE ranks = $WORLD ranks, loopback (ranks on Unix sockets to their daemon; Gloo over 127.0.0.1 TCP between rank processes)"
  --meta "payload=float32; in place for rankd (donated input), direct and torch, out of place for rankd_copy; schedule bytes:warmup:iters = $SCHEDULE, run as $PHASES phases (rankd then torch, alternating), each timing its share after its own warmup"
  --meta "rankd=git $rev, bazel -c $MODE, Gloo $(dpkg-query -W -f='${Version}' libgloo0 2>/dev/null || echo '?') (Debian libgloo0)"
  --meta "rankd modes=$MODES, taking turns in $BLOCKS block(s) per size and phase"
  --meta "torch=$TORCH_VERSION (Debian python3-torch, links the same libgloo0), Gloo over TCP on lo, TCPStore init, torch.set_num_threads(1)"
  --meta "command=$cmd"
)
((PIN == 0)) ||
  meta+=(--meta "pinning=rank r's process (rankd and torch) on CPU r mod $(nproc); daemons not pinned")
((${#RANK_ENV[@]} == 0)) ||
  meta+=(--meta "rank environment=DIAGNOSTIC, rankd rank processes only (not torch): ${RANK_ENV[*]}")
[[ -z "$NOTE" ]] || meta+=(--meta "note=$NOTE")
results_args=()
[[ -z "$RESULTS" ]] || results_args=(--results "$RESULTS")
((TORCH)) || results_args+=(--no_torch)
echo
$TORCH_PY bench/summarize_allreduce.py --dir="$TMP" --world="$WORLD" \
  --schedule="$SCHEDULE" "${results_args[@]}" "${meta[@]}"
