"""torch.distributed with the NCCL backend on rankd (issue 37, part 6), on a
GPU host: a one-node job of 2 ranks on GPU 0 (each rank with its own
NCCL_HOSTID, so NCCL takes them for ranks of two hosts and lets them share
the one GPU; docs/nccl.md), each a plain torch program whose only rankd
line is its init:

    dist.init_process_group("nccl", init_method="rankd://")

1. all_reduce, all_gather and broadcast on CUDA tensors, values exact;
2. rank 1 kills itself (SIGKILL) while rank 0 waits in an all_reduce: rank
   0's pending collective must end within DEADLINE_S seconds with an error
   naming rank 1 (rankd.torch aborts the process groups when rankd reports
   the loss, where torch has _abort_process_group);
3. the same in a job that recovers in place (rankd --recovery=on; issue
   38): rank 0's error is an EpochEndedError, it calls rankd.torch.rejoin()
   and init_process_group again, this script starts rank 1's replacement,
   and both run an exact all_reduce at epoch 2, rank 0 in the same process
   with the same CUDA tensor.

The GPU kit's runner (tests/gpu/run.sh) runs it from a copy of the Python
package, with no Bazel and no pytest:

    RANKD_BIN_DIR=<kit bin/> RANKD_LIBRARY=<librankd.so> \\
    PYTHONPATH=python:python/tests python3 python/tests/torch_dist_nccl.py

It prints one last line, "PASSED", "SKIPPED: <why>" (no torch, no CUDA
device, no NCCL in this torch) or "FAILED: <why>", and exits 1 only for
FAILED; with $RANKD_REQUIRE_GPU=1 a missing device is FAILED. Run with
"rank" ("recover-rank") as its first argument it is the rank program of
steps 1-2 (3). It stops only the
processes it started (LocalJob, by pid). TORCH_DIST_BACKEND=gloo runs the
same on CPU tensors (a check of this script on a host without a GPU).
"""

import datetime
import os
import signal
import subprocess
import sys
import time

# How long the survivor's collective may take to end after the kill: the
# loss of a local rank reaches its daemon when the rank's connection
# closes (milliseconds); the rest is NCCL's abort.
DEADLINE_S = 10.0

BACKEND = os.environ.get("TORCH_DIST_BACKEND", "nccl")


