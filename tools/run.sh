#!/usr/bin/env bash
# Runs rankd end to end on this machine: installs what is missing, builds,
# starts a local cluster (one `rankd` daemon per node, each a separate
# process; with --hosts=netns each node in its own network namespace), runs
# the model-parallel serving example (examples/serving) on every rank,
# prints its progress and summary, and shuts everything down, leaving no
# process (and no namespace) behind. Stops only what it started, by pid.
#
# Usage: tools/run.sh [options] [-- extra flags for every serving rank]
#   --nodes=2 --ranks-per-node=4    the cluster (world = nodes x ranks)
#   --tp=N --pp=N --ep=N            parallel layout (default: 2 each where
#                                   the world allows; data parallel = rest)
#   --steps=50                      serving steps
#   --backend=gloo|nccl             data plane (nccl needs CUDA GPUs)
#   --hosts=local|netns             nodes on loopback, or each node in its
#                                   own network namespace (needs root)
#   --kill-rank=R [--at-step=S]     failure drill: kill -9 rank R at step S
#                                   (default: half-way); every other rank
#                                   must report rank R lost, and everything
#                                   must shut down without a hang
#   --keep-logs                     keep the run folder (logs) afterwards
# Environment: RANKD_BIN_DIR=DIR uses prebuilt binaries DIR/daemon/rankd,
# DIR/client/rankctl and DIR/examples/serving (no install, no build; the
# test suite runs it this way).
# RANKD_KIT_RANKS_ON_ONE_GPU=1 is the GPU kit's one-GPU mode, for tests
# only (tests/gpu/run.sh; docs/nccl.md, "One GPU, several ranks"): every
# rank process sees the first visible GPU alone and gets an NCCL_HOSTID of
# its own, so that NCCL runs several ranks on one GPU through its socket
# transport. Never a production setting.
# Exit status: 0 when the run (or the drill) went as expected, 1 when
# anything failed, 2 for bad options or an unusable backend / host mode.
set -euo pipefail
cd "$(dirname "$0")/.."

nodes=2 ranks_per_node=4 tp="" pp="" ep="" steps=50 backend=gloo hosts=local
kill_rank="" at_step="" keep_logs=0
example_args=()
while (($#)); do
  case "$1" in
    --nodes=*) nodes="${1#*=}" ;;
    --ranks-per-node=*) ranks_per_node="${1#*=}" ;;
    --tp=*) tp="${1#*=}" ;;
    --pp=*) pp="${1#*=}" ;;
    --ep=*) ep="${1#*=}" ;;
    --steps=*) steps="${1#*=}" ;;
    --backend=*) backend="${1#*=}" ;;
    --hosts=*) hosts="${1#*=}" ;;
    --kill-rank=*) kill_rank="${1#*=}" ;;
    --at-step=*) at_step="${1#*=}" ;;
    --keep-logs) keep_logs=1 ;;
    --) shift; example_args=("$@"); break ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "run.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

usage_error() { echo "run.sh: $*" >&2; exit 2; }
is_count() { [[ "$1" =~ ^[1-9][0-9]*$ ]]; }
for v in nodes ranks_per_node steps; do
  is_count "${!v}" || usage_error "--${v//_/-}=${!v}: must be a positive integer"
done
world=$((nodes * ranks_per_node))
# Default layout: 2-way tensor, pipeline and expert parallelism as far as
# the world size allows; whatever is left is data parallel.
rest=$world
for v in tp pp ep; do
  if [[ -z "${!v}" ]]; then
    if ((rest % 2 == 0)); then printf -v "$v" 2; else printf -v "$v" 1; fi
  fi
  is_count "${!v}" || usage_error "--$v=${!v}: must be a positive integer"
  ((rest % ${!v} == 0)) ||
    usage_error "--$v=${!v} does not divide what is left of world $world ($rest)"
  rest=$((rest / ${!v}))
done
dp=$rest
[[ "$backend" == gloo || "$backend" == nccl ]] ||
  usage_error "--backend=$backend: use gloo or nccl"
[[ "$hosts" == local || "$hosts" == netns ]] ||
  usage_error "--hosts=$hosts: use local or netns"
