"""Runs torch.distributed rank processes for the benchmarks' torch peers.

Shared by torch_allgather.py and torch_allreduce.py: checks that Debian's
torch has Gloo, forks `world` ranks from one process that already imported
torch, watches them until they all exit, one fails, or `timeout_s` passes,
and stops every rank it started (SIGKILL by pid) on any exit path,
including SIGTERM/SIGINT of the launcher.
"""
import multiprocessing as mp
import os
import signal
import sys
import time


def enter_rank(args):
    """What every rank_main does first: asks the kernel to kill this rank
    when the launcher dies (PR_SET_PDEATHSIG), exits at once if it already
    did, and returns (torch, torch.distributed) with one intra-op thread."""
    import ctypes
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != args.parent_pid:  # launcher already gone
        os._exit(1)
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    return torch, dist


def run_ranks(rank_main, args):
    """Runs rank_main(rank, args) for rank in range(args.world).

    Uses args.world and args.timeout_s; sets args.parent_pid. Returns 0 when
    every rank exited 0, else 1 (after printing an ERROR line).
    """
    args.parent_pid = os.getpid()
    import torch  # noqa: F401  (imported once here; children inherit it)
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_gloo_available():
        print("ERROR torch.distributed with Gloo is not available", flush=True)
        return 1
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    os.environ["OMP_NUM_THREADS"] = "1"

    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=rank_main, args=(r, args), daemon=True)
             for r in range(args.world)]

    def stop_children(*_):
        for pr in procs:
            if pr.pid is not None and pr.exitcode is None:
                try:
                    os.kill(pr.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for pr in procs:
            if pr.pid is not None:
                pr.join(5)

    def on_signal(signum, _frame):
        stop_children()
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    ok = False
    try:
        for pr in procs:
            pr.start()
        deadline = time.monotonic() + args.timeout_s
        failed = False
        while not failed and any(pr.exitcode is None for pr in procs):
            if time.monotonic() > deadline:
                print(f"ERROR torch run exceeded {args.timeout_s}s", flush=True)
                failed = True
                break
            for pr in procs:
                if pr.exitcode not in (None, 0):
                    print(f"ERROR torch rank {procs.index(pr)} exited with "
                          f"{pr.exitcode}", flush=True)
                    failed = True
            time.sleep(0.05)
        ok = not failed and all(pr.exitcode == 0 for pr in procs)
    finally:
        stop_children()
    return 0 if ok else 1
