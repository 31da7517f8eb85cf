#!/usr/bin/env bash
# Scale: one real coordinator daemon against many simulated nodes.
#
# For each node count N in NODES (default 8,64,512, i.e. 64, 512 and 4096
# ranks at 8 ranks per node), this starts one real rankd daemon as the
# coordinator of a job of N nodes x NPROC_PER_NODE ranks (node 0), its
# NPROC_PER_NODE real rank processes (bench/allgather_words_bench.cc, the
# client library on the daemon's Unix socket), and simulates nodes 1..N-1 in
# at most SIM_PROCS processes (bench/scale_sim.cc: the real Peer protocol,
# one TCP connection, node token, event stream, heartbeats and round link
# (daemon/node/round_link.h) per node). It reports:
#   - register: the simulated nodes' RegisterNode + Subscribe, all of them;
#   - join-to-ready: first JoinRank sent until every rank of the world holds
#     its answer (the simulated nodes' JoinRank, which answers only once the
#     whole world joined), and the coordinator's CPU time meanwhile;
#   - round p50/p99: per round, the slowest simulated node's latency (send
#     to outcome) over the timed rounds; and the real ranks' own p50 (the
#     slowest of node 0's ranks per round), 4-word frames;
#   - the coordinator's CPU per round (user + system, all its threads, over
#     the timed rounds) and its resident memory (now and peak).
# Heartbeats: every node beats every HEARTBEAT_MS (default 1000; the
# product's default is 250) and the coordinator allows 30 s of silence, so
# that 512 nodes' heartbeats sharing this machine's cores with everything
# else cannot be mistaken for lost nodes. All processes share the machine:
# the simulated nodes' own CPU is in the round latencies.
#
# Rewrites the "scale latest" section of bench/RESULTS.md and draws
# bench/plots/scale.svg (bench/summarize_scale.py).
#
# With --undecoded_events the simulated nodes read their event streams
# without decoding them: every node's decoding runs on these same 2 cores
# (512 times one node's work), so this shows what the coordinator itself
# needs; a real node decodes on its own CPU.
#
# With --recovery (issue 38's recovery at scale) the daemon runs with
# --recovery=on and, after the rounds, one simulated rank is reported lost
# (node 1's first: its daemon's ReleaseRank, as when a process dies); every
# rank then re-enters the next epoch: the simulated nodes' survivors and
# the lost rank's replacement join again, node 0's real ranks through
# Client::Rejoin. It prints, per size, the control plane's share of an
# in-place recovery (loss reported -> every rank's join answered, the job
# READY at epoch 2; and loss -> the last rank saw it) beside the same
# run's join-to-ready from scratch (the control plane's share of a full
# restart, which a real restart adds process start and model load to),
# and writes no results file.
#
# usage: bench/run_scale.sh [--nodes=8,64,512] [--nproc_per_node=8]
#          [--warmup=N] [--rounds=N] [--sim_procs=N] [--undecoded_events]
#          [--recovery]
#          [--results=PATH | --no_results] [--keep=DIR] [--skip_setup]
# Environment defaults: NODES, NPROC_PER_NODE (8), WARMUP (20), ROUNDS
# (200), SIM_PROCS (4), HEARTBEAT_MS (1000), RESULTS (bench/RESULTS.md),
# BAZEL_COMPILATION_MODE (opt).
#
# It stops only what it started, by pid (TERM, then KILL after 5 s), and
# removes its temp folder, on success, failure or interruption.
set -euo pipefail
cd "$(dirname "$0")/.."

NODE_COUNTS=${NODES:-8,64,512}
NPROC_PER_NODE=${NPROC_PER_NODE:-8}
WARMUP=${WARMUP:-20}
ROUNDS=${ROUNDS:-200}
SIM_PROCS=${SIM_PROCS:-4}
HEARTBEAT_MS=${HEARTBEAT_MS:-1000}
RESULTS=${RESULTS:-bench/RESULTS.md}
MODE=${BAZEL_COMPILATION_MODE:-opt}
KEEP=""
SETUP=1
DECODE_EVENTS=true
RECOVERY=0
ORIG_ARGS=("$@")

