#!/usr/bin/env bash
# Runs a real local rankd job on this machine: one `rankd` daemon per node
# (separate processes on loopback TCP, each with its own Unix socket) and one
# rank process per rank, which joins, exchanges all_gather_words rounds and
# key-value traffic through the daemons, checks every result, and leaves.
# While it runs it shows the job as operators see it (rankctl). Installs
# what is missing, builds, and stops everything it started (by pid).
#
# Usage: tools/run.sh [--nodes=2] [--ranks-per-node=4] [--tp=1] [--pp=1]
#                     [--ep=1] [--rounds=200] [--kill-rank=R]
# Exit status: 0 when every rank checked out, non-zero otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."

nodes=2 ranks_per_node=4 tp=1 pp=1 ep=1 rounds=200 kill_rank=""
for arg in "$@"; do
  case "$arg" in
    --nodes=*) nodes="${arg#*=}" ;;
    --ranks-per-node=*) ranks_per_node="${arg#*=}" ;;
    --tp=*) tp="${arg#*=}" ;;
    --pp=*) pp="${arg#*=}" ;;
    --ep=*) ep="${arg#*=}" ;;
    --rounds=*) rounds="${arg#*=}" ;;
    --kill-rank=*) kill_rank="${arg#*=}" ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown option $arg (see --help)" >&2; exit 2 ;;
  esac
done
world=$((nodes * ranks_per_node))

tools/setup.sh
echo "== building"
bazel build -c opt //daemon:rankd //client:rankctl //tests:rank_worker 2>&1 \
  | grep -E "ERROR|error:" || true
bin=$(bazel info -c opt bazel-bin 2>/dev/null)
for b in daemon/rankd client/rankctl tests/rank_worker; do
  [[ -x "$bin/$b" ]] || { echo "run.sh: build failed ($b missing)" >&2; exit 1; }
done

dir=$(mktemp -d /tmp/rankd-run-XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$dir"
}
trap cleanup EXIT

free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
ports=()
for ((n = 0; n < nodes; n++)); do ports+=("$(free_port)"); done

echo "== starting $nodes rankd daemons (job 'demo', world $world, tp=$tp pp=$pp ep=$ep)"
for ((n = 0; n < nodes; n++)); do
  args=(--job_id=demo --nnodes="$nodes" --node_index="$n"
        --nproc_per_node="$ranks_per_node" --tensor_parallel="$tp"
        --pipeline_parallel="$pp" --expert_parallel="$ep"
        --listen="127.0.0.1:${ports[$n]}" --socket="$dir/node$n.sock")
  ((n > 0)) && args+=(--coordinator="127.0.0.1:${ports[0]}")
  "$bin/daemon/rankd" "${args[@]}" >"$dir/daemon$n.log" 2>&1 &
  pids+=($!)
done
for ((n = 0; n < nodes; n++)); do
  for _ in $(seq 100); do
    "$bin/client/rankctl" --target="127.0.0.1:${ports[$n]}" --service=readiness \
      health >/dev/null 2>&1 && break
    sleep 0.1
  done
done

echo "== starting $world rank processes"
workers=()
for ((n = 0; n < nodes; n++)); do
  for ((l = 0; l < ranks_per_node; l++)); do
    r=$((n * ranks_per_node + l))
    extra=()
    [[ "$kill_rank" == "$r" ]] && extra+=(--stall_at_round=$((rounds / 2)))
    "$bin/tests/rank_worker" --target="unix://$dir/node$n.sock" --job_id=demo \
      --local_rank="$l" --world_size="$world" --rounds="$rounds" --words=8 \
      --kv_keys=4 --hold_ms=1500 "${extra[@]}" >"$dir/rank$r.log" 2>&1 &
    workers+=($!)
    pids+=($!)
  done
done

sleep 1
echo "== the job as an operator sees it (rankctl --target=127.0.0.1:${ports[0]} ...)"
"$bin/client/rankctl" --target="127.0.0.1:${ports[0]}" status || true
"$bin/client/rankctl" --target="127.0.0.1:${ports[0]}" topology || true
"$bin/client/rankctl" --target="127.0.0.1:${ports[0]}" members || true

if [[ -n "$kill_rank" ]]; then
  for _ in $(seq 200); do grep -q STALLING "$dir/rank$kill_rank.log" 2>/dev/null && break; sleep 0.05; done
  echo "== failure drill: kill -9 rank $kill_rank (pid ${workers[$kill_rank]})"
  kill -KILL "${workers[$kill_rank]}"
fi

failed=0
for ((r = 0; r < world; r++)); do
  if wait "${workers[$r]}"; then
    echo "rank $r: $(grep -E '^(KV_OK|ROUNDS_OK)' "$dir/rank$r.log" | tr '\n' ' ')"
  else
    failed=$((failed + 1))
    echo "rank $r: FAILED: $(grep -E '^(ERROR|MISMATCH)' "$dir/rank$r.log" | tail -1)"
  fi
done
"$bin/client/rankctl" --target="127.0.0.1:${ports[0]}" status || true
if ((failed > 0)); then
  echo "== $failed of $world ranks failed (logs were in $dir)"
  exit 1
fi
echo "== all $world ranks joined, ran $rounds checked all_gather_words rounds and key-value traffic, and left"