def unavailable():
    """Why this host cannot run the check, or None."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:
        return f"torch is not importable under {sys.executable} ({e})"
    if BACKEND == "gloo":
        return None
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} has no usable CUDA device"
    if not dist.is_available() or not dist.is_nccl_available():
        return f"torch {torch.__version__} has no NCCL backend"
    return None


def rank_setup():
    """(torch, dist, device, sync) for a rank, its process group formed."""
    # Before anything initializes NCCL: a host id of this rank's own.
    local = int(os.environ["RANKD_LOCAL_RANK"])
    os.environ["NCCL_HOSTID"] = f"rankd-kit-torch-rank{local}"
    # A collective's wait blocks the host (so an abort ends it with an
    # error rather than leaving a stream waiting).
    os.environ.setdefault("TORCH_NCCL_BLOCKING_WAIT", "1")
    import torch
    import torch.distributed as dist
    import rankd.torch  # noqa: F401 (registers rankd://)

    if BACKEND == "nccl":
        torch.cuda.set_device(0)
        dev = torch.device("cuda", 0)
        sync = torch.cuda.synchronize
    else:
        dev = torch.device("cpu")
        sync = lambda: None  # noqa: E731
    dist.init_process_group(BACKEND, init_method="rankd://",
                            timeout=datetime.timedelta(seconds=30))
    return torch, dist, dev, sync


def rank_main():
    torch, dist, dev, sync = rank_setup()
    rank, world = dist.get_rank(), dist.get_world_size()

    t = torch.arange(1024, dtype=torch.float32, device=dev) + 1000 * rank
    dist.all_reduce(t)
    want = torch.arange(1024, dtype=torch.float32, device=dev) * world + \
        1000 * sum(range(world))
    assert torch.equal(t, want), "all_reduce is not exact"
    parts = [torch.empty(4, dtype=torch.int64, device=dev)
             for _ in range(world)]
    dist.all_gather(parts, torch.full((4,), rank, dtype=torch.int64,
                                      device=dev))
    for r, p in enumerate(parts):
        assert torch.equal(p.cpu(), torch.full((4,), r, dtype=torch.int64))
    b = torch.full((3,), 7.5 if rank == 0 else 0.0, device=dev)
    dist.broadcast(b, src=0)
    assert torch.equal(b.cpu(), torch.full((3,), 7.5)), b
    sync()
    print(f"TORCH {BACKEND.upper()} OK {rank}", flush=True)

    # The kill drill.
    dist.barrier()
    sync()
    victim = world - 1
    if rank == victim:
        time.sleep(1.0)  # the others are waiting in the all_reduce by then
        print(f"KILLING {rank} {time.time():.6f}", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    started = time.time()
    try:
        dist.all_reduce(t)  # the victim never joins this one
        sync()
        print(f"SURVIVOR {rank} NO ERROR", flush=True)
    except Exception as e:  # noqa: BLE001 (reported, not handled)
        print(f"SURVIVOR {rank} {time.time():.6f} "
              f"{time.time() - started:.3f} {type(e).__name__}: "
              f"{str(e).splitlines()[0] if str(e) else ''}", flush=True)
    os._exit(0)


def recover_rank_main():
    """Step 3's rank program: rank 1 of epoch 1 kills itself; rank 0
    rejoins; rank 1's replacement (started by recovery_failures) joins
    epoch 2 directly."""
    torch, dist, dev, sync = rank_setup()
    import rankd.torch
    rank, world = dist.get_rank(), dist.get_world_size()
    epoch = rankd.torch.joined_rank().epoch

    def exact_all_reduce(step):
        t = torch.full((256,), float(rank + 10 * step), device=dev)
        dist.all_reduce(t)
        sync()
        want = float(sum(range(world)) + 10 * step * world)
        assert torch.equal(t.cpu(), torch.full((256,), want)), (step, t)

    # What a serving process keeps across the recovery: its weights.
    weights = torch.full((1 << 16,), float(rank), device=dev)
    where = weights.data_ptr()
    if epoch == 1:
        exact_all_reduce(0)
        dist.barrier()
        sync()
        if rank == world - 1:
            time.sleep(1.0)  # the others are waiting in the all_reduce
            print(f"KILLING {rank} {time.time():.6f}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            exact_all_reduce(1)
            print(f"LOSS {rank} NO ERROR", flush=True)
            os._exit(1)
        except rankd.torch.EpochEndedError as e:
            print(f"LOSS {rank} {time.time():.6f} {type(e).__name__}: "
                  f"{str(e).splitlines()[0]}", flush=True)
        epoch = rankd.torch.rejoin(timeout=60)
        dist.init_process_group(BACKEND, init_method="rankd://",
                                timeout=datetime.timedelta(seconds=30))
    exact_all_reduce(1)
    sync()
    assert weights.data_ptr() == where, "the weights were reallocated"
    assert torch.equal(weights.cpu(), torch.full((1 << 16,), float(rank)))
    print(f"RECOVERED {rank} epoch {epoch} {time.time():.6f}", flush=True)
    dist.destroy_process_group()


def survivor_failures(step, killed, ended_at, error, kind, outcome):
    """What is wrong with rank 0's `error` (its collective ended at
    `ended_at`, s), given the victim's KILLING line: later than DEADLINE_S
    after the kill, or not a `kind` whose words name rank 1 with
    `outcome` (" failed (", " epoch 1 ended ("). `step` prefixes it."""
    delay = ended_at - float(killed.split()[2])
    print(f"{step}rank 0's collective ended {delay * 1000:.0f} ms after the "
          f"kill: {error}")
    found = []
    if delay > DEADLINE_S:
        found.append(f"{step}rank 0's error came {delay:.1f} s after the "
                     f"kill (at most {DEADLINE_S} s)")
    if not error.startswith(kind + ":") or outcome not in error or \
            "rank 1" not in error:
        found.append(f"{step}rank 0's error is not a {kind} naming rank 1 "
                     f"in rankd's words ({outcome.strip()}): {error}")
    return found


def recovery_failures(env, timeout):
    """Step 3; returns what went wrong (empty when it passed)."""
    from local_job import LocalJob
    script = os.path.abspath(__file__)
    with LocalJob("py-torch-dist-recover", 1, 2,
                  daemon_flags=["--kv_shared_prefixes=torch/",
                                "--recovery=on",
                                "--recovery_deadline_ms=60000"]) as job:
        deadline = time.monotonic() + timeout
        survivor = job.start_rank(script, 0, 0, "recover-rank", env=env)
        job.start_rank(script, 0, 1, "recover-rank", env=env)
        while "LOSS 0 " not in job.log("rank0.log"):
            if survivor.poll() is not None or time.monotonic() > deadline:
                return ["step 3: rank 0 saw no loss:\n"
                        f"{job.log('rank0.log')[-3000:]}\n"
                        f"{job.log('rank1.log')[-2000:]}"]
            time.sleep(0.05)
        replacement = job.start_rank(script, 0, 1, "recover-rank", env=env,
                                     log_name="rank1.replacement.log")
        for p in (survivor, replacement):
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        out0 = job.log("rank0.log")
        out1 = job.log("rank1.log")
        replaced = job.log("rank1.replacement.log")
    found = []
    loss = [line for line in out0.splitlines() if line.startswith("LOSS 0 ")]
    killed = [line for line in out1.splitlines()
              if line.startswith("KILLING 1 ")]
    if not loss or not killed or "NO ERROR" in loss[0]:
        return [f"step 3: the kill drill did not run:\n{out0[-3000:]}"]
    words = loss[0].split(" ", 3)
    found += survivor_failures("step 3: ", killed[0], float(words[2]),
                               words[3], "EpochEndedError", " epoch 1 ended (")
    for r, output in ((0, out0), (1, replaced)):
        if f"RECOVERED {r} epoch 2 " not in output:
            found.append(f"step 3: rank {r} did not serve at epoch 2:\n"
                         f"{output[-3000:]}")
    return found


def failures():
    """Runs the job; returns what went wrong (empty when it passed)."""
    import rankd
    from local_job import LocalJob
    here = os.path.dirname(os.path.abspath(__file__))
    package = os.path.dirname(os.path.dirname(os.path.abspath(
        rankd.__file__)))
    env = {"PYTHONPATH": os.pathsep.join([package, here])}
    # All steps within the GPU runner's 40 s, so that this script, not the
    # runner, stops the ranks of a hung run; the CPU test, under a
    # sanitizer on a loaded machine, gives more (RANKD_KIT_RANK_TIMEOUT_S).
    # Steps 1-2 may take a little over half of it, step 3 the rest.
    total = float(os.environ.get("RANKD_KIT_RANK_TIMEOUT_S", "34"))
    deadline = time.monotonic() + total
    with LocalJob("py-torch-dist-nccl", 1, 2,
                  daemon_flags=["--kv_shared_prefixes=torch/"]) as job:
        results = job.run_ranks(
            os.path.abspath(__file__), "rank", env=env,
            timeout=0.55 * total)
    found = []
    out0 = results[0][1]
    for r, (_, output) in enumerate(results):
        if f"TORCH {BACKEND.upper()} OK {r}" not in output:
            found.append(f"rank {r}: no exact collectives:\n{output[-3000:]}")
    killed = [line for line in results[1][1].splitlines()
              if line.startswith("KILLING 1 ")]
    survived = [line for line in out0.splitlines()
                if line.startswith("SURVIVOR 0 ")]
    if found:
        return found
    if not killed or not survived:
        return [f"the kill drill did not run:\n{out0[-3000:]}"]
    words = survived[0].split(" ", 4)
    if words[2] == "NO":
        return [f"rank 0's collective ended without an error: {survived[0]}"]
    found += survivor_failures("", killed[0], float(words[2]), words[4],
                               "JobFailedError", " failed (")
    left = deadline - time.monotonic()
    if left <= 0:
        return [f"steps 1-2 took the whole {total:g} s; step 3 did not run"]
    return found + recovery_failures(env, left)


def main():
    if sys.argv[1:] == ["rank"]:
        rank_main()
        return 0
    if sys.argv[1:] == ["recover-rank"]:
        recover_rank_main()
        return 0
    why = unavailable()
    if why is not None:
        if os.environ.get("RANKD_REQUIRE_GPU") == "1":
            print(f"FAILED: RANKD_REQUIRE_GPU=1 but {why}")
            return 1
        print(f"SKIPPED: {why}")
        return 0
    found = failures()
    for failure in found:
        print(failure)
    print(f"FAILED: {'; '.join(f.splitlines()[0] for f in found)}"
          if found else "PASSED")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
