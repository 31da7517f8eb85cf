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
#   --recover                       in-place recovery: daemons run with
#                                   --recovery=on, each node's ranks under
#                                   rankrun --max_restarts; a lost rank is
#                                   replaced, the job re-forms at the next
#                                   epoch and serves the failed step again
#   --kill-rank=R --recover         kill -9 rank R (not 0, unless
#                                   --recovery=domain) at step S; rankrun
#                                   restarts it into its rank, it loads its
#                                   shard and every step must still pass
#                                   the self-check, no request lost
#   --kill-node=N --recover         kill -9 node N's daemon, its rankrun and
#                                   ranks (N >= 1; node 0 coordinates) at
#                                   step S; a replacement daemon registers
#                                   node N again, rankrun starts its ranks
#                                   and the job recovers the same way
#                                   (with --recover the summary splits the
#                                   recovery time: detect, replace, re-form,
#                                   first step)
#   --recover --recovery=domain     recovery by data-parallel replica
#                                   (needs dp >= 2; the default is
#                                   --recovery=on, the whole job): daemons
#                                   run with --recovery=domain, each replica
#                                   serves its own request streams, --steps
#                                   steps each; with --kill-rank=R (any
#                                   rank) only R's replica re-forms, at its
#                                   own epoch, while the others keep serving
#                                   (no loss, no re-form there); then it
#                                   re-enters the world rounds and serves
#                                   on. Every last-stage rank self-checks
#                                   its own outputs; the summary says how
#                                   many steps the other replicas served
#                                   meanwhile. Not with --kill-node (a node
#                                   may hold a whole replica, which then has
#                                   no survivor to resume from)
#   --kill-rank=R --full-restart    the baseline in-place recovery is
#                                   measured against: kill -9 rank R at
#                                   step S, let the job fail, then do what
#                                   an orchestrator that recreates the
#                                   whole group does (LeaderWorkerSet's
#                                   RecreateGroupOnPodRestart): stop every
#                                   daemon and rank, start them all again
#                                   and serve on from step S; the summary
#                                   splits loss -> serving again into
#                                   detect, exit, stop, daemons, ranks (start,
#                                   join, shard load) and first step
#   --keep-logs                     keep the run folder (logs) afterwards
# Environment: RANKD_BIN_DIR=DIR uses prebuilt binaries DIR/daemon/rankd,
# DIR/client/rankctl, DIR/examples/serving and (--recover)
# DIR/launcher/rankrun (no install, no build; the test suite runs it this
# way).
# RANKD_KIT_RANKS_ON_ONE_GPU=1 is the GPU kit's one-GPU mode, for tests
# only (tests/gpu/run.sh; docs/nccl.md, "One GPU, several ranks"): every
# rank process sees the first visible GPU alone and gets an NCCL_HOSTID of
# its own (with --recover, set per rank through rankrun's {rank}; a
# restarted rank gets its slot's), so that NCCL runs several ranks on one
# GPU through its socket transport. Never a production setting.
# Exit status: 0 when the run (or the drill) went as expected (with
# --recover: every step self-checked, no request lost), 1 when anything
# failed, 2 for bad options or an unusable backend / host mode.
set -euo pipefail
cd "$(dirname "$0")/.."

nodes=2 ranks_per_node=4 tp="" pp="" ep="" steps=50 backend=gloo hosts=local
kill_rank="" kill_node="" at_step="" keep_logs=0 recover=0 full_restart=0
recovery=""
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
    --kill-node=*) kill_node="${1#*=}" ;;
    --recover) recover=1 ;;
    --recovery=*) recovery="${1#*=}" ;;
    --full-restart) full_restart=1 ;;
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
[[ -n "$kill_rank" && -n "$kill_node" ]] &&
  usage_error "--kill-rank and --kill-node: one drill at a time"
by_domain=0
if [[ -n "$recovery" ]]; then
  [[ "$recovery" == on || "$recovery" == domain ]] ||
    usage_error "--recovery=$recovery: use on (the whole job re-forms) or" \
      "domain (only the hit data-parallel replica re-forms)"
  ((recover)) || usage_error "--recovery=$recovery needs --recover (without" \
    "it a loss ends the job)"
  if [[ "$recovery" == domain ]]; then
    ((dp >= 2)) || usage_error "--recovery=domain needs at least 2" \
      "data-parallel replicas; tp$tp pp$pp ep$ep of world $world leaves" \
      "dp=$dp, whose one replica is the whole job (it would recover as" \
      "--recovery=on does): lower --tp/--pp/--ep or add ranks"
    [[ -n "$kill_node" ]] && usage_error "--kill-node with --recovery=domain:" \
      "a node may hold a whole replica, which then has no survivor to" \
      "resume its request streams from; kill a rank (--kill-rank)"
    by_domain=1
  fi
