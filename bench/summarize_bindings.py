#!/usr/bin/env python3
"""Summarizes bench/run_bindings.sh: per binding and layout, the median over
blocks of each block's p50 (and p99) latency of a small all_reduce_sum, and
the overhead over the C++ API (p50 minus C++'s p50, same layout, same run),
against the goals of issue 12 (C and Rust at most 2 us, Python at most
15 us). Prints the table; with a RESULTS path, rewrites the section between
the "bindings" markers of that file (appending it the first time).

Usage: summarize_bindings.py LINES RESULTS|"" COMMAND LOAD_BEFORE
LINES holds "block B BINDING name world W ops N p50_ns X p99_ns Y mean_ns Z".
Standard library only.
"""
import datetime
import os
import statistics
import sys

import results_md

BEGIN = "<!-- BEGIN bindings -->"
END = "<!-- END bindings -->"
ORDER = ["cpp", "c", "python", "rust"]
NAMES = {"cpp": "C++ (baseline)", "c": "C ABI", "python": "Python",
         "rust": "Rust"}
GOAL_US = {"c": 2.0, "python": 15.0, "rust": 2.0}
LAYOUTS = {1: "1 x 1 (one rank: the layer, no exchange)",
           2: "1 x 2 (one daemon, two ranks, loopback Gloo)"}


def parse(path):
    runs = {}  # (binding, world) -> list of (p50, p99) in ns
    ops = None
    with open(path) as f:
        for line in f:
            t = line.split()
            if len(t) < 14 or t[2] != "BINDING":
                continue
            binding, world = t[3], int(t[5])
            ops = int(t[7])
            runs.setdefault((binding, world), []).append(
                (int(t[9]), int(t[11])))
    return runs, ops


def table(runs):
    rows = []
    rows.append("| layout | binding | blocks | p50 | p99 | overhead p50 vs C++ "
                "| goal | met |")
    rows.append("|---|---|---:|---:|---:|---:|---:|---|")
    for world in sorted({w for _, w in runs}):
        base = runs.get(("cpp", world))
        base_p50 = statistics.median(p for p, _ in base) if base else None
        for b in ORDER:
            samples = runs.get((b, world))
            if not samples:
                continue
            p50 = statistics.median(p for p, _ in samples)
            p99 = statistics.median(q for _, q in samples)
            if b == "cpp" or base_p50 is None:
                over, goal, met = "-", "-", "-"
            else:
                d = (p50 - base_p50) / 1000
                over = f"{d:+.2f} us"
                goal = f"<= {GOAL_US[b]:g} us"
                met = "yes" if d <= GOAL_US[b] else "**no**"
            rows.append(f"| {LAYOUTS.get(world, world)} | {NAMES[b]} | "
                        f"{len(samples)} | {p50 / 1000:.2f} us | "
                        f"{p99 / 1000:.2f} us | {over} | {goal} | {met} |")
    return "\n".join(rows)


def main():
    lines, results, command, load = sys.argv[1:5]
    runs, ops = parse(lines)
    if not runs:
        sys.exit("summarize_bindings: no BINDING lines in " + lines)
    body = table(runs)
    print(body)
    if not results:
        return
    date = datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M:%S UTC")
    section = "\n".join([
        BEGIN,
        "",
        f"### Latest run: {date}",
        "",
        f"Command: `{command.strip()}` ({ops} timed operations per block; "
        f"load average before: {load}; {os.cpu_count()} CPUs).",
        "",
        body,
        "",
        END,
    ])
    preamble = (
        "## Bindings: per-operation overhead over the C++ API\n\n"
        "`bench/run_bindings.sh`: the same small all_reduce_sum loop "
        "(f32[4], Gloo, world scope, submit then wait) through the "
        "C++ API, the C ABI, Python and Rust; each binding's p50 is "
        "the median of its blocks' p50s, the bindings taking turns "
        "block by block, each rank pinned to its own core. The "
        "overhead is measured in the 1 x 1 layout, where no exchange "
        "adds noise; 1 x 2 shows the same with a real peer.\n\n")
    results_md.update(results, lambda text: results_md.replace_section(
        text, BEGIN, END, section, preamble))


if __name__ == "__main__":
    main()