die() { echo "run_scale: $*" >&2; exit 1; }
for arg in "$@"; do
  case "$arg" in
    --nodes=*) NODE_COUNTS=${arg#*=} ;;
    --nproc_per_node=*) NPROC_PER_NODE=${arg#*=} ;;
    --warmup=*) WARMUP=${arg#*=} ;;
    --rounds=*) ROUNDS=${arg#*=} ;;
    --sim_procs=*) SIM_PROCS=${arg#*=} ;;
    --results=*) RESULTS=${arg#*=} ;;
    --no_results) RESULTS="" ;;
    --keep=*) KEEP=${arg#*=} ;;
    --skip_setup) SETUP=0 ;;
    --undecoded_events) DECODE_EVENTS=false ;;
    --recovery) RECOVERY=1 ;;
    -h|--help) sed -n "2,55p" "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$arg' (see --help)" ;;
  esac
done
for v in NPROC_PER_NODE WARMUP ROUNDS SIM_PROCS HEARTBEAT_MS; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a number, got '${!v}'"
done
[[ $NODE_COUNTS =~ ^[0-9]+(,[0-9]+)*$ ]] || die "--nodes must be like 8,64,512"
((ROUNDS >= 1 && SIM_PROCS >= 1 && NPROC_PER_NODE >= 1)) || die "bad sizes"

TORCH_PY=/usr/bin/python3   # for the free port and the summary
NEED_TORCH=0
START_DAEMONS=0
NNODES=1
BENCH_TARGET=allgather_words_bench
EXTRA_BENCH_TARGETS=//bench:scale_sim
source bench/bench_lib.sh  # the repository root is the working folder
SIM=$BIN/bench/scale_sim
[[ -x $SIM ]] || die "missing $SIM"
JOB=scale
TSV=$TMP/scale.tsv
printf 'nodes\tranks\tregister_ms\tjoin_ms\tjoin_cpu_ms\tsim_p50_us\tsim_p99_us\trank_p50_us\trank_p99_us\tcoord_cpu_us\trss_mb\thwm_mb\n' >"$TSV"
RTSV=$TMP/recovery.tsv
printf 'nodes\tranks\tjoin_to_ready_ms (from scratch)\tloss_to_all_seen_ms\tloss_to_ready_ms (in place)\tin place / from scratch\tepoch\n' >"$RTSV"
RECOVERY_DAEMON=()
RECOVERY_RANK=()
if ((RECOVERY)); then
  RESULTS=""
  RECOVERY_DAEMON=(--recovery=on --recovery_deadline_ms=600000)
  RECOVERY_RANK=(--recover)
fi

# Waits until every file in the arguments has a line starting with $WANT,
# looking every $POLL seconds (default 0.05). Each look uses bash builtins
# only: forking grep a dozen times a look took 5-7% of the cores the rounds
# are measured on. Otherwise sets FAILED to the first simulator's error (or
# the timeout) and returns 1.
await_lines() {
  local deadline=$((SECONDS + $1)); shift
  local f ok pid line lines
  while :; do
    ok=1
    for f in "$@"; do
      lines=()
      [[ -f $f ]] && mapfile -t lines <"$f"
      local found=0
      for line in "${lines[@]}"; do
        if [[ $line == ERROR* ]]; then
          FAILED="$(basename "$f"): $line"; return 1
        fi
        [[ $line == "$WANT"* ]] && found=1
      done
      ((found)) || ok=0
    done
    ((ok)) && return 0
    for pid in "${SIM_PIDS[@]}"; do
      kill -0 "$pid" 2>/dev/null || { FAILED="a simulator exited early"; return 1; }
    done
    ((SECONDS < deadline)) || { FAILED="timed out waiting for $WANT"; return 1; }
    sleep "${POLL:-0.05}"
  done
}
# Records size N as failed in phase $1 and stops its processes.
record_failure() {
  echo "scale: $N nodes failed while $1: $FAILED" >&2
  printf '%s\t%s\tFAILED\t%s: %s\n' "$N" "$((N * NPROC_PER_NODE))" "$1" "$FAILED" >>"$TSV"
  stop_all
}

