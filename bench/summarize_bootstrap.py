#!/usr/bin/env python3
"""Summarises one bootstrap benchmark run (bench/run_bootstrap.sh).

Reads <dir>/<system>-<size>-<i>/<system>.rank<R>.txt ("# header", then
"<start_ns> <end_ns>"), where system is rankd or torch: one repetition's
bootstrap time is the last rank's end minus the shared start. Prints, per
size, the median, min and max over the repetitions for both systems and the
ratio of the medians, and (with --results) rewrites the section between the
BEGIN/END markers of bench/RESULTS.md: one section for daemons started at
the start time (--daemons=start, issue 13's bootstrap), another for daemons
already running (--daemons=running). Standard library only.
"""

import argparse
import glob
import os
import statistics
import sys

import results_md

SECTIONS = {
    # --daemons: (BEGIN, END, heading of a new section)
    "start": (
        "<!-- BEGIN bootstrap latest (written by bench/summarize_bootstrap.py) -->",
        "<!-- END bootstrap latest -->",
        "## Bootstrap: daemons started to every rank holding its descriptor, "
        "vs torch init_process_group\n\n"),
    "running": (
        "<!-- BEGIN bootstrap-running latest (written by "
        "bench/summarize_bootstrap.py) -->",
        "<!-- END bootstrap-running latest -->",
        "## Bootstrap with daemons already running, vs torch with its store "
        "already running\n\n"),
}
GOAL = 0.5  # issue 13: rankd at most half of torch's init_process_group


def repetition_ms(dirname, system, size):
    files = glob.glob(os.path.join(dirname, f"{system}.rank*.txt"))
    if len(files) != size:
        raise SystemExit(f"{dirname}: {len(files)} rank files, expected {size}")
    start, end = None, 0
    for path in files:
        with open(path) as f:
            rows = [l.split() for l in f if l.strip() and not l.startswith("#")]
        if len(rows) != 1:
            raise SystemExit(f"{path}: expected one result line")
        a, b = int(rows[0][0]), int(rows[0][1])
        if start is not None and a != start:
            raise SystemExit(f"{path}: another start time ({a} vs {start})")
        start, end = a, max(end, b)
    return (end - start) / 1e6


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--sizes", required=True)
    p.add_argument("--repeat", type=int, required=True)
    p.add_argument("--daemons", choices=sorted(SECTIONS), default="start")
    p.add_argument("--results")
    p.add_argument("--meta", action="append", default=[])
    a = p.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]

    rows = []
    for size in sizes:
        got = {}
        for system in ("rankd", "torch"):
            got[system] = sorted(
                repetition_ms(os.path.join(a.dir, f"{system}-{size}-{i}"),
                              system, size) for i in range(a.repeat))
        r, t = statistics.median(got["rankd"]), statistics.median(got["torch"])
        rows.append((size, got["rankd"], got["torch"], r / t))

    def span(v):
        return f"{statistics.median(v):.1f} ({v[0]:.1f} to {v[-1]:.1f})"

    lines = [
        "| ranks | rankd ms, median (min to max) | torch ms, median (min to max) "
        "| **rankd / torch** (medians) |",
        "|---:|---:|---:|---:|",
    ]
    for size, r, t, ratio in rows:
        lines.append(f"| {size} | {span(r)} | {span(t)} | **{ratio:.2f}** |")
    met = all(ratio <= GOAL for *_, ratio in rows)
    bar = ("goal" if a.daemons == "start" else
           "issue 13's bar, applied to running daemons")
    verdict = (f"{bar} (rankd at most {GOAL:g} x torch at every size): "
               f"{'MET' if met else 'NOT MET'}")
    print("\n".join(lines))
    print(verdict)
    if not a.results:
        return 0

    begin, end, heading = SECTIONS[a.daemons]
    section, _ = results_md.latest_head(begin, a.meta)
    section += lines
    section += [
        "",
        "Bootstrap = the last rank's end minus the shared start time "
        "(rankd: Join with wait_for_world returned, the descriptor in hand; "
        "torch: init_process_group returned), per repetition."
        + ("" if a.daemons == "start" else
           " The daemons (torch: the store) were ready before the start "
           "time; their start is not counted."),
        "",
        f"**{verdict}**",
        "",
        end,
    ]
    results_md.update(a.results, lambda text: results_md.replace_section(
        text, begin, end, "\n".join(section), heading))
    print(f"updated {a.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