if [[ -n "$kill_rank" ]]; then
  [[ "$kill_rank" =~ ^[0-9]+$ ]] && ((kill_rank < world)) ||
    usage_error "--kill-rank=$kill_rank: must be a rank in 0..$((world - 1))"
  ((world > 1)) || usage_error "--kill-rank needs at least 2 ranks"
  [[ -n "$at_step" ]] || at_step=$(((steps + 1) / 2))
  is_count "$at_step" && ((at_step <= steps)) ||
    usage_error "--at-step=$at_step: must be in 1..$steps"
elif [[ -n "$at_step" ]]; then
  usage_error "--at-step needs --kill-rank"
fi
if [[ "$hosts" == netns ]]; then
  if [[ $(id -u) -ne 0 ]]; then
    echo "run.sh: --hosts=netns needs root: it creates a network namespace" \
      "per node and veth pairs between them. Run it as root, or use" \
      "--hosts=local (every node on 127.0.0.1)." >&2
    exit 2
  fi
  command -v ip >/dev/null || usage_error "--hosts=netns needs iproute2 (ip)"
fi

# ---- binaries ----------------------------------------------------------------
if [[ -n "${RANKD_BIN_DIR:-}" ]]; then
  bin="$RANKD_BIN_DIR"
else
  tools/setup.sh
  echo "== building (bazel -c opt; the first build takes a few minutes)"
  if ! bazel build -c opt //daemon:rankd //client:rankctl //examples:serving \
      >/tmp/rankd-build.$$.log 2>&1; then
    grep -E "ERROR|error:" /tmp/rankd-build.$$.log | head -20 >&2
    rm -f /tmp/rankd-build.$$.log
    echo "run.sh: build failed" >&2
    exit 1
  fi
  rm -f /tmp/rankd-build.$$.log
  bin=$(bazel info -c opt bazel-bin 2>/dev/null)
fi
rankd="$bin/daemon/rankd" rankctl="$bin/client/rankctl"
serving="$bin/examples/serving"
for b in "$rankd" "$rankctl" "$serving"; do
  [[ -x "$b" ]] || { echo "run.sh: $b is missing (build failed?)" >&2; exit 1; }
done
if [[ "$backend" == nccl ]]; then
  # The serving binary itself says whether NCCL can run here.
  if ! probe=$("$serving" --backend=nccl --probe_backend 2>&1); then
    sed -E 's/^(REFUSED|NCCL_RUNTIME) /run.sh: /' <<<"$probe" >&2
    exit 2
  fi
  gpus=$(sed -nE 's/.*devices=([0-9]+).*/\1/p' <<<"$probe")
  if ((world > ${gpus:-0})); then
    echo "run.sh: --backend=nccl runs one rank per GPU: world $world needs" \
      "$world GPUs and this machine has ${gpus:-0}; use for example" \
      "--nodes=1 --ranks-per-node=${gpus:-1}, or --backend=gloo" >&2
    exit 2
  fi
fi

# ---- cleanup: only what this script started ----------------------------------
dir=$(mktemp -d /tmp/rankd-run-XXXXXX)
pids=()        # every process started, by pid
namespaces=()  # network namespaces created (--hosts=netns)
uplink=""      # root-namespace end of the veth to the namespaces' switch
cleaned=0
cleanup() {  # [exit status]: the run folder is kept when it is non-zero
  ((cleaned)) && return 0
  cleaned=1
  (("${1:-0}" != 0)) && keep_logs=1
  local pid
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  local ns
  for ns in "${namespaces[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  [[ -n "$uplink" ]] && ip link del "$uplink" 2>/dev/null || true
  if ((keep_logs)); then echo "== logs kept in $dir"; else rm -rf "$dir"; fi
}
trap 'cleanup $?' EXIT
trap 'echo "run.sh: interrupted" >&2; exit 130' INT TERM

now_ms() { date +%s%3N; }

# ---- hosts -------------------------------------------------------------------
addr=()   # node -> host:port of its daemon's TCP listener
ip_of=()  # node -> the node's IP (Gloo listens there)
run_in=() # node -> command prefix that runs a process on that node
if [[ "$hosts" == local ]]; then
  free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
  }
  for ((n = 0; n < nodes; n++)); do
    addr+=("127.0.0.1:$(free_port)")
    ip_of+=("127.0.0.1")
    run_in+=("")
  done
