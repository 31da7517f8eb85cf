# Shared by the benchmark launchers (run_allgather_words.sh, run_allreduce.sh).
# Sourced after they parsed their options; it runs in their shell.
#
# Expects: SETUP (0/1), MODE (bazel -c), KEEP (folder or ""), NNODES,
#   NPROC_PER_NODE, TORCH_PY, BENCH_TARGET (the //bench rank program), die();
#   optional EXTRA_BENCH_TARGETS (more labels to build);
#   NEED_TORCH=0 (optional) for a launcher that runs no torch peer: no
#   torch is then installed or checked, and TORCH_VERSION is "-";
#   START_DAEMONS=0 (optional) for a launcher that starts them itself.
# Does: installs (tools/setup.sh --bench) and checks torch, builds, starts
#   NNODES rankd daemons on loopback and waits until each is ready, and
#   stops everything it or the caller started (tracked in PIDS) on exit.
# Defines: PIDS, DAEMON_PIDS, stop_all, start_daemons (= launch_daemons, then
#   await_daemons), wait_ranks, forget PID,
#   TORCH_VERSION, BIN, RANKD, RANKCTL, RANK_BENCH, LOAD_BEFORE, TMP, PORTS (NNODES + 1 free
#   ports; the last is for torch's store), JOB.

# --- Everything started below is tracked here and stopped on exit. --------
TMP=""
declare -a PIDS=()
stop_all() {
  local pid left i
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for ((i = 0; i < 50; i++)); do
    left=0
    for pid in "${PIDS[@]}"; do
      # A child that exited stays a zombie (state Z) until reaped.
      if [[ -r /proc/$pid/stat ]] && ! grep -q '^[0-9]* ([^)]*) Z' "/proc/$pid/stat" 2>/dev/null; then
        left=1
      fi
    done
    ((left)) || break
    sleep 0.1
  done
  for pid in "${PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  PIDS=()
}
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  stop_all
  if [[ -n "$TMP" && -d "$TMP" ]]; then
    if [[ -n "$KEEP" ]]; then mkdir -p "$KEEP" && cp -r "$TMP"/. "$KEEP"/ || true; fi
    rm -rf "$TMP"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
# Forget a pid once it has been reaped, so it is never signalled again.
forget() {
  local keep=() p
  for p in "${PIDS[@]}"; do [[ $p == "$1" ]] || keep+=("$p"); done
  PIDS=("${keep[@]}")
}

# Waits for the rank processes in RANK_PIDS (rank r's at index r, its log in
# $TMP/rank<r>.log); if any failed, shows their and the daemons' last log
# lines and dies.
wait_ranks() {
  local r pid rc n failed=0
  for ((r = 0; r < ${#RANK_PIDS[@]}; r++)); do
    pid=${RANK_PIDS[$r]}
    rc=0; wait "$pid" || rc=$?
    forget "$pid"
    if ((rc != 0)); then
      failed=1
      echo "rank $r exited with $rc:" >&2; tail -5 "$TMP/rank$r.log" >&2
    fi
  done
  if ((failed)); then
    for ((n = 0; n < NNODES; n++)); do echo "--- daemon $n" >&2; tail -5 "$TMP/daemon$n.log" >&2; done
    die "rankd run failed"
  fi
}

# --- Setup and build. ------------------------------------------------------
if [[ ${NEED_TORCH:-1} == 0 ]]; then
  if ((SETUP)); then tools/setup.sh; fi
  [[ -x $TORCH_PY ]] || die "$TORCH_PY not found (tools/setup.sh installs python3)"
  TORCH_VERSION=-
else
  if ((SETUP)); then tools/setup.sh --bench; fi
  [[ -x $TORCH_PY ]] || die "$TORCH_PY not found (tools/setup.sh --bench installs python3-torch)"
  TORCH_VERSION=$($TORCH_PY -c 'import torch, torch.distributed as d; assert d.is_gloo_available(); print(torch.__version__)') ||
    die "$TORCH_PY cannot import torch with Gloo (run tools/setup.sh --bench)"
fi

echo "building (bazel -c $MODE) ..." >&2
bazel build -c "$MODE" //daemon:rankd //client:rankctl //bench:$BENCH_TARGET \
  ${EXTRA_BENCH_TARGETS:-}
BIN=$(bazel info -c "$MODE" bazel-bin 2>/dev/null)
RANKD=$BIN/daemon/rankd
RANKCTL=$BIN/client/rankctl
# RANK_BENCH_OVERRIDE (diagnostic): another build's rank program, for a
# same-run comparison of two builds.
RANK_BENCH=${RANK_BENCH_OVERRIDE:-$BIN/bench/$BENCH_TARGET}
for b in "$RANKD" "$RANKCTL" "$RANK_BENCH"; do [[ -x $b ]] || die "missing $b"; done

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
TMP=$(mktemp -d /tmp/rankd-bench.XXXXXX)   # short: Unix socket paths must fit
read -r -a PORTS <<<"$($TORCH_PY - "$((NNODES + 1))" <<'EOF'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
for s in socks: s.close()
EOF
)"

# --- rankd: daemons, readiness, ranks. -------------------------------------
# Starts NNODES daemons (appending to $TMP/daemon<n>.log) and waits until each
# is ready. Called once here; a launcher that stopped them (stop_all) may call
# it again.
JOB=bench
# The job's own credentials, as tools/run.sh does; ranks use the Unix sockets,
# each with its own rank token (rank_token NODE RANK, for RANKD_RANK_TOKEN).
CREDS=$TMP/credentials
"$RANKCTL" credentials create "$CREDS" >/dev/null || die "cannot create $CREDS"
rank_token() {
  "$RANKCTL" credentials rank-token "$CREDS" "$JOB" "$1" "$2"
}
launch_daemons() {
  local n args
  DAEMON_PIDS=()
  for ((n = 0; n < NNODES; n++)); do
    args=(--job_id=$JOB --nnodes="$NNODES" --node_index=$n
          --nproc_per_node="$NPROC_PER_NODE"
          --listen=127.0.0.1:${PORTS[$n]} --socket="$TMP/node$n.sock"
          --credentials_dir="$CREDS"
          # The soak's shared operation counter (bench/soak_bench.cc).
          --kv_shared_prefixes=soak/ops)
    ((n == 0)) || args+=(--coordinator=127.0.0.1:${PORTS[0]})
    "$RANKD" "${args[@]}" >>"$TMP/daemon$n.log" 2>&1 &
    PIDS+=($!)
    DAEMON_PIDS+=($!)
  done
}
await_daemons() {
  local n deadline
  for ((n = 0; n < NNODES; n++)); do
    deadline=$((SECONDS + 30))
    until "$RANKCTL" --target=127.0.0.1:${PORTS[$n]} --service=readiness \
            --timeout_ms=1000 health >/dev/null 2>&1; do
      if ! kill -0 "${DAEMON_PIDS[$n]}" 2>/dev/null; then
        cat "$TMP/daemon$n.log" >&2; die "daemon $n exited during start"
      fi
      ((SECONDS < deadline)) || { cat "$TMP/daemon$n.log" >&2; die "daemon $n not ready in 30 s"; }
      sleep 0.05
    done
  done
}
start_daemons() {
  launch_daemons
  await_daemons
}
((${START_DAEMONS:-1} == 0)) || start_daemons