fi
domain_size=$((tp * pp * ep))
if [[ -n "$kill_rank" ]]; then
  [[ "$kill_rank" =~ ^[0-9]+$ ]] && ((kill_rank < world)) ||
    usage_error "--kill-rank=$kill_rank: must be a rank in 0..$((world - 1))"
  ((world > 1)) || usage_error "--kill-rank needs at least 2 ranks"
  ((recover && !by_domain && kill_rank == 0)) &&
    usage_error "--kill-rank=0 --recover: rank 0 checks every step and" \
      "prints the summary (a replacement could check only the steps after" \
      "the loss); kill another rank"
fi
if [[ -n "$kill_node" ]]; then
  ((recover)) || usage_error "--kill-node needs --recover"
  [[ "$kill_node" =~ ^[0-9]+$ ]] && ((kill_node >= 1 && kill_node < nodes)) ||
    usage_error "--kill-node=$kill_node: must be a node in 1..$((nodes - 1))" \
      "(node 0's daemon coordinates the job: its loss is always terminal)"
fi
if ((full_restart)); then
  [[ -n "$kill_rank" ]] || usage_error "--full-restart needs --kill-rank"
  ((recover)) && usage_error "--full-restart and --recover: the two ways" \
    "back from a loss, one at a time"
fi
if [[ -n "$kill_rank$kill_node" ]]; then
  [[ -n "$at_step" ]] || at_step=$(((steps + 1) / 2))
  is_count "$at_step" && ((at_step <= steps)) ||
    usage_error "--at-step=$at_step: must be in 1..$steps"
elif [[ -n "$at_step" ]]; then
  usage_error "--at-step needs --kill-rank or --kill-node"
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
      //launcher:rankrun >/tmp/rankd-build.$$.log 2>&1; then
    grep -E "ERROR|error:" /tmp/rankd-build.$$.log | head -20 >&2
    rm -f /tmp/rankd-build.$$.log
    echo "run.sh: build failed" >&2
    exit 1
  fi
  rm -f /tmp/rankd-build.$$.log
  bin=$(bazel info -c opt bazel-bin 2>/dev/null)
fi
rankd="$bin/daemon/rankd" rankctl="$bin/client/rankctl"
serving="$bin/examples/serving" rankrun="$bin/launcher/rankrun"
needed=("$rankd" "$rankctl" "$serving")
((recover)) && needed+=("$rankrun")
for b in "${needed[@]}"; do
  [[ -x "$b" ]] || { echo "run.sh: $b is missing (build failed?)" >&2; exit 1; }
done
if [[ "$backend" == nccl ]]; then
  # The serving binary itself says whether NCCL can run here.
  if ! probe=$("$serving" --backend=nccl --probe_backend 2>&1); then
    sed -E 's/^(REFUSED|NCCL_RUNTIME) /run.sh: /' <<<"$probe" >&2
    exit 2
  fi
  gpus=$(sed -nE 's/.*devices=([0-9]+).*/\1/p' <<<"$probe")
  # The kit's one-GPU mode puts every rank on the first GPU.
  need=$world
  [[ -n "${RANKD_KIT_RANKS_ON_ONE_GPU:-}" ]] && need=1
  if ((need > ${gpus:-0})); then
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
if ((by_domain)); then
  echo "   in-place recovery by data-parallel replica: --recovery=domain ($dp replicas of $domain_size ranks: replica d = ranks d*$domain_size..d*$domain_size+$((domain_size - 1))); each node's ranks under rankrun --max_restarts"
elif ((recover)); then
  echo "   in-place recovery: --recovery=on; each node's ranks under rankrun --max_restarts"
fi
daemon_pids=() daemon_logs=()
start_daemon() {  # node log: node's daemon, in the background (daemon_pids)
  local n=$1 args
  args=(--job_id="$job" --nnodes="$nodes" --node_index="$n"
        --nproc_per_node="$ranks_per_node" --tensor_parallel="$tp"
        --pipeline_parallel="$pp" --expert_parallel="$ep"
        --listen="${addr[$n]}" --socket="$dir/node$n.sock"
        --credentials_dir="${node_creds[$n]}")
  ((n > 0)) && args+=(--coordinator="${addr[0]}")
  # A lost rank or node moves the job to its next epoch instead of failing
  # it; a recovery that takes over a minute fails it after all.
  if ((by_domain)); then
    args+=(--recovery=domain --recovery_deadline_ms=60000)
  elif ((recover)); then
    args+=(--recovery=on --recovery_deadline_ms=60000)
  fi
  ${run_in[$n]} "$rankd" "${args[@]}" >"$2" 2>&1 &
  pids+=($!)
  daemon_pids[$n]=$!
  daemon_logs[$n]=$2
}
await_daemon() {  # node log: waits until it is ready (registered), else exits 1
  local n=$1
  for _ in $(seq 150); do
    if "$rankctl" --target="${addr[$n]}" --service=readiness --timeout_ms=1000 \
        health >/dev/null 2>&1; then
      return 0
    fi
    kill -0 "${daemon_pids[$n]}" 2>/dev/null || break
    sleep 0.1
  done
  echo "run.sh: daemon of node $n (${addr[$n]}) did not become ready:" >&2
  tail -5 "$2" >&2
  exit 1
}
for ((n = 0; n < nodes; n++)); do start_daemon "$n" "$dir/daemon$n.log"; done
for ((n = 0; n < nodes; n++)); do
  await_daemon "$n" "$dir/daemon$n.log"
  role=""
  ((n == 0)) && role=" (coordinator)"
  echo "   node $n: rankd at ${addr[$n]}$role, ranks $((n * ranks_per_node))-$(((n + 1) * ranks_per_node - 1)) on unix://$dir/node$n.sock"
