"""A plain torch.distributed program, changed only in its init line, that
python/tests/test_torch.py runs on every rank (under rankrun or LocalJob):

    torch_program.py ops         collectives, subgroups, object
                                 collectives: values checked exactly,
                                 "TORCH OK <rank>"
    torch_program.py ops-kill V  the same, then rank V kills itself
                                 (SIGKILL) while the others wait in an
                                 all_reduce: "KILLING V <time>", and each
                                 survivor "SURVIVOR <rank> <time> <error>"
    torch_program.py ops-raise V the same as ops-kill, but rank V ends
                                 of an uncaught exception ("RAISING V
                                 <time>"), not a signal
    torch_program.py ops-exit V  the same, rank V calling sys.exit(3)
                                 ("EXITING V <time>")
    torch_program.py node-kill   the same as ops-kill, but the test kills
                                 node 1 whole (its rankrun, daemon and
                                 ranks) once every rank printed "READY
                                 <rank> pid <pid>"; node 1's ranks wait
                                 for it, node 0's in an all_reduce
    torch_program.py tcp-kill V  the kill alone, rendezvous through torch
                                 alone (env://, TCPStore on rank 0), to
                                 compare
    torch_program.py recover V   (under rankrun --max_restarts, so the job
                                 recovers in place) steps of all_reduce on
                                 the world and on a subgroup, values
                                 checked; rank V kills itself at step
                                 KILL_AT of epoch 1 ("KILLING V <time>");
                                 each survivor catches EpochEndedError
                                 ("LOSS <rank> <error>"), rejoins, forms
                                 its groups again and serves on from the
                                 failed step with the same process and
                                 tensors ("RESUMED <rank> <step> <time>"),
                                 as does V's replacement; at the end
                                 "RECOVERED <rank> epoch <e> pid <pid>
                                 restarts <n>"

The rank and world size come from the rendezvous, never from the program.
"""

import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist


def init(tcp):
    timeout = datetime.timedelta(
        seconds=float(os.environ.get("TORCH_PROGRAM_TIMEOUT", "60")))
    if tcp:
        dist.init_process_group("gloo", init_method="env://",
                                rank=int(os.environ["RANK"]),
                                world_size=int(os.environ["WORLD_SIZE"]),
                                timeout=timeout)
    else:
        import rankd.torch  # noqa: F401 (registers rankd://)
        # TORCH_PROGRAM_INIT_METHOD: an explicit rankd://HOST:PORT?... URL
        # (test_torch.py), as a program outside a launcher would pass it.
        dist.init_process_group(
            "gloo",
            init_method=os.environ.get("TORCH_PROGRAM_INIT_METHOD", "rankd://"),
            timeout=timeout)
    return dist.get_rank(), dist.get_world_size()