else
  # A switch namespace with a bridge; one namespace per node, wired to the
  # bridge by a veth pair (eth0 inside the node); an uplink veth from this
  # namespace so rankctl / grpcurl here can reach every daemon.
  tag=$(printf '%04x' $((RANDOM % 65536)))
  while ip netns list | grep -q "^rankd-$tag-"; do
    tag=$(printf '%04x' $((RANDOM % 65536)))
  done
  subnet=""
  for _ in $(seq 20); do
    candidate="10.$((200 + RANDOM % 50)).$((1 + RANDOM % 250))"
    if ! ip -4 addr show | grep -q " $candidate\." &&
        ! ip -4 route show | grep -q "^$candidate\."; then
      subnet=$candidate
      break
    fi
  done
  [[ -n "$subnet" ]] || { echo "run.sh: found no free 10.x.y.0/24" >&2; exit 1; }
  sw="rankd-$tag-sw"
  ip netns add "$sw" && namespaces+=("$sw")
  ip -n "$sw" link set lo up
  ip -n "$sw" link add br0 type bridge
  ip -n "$sw" link set br0 up
  for ((n = 0; n < nodes; n++)); do
    ns="rankd-$tag-n$n"
    ip netns add "$ns" && namespaces+=("$ns")
    ip -n "$ns" link set lo up
    ip -n "$sw" link add "p$n" type veth peer name eth0 netns "$ns"
    ip -n "$sw" link set "p$n" master br0 up
    ip -n "$ns" addr add "$subnet.$((n + 1))/24" dev eth0
    ip -n "$ns" link set eth0 up
    addr+=("$subnet.$((n + 1)):7421")
    ip_of+=("$subnet.$((n + 1))")
    run_in+=("ip netns exec $ns")
  done
  ip link add "rk$tag" type veth peer name up0 netns "$sw" && uplink="rk$tag"
  ip -n "$sw" link set up0 master br0 up
  ip addr add "$subnet.254/24" dev "rk$tag"
  ip link set "rk$tag" up
  echo "== hosts: ${namespaces[*]:1} (network namespaces on $subnet.0/24, bridged in $sw; this host is $subnet.254)"
fi

# ---- daemons -----------------------------------------------------------------
job=serving
# Fresh credentials for this job (docs/operations.md, "Credentials"): the
# coordinator holds the node key, every other daemon only its own node token
# (so it cannot act as another node); each rank gets a token of its own, for
# its process alone (RANKD_RANK_TOKEN), so it can act as no other rank;
# rankctl here presents the operator token.
creds="$dir/credentials"
"$rankctl" credentials create "$creds" >/dev/null
operator=(--token_file="$creds/operator.token")
node_creds=("$creds")
for ((n = 1; n < nodes; n++)); do
  own="$dir/credentials-node$n"
  mkdir -m 700 "$own"
  "$rankctl" credentials node-token "$creds" "$job" "$n" >"$own/node.token"
  cp "$creds/operator.token" "$own/"
  node_creds+=("$own")
done
echo "== starting $nodes rankd daemons: job '$job', world $world = $nodes nodes x $ranks_per_node ranks, tp$tp pp$pp ep$ep dp$dp, $backend"
daemon_pids=()
for ((n = 0; n < nodes; n++)); do
  args=(--job_id="$job" --nnodes="$nodes" --node_index="$n"
        --nproc_per_node="$ranks_per_node" --tensor_parallel="$tp"
        --pipeline_parallel="$pp" --expert_parallel="$ep"
        --listen="${addr[$n]}" --socket="$dir/node$n.sock"
        --credentials_dir="${node_creds[$n]}")
  ((n > 0)) && args+=(--coordinator="${addr[0]}")
  ${run_in[$n]} "$rankd" "${args[@]}" >"$dir/daemon$n.log" 2>&1 &
  pids+=($!)
  daemon_pids+=($!)
done
for ((n = 0; n < nodes; n++)); do
  ready=0
  for _ in $(seq 150); do
    if "$rankctl" --target="${addr[$n]}" --service=readiness --timeout_ms=1000 \
        health >/dev/null 2>&1; then
      ready=1
      break
    fi
    kill -0 "${daemon_pids[$n]}" 2>/dev/null || break
    sleep 0.1
  done
  if ((!ready)); then
    echo "run.sh: daemon of node $n (${addr[$n]}) did not become ready:" >&2
    tail -5 "$dir/daemon$n.log" >&2
    exit 1
  fi
  role=""
  ((n == 0)) && role=" (coordinator)"
  echo "   node $n: rankd at ${addr[$n]}$role, ranks $((n * ranks_per_node))-$(((n + 1) * ranks_per_node - 1)) on unix://$dir/node$n.sock"