done
echo "   inspect it while it runs: $rankctl --target=${addr[0]} --token_file=$creds/operator.token members"
echo "                             grpcurl -plaintext -H \"authorization: Bearer \$(cat $creds/operator.token)\" -d '{}' ${addr[0]} rankd.v1.Admin/ListMembers"

# ---- ranks -------------------------------------------------------------------
# The drill's victims: rank R, or every rank of node N.
victims=()
if [[ -n "$kill_rank" ]]; then
  victims=("$kill_rank")
elif [[ -n "$kill_node" ]]; then
  for ((l = 0; l < ranks_per_node; l++)); do
    victims+=($((kill_node * ranks_per_node + l)))
  done
fi
echo "== starting $world serving ranks (examples/serving, $steps steps)"
rank_pids=()     # without --recover: rank -> pid
rankrun_pids=()  # with --recover: node -> pid of its rankrun
rank_logs=()     # with --recover: every rankrun's output, in start order
start_rankrun() {  # node log [serving flags...]: node's ranks under rankrun
  local n=$1 log=$2
  shift 2
  # The kit's one-GPU mode: rankrun gives a node's ranks one environment,
  # so each rank's own NCCL_HOSTID goes through env(1), whose arguments
  # rankrun fills in per rank ({rank}) as it fills in the server's; env
  # then execs the server (same pid). A restart gets its slot's again.
  local one_gpu=()
  if [[ -n "${RANKD_KIT_RANKS_ON_ONE_GPU:-}" ]]; then
    local visible="${CUDA_VISIBLE_DEVICES:-0}"
    one_gpu=("$(command -v env)" "CUDA_VISIBLE_DEVICES=${visible%%,*}"
             "NCCL_HOSTID=rankd-kit-$job-rank{rank}")
  fi
  # The ranks' output comes labelled "[rank R] " through rankrun; the
  # loop below files it per rank. A restart (--max_restarts) is the same
  # command line in a new process, which knows it joined a later epoch.
  # The log exists before the loop first reads it (the background job
  # below opens it only once it runs).
  : >"$log"
  ${run_in[$n]} "$rankrun" --daemon=reuse --rankd_socket="$dir/node$n.sock" \
    --credentials_dir="${node_creds[$n]}" --max_restarts=3 \
    --restart_backoff_ms=100 --stop_grace_ms=5000 -- \
    "${one_gpu[@]}" "$serving" --target="{target}" --local_rank="{local_rank}" \
    --job_id="$job" --world_size="$world" --backend="$backend" \
    --steps="$steps" --hostname="${ip_of[$n]}" --recover "$@" \
    "${example_args[@]}" >"$log" 2>&1 &
  pids+=($!)
  rankrun_pids[$n]=$!
  rank_logs+=("$log")
}
rank_tokens=()
start_ranks() {  # [serving flags...]: every rank as its own process (rank_pids)
  local n l r token visible gpu_env extra
  rank_pids=()
  for ((n = 0; n < nodes; n++)); do
    for ((l = 0; l < ranks_per_node; l++)); do
      r=$((n * ranks_per_node + l))
      extra=("$@")
      [[ "$kill_rank" == "$r" && -z "${killed_at:-}" ]] &&
        extra+=(--stall_at_step="$at_step")
      # Made once: a restarted rank (--full-restart) presents the same
      # credential, as a pod restarted with its secret does.
      [[ -n "${rank_tokens[$r]:-}" ]] ||
        rank_tokens[$r]=$("$rankctl" credentials rank-token "$creds" "$job" "$n" "$r")
      token=${rank_tokens[$r]}
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
}
if ((recover)); then
  for ((n = 0; n < nodes; n++)); do
    extra=()
    if ((${#victims[@]})); then
      extra=(--stall_at_step="$at_step"
             --stall_ranks="$(IFS=,; echo "${victims[*]}")")
    fi
    start_rankrun "$n" "$dir/ranks-node$n.log" "${extra[@]}"
  done
else
  start_ranks
fi

# With --recover, rankR.log is rebuilt from the rankruns' labelled output
# (every process that served as rank R, in order).
split_rank_logs() {
  ((recover)) || return 0
  awk -v d="$dir" '/^\[rank [0-9]+\] / {
      r = $2; sub(/\]$/, "", r); line = $0; sub(/^\[rank [0-9]+\] /, "", line)
      print line > (d "/rank" r ".log") }' "${rank_logs[@]}"
}
# Rank 0's lines (progress, summary) as they come; the operator's view once
# the job is serving; the drill's kill when the victim stalls.
shown=0 operator_view=0 killed_at="" killed_us="" node_ready_us=""
show_rank0() {
  local total
  [[ -f "$dir/rank0.log" ]] || return 0
  total=$(wc -l <"$dir/rank0.log" 2>/dev/null || echo 0)
  if ((total > shown)); then
    # (FAILED / CAUSE lines are reported per rank at the end.)
    sed -n "$((shown + 1)),${total}p" "$dir/rank0.log" |
      grep -v -E '^(READY|FAILED|CAUSE|LOSS|REFORMED|RESUMING|RESUMED|JOINED) ' || true
    shown=$total
  fi
}
running() {
  local pid
  for pid in "${rank_pids[@]}" "${rankrun_pids[@]}"; do
    kill -0 "$pid" 2>/dev/null && return 0
  done
  return 1
}
# The pid in the last "STALLING rank=R ... pid=P" line of rank R; empty
# before it stalls.
stalled_pid() {
  sed -nE 's/^STALLING rank=[0-9]+ step=[0-9]+ pid=([0-9]+).*/\1/p' \
    "$dir/rank$1.log" 2>/dev/null | tail -1
}
# Whether `pid` is a process of this run (its command line names the run's
# folder): a pid read from a log is checked before it is killed.
ours() { grep -qF -- "$dir" "/proc/$1/cmdline" 2>/dev/null; }
kill_victims() {  # the drill: kill -9 every victim (and with --kill-node, its node)
  local r pid targets=() what
  for r in "${victims[@]}"; do
    pid=$(stalled_pid "$r")
    ours "$pid" && targets+=("$pid")
  done
  if [[ -n "$kill_node" ]]; then
    # The node's rankrun first in the list, so it restarts nothing; its
    # daemon; its ranks.
    targets=("${rankrun_pids[$kill_node]}" "${daemon_pids[$kill_node]}" "${targets[@]}")
  fi
  killed_us=$(date +%s%6N)
  killed_at=$((killed_us / 1000))
  kill -KILL "${targets[@]}" 2>/dev/null || true
  if ((recover)); then
    what="pid ${targets[*]}"
    if [[ -n "$kill_node" ]]; then
      wait "${rankrun_pids[$kill_node]}" "${daemon_pids[$kill_node]}" 2>/dev/null || true
      forget "${rankrun_pids[$kill_node]}" "${daemon_pids[$kill_node]}"
      echo "== recovery drill: kill -9 node $kill_node at step $at_step: its daemon (pid ${daemon_pids[$kill_node]}), rankrun (pid ${rankrun_pids[$kill_node]}) and ranks ${victims[*]} (pids ${targets[*]:2})"
      # As its orchestrator would: a new daemon for the node (the same
      # index, address and socket; a new incarnation), then its ranks.
      start_daemon "$kill_node" "$dir/daemon$kill_node.2.log"
      await_daemon "$kill_node" "$dir/daemon$kill_node.2.log"
      node_ready_us=$(date +%s%6N)
      echo "   node $kill_node: replacement rankd (pid ${daemon_pids[$kill_node]}) registered after $(((node_ready_us - killed_us) / 1000)) ms; starting its ranks"
      start_rankrun "$kill_node" "$dir/ranks-node$kill_node.2.log"
    else
      echo "== recovery drill: kill -9 rank $kill_rank ($what, node $((kill_rank / ranks_per_node))) at step $at_step; rankrun restarts it"
    fi
  else
    wait "${rank_pids[$kill_rank]}" 2>/dev/null || true
    forget "${rank_pids[$kill_rank]}"
    echo "== failure drill: kill -9 rank $kill_rank (pid ${rank_pids[$kill_rank]}, node $((kill_rank / ranks_per_node))) at step $at_step"
  fi
}
# Drops reaped pids from the cleanup list (a reaped pid may be reused).
forget() {
  local gone kept=() pid
  for pid in "${pids[@]}"; do
    for gone in "$@"; do [[ "$pid" == "$gone" ]] && continue 2; done
    kept+=("$pid")
  done
  pids=("${kept[@]}")
}
all_stalled() {
  local r
  for r in "${victims[@]}"; do [[ -n "$(stalled_pid "$r")" ]] || return 1; done
  return 0
}
supervise() {  # until every rank has exited, or the deadline (hung=1)
  while running; do
    split_rank_logs
    show_rank0
    if ((!operator_view)) && grep -q '^SERVING ' "$dir/rank0.log" 2>/dev/null; then
      operator_view=1
      echo "== the job as an operator sees it now (rankctl --target=${addr[0]} members)"
      "$rankctl" --target="${addr[0]}" "${operator[@]}" members 2>&1 | sed 's/^/   /' || true
    fi
    if ((${#victims[@]})) && [[ -z "$killed_at" ]] && all_stalled; then
      kill_victims
      # The failure drill ends within 30 s of the kill; a recovery within 60.
      deadline=$((killed_at + (recover ? 60000 + steps * 1000 : 30000)))
    fi
    if (($(now_ms) > deadline)); then
      hung=1
      break
    fi
    # After the kill, a full restart's timing counts from the moment every
    # rank has exited: look more often.
    if [[ -n "$killed_at" ]] && ((full_restart)); then sleep 0.02; else sleep 0.1; fi
  done
  split_rank_logs
  show_rank0
}
deadline=$(($(now_ms) + (120 + steps) * 1000))
hung=0
supervise
exited_us=$(date +%s%6N)  # (--full-restart: every rank of the job is gone)

failed=0
if ((hung)); then
  still=()
  if ((recover)); then
    for ((n = 0; n < nodes; n++)); do
      kill -0 "${rankrun_pids[$n]}" 2>/dev/null && still+=("node$n")
    done
    echo "== HANG: the ranks of ${still[*]} still running at the deadline; stopping them"
  else
    for ((r = 0; r < world; r++)); do
      kill -0 "${rank_pids[$r]}" 2>/dev/null && still+=("$r")
    done
    echo "== HANG: ranks ${still[*]} still running at the deadline; stopping them"
  fi
  failed=1
fi
await_stop() {  # what pid: sent SIGTERM; reaped within 10 s (else SIGKILL, failed=1) into $code
  local what=$1 pid=$2
  for _ in $(seq 500); do kill -0 "$pid" 2>/dev/null || break; sleep 0.02; done
  if kill -0 "$pid" 2>/dev/null; then
    echo "== $what did not stop within 10 s of SIGTERM; killing it"
    kill -KILL "$pid" 2>/dev/null || true
    failed=1
  fi
  code=0
  wait "$pid" 2>/dev/null || code=$?
}
reap_ranks() {  # every rank process (rank_pids) stopped and reaped: codes
  local r code
  codes=()
  for ((r = 0; r < world; r++)); do
    # (The drill's victim was reaped already: its pid may be another's.)
    [[ "$r" == "$kill_rank" && -n "$killed_at" && $restarted == 0 ]] ||
      kill -KILL "${rank_pids[$r]}" 2>/dev/null || true
    code=0
    wait "${rank_pids[$r]}" 2>/dev/null || code=$?
    codes+=("$code")
  done
  forget "${rank_pids[@]}"
  reaped=$((reaped + world))
}
codes=() restarted=0 reaped=0
drill_codes=()  # the drill's exit statuses (the failed job's, with --full-restart)
if ((recover)); then
  # SIGTERM first: rankrun forwards it and stops its ranks, by pid,
  # SIGKILL after its --stop_grace_ms (5 s); this waits 10 s.
  for ((n = 0; n < nodes; n++)); do kill -TERM "${rankrun_pids[$n]}" 2>/dev/null || true; done
  for ((n = 0; n < nodes; n++)); do
    await_stop "rankrun of node $n" "${rankrun_pids[$n]}"
    codes+=("$code")
  done
  split_rank_logs
else
  reap_ranks
fi

first_line() { grep -m1 -E "$1" "$2" 2>/dev/null | cut -c1-400 || true; }
check_served() {  # every rank exited 0 and rank 0's self-check passed
  local r why
  for ((r = 0; r < world; r++)); do
    if ((codes[r] != 0)); then
      failed=1
      why=$(first_line '^(FAILED|STOPPED|SELF-CHECK|ERROR|REFUSED)' "$dir/rank$r.log")
      echo "rank $r: exit ${codes[$r]}: ${why:-$(tail -1 "$dir/rank$r.log" 2>/dev/null)}"
    fi
  done
  if ! grep -q '^  self-check    PASSED' "$dir/rank0.log"; then failed=1; fi
}
check_drill() {  # [log prefix]: every survivor failed promptly, naming the killed rank
  local r line cause at step message log
  # The drill: every survivor must fail promptly, naming the killed rank.
  if [[ -z "$killed_at" ]]; then
    echo "== drill: rank $kill_rank never reached step $at_step"
    failed=1
  fi
  named=0
  for ((r = 0; r < world; r++)); do
    ((r == kill_rank)) && continue
    log="$dir/${1:-}rank$r.log"
    line=$(first_line '^FAILED ' "$log")
    cause=$(first_line '^CAUSE ' "$log")
    if [[ -z "$line" ]]; then
      echo "rank $r: exit ${drill_codes[$r]}: did not report the loss: $(tail -1 "$log" 2>/dev/null)"
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
}
stop_daemons() {  # SIGTERM to every daemon; each must exit 0 within 10 s
  local n pid code
  for pid in "${daemon_pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for ((n = 0; n < nodes; n++)); do
    pid=${daemon_pids[$n]}
    await_stop "daemon of node $n" "$pid"
    forget "$pid"
    reaped=$((reaped + 1))
    if ((code != 0)); then
      echo "== daemon of node $n exited with status $code: $(tail -1 "${daemon_logs[$n]}")"
      failed=1
    fi
  done
}
# Largest "unix_us=" stamp of the lines matching `pattern` in every rank's
# log, and how many there were: "<max> <count>".
latest_stamp() {
  local pattern=$1
  cat "$dir"/rank*.log 2>/dev/null | grep -E "$pattern" |
    sed -nE 's/.* unix_us=([0-9]+).*/\1/p' |
    awk 'BEGIN { max = 0; n = 0 } { n++; if ($1 + 0 > max) max = $1 + 0 } END { printf "%.0f %d\n", max, n }'
}
ms() { printf '%d.%d' $(($1 / 1000)) $((($1 % 1000) / 100)); }
# ---- --full-restart: the baseline in-place recovery is measured against ------
# Every rank of the failed job has exited: stop every daemon, start them all
# again (same addresses and credentials, new incarnations), then every rank,
# serving from the step the lost job did not finish.
if ((full_restart && !hung)) && [[ -n "$killed_at" ]]; then
  # As fast as an orchestrator would: the checks of the failed job's logs
  # wait until the new job runs.
  stop_daemons
  stopped_us=$(date +%s%6N)
  drill_codes=("${codes[@]}")
  for ((r = 0; r < world; r++)); do
    mv "$dir/rank$r.log" "$dir/phase1-rank$r.log" 2>/dev/null || true
  done
  echo "== full restart: every rank of the failed job has exited and every daemon stopped; starting all $nodes daemons again, then all $world ranks from step $at_step"
  for ((n = 0; n < nodes; n++)); do start_daemon "$n" "$dir/daemon$n.2.log"; done
  for ((n = 0; n < nodes; n++)); do await_daemon "$n" "$dir/daemon$n.2.log"; done
  daemons_us=$(date +%s%6N)
  restarted=1 shown=0
  start_ranks --first_step="$at_step"
  deadline=$(($(now_ms) + (120 + steps) * 1000))
  supervise
  if ((hung)); then
    still=()
    for ((r = 0; r < world; r++)); do
      kill -0 "${rank_pids[$r]}" 2>/dev/null && still+=("$r")
    done
    echo "== HANG: restarted ranks ${still[*]} still running at the deadline; stopping them"
    failed=1
  fi
  reap_ranks
  check_drill phase1-
  survivors_us=$(cat "$dir"/phase1-rank*.log 2>/dev/null |
    sed -nE 's/^FAILED .* unix_ms=([0-9]+).*/\1/p' | sort -n | tail -1)
  survivors_us=$((${survivors_us:-0} * 1000))
  read -r started_us starts < <(latest_stamp '^RESTARTED ')
  read -r resumed_us resumes < <(latest_stamp '^RESUMED ')
  if ((survivors_us > 0 && starts == world && resumes == world)); then
    p1=$((survivors_us > killed_us ? survivors_us : killed_us))
    pe=$((exited_us > p1 ? exited_us : p1))
    p2=$((stopped_us > pe ? stopped_us : pe))
    p3=$((daemons_us > p2 ? daemons_us : p2))
    p4=$((started_us > p3 ? started_us : p3))
    p5=$((resumed_us > p4 ? resumed_us : p4))
    echo "== full restart: rank $kill_rank killed at step $at_step; serving again after $(ms $((p5 - killed_us))) ms (loss -> first step served by the restarted job)"
    printf '   %-11s %9s ms  %s\n' \
      detect "$(ms $((p1 - killed_us)))" "kill -9 -> all $((world - 1)) surviving ranks saw the loss (FAILED)" \
      exit "$(ms $((pe - p1)))" "-> every rank process exited (run.sh's view, within 20 ms)" \
      stop "$(ms $((p2 - pe)))" "-> all $nodes daemons stopped (SIGTERM)" \
      daemons "$(ms $((p3 - p2)))" "-> all $nodes daemons started again and ready (registered)" \
      ranks "$(ms $((p4 - p3)))" "-> all $starts ranks started, joined, formed their sessions and loaded their shards (RESTARTED)" \
      "first step" "$(ms $((p5 - p4)))" "-> step $at_step served and self-checked on all $resumes ranks (RESUMED)"
    echo "   (time stamps: CLOCK_REALTIME microseconds of this host, from run.sh's kill, its own view of the processes and every rank's log; ms resolution for FAILED)"
  else
    echo "== full restart phases missing: FAILED=${survivors_us} RESTARTED=$starts RESUMED=$resumes of $world"
    failed=1
  fi
fi
if ((recover)); then
  for ((n = 0; n < nodes; n++)); do
    if ((codes[n] != 0)); then
      failed=1
      echo "node $n: rankrun exited with status ${codes[$n]}: $(grep -H '^rankrun: ' "${rank_logs[@]}" 2>/dev/null | grep -F "/ranks-node$n." | tail -1 | cut -d: -f2- | cut -c1-400)"
    fi
  done
  for ((r = 0; r < world; r++)); do
    if ! grep -q "^DONE rank=$r " "$dir/rank$r.log" 2>/dev/null; then
      failed=1
      why=$(grep -E '^(FAILED|STOPPED|SELF-CHECK|ERROR|REFUSED)' "$dir/rank$r.log" 2>/dev/null | tail -1 | cut -c1-400 || true)
      echo "rank $r: did not finish: ${why:-$(tail -1 "$dir/rank$r.log" 2>/dev/null)}"
    fi
  done
  # The summary: rank 0's; by replica, the rank's that saw every round
  # (the lowest rank of a replica that never recovered).
  summary_log="$dir/rank0.log"
  if ((by_domain)); then
    summary_log=$(grep -l '^== summary' "$dir"/rank*.log 2>/dev/null | head -1 || true)
    summary_log=${summary_log:-$dir/rank0.log}
    if [[ "$summary_log" != "$dir/rank0.log" ]]; then
      echo "== summary by ${summary_log##*/} (the lowest rank that saw every world round)"
      sed -n '/^== summary/,/^DONE /p' "$summary_log" | grep -v '^DONE '
    fi
    checked_steps=$((steps * dp)) per_replica=" ($dp replicas x $steps)"
  else
    checked_steps=$steps per_replica=""
  fi
  if ! grep -q "^  self-check    PASSED: $checked_steps/$checked_steps steps" "$summary_log"; then
    echo "== the self-check did not pass for every one of the $checked_steps steps$per_replica"
    failed=1
  fi
  ledger=$(grep -m1 '^  requests ' "$summary_log" || true)
  if ((${#victims[@]})); then
    if [[ -z "$killed_at" ]]; then
      echo "== drill: the victims never all reached step $at_step"
      failed=1
    fi
    if [[ "$ledger" =~ ([0-9,]+)\ in\ flight\ at\ the\ loss,\ ([0-9,]+)\ re-run,\ ([0-9,]+)\ lost ]]; then
      in_flight=${BASH_REMATCH[1]//,/} rerun=${BASH_REMATCH[2]//,/} lost=${BASH_REMATCH[3]//,/}
      if ((lost != 0 || rerun != in_flight)); then
        echo "== requests lost: $lost of the $in_flight in flight at the loss were not served again"
        failed=1
      fi
    else
      echo "== rank 0 reported no recovery: ${ledger:-no summary}"
      failed=1
    fi
    # The recovery's phases, from run.sh's kill and the ranks' stamps
    # (CLOCK_REALTIME microseconds, comparable on this one host).
    # By replica: only the hit replica's ranks lose, re-form and resume;
    # every other replica must show none of it, and served steps meanwhile.
    hit_ranks=$world hit_what=""
    if ((by_domain)); then
      hit=$((kill_rank / domain_size))
      hit_ranks=$domain_size
      hit_what=" (replica $hit, ranks $((hit * domain_size))-$(((hit + 1) * domain_size - 1)))"
      for ((r = 0; r < world; r++)); do
        ((r / domain_size == hit)) && continue
        if grep -qE '^(LOSS|REFORMED|RESUMING|RESUMED|JOINED|STALLING) ' "$dir/rank$r.log" 2>/dev/null; then
          echo "== rank $r of replica $((r / domain_size)) lost, re-formed or resumed although only replica $hit was hit: $(grep -m1 -E '^(LOSS|REFORMED|RESUMING|RESUMED|JOINED) ' "$dir/rank$r.log" | cut -c1-300)"
          failed=1
        fi
      done
      meanwhile=()
      for ((d = 0; d < dp; d++)); do
        ((d == hit)) && continue
        line=$(grep -m1 -E "^  replica $d +ranks " "$summary_log" || true)
        if [[ "$line" =~ served\ ([0-9]+)\ of\ them\ while\ replica\ ([0-9, ]+)\ recovered ]] && ((BASH_REMATCH[1] > 0)); then
          meanwhile+=("replica $d served ${BASH_REMATCH[1]} steps")
        else
          echo "== replica $d served no step while replica $hit recovered: ${line:-no summary line}"
          failed=1
        fi
      done
    fi
    read -r loss_us losses < <(latest_stamp '^LOSS rank=[0-9]+ step=[0-9]+ epoch=1 ')
    read -r joined_us joins < <(latest_stamp '^JOINED ')
    read -r reformed_us reforms < <(latest_stamp '^REFORMED ')
    read -r resumed_us resumes < <(latest_stamp '^RESUMED ')
    epoch=$(sed -nE 's/^RESUMED .* epoch=([0-9]+) .*/\1/p' "$dir/rank${victims[0]}.log" | tail -1)
    # A run may see more than one loss (another one during or after this
    # recovery): count the ranks that served at the last epoch, once each,
    # not every RESUMED line.
    resumed_ranks=$(cat "$dir"/rank*.log 2>/dev/null |
      sed -nE "s/^RESUMED rank=([0-9]+) .* epoch=${epoch:-0} .*/\1/p" | sort -u | wc -l || true)
    # Survivors re-form in place: their last REFORMED line says shard=kept.
    reloaded=()
    for ((r = 0; r < world; r++)); do
      [[ " ${victims[*]} " == *" $r "* ]] && continue
      # A rank lost too (a second loss: the example's --die_at_epoch drill,
      # or any other) was restarted by rankrun: its replacement's JOINED
      # line says so, and it loaded its shard as a replacement does.
      grep -qE '^(DYING|JOINED) ' "$dir/rank$r.log" 2>/dev/null && continue
      last=$(grep -E '^REFORMED ' "$dir/rank$r.log" 2>/dev/null | tail -1 || true)
      [[ -n "$last" && "$last" != *shard=kept* ]] && reloaded+=("$r")
    done
    if [[ -n "$killed_us" ]] && ((losses > 0 && joins > 0 && reforms > 0 && resumes > 0)); then
      p1=$((loss_us > killed_us ? loss_us : killed_us))
      p2=$((joined_us > p1 ? joined_us : p1))
      p3=$((reformed_us > p2 ? reformed_us : p2))
      p4=$((resumed_us > p3 ? resumed_us : p3))
      if [[ -n "$kill_node" ]]; then
        lost_what="node $kill_node (daemon and ranks ${victims[0]}-${victims[-1]})"
        replaced="the replacement daemon registered node $kill_node (+$(ms $((node_ready_us - killed_us))) ms) and its $joins ranks joined epoch ${epoch:-?}"
      else
        lost_what="rank $kill_rank$hit_what"
        replaced="rankrun restarted rank $kill_rank; the replacement joined epoch ${epoch:-?}"
      fi
      echo "== recovery: $lost_what killed at step $at_step; serving again after $(ms $((p4 - killed_us))) ms (loss -> first step served at epoch ${epoch:-?})"
      printf '   %-11s %9s ms  %s\n' \
        detect "$(ms $((p1 - killed_us)))" "kill -9 -> all $losses surviving ranks saw the loss (LOSS)" \
        replace "$(ms $((p2 - p1)))" "-> $replaced (JOINED)" \
        re-form "$(ms $((p3 - p2)))" "-> all $reforms ranks' sessions formed at epoch ${epoch:-?} (REFORMED; survivors kept their shards)" \
        "first step" "$(ms $((p4 - p3)))" "-> step $at_step served again and self-checked on all $resumed_ranks ranks${hit_what:+ of replica $hit} (RESUMED)"
      if ((by_domain)); then
        printf '   %-11s %9s     %s\n' meanwhile "" "$(IFS=';'; echo "${meanwhile[*]:-nothing}" | sed 's/;/; /g') while replica $hit recovered (never lost, re-formed or stopped: no LOSS, REFORMED or RESUMED line in its logs)"
      fi
      echo "   (time stamps: CLOCK_REALTIME microseconds of this host, from run.sh's kill and every rank's log)"
      echo "   requests: ${ledger#  requests      }"
      if ((resumed_ranks != hit_ranks)); then
        echo "== only $resumed_ranks of $hit_ranks ranks served a step at epoch ${epoch:-?} after the recovery"
        failed=1
      fi
      if ((${#reloaded[@]} > 0)); then
        echo "== surviving ranks ${reloaded[*]} loaded their shard again instead of keeping it (REFORMED without shard=kept)"
        failed=1
      fi
    else
      echo "== recovery phases missing: kill=${killed_us:-none} LOSS=$losses JOINED=$joins REFORMED=$reforms RESUMED=$resumes lines"
      failed=1
    fi
  fi
elif [[ -z "$kill_rank" ]] || ((restarted)); then
  check_served
else
  drill_codes=("${codes[@]}")
  check_drill
fi

# ---- shutdown ----------------------------------------------------------------
if ((operator_view)); then
  echo "== the job after the run (rankctl --target=${addr[0]} status)"
  "$rankctl" --target="${addr[0]}" "${operator[@]}" status 2>&1 | sed 's/^/   /' || true
fi
stop_daemons
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
what="$((${#pids[@]} + reaped)) processes stopped"
[[ "$hosts" == netns ]] && what+=", ${#namespaces[@]} network namespaces removed"
if ((recover)); then
  if ((failed)); then
    echo "== FAILED: the run with in-place recovery did not go as expected (logs in $dir)"
    exit 1
  fi
  if ((${#victims[@]})); then
    if ((by_domain)); then
      echo "== OK: recovered by replica from the loss of rank $kill_rank$hit_what: it re-formed alone while $(IFS=';'; echo "${meanwhile[*]}" | sed 's/;/, /g'); $dp replicas served $steps self-checked steps each, no request lost; shut down cleanly, no process left behind ($what)"
    else
      echo "== OK: recovered in place from the loss of ${kill_node:+node $kill_node (ranks ${victims[*]})}${kill_rank:+rank $kill_rank}: $world ranks served $steps self-checked steps, no request lost; shut down cleanly, no process left behind ($what)"
    fi
  else
    echo "== OK: $world ranks served $steps self-checked steps$( ((by_domain)) && echo " in each of $dp replicas") (recovery ${recovery:-on}, nothing lost); shut down cleanly, no process left behind ($what)"
  fi
elif ((full_restart)); then
  if ((failed)); then
    echo "== FAILED: the full restart did not go as expected (logs in $dir)"
    exit 1
  fi
  echo "== OK: full restart after the loss of rank $kill_rank: every survivor reported it lost; all $nodes daemons and $world ranks started again and served steps $at_step-$steps self-checked; shut down cleanly, no process left behind ($what)"
elif [[ -z "$kill_rank" ]]; then
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
