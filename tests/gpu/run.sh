#!/usr/bin/env bash
# Runs every NCCL test of rankd and the serving example on NCCL, on a
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
#
# Before any test it finds libcudart.so.13 (or .12) and libnccl.so.2 where
# GPU hosts have them: $RANKD_CUDART_LIBRARY / $RANKD_NCCL_LIBRARY,
# LD_LIBRARY_PATH, the NVIDIA wheel folders of python3's site-packages,
# /usr/local/cuda/lib64 (and lib/, targets/x86_64-linux/lib/), the loader's
# cache; then prints the GPUs, the driver, the CUDA runtime and NCCL that
# will run. No GPU, or no library found, fails with what was looked for
# where. Tests that need more GPUs than are visible skip, saying so.
#
# Output: DIR/run.log (everything), DIR/summary.txt (one line per test
# case: PASSED, FAILED or SKIPPED with the reason), DIR/<test>.log. The
# last line is "N passed, M failed, K skipped"; the exit status is 0 only
# when nothing failed.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"

kit="" out="" mode=auto without_gpu=0
for arg in "$@"; do
  case "$arg" in
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
  [[ -n "$out" ]] || out="$kit/../gpu-out"
else
  root="$(cd "$here/../.." && pwd)"
  source "$here/kit_contents.sh"
  launcher="$root/tools/run.sh"
  [[ -n "$out" ]] || out="$root/build/gpu-out"