done
echo "   inspect it while it runs: $rankctl --target=${addr[0]} --token_file=$creds/operator.token members"
echo "                             grpcurl -plaintext -H \"authorization: Bearer \$(cat $creds/operator.token)\" -d '{}' ${addr[0]} rankd.v1.Admin/ListMembers"

# ---- ranks -------------------------------------------------------------------
echo "== starting $world serving ranks (examples/serving, $steps steps)"
rank_pids=()
for ((n = 0; n < nodes; n++)); do
  for ((l = 0; l < ranks_per_node; l++)); do
    r=$((n * ranks_per_node + l))
    extra=()
    [[ "$kill_rank" == "$r" ]] && extra+=(--stall_at_step="$at_step")
    token=$("$rankctl" credentials rank-token "$creds" "$job" "$n" "$r")
    gpu_env=()
    if [[ -n "${RANKD_KIT_RANKS_ON_ONE_GPU:-}" ]]; then
      visible="${CUDA_VISIBLE_DEVICES:-0}"
      gpu_env=("CUDA_VISIBLE_DEVICES=${visible%%,*}"
               "NCCL_HOSTID=rankd-kit-$job-rank$r")
    fi
    env "${gpu_env[@]}" RANKD_RANK_TOKEN="$token" ${run_in[$n]} "$serving" --target="unix://$dir/node$n.sock" \
      --job_id="$job" --local_rank="$l" --world_size="$world" \
      --backend="$backend" --steps="$steps" --hostname="${ip_of[$n]}" \
      "${extra[@]}" "${example_args[@]}" >"$dir/rank$r.log" 2>&1 &
    pids+=($!)
    rank_pids+=($!)
  done
done

# Rank 0's lines (progress, summary) as they come; the operator's view once
# the job is serving; the drill's kill when the victim stalls.
shown=0 operator_view=0 killed_at=""
show_rank0() {
  local total
  total=$(wc -l <"$dir/rank0.log" 2>/dev/null || echo 0)
  if ((total > shown)); then
    # (FAILED / CAUSE lines are reported per rank at the end.)
    sed -n "$((shown + 1)),${total}p" "$dir/rank0.log" |
      grep -v -E '^(READY|FAILED|CAUSE) ' || true
    shown=$total
  fi
}
running() {
  local pid
  for pid in "${rank_pids[@]}"; do kill -0 "$pid" 2>/dev/null && return 0; done
  return 1
}
deadline=$(($(now_ms) + (120 + steps) * 1000))
hung=0
while running; do
  show_rank0
  if ((!operator_view)) && grep -q '^SERVING ' "$dir/rank0.log" 2>/dev/null; then
    operator_view=1
    echo "== the job as an operator sees it now (rankctl --target=${addr[0]} members)"
    "$rankctl" --target="${addr[0]}" "${operator[@]}" members 2>&1 | sed 's/^/   /' || true
  fi
  if [[ -n "$kill_rank" && -z "$killed_at" ]] &&
      grep -q '^STALLING ' "$dir/rank$kill_rank.log" 2>/dev/null; then
    killed_at=$(now_ms)
    { kill -KILL "${rank_pids[$kill_rank]}" && wait "${rank_pids[$kill_rank]}"; } 2>/dev/null || true
    echo "== failure drill: kill -9 rank $kill_rank (pid ${rank_pids[$kill_rank]}, node $((kill_rank / ranks_per_node))) at step $at_step"
    deadline=$((killed_at + 30000))
  fi
  if (($(now_ms) > deadline)); then
    hung=1
    break
  fi
  sleep 0.1
done
show_rank0

failed=0
if ((hung)); then
  still=()
  for ((r = 0; r < world; r++)); do
    kill -0 "${rank_pids[$r]}" 2>/dev/null && still+=("$r")
  done
  echo "== HANG: ranks ${still[*]} still running at the deadline; stopping them"
  failed=1
