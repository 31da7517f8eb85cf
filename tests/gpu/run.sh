#!/usr/bin/env bash
# Runs every NCCL test of rankd (the data plane's, the daemons', the C
# ABI's, and the Python package's on PyTorch CUDA tensors when the host's
# python3 has torch and numpy) and the serving example on NCCL, on a
# machine with one or more GPUs (world size = number of visible GPUs; 1
# works), and writes a log and a per-test summary. See docs/nccl.md.
#
#   tests/gpu/run.sh                      from a checkout: the kit at
#                                         build/gpu-kit if there is one,
#                                         else a Bazel build (-c opt)
#   build/gpu-kit/run.sh                  from the kit itself (no Bazel)
#   tests/gpu/run.sh --kit=DIR            the kit in DIR
#   tests/gpu/run.sh --bazel              build with Bazel even if a kit exists
#   tests/gpu/run.sh --out=DIR            results (default build/gpu-out,
#                                         next to the kit when run from it)
#   tests/gpu/run.sh --without-gpu        check the runner itself on a CPU
#                                         machine: no GPU required, GPU tests
#                                         skip, the serving example is skipped
#   CUDA_VISIBLE_DEVICES=0 tests/gpu/run.sh   world size 1
#   tests/gpu/run.sh --ranks-on-one-gpu=2,4   the one-GPU mode (default on a
#                                         host with one GPU; =none turns it
#                                         off): the multi-process NCCL tests
#                                         and the serving example again with
#                                         2, then 4 ranks on that one GPU,
#                                         each process with its own
#                                         NCCL_HOSTID (NCCL's socket
#                                         transport over loopback). A kit
#                                         setting only: rankd never sets
#                                         NCCL_HOSTID (docs/nccl.md)
#   tests/gpu/run.sh --with-standin       also run the CPU twins against
#                                         the CUDA/NCCL stand-in (always
#                                         with --without-gpu)
#
# Before any test it prints what rankd's own loader finds (libcudart.so.13
# or .12 and libnccl.so.2: $RANKD_CUDART_LIBRARY / $RANKD_NCCL_LIBRARY,
# LD_LIBRARY_PATH, the loader's cache, the CUDA homes, the NVIDIA wheel
# folders, to which it adds those of python3's site-packages), the GPUs and
# the driver. No GPU, or no library found, fails with what was looked for
# where. Tests that need more GPUs than are visible skip, saying so.
#
# Every test has a time limit; on a GPU host the limits sum to less than
# 540 s, so one 540 s command runs the whole kit (it prints the sum first).
# NCCL_DEBUG defaults to WARN.
#
# Output, three files, so that a remote runner can bring them back whole:
# DIR/run.log (everything), DIR/summary.txt (one verdict line per test
# case: PASSED, FAILED or SKIPPED with the reason), DIR/logs.tar.gz (each
# test's own log, <test>.log). The last line is "N passed, M failed, K
# skipped"; the exit status is 0 only when nothing failed.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"

kit="" out="" mode=auto without_gpu=0 with_standin=0 one_gpu_ranks=auto
for arg in "$@"; do
  case "$arg" in
    --ranks-on-one-gpu=*) one_gpu_ranks="${arg#*=}" ;;
    --with-standin) with_standin=1 ;;
    --kit=*) kit="${arg#*=}"; mode=kit ;;
    --bazel) mode=bazel ;;
    --out=*) out="${arg#*=}" ;;
    --without-gpu) without_gpu=1 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "run.sh: unknown option $arg (see --help)" >&2; exit 2 ;;
  esac
done

# ---- where the binaries come from -----------------------------------------
if [[ "$mode" == auto ]]; then
  if [[ -x "$here/bin/daemon/rankd" ]]; then
    kit="$here"; mode=kit                       # run.sh inside a kit
  elif [[ -x "$here/../../build/gpu-kit/bin/daemon/rankd" ]]; then
    kit="$here/../../build/gpu-kit"; mode=kit   # a checkout with a kit
  else
    mode=bazel
  fi
