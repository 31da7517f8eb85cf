#!/usr/bin/python3
"""The peer half of the bootstrap benchmark: torch.distributed (Gloo).

Forks --world rank processes from one process that already imported torch
(bench/torch_ranks.py). Each sleeps until --start_ns (CLOCK_REALTIME, as
bench/bootstrap_rank.cc), then calls dist.init_process_group("gloo",
init_method=tcp://127.0.0.1:--port) (rank 0 hosts the TCPStore, as the
first rankd daemon hosts the coordinator) and writes
<out_dir>/torch.rank<R>.txt: "# torch_bootstrap rank=R", then
"<start_ns> <end_ns>" (end: init_process_group returned, every rank's
connections made). Then it destroys the group.

With --store=running the TCPStore is already up when the ranks start: this
launcher hosts it (created before the ranks are forked, as torchrun's agent
hosts the store before it starts its workers), and each rank connects to it
as a client and calls init_process_group(store=...): the counterpart of
rankd ranks joining daemons that already run.

Needs Debian's python3-torch: run it with /usr/bin/python3. Exit status 0
when every rank succeeded, 1 otherwise.
"""

import argparse
import os
import sys
import time
from datetime import timedelta

from torch_ranks import enter_rank, run_ranks


def rank_main(rank, args):
    torch, dist = enter_rank(args)
    delay = args.start_ns - time.time_ns()
    if delay > 0:
        time.sleep(delay / 1e9)
    timeout = timedelta(seconds=args.timeout_s)
    if args.store == "running":
        store = dist.TCPStore("127.0.0.1", args.port, args.world,
                              is_master=False, timeout=timeout)
        dist.init_process_group("gloo", store=store, rank=rank,
                                world_size=args.world, timeout=timeout)
    else:
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://127.0.0.1:{args.port}",
            rank=rank,
            world_size=args.world,
            timeout=timeout,
        )
    end = time.time_ns()
    with open(os.path.join(args.out_dir, f"torch.rank{rank}.txt"), "w") as f:
        f.write(f"# torch_bootstrap rank={rank}\n{args.start_ns} {end}\n")
    dist.destroy_process_group()
    os._exit(0)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--start_ns", type=int, required=True)
    p.add_argument("--out_dir", required=True)
    p.add_argument("--timeout_s", type=int, default=120)
    p.add_argument("--store", choices=("rank0", "running"), default="rank0",
                   help="rank0: rank 0 starts the TCPStore (tcp:// init); "
                   "running: this launcher hosts it before the ranks start")
    args = p.parse_args()
    store = None
    if args.store == "running":
        import torch.distributed as dist
        store = dist.TCPStore("127.0.0.1", args.port, args.world,
                              is_master=True, wait_for_workers=False,
                              timeout=timedelta(seconds=args.timeout_s))
    rc = run_ranks(rank_main, args)
    del store
    return rc


if __name__ == "__main__":
    sys.exit(main())
