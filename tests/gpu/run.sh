#!/usr/bin/env bash
# Builds and runs every NCCL test of rankd on a machine with one or more
# GPUs, with world size = number of GPUs (1 works), and prints a summary.
# Meant to finish in under 5 minutes on a fresh 16-core machine.
#
#   tests/gpu/run.sh                # everything
#   tests/gpu/run.sh --no-build     # reuse what is built
#   CUDA_VISIBLE_DEVICES=0 tests/gpu/run.sh   # world size 1
#
# What runs (see docs/nccl.md):
#   //dataplane/nccl:nccl_types_test, :unique_id_broker_test,
#   :nccl_fail_closed_test        no GPU needed (run anyway)
#   //dataplane/nccl:nccl_gpu_test  CUDA handles, one-rank world, bounded
#                                   waits, job-failure aborts, init deadline;
#                                   one thread per GPU when there are 2+
#   //tests/gpu:nccl_cluster_test   one worker process per GPU through real
#                                   rankd daemons: every session and backend
#                                   operation, bounded waits, lost-peer aborts
#   //tests/gpu:nccl_cluster_dry_run_test   the same orchestration, no GPU
# The GPU tests get RANKD_REQUIRE_GPU=1, so on this machine "no device"
# fails instead of skipping. Exit status 0 only when nothing failed.
set -uo pipefail
cd "$(dirname "$0")/../.."

build=1
for arg in "$@"; do
  case "$arg" in
    --no-build) build=0 ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown option $arg (see --help)" >&2; exit 2 ;;
  esac
done

start=$(date +%s)
if ! command -v bazel >/dev/null; then
  echo "run.sh: bazel is not installed (Debian: bazel-bootstrap; see tools/setup.sh)" >&2
  exit 2
fi

gpus="unknown"
if command -v nvidia-smi >/dev/null; then
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
  echo "== $(nvidia-smi -L 2>/dev/null | head -8 | tr '\n' ';')"
fi
if [[ -n "${CUDA_VISIBLE_DEVICES:-}" ]]; then
  echo "== CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"
fi
echo "== GPUs: $gpus (world size of the GPU tests = number of visible GPUs)"

cpus=$(nproc 2>/dev/null || echo 2)
flags=(
  --jobs="$cpus" --local_cpu_resources=HOST_CPUS
  --test_output=errors --test_summary=terse
  --test_env=RANKD_REQUIRE_GPU=1
  --test_env=CUDA_VISIBLE_DEVICES --test_env=LD_LIBRARY_PATH
  --test_env=NCCL_DEBUG --test_env=NCCL_SOCKET_IFNAME
  --test_env=NCCL_P2P_DISABLE --test_env=NCCL_SHM_DISABLE
  --test_timeout=60,240,280,300
)
unit=(//dataplane/nccl:nccl_types_test //dataplane/nccl:unique_id_broker_test
      //dataplane/nccl:nccl_fail_closed_test
      //tests/gpu:nccl_cluster_dry_run_test)
gpu=(//dataplane/nccl:nccl_gpu_test //tests/gpu:nccl_cluster_test)

if ((build)); then
  echo "== building (bazel, $cpus jobs)"
  if ! bazel build "${flags[@]}" "${unit[@]}" "${gpu[@]}"; then
    echo "run.sh: build failed"
    echo "0 passed, 1 failed"
    exit 1
  fi
fi
config=$(bazel info output_base 2>/dev/null)/external/local_cuda/local_cuda_config.h
if [[ -f "$config" ]]; then
  echo "== @local_cuda: $(grep -E 'RANKD_(HAVE_CUDA|CUDA_HOME|NCCL_BUILD_VERSION|CUDA_UNAVAILABLE_REASON) ' "$config" | sed 's/#define //' | tr '\n' ' ')"
fi

echo "== tests that need no GPU"
bazel test "${flags[@]}" "${unit[@]}"
echo "== GPU tests (one at a time: they share the GPUs)"
bazel test "${flags[@]}" --local_test_jobs=1 "${gpu[@]}"

echo
echo "== summary"
testlogs=$(bazel info bazel-testlogs 2>/dev/null)
failed=0
for t in "${unit[@]}" "${gpu[@]}"; do
  line=$(python3 tools/count_results.py "$testlogs" "$t" 2>/dev/null | tail -1)
  printf '  %-46s %s\n' "$t" "$line"
  rel=${t#//}
  rel=${rel/://}
  grep -h -A1 -E '^\[  SKIPPED \]|: Skipped$' "$testlogs/$rel/test.log" 2>/dev/null \
    | grep -v -E '^\[|^--$|Skipped$' | sort -u | head -3 | sed 's/^/      skipped: /'
done
python3 tools/count_results.py "$testlogs" "${unit[@]}" "${gpu[@]}" | tail -1 > /tmp/rankd_nccl_total.$$
status=$?
total=$(cat /tmp/rankd_nccl_total.$$); rm -f /tmp/rankd_nccl_total.$$
echo "  TOTAL: $total  ($(( $(date +%s) - start )) s)"
[[ "$total" == *" 0 failed"* ]] || failed=1
((status != 0)) && failed=1
exit $failed