fi
if [[ "$mode" == kit ]]; then
  kit="$(cd "$kit" 2>/dev/null && pwd)" ||
    { echo "run.sh: no kit at ${kit}" >&2; exit 2; }
  [[ -x "$kit/bin/daemon/rankd" ]] ||
    { echo "run.sh: $kit is not a GPU kit (no bin/daemon/rankd; make one with tests/gpu/make_kit.sh)" >&2; exit 2; }
  source "$kit/kit_contents.sh"
  bin="$kit/bin"
  launcher="$kit/tools/run.sh"
  python_root="$kit/python"
  [[ -n "$out" ]] || out="$kit/../gpu-out"
else
  root="$(cd "$here/../.." && pwd)"
  source "$here/kit_contents.sh"
  launcher="$root/tools/run.sh"
  python_root="$root/python"
  [[ -n "$out" ]] || out="$root/build/gpu-out"
fi
case "$one_gpu_ranks" in
  auto|none) ;;
  *) [[ "$one_gpu_ranks" =~ ^[1-8](,[1-8])*$ ]] ||
       { echo "run.sh: --ranks-on-one-gpu=$one_gpu_ranks: want a list of counts from 1 to 8 (2,4), or none" >&2; exit 2; } ;;
esac
mkdir -p "$out" || { echo "run.sh: cannot create $out" >&2; exit 2; }
out="$(cd "$out" && pwd)"
log="$out/run.log" summary="$out/summary.txt"
logs="$out/logs"  # packed into logs.tar.gz at the end
rm -rf "$logs" "$out/logs.tar.gz"
mkdir -p "$logs" || { echo "run.sh: cannot create $logs" >&2; exit 2; }
: > "$summary"
export NCCL_DEBUG="${NCCL_DEBUG:-WARN}"
start=$(date +%s)

