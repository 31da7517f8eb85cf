#!/usr/bin/env python3
"""Summarises one all_gather_words benchmark run (bench/run_allgather_words.sh).

Reads <dir>/rankd.rank<R>.txt and <dir>/torch.rank<R>.txt ("# header", then
"<start_ns> <end_ns>" per timed round), and when present the physical
floor's <dir>/floor_unix.rank0.txt and <dir>/floor_futex.rank0.txt (two
processes, bench/floor_pingpong.cc), computes round latency for every
system the same way, prints a table, and (with --results) rewrites the
section between the BEGIN/END markers of bench/RESULTS.md and appends a row
to its history table. With --plot, also draws the round-latency
distributions of every system (a CDF per system, SVG) with Debian's
matplotlib (tools/setup.sh --bench); everything else is standard library.

Aggregation (identical for both systems):
  * round latency (primary): for each timed round, the slowest rank's
    latency for that round, max over ranks of (end - start): when the round
    is complete as seen by every rank;
  * per-rank (secondary): every rank's per-round latency pooled together.
Percentiles are nearest-rank: the ceil(q/100 * n)-th smallest sample.
"""

import argparse
import glob
import math
import os
import re
import sys

import results_md

BEGIN = "<!-- BEGIN allgather_words latest (written by bench/summarize.py) -->"
END = "<!-- END allgather_words latest -->"
HIST_BEGIN = "<!-- BEGIN allgather_words history -->"
HIST_END = "<!-- END allgather_words history -->"


def load(dirname, system):
    """Returns ({rank: [(start_ns, end_ns)]}, {header field: sum over ranks})."""
    files = glob.glob(os.path.join(dirname, f"{system}.rank*.txt"))
    ranks = {}
    totals = {}
    for path in files:
        m = re.search(r"\.rank(\d+)\.txt$", path)
        rows = []
        with open(path) as f:
            for line in f:
                if line.startswith("#"):
                    for k, v in re.findall(r"(cpu_us|vcsw|ivcsw)=(\d+)", line):
                        totals[k] = totals.get(k, 0) + int(v)
                    continue
                if not line.strip():
                    continue
                a, b = line.split()
                rows.append((int(a), int(b)))
        ranks[int(m.group(1))] = rows
    return ranks, totals


def pct(sorted_values, q):
    n = len(sorted_values)
    k = min(max(math.ceil(q / 100.0 * n), 1), n)
    return sorted_values[k - 1]


def stats(loaded, world, rounds):
    ranks, totals = loaded
    if sorted(ranks) != list(range(world)):
        raise SystemExit(f"expected ranks 0..{world - 1}, found {sorted(ranks)}")
    for r, rows in ranks.items():
        if len(rows) != rounds:
            raise SystemExit(f"rank {r}: {len(rows)} rounds, expected {rounds}")
    per_round = sorted(
        max(ranks[r][i][1] - ranks[r][i][0] for r in range(world)) / 1000.0
        for i in range(rounds))
    pooled = sorted((b - a) / 1000.0 for rows in ranks.values() for a, b in rows)
    first = min(rows[0][0] for rows in ranks.values())
    last = max(rows[-1][1] for rows in ranks.values())
    return {
        "p50": pct(per_round, 50), "p99": pct(per_round, 99),
        "mean": sum(per_round) / len(per_round), "max": per_round[-1],
        "rank_p50": pct(pooled, 50), "rank_p99": pct(pooled, 99),
        "rounds_per_s": rounds / ((last - first) / 1e9),
        "rank_cpu_us": totals.get("cpu_us", 0) / rounds,
        "csw": (totals.get("vcsw", 0) + totals.get("ivcsw", 0)) / rounds,
        "per_round": per_round,
    }


# Curve labels in the plot, by system.
PLOT_LABELS = {
    "rankd": "rankd all_gather_words",
    "torch": "torch.distributed (Gloo) all_gather",
    "floor_unix": "floor: Unix socket ping-pong",
    "floor_futex": "floor: futex ping-pong",
    "floor_spin": "floor: busy-poll ping-pong",
}


