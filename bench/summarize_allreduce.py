#!/usr/bin/env python3
"""Summarises one all_reduce_sum benchmark run (bench/run_allreduce.sh).

Reads <dir>/rankd.rank<R>.txt (modes rankd, direct, rankd_copy, rankd_verify, rankd_local) and
<dir>/torch.rank<R>.txt: "C <mode> <bytes> <iters> <cpu_us> <vcsw> <ivcsw>
<minflt>" and "T <mode> <bytes> <start_ns> <end_ns>" lines. Prints a per-size table and
the per-operation overhead of rankd over direct Gloo, and (with --results)
rewrites the section between the BEGIN/END markers of bench/RESULTS.md and
appends a row to its history table. Standard library only.

Aggregation (identical for every mode and for torch):
  * time per operation (bandwidth): for each rank, the sum over blocks of
    (end of the block's last timed operation - start of its first) /
    iterations, i.e. back-to-back throughput (rankd's modes take turns block
    by block; torch runs one block), then the slowest rank (max over ranks);
  * bus bandwidth = 2 (n - 1) / n x bytes / time per operation, in GB/s
    (1e9 bytes), as nccl-tests defines it for all-reduce;
  * round latency (overhead): for each timed operation, the slowest rank's
    latency for it, max over ranks of (end - start); p50 is nearest-rank
    (the ceil(n/2)-th smallest);
  * per-rank p50: every rank's per-operation latencies pooled;
  * CPU per operation: user + system time of every thread of every rank
    process over the timed operations, summed over ranks, / iterations;
    context switches and minor page faults per operation likewise.
"""

import argparse
import glob
import math
import os
import re
import sys

import results_md

BEGIN = "<!-- BEGIN allreduce latest (written by bench/summarize_allreduce.py) -->"
END = "<!-- END allreduce latest -->"
HIST_BEGIN = "<!-- BEGIN allreduce history -->"
HIST_END = "<!-- END allreduce history -->"
SECTION_TITLE = "## all_reduce_sum bus bandwidth: rankd (Gloo) vs torch.distributed (Gloo)"

# Overhead goal (µs) and bandwidth goal (ratio to torch), from the issue.
OVERHEAD_GOAL_US = 10.0
RATIO_GOAL = 1.0
GOAL_MIN_BYTES = 1024


def parse_schedule(text):
    out = []
    for item in text.split(","):
        if item:
            b, w, n = (int(v) for v in item.split(":"))
            out.append((b, w, n))
    return out


def load(dirname, prefix):
    """{(mode, bytes): {"ops": {rank: [(s, e)]}, "cpu": {rank: (cpu, vcsw, ivcsw)}}}"""
    data = {}
    for path in glob.glob(os.path.join(dirname, f"{prefix}.rank*.txt")):
        rank = int(re.search(r"\.rank(\d+)\.txt$", path).group(1))
        with open(path) as f:
            for line in f:
                parts = line.split()
                if not parts or parts[0].startswith("#"):
                    continue
                key = (parts[1], int(parts[2]))
                d = data.setdefault(key, {"ops": {}, "cpu": {}})
                if parts[0] == "T":
                    # The block (turn) is optional: torch runs one block.
                    block = int(parts[5]) if len(parts) > 5 else 0
                    d["ops"].setdefault(rank, []).append(
                        (int(parts[3]), int(parts[4]), block))
                elif parts[0] == "C":
                    # One line per block: sum them.
                    c = tuple(int(v) for v in parts[4:8])
                    old = d["cpu"].get(rank)
                    d["cpu"][rank] = c if old is None else tuple(
                        x + y for x, y in zip(old, c))
    return data


def pct(sorted_values, q):
    n = len(sorted_values)
    k = min(max(math.ceil(q / 100.0 * n), 1), n)
    return sorted_values[k - 1]