def ops(rank, world):
    t = torch.arange(4, dtype=torch.float64) + 100 * rank
    dist.all_reduce(t)
    want = torch.arange(4, dtype=torch.float64) * world + \
        100 * sum(range(world))
    assert torch.equal(t, want), (t, want)

    parts = [torch.empty(3, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(parts, torch.full((3,), rank, dtype=torch.int64))
    for r, p in enumerate(parts):
        assert torch.equal(p, torch.full((3,), r, dtype=torch.int64)), parts

    b = torch.tensor([rank * 1.5, -2.0]) if rank == world - 1 else \
        torch.zeros(2)
    dist.broadcast(b, src=world - 1)
    assert torch.equal(b, torch.tensor([(world - 1) * 1.5, -2.0])), b

    # Subgroups: the even ranks and the odd ranks, every rank creating both.
    evens = dist.new_group(list(range(0, world, 2)))
    odds = dist.new_group(list(range(1, world, 2)))
    mine = evens if rank % 2 == 0 else odds
    members = list(range(rank % 2, world, 2))
    s = torch.tensor([float(rank)])
    dist.all_reduce(s, group=mine)
    assert s.item() == float(sum(members)), (s, members)
    dist.barrier(group=mine)
    dist.barrier()

    objects = [None] * world
    dist.all_gather_object(objects, {"rank": rank, "name": f"r{rank}"})
    assert objects == [{"rank": r, "name": f"r{r}"} for r in range(world)], \
        objects
    box = [{"from": 0, "values": [1, 2, 3]} if rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    assert box[0] == {"from": 0, "values": [1, 2, 3]}, box
    print(f"TORCH OK {rank}", flush=True)


def kill(rank, world, victim, how="kill"):
    # A launcher stops a failed rank's siblings with SIGTERM; a survivor
    # stays to report (rankrun sends SIGKILL after --stop_grace_ms).
    signal.signal(signal.SIGTERM, lambda *_: None)
    t = torch.ones(8)
    dist.all_reduce(t)
    assert t[0].item() == world
    dist.barrier()
    if how == "node":
        print(f"READY {rank} pid {os.getpid()}", flush=True)
        if rank >= world // 2:  # node 1: the test kills it
            time.sleep(600)
            os._exit(1)
    elif rank == victim:
        time.sleep(0.5)  # the others are inside all_reduce by then
        if how == "raise":
            print(f"RAISING {rank} {time.time():.6f}", flush=True)
            raise RuntimeError(f"rank {rank} gave up")  # uncaught
        if how == "exit":
            print(f"EXITING {rank} {time.time():.6f}", flush=True)
            sys.exit(3)
        print(f"KILLING {rank} {time.time():.6f}", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        dist.all_reduce(t)  # the victim never joins this one
        print(f"SURVIVOR {rank} NO ERROR", flush=True)
    except Exception as e:  # noqa: BLE001 (reported, not handled)
        ended = time.time()
        print(f"SURVIVOR {rank} {ended:.6f} {type(e).__name__}: "
              f"{str(e).splitlines()[0]}", flush=True)
    # A later collective fails too, without waiting.
    started = time.monotonic()
    try:
        dist.all_reduce(t)
        print(f"LATER {rank} NO ERROR", flush=True)
    except Exception as e:  # noqa: BLE001
        print(f"LATER {rank} {(time.monotonic() - started) * 1000:.0f} ms "
              f"{type(e).__name__}", flush=True)
    # Survivors stay up together until the slowest noticed, so that no
    # exit of theirs is what wakes another (a serving process stays up).
    time.sleep(float(os.environ.get("TORCH_PROGRAM_LINGER", "3")))
    os._exit(0)


STEPS = 12
KILL_AT = 5


def recover(rank, world, victim):
    import rankd.torch
    # What a serving process keeps across the recovery: its shard.
    weights = torch.full((1 << 16,), float(rank))
    where = weights.data_ptr()
    step, resumed_at = 0, None

    def form(step):
        """The subgroups, and the step every rank (re)starts at: the
        furthest any rank got (a replacement starts from 0)."""
        at = torch.tensor([step], dtype=torch.int64)
        dist.all_reduce(at, op=dist.ReduceOp.MAX)
        evens = dist.new_group(list(range(0, world, 2)))
        odds = dist.new_group(list(range(1, world, 2)))
        return int(at.item()), evens if rank % 2 == 0 else odds

    print(f"START {rank} pid {os.getpid()} epoch "
          f"{rankd.torch.joined_rank().epoch}", flush=True)
    step, mine = form(step)
    if rankd.torch.joined_rank().epoch > 1:
        resumed_at = step
    while step < STEPS:
        try:
            if rank == victim and step == KILL_AT and \
                    rankd.torch.joined_rank().epoch == 1:
                time.sleep(0.3)  # the others are inside all_reduce by then
                print(f"KILLING {rank} {time.time():.6f}", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            t = torch.full((4,), float(rank + 10 * step))
            dist.all_reduce(t)
            want = float(sum(range(world)) + 10 * step * world)
            assert torch.equal(t, torch.full((4,), want)), (step, t, want)
            s = torch.tensor([float(rank)])
            dist.all_reduce(s, group=mine)
            assert s.item() == float(sum(range(rank % 2, world, 2))), s
            if resumed_at == step:
                print(f"RESUMED {rank} {step} {time.time():.6f}", flush=True)
            step += 1
        except rankd.torch.EpochEndedError as e:
            print(f"LOSS {rank} {type(e).__name__}: "
                  f"{str(e).splitlines()[0]}", flush=True)
            rankd.torch.rejoin(timeout=60)
            init(tcp=False)
            step, mine = form(step)
            resumed_at = step
    assert weights.data_ptr() == where, "the shard was reallocated"
    assert torch.equal(weights, torch.full((1 << 16,), float(rank)))
    print(f"RECOVERED {rank} epoch {rankd.torch.joined_rank().epoch} "
          f"pid {os.getpid()} restarts "
          f"{os.environ.get('RANKD_RESTART_COUNT', '0')}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode not in ("ops", "ops-kill", "ops-raise", "ops-exit", "node-kill",
                    "tcp-kill", "recover"):
        sys.exit(f"unknown mode {mode!r}")
    rank, world = init(mode == "tcp-kill")
    if mode == "recover":
        recover(rank, world, int(sys.argv[2]))
        sys.exit(0)
    if mode != "tcp-kill":
        ops(rank, world)
    if mode == "ops":
        dist.destroy_process_group()
    else:
        kill(rank, world, int(sys.argv[2]) if len(sys.argv) > 2 else -1,
             {"ops-raise": "raise", "ops-exit": "exit",
              "node-kill": "node"}.get(mode, "kill"))