def plot(res, path, title):
    """Draws each system's round-latency CDF into `path` (SVG); returns
    whether it could (matplotlib may be missing)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed (tools/setup.sh --bench); no plot")
        return False
    fig, ax = plt.subplots(figsize=(7, 4))
    for key, label in PLOT_LABELS.items():
        if key not in res:
            continue
        v = [max(x, 0.05) for x in res[key]["per_round"]]
        ax.plot(v, [(i + 1) / len(v) for i in range(len(v))],
                label=f"{label} (p50 {res[key]['p50']:.1f} µs)")
    ax.set_xscale("log")
    ax.set_xlabel("round latency, µs (log scale)")
    ax.set_ylabel("fraction of rounds")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path)
    print(f"wrote {path}")
    return True


def fmt(x):
    return f"{x:.1f}"


# The floors' names in tables, by file prefix.
FLOOR_NAMES = {
    "floor_unix": "floor: Unix socketpair ping-pong (2 processes)",
    "floor_futex": "floor: shared-memory futex ping-pong (2 processes)",
    "floor_spin": "floor: shared-memory busy-poll ping-pong (2 processes)",
}


def table(res):
    r, t = res["rankd"], res["torch"]
    lines = [
        "| system | round p50 µs | round p99 µs | round mean µs | round max µs "
        "| per-rank p50 µs | per-rank p99 µs | rounds/s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    rows = [("rankd all_gather_words", r),
            ("torch.distributed gloo all_gather", t)]
    rows += [(FLOOR_NAMES[k], res[k]) for k in FLOOR_NAMES if k in res]
    for name, s in rows:
        lines.append(
            f"| {name} | {fmt(s['p50'])} | {fmt(s['p99'])} | {fmt(s['mean'])} "
            f"| {fmt(s['max'])} | {fmt(s['rank_p50'])} | {fmt(s['rank_p99'])} "
            f"| {s['rounds_per_s']:.0f} |")
    lines.append(
        f"| **ratio rankd / torch** | **{r['p50'] / t['p50']:.2f}** "
        f"| **{r['p99'] / t['p99']:.2f}** | {r['mean'] / t['mean']:.2f} "
        f"| {r['max'] / t['max']:.2f} | {r['rank_p50'] / t['rank_p50']:.2f} "
        f"| {r['rank_p99'] / t['rank_p99']:.2f} "
        f"| {r['rounds_per_s'] / t['rounds_per_s']:.2f} |")
    for k in FLOOR_NAMES:
        if k not in res:
            continue
        f = res[k]
        lines.append(
            f"| ratio rankd / {k.replace('_', ' ')} | {r['p50'] / f['p50']:.1f} "
            f"| {r['p99'] / f['p99']:.1f} | {r['mean'] / f['mean']:.1f} "
            f"| {r['max'] / f['max']:.1f} | | | |")
    return "\n".join(lines)


def cpu_table(res, daemon_us):
    r, t = res["rankd"], res["torch"]
    ncpu = os.cpu_count() or 1
    lines = [
        "| system | rank processes | daemons | total | total / CPUs "
        "| round period (1 / rounds per s) | context switches / round (ranks) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, s, d in (("rankd", r, daemon_us), ("torch", t, 0.0)):
        tot = s["rank_cpu_us"] + d
        lines.append(
            f"| {name} | {fmt(s['rank_cpu_us'])} | {fmt(d) if name == 'rankd' else '-'} "
            f"| {fmt(tot)} | {fmt(tot / ncpu)} | {fmt(1e6 / s['rounds_per_s'])} "
            f"| {s['csw']:.0f} |")
    return "\n".join(lines)


def layout_goals(layout):
    """Issue 13's goal for a layout "NxM": (p50 ratio, p99 ratio or None)."""
    return {"1x2": (0.1, 0.1), "2x1": (0.5, None), "1x8": (0.05, None),
            "4x4": (0.05, None)}.get(layout, (0.25, None))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--rounds", type=int, required=True)
    p.add_argument("--results", help="bench/RESULTS.md to update")
    p.add_argument("--meta", action="append", default=[],
                   help="KEY=VALUE lines for the results section, in order")
    p.add_argument("--daemon_cpu_us", type=int, default=0,
                   help="CPU time the daemons used while the ranks ran")
    p.add_argument("--coordinator_cpu_us", type=int, default=0,
                   help="of which the coordinator (the first daemon)")
    p.add_argument("--daemon_rounds", type=int, default=0,
                   help="rounds (warmup included) that CPU time covers")
    p.add_argument("--goal", type=float, default=None,
                   help="goal for the p50 ratio rankd/torch (default: the "
                   "layout's goal from issue 13, else 0.25)")
    p.add_argument("--plot", help="SVG file for the latency distributions")
    a = p.parse_args()

    res = {s: stats(load(a.dir, s), a.world, a.rounds) for s in ("rankd", "torch")}
    for k in FLOOR_NAMES:
        if os.path.exists(os.path.join(a.dir, f"{k}.rank0.txt")):
            res[k] = stats(load(a.dir, k), 1, a.rounds)
    daemon_us = a.daemon_cpu_us / a.daemon_rounds if a.daemon_rounds else 0.0
    coordinator_us = (a.coordinator_cpu_us / a.daemon_rounds
                      if a.daemon_rounds else 0.0)
    ratio50 = res["rankd"]["p50"] / res["torch"]["p50"]
    ratio99 = res["rankd"]["p99"] / res["torch"]["p99"]
    meta = dict(m.split("=", 1) for m in a.meta if "=" in m)
    lm = re.match(r"(\d+) daemons x (\d+) ranks", meta.get("layout", ""))
    goal50, goal99 = layout_goals(lm.group(1) + "x" + lm.group(2)
                                  if lm else "")
    if a.goal is not None:
        goal50, goal99 = a.goal, None
    goal_met = ratio50 <= goal50 and (goal99 is None or ratio99 <= goal99)
    wanted = f"rankd p50 <= {goal50:g} x torch p50"
    if goal99 is not None:
        wanted += f", p99 <= {goal99:g} x torch p99"
    verdict = (f"goal ({wanted}): {'MET' if goal_met else 'NOT MET'} "
               f"(ratios {ratio50:.2f} p50, {ratio99:.2f} p99)")

    print(f"{'system':<36}{'p50 µs':>10}{'p99 µs':>10}")
    print(f"{'rankd all_gather_words':<36}{fmt(res['rankd']['p50']):>10}"
          f"{fmt(res['rankd']['p99']):>10}")
    print(f"{'torch.distributed gloo all_gather':<36}"
          f"{fmt(res['torch']['p50']):>10}{fmt(res['torch']['p99']):>10}")
    print(f"{'ratio rankd/torch':<36}{ratio50:>10.2f}{ratio99:>10.2f}")
    for k in FLOOR_NAMES:
        if k in res:
            print(f"{k + ' (2 processes)':<36}{fmt(res[k]['p50']):>10}"
                  f"{fmt(res[k]['p99']):>10}")
            print(f"{'ratio rankd/' + k:<36}"
                  f"{res['rankd']['p50'] / res[k]['p50']:>10.1f}"
                  f"{res['rankd']['p99'] / res[k]['p99']:>10.1f}")
    print("(round latency: per round, the slowest rank's latency)")
    print(f"CPU per round, all processes: rankd "
          f"{fmt(res['rankd']['rank_cpu_us'] + daemon_us)} µs "
          f"(ranks {fmt(res['rankd']['rank_cpu_us'])}, daemons {fmt(daemon_us)}, "
          f"of which the coordinator {fmt(coordinator_us)}), "
          f"torch {fmt(res['torch']['rank_cpu_us'])} µs")
    print(verdict)
    drawn = a.plot and plot(
        res, a.plot, "all_gather_words round latency, " +
        (f"{lm.group(1)} daemons x {lm.group(2)} ranks" if lm
         else f"{a.world} ranks"))

    if not a.results:
        return 0
    section, md = results_md.latest_head(BEGIN, a.meta)
    section += [
        table(res),
        "",
        "Round latency = for each timed round, the maximum over all ranks of "
        "that rank's call latency (the round as completed for the slowest "
        "rank); per-rank = all ranks' call latencies pooled. Nearest-rank "
        "percentiles. Same method for both systems. The floor rows are two "
        "processes passing the same frame there and back with nothing in "
        "between (bench/floor_pingpong.cc): what a Unix-socket round trip "
        "and a shared-memory futex hand-off cost on this machine; "
        "\"ratio rankd / floor\" says how far a rankd round is above them.",
        "",
        "CPU time per timed round, µs, summed over processes (user + "
        "system, every thread; rank processes from getrusage over the timed "
        "rounds, daemons from /proc/PID/stat over the ranks' whole run "
        "divided by warmup + timed rounds). When total / CPUs is close to "
        "the round period the run is CPU-bound: latency is then set by how "
        "much CPU one round costs, not by the network.",
        "",
        cpu_table(res, daemon_us),
        "",
    ]
    if drawn:
        rel = os.path.relpath(a.plot, os.path.dirname(a.results) or ".")
        section += [f"![round-latency distributions of rankd, torch and the "
                    f"floor]({rel})", ""]
    section += [
        f"**{verdict}**",
        "",
        END,
    ]
    lm = re.match(r"(\d+) daemons x (\d+) ranks", md.get("layout", ""))
    layout = f"{lm.group(1)}x{lm.group(2)}" if lm else f"{a.world} ranks"
    row = (f"| {md.get('date', '?')} | {md.get('machine', '?')} | {layout} "
           f"| {a.rounds} | {fmt(res['rankd']['p50'])} "
           f"| {fmt(res['rankd']['p99'])} | {fmt(res['torch']['p50'])} "
           f"| {fmt(res['torch']['p99'])} | {ratio50:.2f} | {ratio99:.2f} "
           f"| {md.get('note', '')} |")

    new_table = ("### History\n\n" + HIST_BEGIN + "\n"
                 "| date | machine | layout | rounds | rankd p50 µs "
                 "| rankd p99 µs | torch p50 µs | torch p99 µs | p50 ratio "
                 "| p99 ratio | note |\n"
                 "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|\n")
    results_md.update(a.results, lambda text: results_md.append_history_row(
        results_md.replace_section(text, BEGIN, END, "\n".join(section)),
        HIST_BEGIN, HIST_END, row, new_table))
    print(f"updated {a.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
