#!/usr/bin/python3
"""The peer half of the all_reduce_sum benchmark: torch.distributed (Gloo).

Starts --world processes on this machine (forked from this one after
importing torch), initialises a Gloo process group through a TCPStore on
127.0.0.1:--port (GLOO_SOCKET_IFNAME=lo), and in each rank, for every
"bytes:warmup:iters" item of --schedule (the same string the launcher gives
bench/allreduce_bench.cc), runs warmup untimed and iters timed
dist.all_reduce (SUM, in place) calls of a float32 tensor of bytes / 4
elements, back to back. Each rank writes <out_dir>/torch.rank<R>.txt in the
format allreduce_bench.cc uses:
  # header
  C torch <bytes> <iters> <cpu_us> <vcsw> <ivcsw> <minflt>  (timed calls,
                                               getrusage)
  T torch <bytes> <start_ns> <end_ns> <block>       (one per timed call)
appending (the launcher runs several phases; --block numbers this one).
with time.monotonic_ns() (CLOCK_MONOTONIC, the C++ ranks' steady_clock).

Values are checked exactly (outside the timed region), as in the C++ rank:
rank r contributes x[i] = (r + 1) * (1 + i % 5). all_reduce is in place, so
the tensor is checked after the first warmup call and once more, refilled,
after the timed calls (in between it keeps growing, x world per call, to
inf, which costs nothing extra on x86).

Needs Debian's python3-torch, i.e. run it with /usr/bin/python3. Every
process it starts dies with it: children are killed by pid when this
launcher exits or is terminated, and each child also asks the kernel
(PR_SET_PDEATHSIG) to kill it if the launcher dies first.
Exit status: 0 when every rank succeeded, 1 otherwise.
"""

import argparse
import os
import resource
import sys
import time
from datetime import timedelta

from torch_ranks import enter_rank, run_ranks


def parse_schedule(text):
    steps = []
    for item in text.split(","):
        if not item:
            continue
        b, w, n = (int(v) for v in item.split(":"))
        if b <= 0 or b % 4 or w < 1 or n < 1:
            raise SystemExit(f"bad --schedule item {item!r}")
        steps.append((b, w, n))
    return steps


def rank_main(rank, args):
    if args.pin:
        # As run_allreduce.sh --pin does for rankd's ranks.
        os.sched_setaffinity(0, {rank % os.cpu_count()})
    torch, dist = enter_rank(args)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{args.port}",
        rank=rank,
        world_size=args.world,
        timeout=timedelta(seconds=args.timeout_s),
    )
    world = args.world
    scale = world * (world + 1) // 2
    lines = [f"# torch {torch.__version__} gloo all_reduce SUM float32 "
             f"rank={rank} world={world}\n"]
    now = time.monotonic_ns

    def fill(t, n):
        pattern = torch.arange(n, dtype=torch.int64) % 5 + 1
        t.copy_(pattern * (rank + 1))
        return pattern

    def check(t, pattern, what):
        if not torch.equal(t, (pattern * scale).to(torch.float32)):
            print(f"ERROR {what}: wrong sum", flush=True)
            os._exit(4)

    for nbytes, warmup, iters in parse_schedule(args.schedule):
        n = nbytes // 4
        t = torch.empty(n, dtype=torch.float32)
        pattern = fill(t, n)
        start = [0] * iters
        end = [0] * iters
        before = None
        for i in range(warmup + iters):
            if i == warmup:
                before = resource.getrusage(resource.RUSAGE_SELF)
            t0 = now()
            dist.all_reduce(t)
            t1 = now()
            if i == 0:
                check(t, pattern, f"{nbytes} B call 0")
            if i >= warmup:
                start[i - warmup] = t0
                end[i - warmup] = t1
        after = resource.getrusage(resource.RUSAGE_SELF)
        fill(t, n)
        dist.all_reduce(t)
        check(t, pattern, f"{nbytes} B final call")
        cpu_us = round((after.ru_utime + after.ru_stime - before.ru_utime -
                        before.ru_stime) * 1e6)
        lines.append(f"C torch {nbytes} {iters} {cpu_us} "
                     f"{after.ru_nvcsw - before.ru_nvcsw} "
                     f"{after.ru_nivcsw - before.ru_nivcsw} "
                     f"{after.ru_minflt - before.ru_minflt}\n")
        lines += [f"T torch {nbytes} {a} {b} {args.block}\n"
                  for a, b in zip(start, end)]
        del t, pattern
    with open(os.path.join(args.out_dir, f"torch.rank{rank}.txt"), "a") as f:
        f.writelines(lines)
    # Keep every rank alive until all have finished before tearing down.
    dist.barrier()
    dist.destroy_process_group()
    os._exit(0)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--world", type=int, default=4)
    p.add_argument("--schedule", required=True,
                   help="bytes:warmup:iters,... (as allreduce_bench.cc)")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--block", type=int, default=0,
                   help="block number written with every timed call")
    p.add_argument("--out_dir", required=True)
    p.add_argument("--pin", action="store_true",
                   help="bind rank r to CPU r mod the CPU count")
    p.add_argument("--timeout_s", type=int, default=600,
                   help="whole-run limit, and Gloo's per-operation timeout")
    args = p.parse_args()
    parse_schedule(args.schedule)
    return run_ranks(rank_main, args)


if __name__ == "__main__":
    sys.exit(main())
