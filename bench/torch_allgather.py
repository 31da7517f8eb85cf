#!/usr/bin/python3
"""The peer half of the all_gather_words benchmark: torch.distributed (Gloo).

Starts --world processes on this machine (forked from this one after
importing torch), initialises a Gloo process group through a TCPStore on
127.0.0.1:--port (GLOO_SOCKET_IFNAME=lo), and in each rank runs --warmup
untimed and --rounds timed dist.all_gather calls of an int32 tensor of
--words elements (the same exchange as rankd's all_gather_words of a
--words-word frame). Each rank writes <out_dir>/torch.rank<R>.txt in the
format bench/allgather_words_bench.cc uses: a "# ..." header, then
"<start_ns> <end_ns>" per timed round, from time.monotonic_ns()
(CLOCK_MONOTONIC, the same clock as the C++ rank's steady_clock). The
header also gives the process's CPU time and context switches over the timed
rounds (cpu_us, vcsw, ivcsw; getrusage, every thread).

Results of the warmup rounds and of the last timed round are checked
element by element (outside the timed region).

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


def word(rank, rnd, j):
    return (rank * 1000003 + rnd * 131 + j) & 0xFFFFFFFF


def as_i32(v):
    return v - (1 << 32) if v >= (1 << 31) else v


def rank_main(rank, args):
    torch, dist = enter_rank(args)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{args.port}",
        rank=rank,
        world_size=args.world,
        timeout=timedelta(seconds=args.timeout_s),
    )
    world, words = args.world, args.words
    total = args.warmup + args.rounds
    frames = [
        torch.tensor([as_i32(word(rank, i, j)) for j in range(words)],
                     dtype=torch.int32)
        for i in range(total)
    ]
    outs = [torch.empty(words, dtype=torch.int32) for _ in range(world)]
    start = [0] * args.rounds
    end = [0] * args.rounds
    now = time.monotonic_ns
    before = None
    for i in range(total):
        if i == args.warmup:
            before = resource.getrusage(resource.RUSAGE_SELF)
        t = frames[i]
        t0 = now()
        dist.all_gather(outs, t)
        t1 = now()
        if i < args.warmup or i == total - 1:
            for r in range(world):
                got = outs[r].tolist()
                want = [as_i32(word(r, i, j)) for j in range(words)]
                if got != want:
                    print(f"ERROR round {i + 1}: wrong frame from rank {r}",
                          flush=True)
                    os._exit(4)
        if i >= args.warmup:
            start[i - args.warmup] = t0
            end[i - args.warmup] = t1
        if args.pace_us > 0:
            time.sleep(args.pace_us / 1e6)
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu_us = round((after.ru_utime + after.ru_stime - before.ru_utime -
                    before.ru_stime) * 1e6)
    path = os.path.join(args.out_dir, f"torch.rank{rank}.txt")
    with open(path, "w") as f:
        f.write(f"# torch {torch.__version__} gloo all_gather int32 rank={rank} "
                f"world={world} words={words} warmup={args.warmup} "
                f"rounds={args.rounds} cpu_us={cpu_us} "
                f"vcsw={after.ru_nvcsw - before.ru_nvcsw} "
                f"ivcsw={after.ru_nivcsw - before.ru_nivcsw}\n")
        for a, b in zip(start, end):
            f.write(f"{a} {b}\n")
    # Keep every rank alive until all have finished before tearing down.
    dist.barrier()
    dist.destroy_process_group()
    os._exit(0)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--world", type=int, default=16)
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--rounds", type=int, default=2000)
    p.add_argument("--words", type=int, default=4)
    p.add_argument("--pace_us", type=int, default=0,
                   help="pause after each round (0: back to back)")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--out_dir", required=True)
    p.add_argument("--timeout_s", type=int, default=300,
                   help="whole-run limit, and Gloo's per-operation timeout")
    args = p.parse_args()
    return run_ranks(rank_main, args)


if __name__ == "__main__":
    sys.exit(main())
