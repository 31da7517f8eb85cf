"""Summarizes a bench/run_soak.sh run: each daemon's resident memory at join,
at the start (the first sample after 5 % of the rounds) and at the end, and
the growth from start to end; each rank's own RSS at its first PROGRESS line
after 5 % of the rounds and at DONE. About ten evenly spaced samples follow. Prints a Markdown section and, with --results, replaces the
"## Soak" section of that file (up to the next "## " heading) with it.

Samples file: one line per second, "<seconds> <round> <rss_kb daemon 0> ...".
"""
import argparse
import glob
import os
import re


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--samples", required=True)
    p.add_argument("--rounds", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--rank_logs", required=True)
    p.add_argument("--results")
    p.add_argument("--meta", action="append", default=[])
    a = p.parse_args()

    rows = []
    with open(a.samples) as f:
        for line in f:
            parts = [int(x) for x in line.split()]
            if len(parts) >= 3:
                rows.append(parts)
    if not rows:
        raise SystemExit("summarize_soak: no samples")
    first = rows[0]
    start = next((r for r in rows if r[1] >= a.rounds // 20), rows[-1])
    end = rows[-1]
    seconds = max(end[0], 1)

    out = ["## Soak: resident memory over a long run", ""]
    out += ["- " + m.replace("=", ": ", 1) for m in a.meta]
    out.append(f"- duration: {seconds} s, {a.rounds / seconds:.0f} rounds/s")
    out += ["", "| process | RSS at join | RSS at start (round "
            f"{start[1]}) | RSS at end (round {end[1]}) | growth start to end |",
            "|---|---:|---:|---:|---:|"]

    def mib(kb):
        return f"{kb / 1024:.1f} MiB"

    def growth(before, after):
        return f"{(after - before) / 1024:+.1f} MiB ({(after - before) / max(before, 1) * 100:+.1f} %)"

    for d in range(len(first) - 2):
        out.append(f"| daemon {d} | {mib(first[2 + d])} | {mib(start[2 + d])} "
                   f"| {mib(end[2 + d])} | {growth(start[2 + d], end[2 + d])} |")
    for r in range(a.world):
        path = os.path.join(a.rank_logs, f"rank{r}.log")
        text = open(path).read() if os.path.exists(path) else ""
        progress = [(int(x), int(y)) for x, y in
                    re.findall(r"PROGRESS round=(\d+) rss_kb=(\d+)", text)]
        done = re.search(r"DONE rounds=\d+ kv_batches=\d+ rss_kb=(\d+)", text)
        if not progress or not done:
            continue
        s = next((p for p in progress if p[0] >= a.rounds // 20), progress[-1])
        out.append(f"| rank {r} | | {mib(s[1])} | {mib(int(done.group(1)))} "
                   f"| {growth(s[1], int(done.group(1)))} |")
    out += ["", "Samples (seconds, round, daemon RSS in KiB), ten spread over "
            "the run:", "",
            "```"]
    out += [" ".join(str(x) for x in r) for r in rows[:: max(1, len(rows) // 10)]]
    out += [" ".join(str(x) for x in end), "```", ""]
    text = "\n".join(out)
    print(text)

    if a.results:
        with open(a.results) as f:
            doc = f.read()
        m = re.search(r"^## Soak.*?(?=^## |\Z)", doc, flags=re.S | re.M)
        if m:
            doc = doc[: m.start()] + text + "\n" + doc[m.end():]
        else:
            doc = doc.rstrip("\n") + "\n\n" + text
        with open(a.results, "w") as f:
            f.write(doc)


if __name__ == "__main__":
    main()