fi
codes=()
for ((r = 0; r < world; r++)); do
  kill -KILL "${rank_pids[$r]}" 2>/dev/null || true
  code=0
  wait "${rank_pids[$r]}" 2>/dev/null || code=$?
  codes+=("$code")
done

first_line() { grep -m1 -E "$1" "$2" 2>/dev/null | cut -c1-400 || true; }
if [[ -z "$kill_rank" ]]; then
  for ((r = 0; r < world; r++)); do
    if ((codes[r] != 0)); then
      failed=1
      why=$(first_line '^(FAILED|STOPPED|SELF-CHECK|ERROR|REFUSED)' "$dir/rank$r.log")
      echo "rank $r: exit ${codes[$r]}: ${why:-$(tail -1 "$dir/rank$r.log" 2>/dev/null)}"
    fi
  done
  if ! grep -q '^  self-check    PASSED' "$dir/rank0.log"; then failed=1; fi
else
  # The drill: every survivor must fail promptly, naming the killed rank.
  if [[ -z "$killed_at" ]]; then
    echo "== drill: rank $kill_rank never reached step $at_step"
    failed=1
  fi
  named=0
  for ((r = 0; r < world; r++)); do
    ((r == kill_rank)) && continue
    line=$(first_line '^FAILED ' "$dir/rank$r.log")
    cause=$(first_line '^CAUSE ' "$dir/rank$r.log")
    if [[ -z "$line" ]]; then
      echo "rank $r: exit ${codes[$r]}: did not report the loss: $(tail -1 "$dir/rank$r.log" 2>/dev/null)"
      failed=1
      continue
    fi
    at=$(sed -E 's/.* unix_ms=([0-9]+).*/\1/' <<<"$line")
    step=$(sed -E 's/.* step=([0-9]+).*/\1/' <<<"$line")
    message=${line#* unix_ms=* }
    if grep -qE "rank $kill_rank([^0-9]|$)" <<<"$line$cause"; then
      named=$((named + 1))
      echo "rank $r: detected the loss of rank $kill_rank after $((at - ${killed_at:-at})) ms (step $step): $message"
    else
      echo "rank $r: failed without naming rank $kill_rank: $message ${cause#CAUSE rank=$r }"
      failed=1
    fi
  done
fi

# ---- shutdown ----------------------------------------------------------------
if ((operator_view)); then
  echo "== the job after the run (rankctl --target=${addr[0]} status)"
  "$rankctl" --target="${addr[0]}" "${operator[@]}" status 2>&1 | sed 's/^/   /' || true
fi
for pid in "${daemon_pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
for ((n = 0; n < nodes; n++)); do
  pid=${daemon_pids[$n]}
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    echo "== daemon of node $n did not stop within 10 s of SIGTERM; killing it"
    kill -KILL "$pid" 2>/dev/null || true
    failed=1
  fi
  code=0
  wait "$pid" 2>/dev/null || code=$?
  if ((code != 0)); then
    echo "== daemon of node $n exited with status $code: $(tail -1 "$dir/daemon$n.log")"
    failed=1
  fi
done
cleanup "$failed"
left=$(ps -eo pid=,args= | grep -F -- "$dir" | grep -v -e grep -e "ps -eo" || true)
if [[ -n "$left" ]]; then
  echo "== processes left behind:"
  echo "$left"
  failed=1
fi
if [[ "$hosts" == netns ]] && ip netns list | grep -q "^rankd-$tag-"; then
  echo "== network namespaces left behind: $(ip netns list | grep "^rankd-$tag-" | tr '\n' ' ')"
  failed=1
fi
what="$((${#pids[@]})) processes stopped"
[[ "$hosts" == netns ]] && what+=", ${#namespaces[@]} network namespaces removed"
if [[ -z "$kill_rank" ]]; then
  if ((failed)); then
    echo "== FAILED (see above; logs in $dir)"
    exit 1
  fi
  echo "== OK: $world ranks served $steps self-checked steps; shut down cleanly, no process left behind ($what)"
else
  if ((failed)); then
    echo "== FAILED: the failure drill did not go as expected (logs in $dir)"
    exit 1
  fi
  echo "== OK: failure drill: all $named surviving ranks reported rank $kill_rank lost; shut down cleanly, no process left behind ($what)"
fi