IFS=, read -r -a COUNTS <<<"$NODE_COUNTS"
for N in "${COUNTS[@]}"; do
  ((N >= 2)) || die "--nodes must be at least 2 each"
  WORLD=$((N * NPROC_PER_NODE))
  RUN=$TMP/n$N
  mkdir -p "$RUN"
  echo "scale: $N nodes x $NPROC_PER_NODE ranks = $WORLD ranks ..." >&2
  "$RANKD" --job_id=$JOB --nnodes="$N" --node_index=0 \
    --nproc_per_node="$NPROC_PER_NODE" --listen=127.0.0.1:${PORTS[0]} \
    --socket="$RUN/node0.sock" --credentials_dir="$CREDS" \
    --heartbeat_interval_ms="$HEARTBEAT_MS" --heartbeat_timeout_ms=30000 \
    "${RECOVERY_DAEMON[@]}" >"$RUN/coordinator.log" 2>&1 &
  COORD=$!
  PIDS+=($COORD)
  DAEMON_PIDS=($COORD)
  deadline=$((SECONDS + 30))
  until "$RANKCTL" --target=127.0.0.1:${PORTS[0]} --service=readiness \
          --timeout_ms=1000 health >/dev/null 2>&1; do
    kill -0 "$COORD" 2>/dev/null || { cat "$RUN/coordinator.log" >&2; die "coordinator exited"; }
    ((SECONDS < deadline)) || die "coordinator not ready in 30 s"
    sleep 0.05
  done

  # Simulated nodes 1..N-1, split over the simulator processes.
  procs=$((SIM_PROCS < N - 1 ? SIM_PROCS : N - 1))
  SIM_PIDS=()
  SIM_LOGS=()
  first=1
  register_start=$(date +%s%N)
  for ((p = 0; p < procs; p++)); do
    count=$(((N - 1) / procs + (p < (N - 1) % procs ? 1 : 0)))
    extra=()
    ((p == 0)) && extra=(--coordinator_pid="$COORD")
    ((RECOVERY)) && extra+=(--recover_go_file="$RUN/recover")
    "$SIM" --coordinator=127.0.0.1:${PORTS[0]} --credentials_dir="$CREDS" \
      --job_id=$JOB --nnodes="$N" --nproc_per_node="$NPROC_PER_NODE" \
      --first_node=$first --node_count=$count --warmup="$WARMUP" \
      --rounds="$ROUNDS" --heartbeat_ms="$HEARTBEAT_MS" \
      --go_file="$RUN/go" --out="$RUN/sim$p.txt" \
      --decode_events="$DECODE_EVENTS" "${extra[@]}" \
      >"$RUN/sim$p.log" 2>&1 &
    PIDS+=($!)
    SIM_PIDS+=($!)
    SIM_LOGS+=("$RUN/sim$p.log")
    first=$((first + count))
  done
  FAILED=""
  if ! WANT=REGISTERED await_lines 300 "${SIM_LOGS[@]}"; then
    record_failure registering; continue
  fi
  register_ms=$((($(date +%s%N) - register_start) / 1000000))

  # Node 0's real ranks connect and join first (a daemon busy with a join
  # storm may take longer than a client's connect timeout to accept them),
  # then the simulated nodes join: join-to-ready is timed from their first
  # JoinRank.
  RANK_PIDS=()
  for ((l = 0; l < NPROC_PER_NODE; l++)); do
    RANKD_RANK_TOKEN=$("$RANKCTL" credentials rank-token "$CREDS" "$JOB" 0 "$l") \
    "$RANK_BENCH" --target="unix://$RUN/node0.sock" --job_id=$JOB \
      --local_rank=$l --world_size=$WORLD --warmup="$WARMUP" \
      --rounds="$ROUNDS" --round_timeout_ms=60000 --join_wait_ms=300000 \
      --out="$RUN/rank$l.txt" "${RECOVERY_RANK[@]}" >"$TMP/rank$l.log" 2>&1 &
    PIDS+=($!)
    RANK_PIDS+=($!)
  done
  sleep 1
  touch "$RUN/go"
  if ! WANT=JOINED POLL=0.5 await_lines 600 "${SIM_LOGS[@]}"; then
    record_failure joining; continue
  fi
  if ! WANT=DONE POLL=0.5 await_lines 1200 "${SIM_LOGS[@]}"; then
    record_failure "running rounds"; continue
  fi
  if ((RECOVERY)); then
    RANK_LOGS=()
    for ((l = 0; l < NPROC_PER_NODE; l++)); do RANK_LOGS+=("$TMP/rank$l.log"); done
    if ! WANT=SUMMARY POLL=0.2 await_lines 600 "${RANK_LOGS[@]}"; then
      record_failure "running rounds"; continue
    fi
    touch "$RUN/recover"
    if ! WANT=RECOVERED POLL=0.2 await_lines 600 "${SIM_LOGS[@]}" "${RANK_LOGS[@]}"; then
      record_failure recovering; continue
    fi
    "$TORCH_PY" - "$N" "$NPROC_PER_NODE" "${SIM_LOGS[@]}" "${RANK_LOGS[@]}" >>"$RTSV" <<'EOF'