fi
mkdir -p "$out" || { echo "run.sh: cannot create $out" >&2; exit 2; }
out="$(cd "$out" && pwd)"
log="$out/run.log" summary="$out/summary.txt"
: > "$summary"
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

  # ---- the host's CUDA runtime and NCCL ---------------------------------------
  searched=()
  candidate_dirs() {
    local d
    IFS=: read -r -a ld <<<"${LD_LIBRARY_PATH:-}"
    for d in "${ld[@]}"; do [[ -n "$d" ]] && echo "$d"; done
    if command -v python3 >/dev/null; then
      python3 - <<'PY' 2>/dev/null
import glob, os, site, sys
roots = list(site.getsitepackages()) + [site.getusersitepackages()]
for root in roots:
    for sub in ("cu13", "cu12", "cuda_runtime", "nccl"):
        d = os.path.join(root, "nvidia", sub, "lib")
        if os.path.isdir(d):
            print(d)
PY
    fi
    for d in "${CUDA_HOME:-/usr/local/cuda}"/{lib64,lib,targets/x86_64-linux/lib} \
             /usr/local/cuda/{lib64,lib,targets/x86_64-linux/lib} /usr/lib/x86_64-linux-gnu; do
      echo "$d"
    done
  }
  find_library() {  # find_library VAR SONAME... : sets VAR to the first file found
    local var=$1 d s; shift
    if [[ -n "${!var:-}" && -f "${!var}" ]]; then return 0; fi
    while read -r d; do
      searched+=("$d")
      for s in "$@"; do
        if [[ -f "$d/$s" ]]; then printf -v "$var" '%s' "$d/$s"; return 0; fi
      done
    done < <(candidate_dirs | awk '!seen[$0]++')
    for s in "$@"; do
      local cached
      cached=$(ldconfig -p 2>/dev/null | awk -v s="$s" '$1 == s { print $NF; exit }')
      if [[ -n "$cached" ]]; then printf -v "$var" '%s' "$cached"; return 0; fi
    done
    return 1
  }
  echo "== CUDA runtime and NCCL of this host"
  if ! find_library RANKD_CUDART_LIBRARY libcudart.so.13 libcudart.so.12; then
    fail_setup host-libraries "no GPU can be used: no CUDA runtime found: no libcudart.so.13 or libcudart.so.12 in \$RANKD_CUDART_LIBRARY, $(printf '%s, ' "${searched[@]}" | awk '!seen[$0]++' | sed 's/, $//') or the loader cache (ldconfig -p); install the CUDA runtime (e.g. pip install nvidia-cuda-runtime) or set RANKD_CUDART_LIBRARY"
  fi
  searched=()
  if ! find_library RANKD_NCCL_LIBRARY libnccl.so.2; then
    fail_setup host-libraries "no GPU can be used: no NCCL found: no libnccl.so.2 in \$RANKD_NCCL_LIBRARY, $(printf '%s, ' "${searched[@]}" | sed 's/, $//') or the loader cache (ldconfig -p); install NCCL (e.g. pip install nvidia-nccl-cu13) or set RANKD_NCCL_LIBRARY"
  fi
  export RANKD_CUDART_LIBRARY RANKD_NCCL_LIBRARY
  echo "   libcudart: $RANKD_CUDART_LIBRARY"
  echo "   libnccl:   $RANKD_NCCL_LIBRARY"

  # ---- the GPUs ------------------------------------------------------------------
  echo "== GPUs"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader 2>&1 | sed 's/^/   nvidia-smi: /'
  fi
  [[ -n "${CUDA_VISIBLE_DEVICES:-}" ]] && echo "   CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"
  # The serving binary reports what rankd itself loads and sees.
  probe=$("$bin/examples/serving" --backend=nccl --probe_backend 2>&1)
  probe_status=$?
  echo "$probe" | sed 's/^/   /'
  gpus=$(sed -nE 's/^BACKEND_OK nccl devices=([0-9]+).*/\1/p' <<<"$probe")
  if ((probe_status != 0)) || [[ -z "$gpus" ]] || ((gpus < 1)); then
    why="no GPU found: $(grep -m1 '^REFUSED' <<<"$probe" | sed 's/^REFUSED //')"
    ((without_gpu)) || fail_setup gpus "$why"
    echo "   --without-gpu: going on ($why)"
    gpus=0
  fi
  echo "   world size of the GPU tests: $gpus"
  export RANKD_BIN_DIR="$bin"
  # Everything below requires the GPU: a vanished device fails, never skips.
  ((without_gpu)) || export RANKD_REQUIRE_GPU=1

  # ---- the tests ----------------------------------------------------------------
  # run_gtest NAME SECONDS BINARY [ENV=VALUE...]: one gtest binary, each case
  # recorded (the first line after a skip is its reason).
  run_gtest() {
    local name=$1 limit=$2 binary=$3; shift 3
    local tlog="$out/$name.log"
    echo "== $name (at most ${limit} s)"
    env "$@" timeout --kill-after=10 "$limit" "$binary" --gtest_color=no > "$tlog" 2>&1
    local status=$?
    local -A seen=()
    local cases=0 line test reason
    while IFS= read -r line; do
      if [[ "$line" =~ ^\[\ +(OK|FAILED|SKIPPED)\ +\]\ ([A-Za-z0-9_/.]+)(\ \(|$) ]]; then
        test=${BASH_REMATCH[2]}
        [[ -n "${seen[$test]:-}" ]] && continue
        seen[$test]=1
        cases=$((cases + 1))
        case "${BASH_REMATCH[1]}" in
          OK) record PASSED "$name:$test" ;;
          FAILED) record FAILED "$name:$test" "see $tlog" ;;
          SKIPPED)
            reason=$(grep -B1 -F "[  SKIPPED ] $test" "$tlog" | head -1)
            [[ "$reason" == "[ RUN"* || "$reason" == *"Skipped"* ]] && reason=""
            [[ -z "$reason" ]] && reason=$(grep -A1 -E ": Skipped$" "$tlog" | grep -v -E ': Skipped$|^--$' | head -1)
            record SKIPPED "$name:$test" "$reason" ;;
        esac
      fi
    done < "$tlog"
    tail -3 "$tlog" | sed 's/^/   /'
    if ((status == 124 || status == 137)); then
      record FAILED "$name" "timed out after ${limit} s; see $tlog"
    elif ((status != 0)) && ! grep -q '^\[  FAILED  \]' "$tlog"; then
      record FAILED "$name" "exit status $status; see $tlog"
    elif ((cases == 0)); then
      record FAILED "$name" "ran no test case; see $tlog"
    fi
  }

  run_gtest nccl_types_test 30 "$bin/dataplane/nccl/nccl_types_test"
  run_gtest unique_id_broker_test 30 "$bin/dataplane/nccl/unique_id_broker_test"
  run_gtest native_library_test 30 "$bin/dataplane/nccl/native_library_test"
  run_gtest nccl_fail_closed_test 30 "$bin/dataplane/nccl/nccl_fail_closed_test"
  run_gtest nccl_cluster_dry_run_test 60 "$bin/tests/gpu/nccl_cluster_test" \
    RANKD_NCCL_CLUSTER_DRY_RUN=1
  run_gtest nccl_gpu_test 90 "$bin/dataplane/nccl/nccl_gpu_test"
  run_gtest nccl_cluster_test 120 "$bin/tests/gpu/nccl_cluster_test"

  # ---- the serving example on NCCL ------------------------------------------------
  if ((gpus == 0)); then
    record SKIPPED "serving_example:nccl" "no GPU (--without-gpu)"
  else
    echo "== serving example on NCCL: 1 node x $gpus ranks (self-checked)"
    slog="$out/serving_example.log"
    RANKD_BIN_DIR="$bin" timeout --kill-after=10 120 bash "$launcher" \
      --backend=nccl --nodes=1 --ranks-per-node="$gpus" --steps=30 > "$slog" 2>&1
    status=$?
    sed -n '/^== summary/,$p' "$slog" | sed 's/^/   /'
    check=$(grep -m1 -E '^ +self-check' "$slog" | sed -E 's/^ +//')
    if ((status == 0)) && grep -q 'self-check *PASSED' "$slog"; then
      record PASSED "serving_example:nccl_world_$gpus" "$check"
    else
      tail -5 "$slog" | sed 's/^/   /'
      record FAILED "serving_example:nccl_world_$gpus" "exit status $status${check:+, $check}; see $slog"
    fi
  fi

  finish
}

main 2>&1 | tee "$log"
exit "${PIPESTATUS[0]}"