def stats(d, world, iters, nbytes, label, only_rank0=False):
    ranks = d["ops"]
    if only_rank0:
        # rankd_local: rank 0 alone, with its own count of operations
        # (allreduce_bench.cc runs at least kLocalOpsPerBlock per block).
        world = 1
        iters = len(ranks.get(0, []))
    if sorted(ranks) != list(range(world)):
        raise SystemExit(f"{label}: expected ranks 0..{world - 1}, found {sorted(ranks)}")
    for r, rows in ranks.items():
        if len(rows) != iters:
            raise SystemExit(f"{label} rank {r}: {len(rows)} ops, expected {iters}")
    def back_to_back_us(rows):
        # Sum over blocks of (end of its last operation - start of its first):
        # the other modes' turns in between are not counted.
        spans = {}
        for s_, e_, b in rows:
            lo, hi = spans.get(b, (s_, e_))
            spans[b] = (min(lo, s_), max(hi, e_))
        return sum(hi - lo for lo, hi in spans.values()) / iters / 1000.0

    t_us = max(back_to_back_us(rows) for rows in ranks.values())
    round_list = [(max(ranks[r][i][1] - ranks[r][i][0] for r in range(world)) / 1000.0,
                   ranks[0][i][2]) for i in range(iters)]
    rounds = sorted(v for v, _ in round_list)
    # Round p50 per block (turn), to pair modes that ran in the same block.
    by_block = {}
    for v, b in round_list:
        by_block.setdefault(b, []).append(v)
    block_p50 = {b: pct(sorted(v), 50) for b, v in by_block.items()}
    pooled = sorted((e - s_) / 1000.0 for rows in ranks.values() for s_, e, _ in rows)
    cpu = sum(c[0] for c in d["cpu"].values()) / iters
    csw = sum(c[1] + c[2] for c in d["cpu"].values()) / iters
    flt = sum(c[3] if len(c) > 3 else 0 for c in d["cpu"].values()) / iters
    busbw = 2.0 * (world - 1) / world * nbytes / (t_us * 1e-6) / 1e9
    return {"t_us": t_us, "busbw": busbw, "p50": pct(rounds, 50),
            "block_p50": block_p50,
            "p90": pct(rounds, 90), "rank_p50": pct(pooled, 50),
            "cpu_us": cpu, "csw": csw, "minflt": flt}


def human(b):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= scale and b % scale == 0:
            return f"{b // scale} {unit}"
    return f"{b} B"


def f1(x):
    return "-" if x is None else f"{x:.1f}"


def f2(x):
    return "-" if x is None else f"{x:.2f}"


