#!/usr/bin/env bash
# Recovery at 8 ranks (issue 38, part 6): in-place recovery against a full
# restart of the whole group, measured in the same run on the main job
# (tools/run.sh, examples/serving, 2 nodes x 4 ranks, Gloo).
#
# Each repeat runs, alternating (in place first in odd repeats, the full
# restart first in even ones, so that neither always follows the other):
#   in place      tools/run.sh --kill-rank=R --at-step=S --recover
#                 (rankrun restarts rank R alone; the survivors keep their
#                 processes and shards and re-form at epoch 2)
#   full restart  tools/run.sh --kill-rank=R --at-step=S --full-restart
#                 (the job fails; every daemon and rank is stopped and
#                 started again, as LeaderWorkerSet's
#                 RecreateGroupOnPodRestart does, serving on from step S)
# and prints, per repeat, loss -> serving again and its phases for both,
# then their medians and the ratio in place / full restart. Each run must
# exit 0 (every step self-checked; nothing left running), or the bench
# fails. Neither figure includes an orchestrator's own reaction (a pod's
# rescheduling) or a real model's load: the example's shard is generated
# from a seed in milliseconds, so the full restart here is a lower bound
# of a real one.
#
# usage: bench/run_recovery.sh [--repeat=3] [--kill-rank=5] [--at-step=10]
#          [--steps=20] [--skip_build]
# Builds with -c opt (bazel) unless --skip_build and RANKD_BIN_DIR are
# given; writes no results file (bench/RESULTS.md, "Recovery at 8 ranks",
# is written by hand from its output).
set -euo pipefail
cd "$(dirname "$0")/.."

repeat=3 kill_rank=5 at_step=10 steps=20 skip_build=0
for arg in "$@"; do
  case "$arg" in
    --repeat=*) repeat="${arg#*=}" ;;
    --kill-rank=*) kill_rank="${arg#*=}" ;;
    --at-step=*) at_step="${arg#*=}" ;;
    --steps=*) steps="${arg#*=}" ;;
    --skip_build) skip_build=1 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "run_recovery.sh: unknown option $arg" >&2; exit 2 ;;
  esac
done
[[ "$repeat" =~ ^[1-9][0-9]*$ ]] || { echo "run_recovery.sh: --repeat=$repeat" >&2; exit 2; }

if ((!skip_build)) || [[ -z "${RANKD_BIN_DIR:-}" ]]; then
  tools/setup.sh >/dev/null
  bazel build -c opt //daemon:rankd //client:rankctl //examples:serving \
    //launcher:rankrun >/dev/null 2>&1 ||
    { echo "run_recovery.sh: build failed (bazel build -c opt ...)" >&2; exit 1; }
  RANKD_BIN_DIR=$(bazel info -c opt bazel-bin 2>/dev/null)
fi
export RANKD_BIN_DIR

out=$(mktemp -d /tmp/rankd-recovery-bench-XXXXXX)
trap 'rm -rf "$out"' EXIT
common=(--nodes=2 --ranks-per-node=4 --steps="$steps" --kill-rank="$kill_rank"
        --at-step="$at_step")

# One run of tools/run.sh; prints "total phase1 phase2 ..." in ms from its
# summary, or fails the bench with the run's tail.
measure() {  # mode (recover|full-restart) log
  local mode=$1 log=$2
  if ! tools/run.sh "${common[@]}" --"$mode" >"$log" 2>&1; then
    echo "run_recovery.sh: tools/run.sh --$mode failed:" >&2
    tail -20 "$log" >&2
    exit 1
  fi
  awk '/serving again after/ { for (i = 1; i <= NF; i++) if ($i == "after") t = $(i + 1) }
       /^   [a-z -]+ +[0-9.]+ ms  / { sub(/^ +/, ""); n = split($0, f, / +/);
                                    for (i = 1; i <= n; i++) if (f[i] == "ms") { p = p " " f[i - 1]; break } }
       END { print t p }' "$log"
}

echo "== recovery at 8 ranks (2 nodes x 4), kill -9 rank $kill_rank at step $at_step of $steps; $repeat repeats; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
inplace=() full=()
for ((i = 1; i <= repeat; i++)); do
  order=(recover full-restart)
  ((i % 2 == 0)) && order=(full-restart recover)
  for mode in "${order[@]}"; do
    line=$(measure "$mode" "$out/$mode.$i.log")
    if [[ "$mode" == recover ]]; then
      inplace+=("$line")
      read -r t a b c d <<<"$line"
      echo "   $i in place     ${t} ms  (detect $a, replace $b, re-form $c, first step $d)"
    else
      full+=("$line")
      read -r t a b c d e f <<<"$line"
      echo "   $i full restart ${t} ms  (detect $a, exit $b, stop $c, daemons $d, ranks $e, first step $f)"
    fi
  done
done
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
totals_in=() totals_full=()
for l in "${inplace[@]}"; do totals_in+=("${l%% *}"); done
for l in "${full[@]}"; do totals_full+=("${l%% *}"); done
m_in=$(median "${totals_in[@]}") m_full=$(median "${totals_full[@]}")
ratio=$(awk -v a="$m_in" -v b="$m_full" 'BEGIN { printf "%.2f", a / b }')
echo "== median loss -> serving again: in place $m_in ms, full restart $m_full ms; in place / full restart = $ratio (goal <= 0.10)"
echo "   command: bench/run_recovery.sh --repeat=$repeat --kill-rank=$kill_rank --at-step=$at_step --steps=$steps"