import re, sys
n, nproc = int(sys.argv[1]), int(sys.argv[2])
text = "\n".join(open(p).read() for p in sys.argv[3:])
joins = [tuple(map(int, m)) for m in re.findall(r"^JOINED start_ns=(\d+) end_ns=(\d+)", text, re.M)]
join_ms = (max(e for _, e in joins) - min(s for s, _ in joins)) / 1e6
loss = int(re.search(r"^LOSS ns=(\d+)", text, re.M).group(1))
seen = [int(s) for s in re.findall(r"^RECOVERED .*seen_ns=(\d+)", text, re.M)]
ready = [int(s) for s in re.findall(r"^RECOVERED .*(?:end|ready)_ns=(\d+)", text, re.M)]
epochs = set(re.findall(r"^RECOVERED .*epoch=(\d+)", text, re.M))
ready_ms = (max(ready) - loss) / 1e6
print("\t".join(str(x) for x in [
    n, n * nproc, f"{join_ms:.0f}", f"{(max(seen) - loss) / 1e6:.1f}",
    f"{ready_ms:.0f}", f"{ready_ms / join_ms:.2f}", ",".join(sorted(epochs))]))
EOF
    tail -1 "$RTSV" >&2
  fi
  NNODES=1 wait_ranks
  cp "$TMP"/rank*.log "$RUN"/ 2>/dev/null || true

  # One row: register, join-to-ready, latencies, coordinator cost.
  "$TORCH_PY" - "$N" "$NPROC_PER_NODE" "$register_ms" "$RUN" "${SIM_LOGS[@]}" >>"$TSV" <<'EOF'
import glob, re, sys
n, nproc, register_ms, run = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
logs = [open(p).read() for p in sys.argv[5:]]
joins = [tuple(map(int, m)) for t in logs for m in re.findall(r"^JOINED start_ns=(\d+) end_ns=(\d+)", t, re.M)]
join_ms = (max(e for _, e in joins) - min(s for s, _ in joins)) / 1e6
slowest = {}
for p in glob.glob(f"{run}/sim*.txt"):
    for line in open(p):
        k, ns = map(int, line.split())
        slowest[k] = max(slowest.get(k, 0), ns)
ranks = {}
for p in glob.glob(f"{run}/rank*.txt"):
    rows = [l.split() for l in open(p) if not l.startswith("#")]
    for k, (s, e) in enumerate(rows):
        ranks[k] = max(ranks.get(k, 0), int(e) - int(s))
def pct(values, q):
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))] / 1e3
join_cpu = max(int(c) for t in logs for c in re.findall(r"^JOINED .* coordinator_cpu_us=(-?\d+)", t, re.M)) / 1e3
coord = re.search(r"^COORDINATOR cpu_us_per_round=([\d.]+) rss_kb=(\d+) hwm_kb=(\d+)", logs[0], re.M)
print("\t".join(str(x) for x in [
    n, n * nproc, register_ms, f"{join_ms:.0f}", f"{join_cpu:.0f}",
    f"{pct(slowest.values(), .5):.0f}", f"{pct(slowest.values(), .99):.0f}",
    f"{pct(ranks.values(), .5):.0f}", f"{pct(ranks.values(), .99):.0f}",
    coord.group(1), f"{int(coord.group(2)) / 1024:.0f}", f"{int(coord.group(3)) / 1024:.0f}"]))
EOF
  tail -1 "$TSV" >&2
  stop_all
done

cat "$TSV"
if ((RECOVERY)); then echo; cat "$RTSV"; fi
if [[ -n $RESULTS ]]; then
  cmd="bench/run_scale.sh"
  for a in "${ORIG_ARGS[@]}"; do cmd+=" $(printf '%q' "$a")"; done
  cpu=$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
  rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
  git diff --quiet HEAD 2>/dev/null || rev+=" (with uncommitted changes)"
  "$TORCH_PY" bench/summarize_scale.py --tsv="$TSV" --results="$RESULTS" \
    --plot=bench/plots/scale.svg \
    --meta "date=$(date -u '+%Y-%m-%d %H:%M:%S UTC')" \
    --meta "machine=$(nproc) CPUs, $cpu" --meta "revision=$rev" \
    --meta "settings=$NPROC_PER_NODE ranks per node, $WARMUP warmup + $ROUNDS timed rounds of 4-word frames, heartbeats every $HEARTBEAT_MS ms, $SIM_PROCS simulator processes, event streams decoded by the simulated nodes: $DECODE_EVENTS" \
    --meta "command=$cmd"
fi
