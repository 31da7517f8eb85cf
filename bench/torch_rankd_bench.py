#!/usr/bin/python3
"""torch.distributed on rankd versus torch alone, in one run:

1. init_process_group("gloo") through init_method="rankd://" versus
   "env://" (TCPStore hosted by rank 0), at each of --sizes ranks, with the
   rankd daemons already running (1 daemon x 2, 2 x 4, 4 x 4: at most 4
   ranks per daemon). Rank processes are forked after `import torch` and
   `import rankd.torch`, wait for a shared start time, then call
   init_process_group; the time is from the start time until the last rank
   returned. Each system runs --repeat times per size, alternating; a rankd
   repetition uses a fresh job (a rank joins a job once). With
   --compare_barrier_poll, rankd:// also runs as before its store answered
   torch's store-barrier reads by waiting in the daemon ("rankd://, poll":
   torch polls the counter every 10 ms), in the same run. "rankd://" sends
   the store's calls over the daemon's key-value channel (a framed Unix
   socket, daemon/transport/kv_socket.h); "rankd://, grpc" is the same
   build with RANKD_KV_CHANNEL=0, every store call a gRPC unary call as
   before the channel existed.
2. Store latency: set (a new key each time), get (an existing key) and add
   of a 100-byte value, rankd.torch.Store (over the channel and over gRPC,
   from a rank of the coordinator's node and from one of a node that
   forwards to it) versus a TCPStore, all served on this machine, from one
   process.

With --spawn, each rank is a fresh process that imports torch itself (as
under a launcher), and the start time is given once every rank imported;
forking (the default) makes a rank's first allocations copy its parent's
pages, which costs rankd's gRPC set-up about 10 ms more CPU per rank.

With --breakdown it measures only where the time goes: per size and
repetition, env://'s TCPStore creation against torch's own work, and for
rankd:// (channel) each rank's rankd.join, its store calls (how many, how
long, the key-value calls under them), the rest (torch's own work), each
rank's CPU time and the daemons' (from the start time on).

Prints the medians and the ratios rankd / torch. Needs Debian's
python3-torch and a build (RANKD_BIN_DIR, RANKD_LIBRARY as for
python/tests):

    bazel build -c opt //capi:librankd.so //daemon:rankd //client:rankctl
    B=$(bazel info -c opt bazel-bin)
    RANKD_BIN_DIR=$B RANKD_LIBRARY=$B/capi/librankd.so \\
      PYTHONPATH=python:python/tests /usr/bin/python3 \\
      bench/torch_rankd_bench.py --sizes=2,8,16 --repeat=3

It stops only the processes it started, by pid.
"""

import argparse
import datetime
import functools
import importlib
import json
import os
import resource
import signal
import select
import socket
import statistics
import subprocess
import sys
import time
import traceback

import torch  # noqa: F401  (imported once; the ranks inherit it)
import torch.distributed as dist

rendezvous_module = importlib.import_module("torch.distributed.rendezvous")

import rankd
import rankd.torch  # noqa: F401  (registers rankd://)
from local_job import LocalJob


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def layout(size):
    nnodes = 1 if size <= 4 else size // 4
    return nnodes, size // nnodes


class _Phases:
    """Per-rank time spent in rankd.join and in the store's calls (the
    torch Store methods and the rankd.Rank key-value calls under them),
    for --breakdown."""

    def __init__(self):
        self.join = 0.0
        self.store = {}  # torch Store method -> [calls, seconds]
        self.kv = {}  # rankd.Rank kv_* method -> [calls, seconds]

    def wrap(self, owner, name, table):
        fn = getattr(owner, name)

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                entry = table.setdefault(name, [0, 0.0])
                entry[0] += 1
                entry[1] += time.perf_counter() - t
        setattr(owner, name, timed)

    def install(self):
        join = rankd.torch.join

        def timed_join(*args, **kwargs):
            t = time.perf_counter()
            try:
                return join(*args, **kwargs)
            finally:
                self.join += time.perf_counter() - t
        rankd.torch.join = timed_join
        for name in ("set", "get", "add", "compare_set", "delete_key",
                     "check", "wait", "num_keys"):
            self.wrap(rankd.torch_store.Store, name, self.store)
        for name in ("kv_set", "kv_get", "kv_add", "kv_delete",
                     "kv_compare_set", "kv_compare_delete", "kv_count"):
            self.wrap(rankd.Rank, name, self.kv)

    def summary(self):
        return {"join": self.join,
                "store_calls": sum(c for c, _ in self.store.values()),
                "store_s": sum(t for _, t in self.store.values()),
                "kv_calls": sum(c for c, _ in self.kv.values()),
                "kv_by_op": {k: c for k, (c, _) in self.kv.items()}}