main() {
  passed=0 failed=0 skipped=0
  record() {  # record STATUS NAME [DETAIL]
    printf '%-8s %s%s\n' "$1" "$2" "${3:+  ($3)}" >> "$summary"
    case "$1" in
      PASSED) passed=$((passed + 1)) ;;
      FAILED) failed=$((failed + 1)) ;;
      SKIPPED) skipped=$((skipped + 1)) ;;
    esac
  }
  finish() {
    # One archive of the tests' own logs (run.log and summary.txt stay
    # beside it).
    if tar -C "$out" -czf "$out/logs.tar.gz" logs 2>/dev/null; then
      rm -rf "$logs"
    else
      echo "run.sh: could not pack $logs into $out/logs.tar.gz; left as it is"
    fi
    echo
    echo "== summary ($summary)"
    cat "$summary"
    echo "== $(( $(date +%s) - start )) s; log in $log"
    echo "$passed passed, $failed failed, $skipped skipped"
    exit $((failed > 0))
  }
  fail_setup() {  # fail_setup NAME MESSAGE
    echo "run.sh: $2"
    record FAILED "$1" "$2"
    finish
  }

  if [[ "$mode" == bazel ]]; then
    echo "== building with Bazel (-c opt)"
    command -v bazel >/dev/null ||
      fail_setup setup "bazel is not installed and there is no kit (make one on a build machine with tests/gpu/make_kit.sh)"
    cpus=$(nproc 2>/dev/null || echo 2)
    (cd "$root" && bazel build -c opt --jobs="$cpus" --local_cpu_resources=HOST_CPUS \
      "${KIT_TARGETS[@]}") || fail_setup build "bazel build failed"
    bin=$(cd "$root" && bazel info -c opt bazel-bin 2>/dev/null)
  else
    echo "== kit $kit"
    sed 's/^/   /' "$kit/KIT_INFO" | head -4
  fi

  # ---- the host's CUDA runtime and NCCL, and the GPUs ------------------------
  # rankd's own loader finds the libraries (dataplane/nccl/internal/
  # native_library.h); this only adds the NVIDIA wheel folders of python3's
  # site-packages, wherever that is (a venv, conda), to its search path.
  echo "== CUDA runtime, NCCL and GPUs of this host"
  if command -v python3 >/dev/null; then
    wheel_dirs=$(python3 - <<'PY' 2>/dev/null
import os, site
roots = list(site.getsitepackages()) + [site.getusersitepackages()]
dirs = [os.path.join(r, "nvidia", s, "lib") for r in roots
        for s in ("cu13", "cu12", "cuda_runtime", "nccl")]
print(":".join(d for d in dirs if os.path.isdir(d)))
PY
    )
    if [[ -n "$wheel_dirs" ]]; then
      export LD_LIBRARY_PATH="$wheel_dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      echo "   python3's NVIDIA wheel folders: $wheel_dirs"
    fi
  fi
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader 2>&1 | sed 's/^/   nvidia-smi: /'
  fi
  [[ -n "${CUDA_VISIBLE_DEVICES:-}" ]] && echo "   CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"
  # The serving binary reports what rankd itself loads and sees:
  # NCCL_RUNTIME (files, versions, GPUs), then BACKEND_OK or REFUSED.
  probe=$(timeout --kill-after=5 15 "$bin/examples/serving" --backend=nccl --probe_backend 2>&1)
  probe_status=$?
  echo "$probe" | sed 's/^/   /'
  runtime=$(grep -m1 '^NCCL_RUNTIME ' <<<"$probe" | sed 's/^NCCL_RUNTIME //')
  gpus=$(sed -nE 's/^BACKEND_OK nccl devices=([0-9]+).*/\1/p' <<<"$probe")
  if [[ -z "$runtime" ]]; then
    why="serving --probe_backend exited $probe_status: $(tail -1 <<<"$probe")"
    ((without_gpu)) || fail_setup setup "$why"
  elif [[ "$runtime" == *"not loaded ("* ]]; then
    # The loader's message says what it looked for where.
    why="no GPU can be used: $runtime"
    ((without_gpu)) || fail_setup host-libraries "$why"
  elif ((probe_status != 0)) || [[ -z "$gpus" ]] || ((gpus < 1)); then
    why="no GPU found: $(grep -m1 '^REFUSED' <<<"$probe" | sed 's/^REFUSED //')"
    ((without_gpu)) || fail_setup gpus "$why"
  fi
  if [[ -z "$gpus" ]] || ((gpus < 1)); then
    echo "   --without-gpu: going on ($why)"
    gpus=0
  fi
  echo "   world size of the GPU tests: $gpus"
  export RANKD_BIN_DIR="$bin"
  # Everything below requires the GPU: a vanished device fails, never skips.
  ((without_gpu)) || export RANKD_REQUIRE_GPU=1

  # ---- the tests ----------------------------------------------------------------
  # run_gtest NAME SECONDS BINARY [ENV=VALUE...] [--flag...]: one gtest
  # binary (flags passed to it, NAME=VALUE set in its environment), each case
  # recorded (the first line after a skip is its reason).
  run_gtest() {
    local name=$1 limit=$2 binary=$3; shift 3
    local tlog="$logs/$name.log" envs=() args=() a
    for a in "$@"; do  # NAME=VALUE is the environment, the rest the binary's
      if [[ "$a" =~ ^[A-Za-z_][A-Za-z0-9_]*= ]]; then envs+=("$a"); else args+=("$a"); fi
    done
    echo "== $name (at most ${limit} s)"
    env "${envs[@]}" timeout --kill-after=3 "$limit" "$binary" --gtest_color=no \
      "${args[@]}" > "$tlog" 2>&1
    local status=$?
    local -A seen=()
    local cases=0 failed_cases=0 line test reason note=""
    while IFS= read -r line; do
      # Not the "[  FAILED  ] 2 tests, listed below:" totals.
      [[ "$line" =~ ^\[.*\]\ [0-9]+\ tests?,\ listed ]] && continue
      # A case's measured figure (the re-form case's recovery time) goes
      # on its verdict line.
      [[ "$line" =~ ^\[\ RUN ]] && note=""
      [[ "$line" =~ ^RECOVERY_MS\  ]] && note=$line
      if [[ "$line" =~ ^\[\ +(OK|FAILED|SKIPPED)\ +\]\ ([A-Za-z0-9_/.]+)(,|\ \(|$) ]]; then
        test=${BASH_REMATCH[2]}
        [[ -n "${seen[$test]:-}" ]] && continue
        seen[$test]=1
        cases=$((cases + 1))
        case "${BASH_REMATCH[1]}" in
          OK) record PASSED "$name:$test" "$note" ;;
          FAILED) record FAILED "$name:$test" "see $tlog"; failed_cases=$((failed_cases + 1)) ;;
          SKIPPED)
            # gtest prints "<file>: Skipped", the reason, then the SKIPPED
            # line of this very test (with its time).
            reason=$(awk -v t="[  SKIPPED ] $test (" \
              'index($0, t) == 1 { if (prev !~ /^\[/ && prev !~ /: Skipped$/) print prev; exit } { prev = $0 }' "$tlog")
            record SKIPPED "$name:$test" "$reason" ;;
        esac
      fi
    done < "$tlog"
    tail -3 "$tlog" | sed 's/^/   /'
    if ((status == 124 || status == 137)); then
      record FAILED "$name" "timed out after ${limit} s; see $tlog"
    elif ((status != 0)) && ((failed_cases == 0)); then
      record FAILED "$name" "exit status $status; see $tlog"
    elif ((cases == 0)); then
      record FAILED "$name" "ran no test case; see $tlog"
    fi
  }

  # Each limit below is an upper bound for that test alone; on a GPU host
  # they sum to under 540 s (printed here), so one 540 s command runs the
  # whole kit, and a test that hangs fails at its limit, not the run.
  standin="$bin/dataplane/nccl/libcuda_nccl_standin.so"
  conformance="$bin/dataplane/conformance/nccl_conformance_gpu_test"
  if [[ "$one_gpu_ranks" == auto ]]; then
    one_gpu_ranks=none
    ((gpus == 1)) && one_gpu_ranks=2,4
    # Without a GPU the mode's plumbing is checked on one stand-in GPU.
    ((without_gpu)) && one_gpu_ranks=2
  fi
  ((without_gpu)) && with_standin=1
  # nccl_cluster_test with N ranks on one GPU; the re-form case initializes
  # every communicator twice and starts a replacement process. With 4+
  # ranks the domain case (OneReplicaReformsAloneWhileTheOtherSums: the
  # same again for one replica while the other sums on) runs too: 10 s
  # more, and that run leaves out NCCL's duplicate-GPU refusal, which does
  # not depend on the rank count and the 2-rank run checks.
  one_gpu_limit() { echo $((55 + 7 * $1 + ($1 >= 4 ? 10 : 0))); }
  # nccl_cluster_test on one GPU each: with 4+ GPUs the domain case runs
  # too (10 s more; the one-GPU mode does not run on such a host).
  cluster_limit=55
  ((gpus >= 4)) && cluster_limit=65
  budget=$((8 * 4 + 55 + 35 + cluster_limit + 30 + 40 + 40 + 30))
  if [[ "$one_gpu_ranks" != none ]]; then
    for n in ${one_gpu_ranks//,/ }; do
      budget=$((budget + $(one_gpu_limit "$n") + 30))
    done
  fi
  echo "== the GPU tests' time limits sum to ${budget} s (one-GPU mode: $one_gpu_ranks)"

  run_gtest nccl_types_test 8 "$bin/dataplane/nccl/nccl_types_test"
  run_gtest unique_id_broker_test 8 "$bin/dataplane/nccl/unique_id_broker_test"
  run_gtest native_library_test 8 "$bin/dataplane/nccl/native_library_test"
  run_gtest nccl_fail_closed_test 8 "$bin/dataplane/nccl/nccl_fail_closed_test"
  if ((with_standin)); then
    # The CPU twins (what CI runs): the same test binaries against the
    # CUDA/NCCL stand-in the kit carries. They need no GPU. The stand-in
    # always has devices: RANKD_REQUIRE_GPU=1 makes a failure to load it
    # fail rather than skip.
    cliques=$(mktemp -d "${TMPDIR:-/tmp}/rankd-nccl-cliques.XXXXXX")
    run_gtest nccl_standin_test 90 "$bin/dataplane/nccl/nccl_gpu_test" \
      RANKD_CUDART_LIBRARY="$standin" RANKD_NCCL_LIBRARY="$standin" \
      RANKD_REQUIRE_GPU=1
    run_gtest nccl_cluster_standin_test 120 "$bin/tests/gpu/nccl_cluster_test" \
      RANKD_CUDART_LIBRARY="$standin" RANKD_NCCL_LIBRARY="$standin" \
      RANKD_STANDIN_DEVICES=2 RANKD_STANDIN_CLIQUE_DIR="$cliques" \
      RANKD_REQUIRE_GPU=1
    run_gtest capi_nccl_standin_test 120 "$bin/capi/capi_nccl_gpu_test" \
      RANKD_CUDART_LIBRARY="$standin" RANKD_NCCL_LIBRARY="$standin" \
      RANKD_STANDIN_DEVICES=2 RANKD_STANDIN_CLIQUE_DIR="$cliques/capi" \
      RANKD_REQUIRE_GPU=1
    # The conformance case table (dataplane/conformance/) as CI runs it.
    run_gtest nccl_conformance_standin_test 120 "$conformance" \
      RANKD_CUDART_LIBRARY="$standin" RANKD_NCCL_LIBRARY="$standin" \
      RANKD_REQUIRE_GPU=1
    rm -rf "$cliques"
  fi
  run_gtest nccl_gpu_test 55 "$bin/dataplane/nccl/nccl_gpu_test"
  run_gtest nccl_conformance_gpu_test 35 "$conformance"
  run_gtest nccl_cluster_test "$cluster_limit" "$bin/tests/gpu/nccl_cluster_test"
  run_gtest capi_nccl_gpu_test 30 "$bin/capi/capi_nccl_gpu_test"

  # ---- the Python package on PyTorch CUDA tensors ---------------------------------
  # python_check NAME SCRIPT SECONDS: a script of python/tests that prints
  # PASSED, "SKIPPED: why" (no torch, numpy or CUDA in this python3) or
  # "FAILED: why" last, run from the kit's copy of the package.
  python_check() {
    local name=$1 script=$2 limit=$3
    echo "== $name (at most $limit s)"
    local plog="$logs/$name.log"
    if ! command -v python3 >/dev/null; then
      record SKIPPED "$name" "no python3 on PATH"
      return
    fi
    RANKD_LIBRARY="$bin/capi/librankd.so" \
      PYTHONPATH="$python_root:$python_root/tests" \
      timeout --kill-after=5 "$limit" python3 "$python_root/tests/$script" > "$plog" 2>&1
    local status=$?
    local last
    last=$(tail -1 "$plog")
    echo "   $last"
    if ((status == 0)) && [[ "$last" == PASSED ]]; then
      record PASSED "$name"
    elif ((status == 0)) && [[ "$last" == SKIPPED:* ]]; then
      record SKIPPED "$name" "${last#SKIPPED: }"
    else
      record FAILED "$name" "exit status $status: $last; see $plog"
    fi
  }
  # rankd's own Python API on torch CUDA tensors.
  python_check python_torch_nccl torch_nccl.py 40
  # torch.distributed itself, init_method="rankd://", NCCL: 2 ranks on GPU
  # 0 with an NCCL_HOSTID each, all_reduce exact, then one rank killed and
  # the survivor's pending collective ending in seconds, naming it.
  python_check python_torch_dist_nccl torch_dist_nccl.py 40

  # ---- the serving example on NCCL ------------------------------------------------
  # serving_example NAME RANKS SECONDS [ENV=VALUE...]: one node of RANKS
  # serving ranks on NCCL (tools/run.sh), self-checked.
  serving_example() {
    local name=$1 ranks=$2 limit=$3; shift 3
    echo "== serving example on NCCL: 1 node x $ranks ranks (at most ${limit} s)"
    local slog="$logs/$name.log"
    env "$@" RANKD_BIN_DIR="$bin" timeout --kill-after=10 "$limit" bash "$launcher" \
      --backend=nccl --nodes=1 --ranks-per-node="$ranks" --steps=30 > "$slog" 2>&1
    local status=$?
    sed -n '/^== summary/,$p' "$slog" | sed 's/^/   /'
    local check
    check=$(grep -m1 -E '^ +self-check' "$slog" | sed -E 's/^ +//')
    if ((status == 0)) && grep -q 'self-check *PASSED' "$slog"; then
      record PASSED "$name" "$check"
    else
      tail -5 "$slog" | sed 's/^/   /'
      record FAILED "$name" "exit status $status${check:+, $check}; see $slog"
    fi
  }
  if ((gpus == 0)); then
    record SKIPPED "serving_example:nccl" "no GPU (--without-gpu)"
  else
    serving_example "serving_example:nccl_world_$gpus" "$gpus" 30
  fi

  # ---- several ranks on one GPU (the kit's one-GPU mode) ---------------------
  # NCCL refuses two ranks of one communicator on one GPU of one host
  # ("Duplicate GPU detected"); with an NCCL_HOSTID of its own per process
  # it takes them for separate hosts and moves data through its socket
  # transport over loopback: correct, with millisecond latency. Set here,
  # for tests only (tests/gpu/nccl_cluster_test.cc, tools/run.sh).
  if [[ "$one_gpu_ranks" != none ]]; then
    local_filter="*SessionCollectives:*BackendOperations:*LostPeerAbortsRunningCollectives:*BoundedWaitNativeCancelAborts:*BoundedWaitQuarantinesUntilComplete:*InPlaceReformAfterALostRank"
    for n in ${one_gpu_ranks//,/ }; do
      # Below 4 ranks NCCL's duplicate-GPU refusal; from 4 the domain case
      # (one_gpu_limit).
      filter="$local_filter:*RanksSharingAGpuWithoutHostIdsAreRefused"
      ((n >= 4)) && filter="$local_filter:*OneReplicaReformsAloneWhileTheOtherSums"
      one_env=(RANKD_KIT_RANKS_ON_ONE_GPU="$n")
      if ((gpus == 0)); then
        # No GPU (--without-gpu): the stand-in's one GPU instead.
        one_env+=(RANKD_CUDART_LIBRARY="$standin" RANKD_NCCL_LIBRARY="$standin"
                  RANKD_STANDIN_DEVICES=1 RANKD_REQUIRE_GPU=1
                  RANKD_STANDIN_CLIQUE_DIR="$(mktemp -d "${TMPDIR:-/tmp}/rankd-nccl-cliques.XXXXXX")")
      fi
      run_gtest "nccl_cluster_one_gpu_${n}_ranks_test" "$(one_gpu_limit "$n")" \
        "$bin/tests/gpu/nccl_cluster_test" "${one_env[@]}" \
        --gtest_filter="$filter"
      if ((gpus == 0)); then
        rm -rf "${one_env[-1]#*=}"
        record SKIPPED "serving_example:nccl_one_gpu_${n}_ranks" "no GPU (--without-gpu)"
      else
        serving_example "serving_example:nccl_one_gpu_${n}_ranks" "$n" 30 \
          RANKD_KIT_RANKS_ON_ONE_GPU=1
      fi
    done
  fi

  finish
}

main 2>&1 | tee "$log"
exit "${PIPESTATUS[0]}"