def f3(x):
    """Three significant digits, never in exponent form (GB/s spans 1e-6..1)."""
    if x is None:
        return "-"
    if x <= 0:
        return "0"
    return f"{x:.{max(0, 2 - math.floor(math.log10(x)))}f}"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--schedule", required=True)
    p.add_argument("--results", help="bench/RESULTS.md to update")
    p.add_argument("--no_torch", action="store_true")
    p.add_argument("--meta", action="append", default=[],
                   help="KEY=VALUE lines for the results section, in order")
    a = p.parse_args()

    schedule = parse_schedule(a.schedule)
    rankd = load(a.dir, "rankd")
    torch = {} if a.no_torch else load(a.dir, "torch")
    modes = [m for m in ("rankd", "direct", "rankd_copy", "rankd_verify", "rankd_local")
             if any(k[0] == m for k in rankd)]
    res = {}  # (system, bytes) -> stats
    for nbytes, _, iters in schedule:
        for m in modes:
            res[(m, nbytes)] = stats(rankd[(m, nbytes)], a.world, iters, nbytes,
                                     f"{m} {nbytes} B", m == "rankd_local")
        if not a.no_torch:
            res[("torch", nbytes)] = stats(torch[("torch", nbytes)], a.world,
                                           iters, nbytes, f"torch {nbytes} B")

    def get(system, nbytes, key):
        s = res.get((system, nbytes))
        return None if s is None else s[key]

    def ratio(x, y):
        return None if x is None or y is None or y == 0 else x / y

    # --- bandwidth table
    bw = [
        "| size | iters | rankd µs/op | rankd GB/s | torch GB/s | **rankd / torch** "
        "| direct Gloo GB/s | rankd / direct | rankd_copy GB/s (out of place) "
        "| rankd_copy / torch | rankd_verify GB/s "
        "| layer alone µs/op (rankd_local) | round p50 µs rankd / direct / torch |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    ratios = []
    for nbytes, _, iters in schedule:
        r = ratio(get("rankd", nbytes, "busbw"), get("torch", nbytes, "busbw"))
        if nbytes >= GOAL_MIN_BYTES and r is not None:
            ratios.append((r, nbytes))
        bw.append(
            f"| {human(nbytes)} | {iters} | {f1(get('rankd', nbytes, 't_us'))} "
            f"| {f3(get('rankd', nbytes, 'busbw'))} | {f3(get('torch', nbytes, 'busbw'))} "
            f"| **{f2(r)}** | {f3(get('direct', nbytes, 'busbw'))} "
            f"| {f2(ratio(get('rankd', nbytes, 'busbw'), get('direct', nbytes, 'busbw')))} "
            f"| {f3(get('rankd_copy', nbytes, 'busbw'))} "
            f"| {f2(ratio(get('rankd_copy', nbytes, 'busbw'), get('torch', nbytes, 'busbw')))} "
            f"| {f3(get('rankd_verify', nbytes, 'busbw'))} "
            f"| {f1(get('rankd_local', nbytes, 't_us'))} "
            f"| {f1(get('rankd', nbytes, 'p50'))} / {f1(get('direct', nbytes, 'p50'))} "
            f"/ {f1(get('torch', nbytes, 'p50'))} |")

    # --- cost table: CPU, context switches and page faults per operation
    systems = [m for m in ("rankd", "direct", "rankd_copy", "rankd_verify", "rankd_local")
               if m in modes]
    if not a.no_torch:
        systems.append("torch")
    cost = ["| size | " + " | ".join(f"{s} CPU µs" for s in systems) + " | "
            + " | ".join(f"{s} csw" for s in systems) + " | "
            + " | ".join(f"{s} page faults" for s in systems) + " |",
            "|---:|" + "---:|" * (3 * len(systems))]
    for nbytes, _, _ in schedule:
        cost.append(f"| {human(nbytes)} | "
                    + " | ".join(f1(get(s, nbytes, "cpu_us")) for s in systems) + " | "
                    + " | ".join(f"{get(s, nbytes, 'csw'):.0f}" for s in systems) + " | "
                    + " | ".join(f"{get(s, nbytes, 'minflt'):.0f}" for s in systems) + " |")

    # --- overhead table (small sizes)
    small = [b for b, _, _ in schedule if b <= 4096]
    ov = [
        "| size | metric | rankd | rankd_verify | direct Gloo | torch "
        "| **rankd - direct** | opt-in agreement check (rankd_verify - rankd) "
        "| layer alone, no Gloo call (rankd_local) |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    overhead = {}
    for nbytes in small:
        for key, label in (("p50", "round p50 µs"), ("t_us", "µs/op back to back"),
                           ("cpu_us", "CPU µs/op (all ranks)"),
                           ("csw", "context switches/op (all ranks)")):
            rv, vv, dv, tv, lv = (get(s, nbytes, key) for s in
                                  ("rankd", "rankd_verify", "direct", "torch",
                                   "rankd_local"))
            diff = None if rv is None or dv is None else rv - dv
            if key == "p50":
                overhead[nbytes] = diff
            agree = None if rv is None or vv is None else vv - rv
            bold = (lambda x: f"**{f1(x)}**") if key == "p50" else f1
            ov.append(f"| {human(nbytes)} | {label} | {f1(rv)} | {f1(vv)} | {f1(dv)} "
                      f"| {f1(tv)} | {bold(diff)} | {f1(agree)} | {f1(lv)} |")

    # End to end, paired: rankd - direct round p50 within each block (the
    # two took turns in it), so that the machine's drift cancels.
    paired = {}
    for nbytes in small:
        rb, db = get("rankd", nbytes, "block_p50"), get("direct", nbytes, "block_p50")
        if rb and db:
            diffs = sorted(rb[b] - db[b] for b in rb if b in db)
            if diffs:
                paired[nbytes] = (pct(diffs, 50), diffs[0], diffs[-1], len(diffs))
    if paired:
        ov += ["", "Paired by block (the modes take turns within each block): rankd "
               "round p50 - direct round p50 in the same block.", "",
               "| size | blocks | median µs | min µs | max µs |", "|---:|---:|---:|---:|---:|"]
        for nbytes, (med, lo, hi, k) in sorted(paired.items()):
            ov.append(f"| {human(nbytes)} | {k} | {f1(med)} | {f1(lo)} | {f1(hi)} |")

    verdicts = []
    if ratios:
        worst, worst_b = min(ratios)
        met = worst >= RATIO_GOAL
        verdicts.append(
            f"bandwidth goal (rankd >= {RATIO_GOAL} x torch bus bandwidth at every "
            f"size from {human(GOAL_MIN_BYTES)}): {'MET' if met else 'NOT MET'} "
            f"(lowest ratio {worst:.3f} at {human(worst_b)}; "
            f"{sum(1 for r, _ in ratios if r >= RATIO_GOAL)} of {len(ratios)} sizes meet it)")
    layer = {b: get("rankd_local", b, "p50") for b in small}
    if any(v is not None for v in layer.values()):
        parts = [f"{f1(v)} µs at {human(b)}" for b, v in sorted(layer.items())
                 if v is not None]
        worst_layer = max(v for v in layer.values() if v is not None)
        e2e = "; ".join(
            f"{human(b)}: median {f1(m)} µs, range {f1(lo)} to {f1(hi)} µs over {k} blocks"
            for b, (m, lo, hi, k) in sorted(paired.items()))
        verdicts.append(
            f"overhead goal (at most {OVERHEAD_GOAL_US:g} µs per operation added by rankd's "
            f"layer over a direct Gloo call), measured as the layer alone (rankd_local "
            f"round p50: validation, executor hand-off, completion, no Gloo call): "
            f"{'MET' if worst_layer <= OVERHEAD_GOAL_US else 'NOT MET'} ({', '.join(parts)}). "
            f"End to end, rankd - direct round p50 paired by block ({e2e or 'not run'}): "
            f"the spread between blocks is this machine's noise, far above "
            f"{OVERHEAD_GOAL_US:g} µs, so it bounds the overhead only that coarsely")
    elif overhead:
        parts = [f"{f1(v)} µs at {human(b)}" for b, v in sorted(overhead.items())
                 if v is not None]
        if parts:
            worst_ov = max(v for v in overhead.values() if v is not None)
            verdicts.append(
                f"overhead goal (rankd's round p50 - direct Gloo's at most {OVERHEAD_GOAL_US:g} µs): "
                f"{'MET' if worst_ov <= OVERHEAD_GOAL_US else 'NOT MET'} ({', '.join(parts)})")

    print("\n".join(bw))
    print()
    print("\n".join(ov))
    print()
    print("\n".join(cost))
    print()
    for v in verdicts:
        print(v)

    if not a.results:
        return 0
    section, md = results_md.latest_head(BEGIN, a.meta)
    section += [
        "Bus bandwidth = 2 (n - 1) / n x bytes / time per operation (GB/s = "
        "1e9 bytes/s); time per operation = each rank's back-to-back time "
        "over the timed operations / their number, slowest rank. Round p50 "
        "= median over operations of the slowest rank's latency. Same method "
        "for every column.",
        "",
        "\n".join(bw), "",
        "Per-operation overhead of rankd's layer over a direct `gloo::allreduce` "
        "call (same process, same Gloo library, algorithm and kernel), small "
        "sizes. rankd_verify is a diagnostic session with the opt-in "
        "`verify_agreement = true`; rankd_local is the product session's "
        "all_reduce_sum on the rank's one-member group: the whole layer "
        "(validation, executor hand-off, completion) with no Gloo "
        "call, run by rank 0 alone while the other "
        "ranks wait blocked (its numbers are rank 0's only).",
        "",
        "\n".join(ov), "",
        "Cost per operation, summed over the rank processes (every thread; "
        "getrusage over the timed operations): CPU time, context switches "
        "(voluntary + involuntary) and minor page faults.",
        "",
        "\n".join(cost), "",
    ]
    section += [f"**{v}**  " for v in verdicts]
    section += ["", END]

    def row_ratio(b):
        return f2(ratio(get("rankd", b, "busbw"), get("torch", b, "busbw")))

    lm = re.match(r"(\d+) daemon\(s\) x (\d+) ranks", md.get("layout", ""))
    layout = f"{lm.group(1)}x{lm.group(2)}" if lm else f"{a.world} ranks"
    worst_txt = f"{min(ratios)[0]:.2f} ({human(min(ratios)[1])})" if ratios else "-"
    big = schedule[-1][0]
    row = (f"| {md.get('date', '?')} | {layout} | {worst_txt} "
           f"| {row_ratio(1024)} | {row_ratio(big)} "
           f"| {f3(get('rankd', big, 'busbw'))} | {f3(get('torch', big, 'busbw'))} "
           f"| {f1(overhead.get(16))} | {f1(overhead.get(1024))} "
           f"| {md.get('load average (1, 5, 15 min)', '?').split(';')[0].replace('before the run: ', '')} "
           f"| {md.get('note', '')} |")

    new_table = (
        "### all_reduce_sum history\n\n" + HIST_BEGIN + "\n"
        "| date | layout | lowest rankd/torch (size) | ratio 1 KiB "
        f"| ratio {human(big)} | rankd GB/s {human(big)} "
        f"| torch GB/s {human(big)} "
        "| overhead µs 16 B | overhead µs 1 KiB | load before | note |\n"
        "|---|---|---|---:|---:|---:|---:|---:|---:|---|---|\n")
    results_md.update(a.results, lambda text: results_md.append_history_row(
        results_md.replace_section(text, BEGIN, END, "\n".join(section),
                                   SECTION_TITLE + "\n\n"),
        HIST_BEGIN, HIST_END, row, new_table))
    print(f"updated {a.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
