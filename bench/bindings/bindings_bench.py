"""bindings_bench.py: the Python twin of bindings_bench.cc (see there): the
same small all_reduce_sum loop through the rankd package, into a
preallocated output (out=), printing
    BINDING python world <W> ops <N> p50_ns <x> p99_ns <y> mean_ns <z>
Usage (under rankrun): bindings_bench.py [ops] [warmup]"""
import sys
import time

import numpy as np

import rankd


def main():
    ops = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    warmup = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    if ops < 1 or warmup < 1:
        sys.exit("usage: bindings_bench.py [ops >= 1] [warmup >= 1]")
    with rankd.join() as rank, rank.open_session() as session:
        x = np.array([1, 2, 3, 4], np.float32)
        out = np.empty_like(x)
        ns = []
        clock = time.perf_counter_ns
        for i in range(warmup + ops):
            start = clock()
            session.all_reduce_sum(x, out=out).wait()
            end = clock()
            if i >= warmup:
                ns.append(end - start)
            if i == 0 and out[0] != rank.world_size:
                sys.exit(f"error: wrong sum {out[0]}")
        ns.sort()
        if rank.rank == 0:
            print(f"BINDING python world {rank.world_size} ops {ops} "
                  f"p50_ns {ns[ops // 2]} p99_ns {ns[ops * 99 // 100]} "
                  f"mean_ns {sum(ns) / ops:.0f}", flush=True)
        rank.all_gather_words([rank.rank], timeout=60)


if __name__ == "__main__":
    main()
