#!/usr/bin/env python3
"""Summarises one scale run (bench/run_scale.sh): one real coordinator
against simulated nodes.

Reads the run's TSV (one row per node count: register and join-to-ready
times, round p50/p99 of the slowest simulated node and of the real ranks,
the coordinator's CPU per round and resident memory; or FAILED with the
phase and error), prints a table, judges it against issue 13's goals for
4096 ranks (join-to-ready under 2 s, round p50 at most 20 ms), draws the
scale curves (--plot, SVG, with Debian's matplotlib when it is installed)
and, with --results, rewrites the section between the BEGIN/END markers of
bench/RESULTS.md.
"""

import argparse
import csv
import os
import sys

import results_md

BEGIN = "<!-- BEGIN scale latest (written by bench/summarize_scale.py) -->"
END = "<!-- END scale latest -->"
GOAL_RANKS = 4096
GOAL_JOIN_MS = 2000
GOAL_ROUND_P50_US = 20000


def read_rows(path):
    rows = []
    with open(path) as f:
        for row in csv.reader(f, delimiter="\t"):
            if row[0] == "nodes":
                continue
            rows.append(row)
    return rows


def plot(rows, path):
    """Round p50 and coordinator CPU per round against the node count."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed (tools/setup.sh --bench); no plot")
        return False
    ok = [r for r in rows if r[2] != "FAILED"]
    if not ok:
        return False
    nodes = [int(r[0]) for r in ok]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.plot(nodes, [float(r[5]) / 1e3 for r in ok], "o-",
              label="slowest simulated node")
    left.plot(nodes, [float(r[7]) / 1e3 for r in ok], "s--",
              label="real ranks of node 0")
    left.axhline(GOAL_ROUND_P50_US / 1e3, color="grey", linestyle=":",
                 label="goal at 4096 ranks")
    left.set_title("all_gather_words round p50 (4-word frames)")
    left.set_ylabel("ms")
    right.plot(nodes, [float(r[9]) / 1e3 for r in ok], "o-")
    right.set_title("coordinator CPU per round")
    right.set_ylabel("ms (user + system)")
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("nodes (8 ranks each)")
        ax.grid(True, alpha=0.3)
    left.legend(fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path)
    print(f"wrote {path}")
    return True


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tsv", required=True)
    p.add_argument("--results")
    p.add_argument("--plot")
    p.add_argument("--meta", action="append", default=[])
    a = p.parse_args()
    rows = read_rows(a.tsv)

    lines = [
        "| nodes | ranks | register ms | join-to-ready ms | coordinator CPU "
        "while joining ms | round p50 ms (slowest node) | round p99 ms | real "
        "ranks' p50 ms | coordinator CPU per round ms | coordinator RSS MiB "
        "(peak) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    verdict = f"goal at {GOAL_RANKS} ranks: not measured"
    for r in rows:
        if r[2] == "FAILED":
            lines.append(f"| {r[0]} | {r[1]} | FAILED while {r[3]} ||||||||")
            if int(r[1]) == GOAL_RANKS:
                verdict = f"goal at {GOAL_RANKS} ranks: NOT MET (failed while {r[3]})"
            continue
        lines.append(
            f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]} | "
            f"{float(r[5]) / 1e3:.2f} | {float(r[6]) / 1e3:.2f} | "
            f"{float(r[7]) / 1e3:.2f} | {float(r[9]) / 1e3:.2f} | "
            f"{r[10]} ({r[11]}) |")
        if int(r[1]) == GOAL_RANKS:
            met = (float(r[3]) < GOAL_JOIN_MS and
                   float(r[5]) <= GOAL_ROUND_P50_US)
            verdict = (f"goal at {GOAL_RANKS} ranks (join-to-ready < "
                       f"{GOAL_JOIN_MS} ms, round p50 <= "
                       f"{GOAL_ROUND_P50_US / 1e3:g} ms): "
                       f"{'MET' if met else 'NOT MET'}")
    print("\n".join(lines))
    for r in rows:
        if r[2] == "FAILED":
            print(f"{r[0]} nodes failed while {r[3]}")
    print(verdict)
    drawn = plot(rows, a.plot) if a.plot else False
    if not a.results:
        return 0

    section, _ = results_md.latest_head(BEGIN, a.meta)
    section += lines
    errors = [f"- {r[0]} nodes, while {r[3]}" for r in rows if r[2] == "FAILED"]
    if errors:
        section += ["", "Failures:", ""] + errors
    section += [
        "",
        "Register: every simulated node's RegisterNode and Subscribe. "
        "Join-to-ready: first JoinRank sent until the last rank's answer "
        "(it answers once the whole world joined); the coordinator's CPU "
        "is its user + system time meanwhile. Round: per timed round, "
        "the slowest simulated node's latency from sending its "
        "contribution to receiving the outcome. Coordinator CPU: user + "
        "system of the coordinator process over the timed rounds, per "
        "round. Every process shares this machine's cores.",
        "",
    ]
    if drawn:
        rel = os.path.relpath(a.plot, os.path.dirname(a.results) or ".")
        section += [f"![round p50 and coordinator CPU per round against "
                    f"the node count]({rel})", ""]
    section += [f"**{verdict}**", "", END]
    results_md.update(a.results, lambda text: results_md.replace_section(
        text, BEGIN, END, "\n".join(section),
        "## Scale: one coordinator, many simulated nodes\n\n"))
    print(f"updated {a.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