def rank_main(system, rank, world, start, env, out_fd, breakdown=False):
    os.environ.update(env)
    phases = None
    store_s = [0.0]
    if breakdown and system.startswith("rankd"):
        phases = _Phases()
        phases.install()
    elif breakdown:
        # env://'s TCPStore: its creation (and connect race) is the part
        # a rankd:// rank replaces with rankd.join.
        create = rendezvous_module._create_c10d_store

        def timed_create(*args, **kwargs):
            t = time.perf_counter()
            try:
                return create(*args, **kwargs)
            finally:
                store_s[0] += time.perf_counter() - t
        rendezvous_module._create_c10d_store = timed_create
    if system == "rankd-poll":
        # No key is a barrier key: torch's own 10 ms polling.
        rankd.torch_store._BARRIER_KEY = "\0never"
    delay = start - time.time()
    if delay > 0:
        time.sleep(delay)
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    timeout = datetime.timedelta(seconds=120)
    if system.startswith("rankd"):
        dist.init_process_group("gloo", init_method="rankd://",
                                timeout=timeout)
    else:
        dist.init_process_group("gloo", init_method="env://", rank=rank,
                                world_size=world, timeout=timeout)
    end = time.time()
    extra = ""
    if breakdown:
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
        extra = " " + json.dumps({"init": end - start, "cpu": cpu,
                                  "tcpstore": store_s[0],
                                  "os_threads": len(os.listdir(
                                      "/proc/self/task")),
                                  **(phases.summary() if phases else {})})
    os.write(out_fd, f"{rank} {end}{extra}\n".encode())
    dist.barrier()  # nobody leaves while another still initializes
    dist.destroy_process_group()
    os._exit(0)


def _process_cpu(pids):
    """Seconds of CPU (user + system) the processes `pids` used so far."""
    ticks = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


# With --spawn, rank processes are started fresh (python3 this file
# --rank_child), each importing torch itself, as a launcher starts ranks,
# instead of forked from this process: a forked rank's first allocations
# copy its parent's pages (about 10 ms more CPU for rankd's gRPC set-up).
SPAWN = False


def spawn_ranks(system, size, envs, out_fd, breakdown, pids):
    """Starts `size` fresh rank processes, waits until each imported torch
    and rankd.torch (at most 300 s), then gives them all one start time,
    which it returns. Appends their pids to `pids`."""
    children = []
    for _ in range(size):
        child = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--rank_child"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, pass_fds=(out_fd,))
        children.append(child)
        pids.append(child.pid)
    deadline = time.monotonic() + 300
    for child in children:
        ready, _, _ = select.select([child.stdout], [], [],
                                    max(0.0, deadline - time.monotonic()))
        if not ready or child.stdout.readline().strip() != b"ready":
            raise RuntimeError(f"{system} at {size}: a rank did not start")
    start = time.time() + 0.3
    for r, child in enumerate(children):
        child.stdin.write(json.dumps({
            "system": system, "rank": r, "world": size, "start": start,
            "env": envs[r], "out_fd": out_fd,
            "breakdown": breakdown}).encode() + b"\n")
        child.stdin.close()
        child.stdout.close()
    return start


def rank_child():
    """A --spawn rank: says it is ready, reads its part, runs rank_main."""
    sys.stdout.buffer.write(b"ready\n")
    sys.stdout.flush()
    a = json.loads(sys.stdin.buffer.readline())
    try:
        rank_main(a["system"], a["rank"], a["world"], a["start"], a["env"],
                  a["out_fd"], a["breakdown"])
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(1)


def one_init(system, size, breakdown=None):
    """Seconds from the start time until every rank's init returned. With
    `breakdown` (a list), appends each rank's _Phases summary to it."""
    nnodes, nproc = layout(size)
    job = None
    envs = []
    if system.startswith("rankd"):
        grpc = {"RANKD_KV_CHANNEL": "0"} if system == "rankd-grpc" else {}
        # rankd's default heartbeat timeout (LocalJob's 1 s is for tests).
        job = LocalJob(f"bench-{os.getpid()}-{time.monotonic_ns()}", nnodes,
                       nproc, daemon_flags=["--kv_shared_prefixes=torch/",
                                            "--heartbeat_timeout_ms=5000"])
        job.start()
        for r in range(size):
            n, local = divmod(r, nproc)
            envs.append({"RANKD_TARGET": job.socket_target(n),
                         "RANKD_JOB_ID": job.job_id,
                         "RANKD_LOCAL_RANK": str(local),
                         "RANKD_RANK_TOKEN": job.rank_token(n, r),
                         **grpc})
    else:
        port = free_port()
        envs = [{"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
                for _ in range(size)]
    daemon_pids = [d.pid for d in job._daemons] if job is not None else []
    read_fd, write_fd = os.pipe()
    start = time.time() + 1.0 + 0.05 * size
    pids = []
    try:
        if SPAWN:
            start = spawn_ranks(system, size, envs, write_fd,
                                breakdown is not None, pids)
        for r in range(0 if SPAWN else size):
            pid = os.fork()
            if pid == 0:
                os.close(read_fd)
                try:
                    rank_main(system, r, size, start, envs[r], write_fd,
                              breakdown is not None)
                except BaseException:
                    traceback.print_exc()
                finally:
                    os._exit(1)
            pids.append(pid)
        os.close(write_fd)
        # The daemons' CPU from the start time on (not their idle wait).
        time.sleep(max(0.0, start - time.time() - 0.5))
        idle0 = [_process_cpu([p]) for p in daemon_pids]
        time.sleep(max(0.0, start - time.time()))
        daemon_cpu0 = [_process_cpu([p]) for p in daemon_pids]
        ends = []
        with os.fdopen(read_fd) as f:
            for line in f:
                fields = line.split(maxsplit=2)
                ends.append(float(fields[1]))
                if breakdown is not None and len(fields) > 2:
                    breakdown.append(json.loads(fields[2]))
        failed = 0
        for pid in pids:
            _, status = os.waitpid(pid, 0)
            failed += status != 0
        pids = []
        if failed or len(ends) != size:
            raise RuntimeError(f"{system} at {size}: {failed} ranks failed")
        if breakdown is not None and job is not None:
            breakdown.append({
                "daemon_cpu": [_process_cpu([p]) - c for p, c in
                               zip(daemon_pids, daemon_cpu0)],
                "daemon_idle": [c - i for c, i in zip(daemon_cpu0, idle0)]})
        return max(ends) - start
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        if job is not None:
            job.stop()


STORE_OPS = ("set", "get", "add")


def measure_store(store, iterations):
    """{op: median seconds} of `store`'s set, get and add."""
    result = {}
    value = b"v" * 100
    store.set("fixed", value)
    for op in STORE_OPS:
        times = []
        for i in range(iterations):
            t = time.perf_counter()
            if op == "set":
                store.set(f"k{i}", value)
            elif op == "get":
                store.get("fixed")
            else:
                store.add("counter", 1)
            times.append(time.perf_counter() - t)
        result[op] = statistics.median(times)
    return result


def store_latency(iterations):
    """{(system, op): median seconds} for set, get and add: "rankd" and
    "rankd-grpc" from a rank of the coordinator's node (the daemon answers
    itself), "rankd-fwd" and "rankd-grpc-fwd" from a rank of the other node
    (its daemon forwards each call to the coordinator over gRPC), "torch"
    from a TCPStore client in the process that serves it."""
    result = {}
    for system in ("rankd", "rankd-grpc"):
        # A fresh job each: the path is chosen when the rank joins.
        with LocalJob(f"bench-store-{system}-{os.getpid()}", 2, 1,
                      daemon_flags=["--kv_shared_prefixes=torch/"]) as job:
            # Both ranks stay joined until both measured: a rank that
            # leaves drains the job.
            ranks = []
            try:
                for node in (0, 1):
                    os.environ.update({
                        "RANKD_TARGET": job.socket_target(node),
                        "RANKD_JOB_ID": job.job_id,
                        "RANKD_LOCAL_RANK": "0",
                        "RANKD_RANK_TOKEN": job.rank_token(node, node),
                        "RANKD_KV_CHANNEL":
                            "0" if system == "rankd-grpc" else "1"})
                    ranks.append(rankd.join(wait_for_world=0))
                for node, (rank, suffix) in enumerate(zip(ranks,
                                                          ("", "-fwd"))):
                    store = rankd.torch.Store(rank,
                                              prefix=f"torch/bench{node}/")
                    pids = [d.pid for d in job._daemons]
                    cpu0 = [_process_cpu([p]) for p in pids]
                    for op, t in measure_store(store, iterations).items():
                        result[(system + suffix, op)] = t
                    # Daemon CPU per call (coordinator's, the other's),
                    # over the 3 * iterations + 1 calls measure_store made.
                    result[(system + suffix, "daemon_cpu")] = [
                        (_process_cpu([p]) - c) / (3 * iterations + 1)
                        for p, c in zip(pids, cpu0)]
            finally:
                for rank in ranks:
                    rank.close()
    for op, t in measure_store(dist.TCPStore("127.0.0.1", 0, 1, True),
                               iterations).items():
        result[("torch", op)] = t
    return result


def print_breakdown(sizes, repeat):
    """Where a rankd:// init's time goes: per size and repetition, the
    whole init (start time to the last rank's return) and, as medians over
    the ranks, rankd.join, the torch store's calls (count and time), the
    key-value calls under them, and the rest (torch's own work)."""
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, load "
          f"{os.getloadavg()[0]:.1f}; per-rank medians (max) in ms",
          flush=True)
    for size in sizes:
        for _ in range(repeat):
            ranks = []
            total = one_init("torch", size, ranks)
            rest = [r["init"] - r["tcpstore"] for r in ranks]
            print(f"{size:>3} ranks env://: init {total * 1e3:.0f}; TCPStore "
                  f"{statistics.median(r['tcpstore'] for r in ranks) * 1e3:.0f}"
                  f" ({max(r['tcpstore'] for r in ranks) * 1e3:.0f}); rest "
                  f"{statistics.median(rest) * 1e3:.0f} ({max(rest) * 1e3:.0f})"
                  f"; cpu "
                  f"{statistics.median(r['cpu'] for r in ranks) * 1e3:.0f}; "
                  f"threads {ranks[0]['os_threads']}", flush=True)
            ranks = []
            total = one_init("rankd", size, ranks)
            daemons = ranks.pop()
            daemon_cpu = sum(daemons["daemon_cpu"])
            med = lambda k: statistics.median(r[k] for r in ranks)  # noqa
            top = lambda k: max(r[k] for r in ranks)  # noqa
            rest = [r["init"] - r["join"] - r["store_s"] for r in ranks]
            ops = {}
            for r in ranks:
                for op, c in r["kv_by_op"].items():
                    ops[op] = ops.get(op, 0) + c
            print(f"{size:>3} ranks: init {total * 1e3:.0f}; join "
                  f"{med('join') * 1e3:.0f} ({top('join') * 1e3:.0f}); store "
                  f"{med('store_calls'):.0f} calls {med('store_s') * 1e3:.0f} "
                  f"({top('store_s') * 1e3:.0f}); kv calls "
                  f"{med('kv_calls'):.0f} "
                  f"{ {k: round(v / size, 1) for k, v in ops.items()} }; "
                  f"cpu {med('cpu') * 1e3:.0f}, daemons' "
                  f"{daemon_cpu * 1e3:.0f} "
                  f"{[round(c * 1e3) for c in daemons['daemon_cpu']]} (idle "
                  f"{[round(c * 1e3) for c in daemons['daemon_idle']]} in "
                  f"the 0.5 s before); threads "
                  f"{ranks[0]['os_threads']}; "
                  f"rest {statistics.median(rest) * 1e3:.0f} "
                  f"({max(rest) * 1e3:.0f})  load {os.getloadavg()[0]:.1f}",
                  flush=True)
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="2,8,16")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--iterations", type=int, default=1000)
    p.add_argument("--compare_barrier_poll", action="store_true")
    p.add_argument("--breakdown", action="store_true",
                   help="only rankd:// (channel): per-phase times")
    p.add_argument("--spawn", action="store_true",
                   help="start each rank fresh instead of forking it")
    args = p.parse_args()
    global SPAWN
    SPAWN = args.spawn
    if args.breakdown:
        return print_breakdown([int(s) for s in args.sizes.split(",")],
                               args.repeat)
    systems = ["rankd", "rankd-grpc", "torch"]
    if args.compare_barrier_poll:
        systems.insert(1, "rankd-poll")
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, load "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    print("init_process_group (s, median of %d; min-max)" % args.repeat)
    names = {"rankd": "rankd://", "rankd-grpc": "rankd://, grpc",
             "rankd-poll": "rankd://, poll", "torch": "env://"}
    print(f"{'ranks':>5} " + " ".join(f"{names[s]:>22}" for s in systems) +
          " " + " ".join(f"{s + '/torch':>17}" for s in systems[:-1]))
    for size in [int(s) for s in args.sizes.split(",")]:
        times = {s: [] for s in systems}
        for _ in range(args.repeat):
            for system in systems:
                times[system].append(one_init(system, size))
        med = {s: statistics.median(t) for s, t in times.items()}
        cells = [f"{med[s]:.3f} ({min(times[s]):.3f}-{max(times[s]):.3f})"
                 for s in systems]
        ratios = [f"{med[s] / med['torch']:>16.2f}x" for s in systems[:-1]]
        print(f"{size:>5} " + " ".join(f"{c:>22}" for c in cells) + " " +
              " ".join(ratios) + f"  (load {os.getloadavg()[0]:.1f})",
              flush=True)
    lat = store_latency(args.iterations)
    print(f"store latency (median of {args.iterations}, microseconds)")
    print("  (rankd: channel / grpc, from the coordinator's node; fwd: from "
          "the other node)")
    for op in STORE_OPS:
        us = {k: v * 1e6 for (k, o), v in lat.items() if o == op}
        t = us["torch"]
        print(f"  {op}: rankd {us['rankd']:.0f} / {us['rankd-grpc']:.0f}, "
              f"fwd {us['rankd-fwd']:.0f} / {us['rankd-grpc-fwd']:.0f}, "
              f"TCPStore {t:.0f}; ratio {us['rankd'] / t:.2f}x / "
              f"{us['rankd-grpc'] / t:.2f}x", flush=True)
    print("  daemons' CPU per call (us; coordinator's daemon + the other's):")
    for system in ("rankd", "rankd-grpc", "rankd-fwd", "rankd-grpc-fwd"):
        cpu = [c * 1e6 for c in lat[(system, "daemon_cpu")]]
        print(f"    {system}: {cpu[0]:.0f} + {cpu[1]:.0f}", flush=True)
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--rank_child"]:
        rank_child()
    sys.exit(main())
