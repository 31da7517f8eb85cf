"""torch.distributed on rankd (rankd.torch) with Debian's python3-torch
(Gloo), through real daemons:

- 2 nodes x 2 ranks under two rankrun processes: init_process_group via
  rankd://, collectives with exact values, subgroups, object collectives,
  then the kill drill: a rank killed with SIGKILL, every survivor's pending
  and later collective fails naming it in rankd's words, nothing left
  running; with RANKD_TORCH_COMPARE=1 also the same drill with torch alone
  (env://, TCPStore), timed in the same run, for comparison;
- the same drill with a victim that ends of an uncaught exception, or of
  sys.exit(3): named lost too (it must not leave the job);
- recovering in place (rankrun --max_restarts=1): the survivors of a
  killed rank catch EpochEndedError, rankd.torch.rejoin() and
  init_process_group again, and serve on with their processes and
  tensors, beside the killed rank's replacement; a job that recovers by
  domain is refused;
- rankd:// URL parameters: unknown, repeated or bad ones refused;
- store conformance: the same cases on rankd.torch.Store and on torch's
  TCPStore (the multi-, append- and clone forms where this torch has
  them), and the store's own behaviour: barrier reads, NUL keys, errors
  as RuntimeErrors, JobFailedError after a lost rank;
- torch 2.x's paths with its API stood in on this torch (1.13): the
  process-group abort at a failure, the barrier read's rule, and store
  errors that are torch 2.x's DistStoreError.

Skipped where torch is not installed.
"""

import datetime
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

import rankd  # noqa: E402
from local_job import LocalJob, _binary, _free_port, _native_env  # noqa: E402

PROGRAM = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                       "torch_program.py")
PYTHONPATH = os.path.dirname(os.path.dirname(os.path.abspath(rankd.__file__)))
VICTIM = 2  # node 1's first rank: node 0's ranks learn of it from rankd
# One heartbeat timeout (rankd's default, 2 s) plus a margin: every
# survivor's pending collective must end within it.
SURVIVOR_LIMIT_S = 6.0


def _start_two_nodes(tmp, job_id, args, env=None, rankrun_args=()):
    """Starts `args` (after python3 PROGRAM) on 2 nodes x 2 ranks: one
    rankrun per node (with `rankrun_args` too), each starting its node's
    daemon. Returns [(rankrun process, its output file)] by node."""
    rankrun = _binary("rankrun", "launcher")
    rankctl = _binary("rankctl", "client")
    creds = os.path.join(tmp, "creds")
    subprocess.run([rankctl, "credentials", "create", creds], check=True,
                   stdout=subprocess.DEVNULL, env=_native_env())
    coordinator = f"127.0.0.1:{_free_port()}"
    e = dict(_native_env(), PYTHONPATH=PYTHONPATH, **(env or {}))
    # A sanitizer build's librankd.so needs its runtime preloaded into
    # Python (run_pytest.sh), not into rankrun and rankd.
    python = ["/usr/bin/python3"]
    if os.environ.get("LD_PRELOAD"):
        python = ["env", f"LD_PRELOAD={os.environ['LD_PRELOAD']}"] + python
    procs = []
    for node in range(2):
        out = open(os.path.join(tmp, f"node{node}.out"), "wb")
        procs.append((subprocess.Popen(
            [rankrun, "--nnodes=2", f"--node_rank={node}",
             "--nproc_per_node=2", "--daemon=start", f"--job_id={job_id}",
             f"--coordinator={coordinator}", f"--credentials_dir={creds}",
             f"--rankd={_binary('rankd', 'daemon')}",
             f"--rankd_log={tmp}/rankd{node}.log", "--stop_grace_ms=8000",
             # The coordinator stays until node 1's ranks left.
             f"--exit_delay_ms={2000 if node == 0 else 0}", *rankrun_args,
             "--",
             *python, PROGRAM, *args],
            stdout=out, stderr=subprocess.STDOUT, env=e), out))
    return procs


def _finish(procs, timeout=150):
    """Waits for the rankruns of _start_two_nodes (killing one still
    running after `timeout` s); returns their (exit status, output)."""
    results = []
    for p, out in procs:
        try:
            code = p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            code = p.wait()
        out.close()
        with open(out.name, errors="replace") as f:
            results.append((code, f.read()))
    return results


def _run_two_nodes(tmp, job_id, args, env=None, timeout=150,
                   rankrun_args=()):
    """Runs `args` on 2 nodes x 2 ranks (_start_two_nodes) to the end.
    Returns the two rankruns' (exit status, output)."""
    return _finish(_start_two_nodes(tmp, job_id, args, env, rankrun_args),
                   timeout)


def _pids_of(pattern):
    """Processes still running whose command line contains `pattern`."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if pattern.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


def _survivor_delays(output):
    """{rank: (seconds from the kill to its error, error line)}."""
    killed = float(re.search(r"(?:KILLING|RAISING|EXITING) \d+ ([0-9.]+)",
                             output).group(1))
    return {int(r): (float(t) - killed, line) for r, t, line in re.findall(
        r"SURVIVOR (\d+) ([0-9.]+) (.*)", output)}


@pytest.fixture
def tmp():
    path = tempfile.mkdtemp(prefix="rankd-torch-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_torch_on_two_nodes_then_a_lost_rank_is_named(tmp):
    job = "torch-2x2"
    results = _run_two_nodes(tmp, job, ["ops-kill", str(VICTIM)])
    output = "\n".join(out for _, out in results)
    for r in range(4):
        assert f"TORCH OK {r}" in output, output
    # The victim's node reports its death by signal; node 0 exits 0.
    assert results[0][0] == 0, output
    assert results[1][0] == 128 + 9, output
    delays = _survivor_delays(output)
    assert sorted(delays) == [0, 1, 3], output
    for r, (seconds, line) in delays.items():
        assert line.startswith(
            "JobFailedError: ABORTED: torch.distributed.all_reduce: job "
            f"{job} failed (MEMBER_LOST, node 1, rank {VICTIM}, "), line
        assert f"rank {VICTIM} (pid " in line, line
        assert 0 <= seconds < SURVIVOR_LIMIT_S, (r, seconds, output)
    for r in (0, 1, 3):
        assert re.search(rf"LATER {r} \d+ ms JobFailedError", output), output
    print("rankd: kill -9 of rank %d to each survivor's error: %s" % (
        VICTIM, ", ".join(f"rank {r} {s * 1000:.0f} ms"
                          for r, (s, _) in sorted(delays.items()))))
    assert _pids_of(PROGRAM) == [], "rank processes left running"


def test_a_lost_node_is_named_within_a_heartbeat_timeout(tmp):
    # Node 1 dies whole (kill -9 of its rankrun, daemon and both ranks)
    # while node 0's ranks wait in an all_reduce: rankd names the node
    # lost and every survivor's collective ends with it.
    job = "torch-node"
    procs = _start_two_nodes(tmp, job, ["node-kill"])
    ready, daemon = {}, None
    try:
        deadline = time.monotonic() + 120
        while len(ready) < 4:
            assert time.monotonic() < deadline, [
                open(out.name, errors="replace").read() for _, out in procs]
            time.sleep(0.05)
            for _, out in procs:
                with open(out.name, errors="replace") as f:
                    ready.update({int(r): int(pid) for r, pid in re.findall(
                        r"READY (\d+) pid (\d+)", f.read())})
        time.sleep(0.5)  # node 0's ranks are inside all_reduce by then
        with open(procs[1][1].name, errors="replace") as f:
            started = re.search(r"started rankd \(pid (\d+)\)", f.read())
        assert started, "node 1's rankrun named no daemon"
        daemon = int(started.group(1))
        killed = time.time()
        for pid in (procs[1][0].pid, daemon, ready[2], ready[3]):
            os.kill(pid, signal.SIGKILL)
    except BaseException:
        # Stops what this test started before failing: both rankruns and
        # node 1's daemon and ranks (node 0's go with their rankrun).
        for pid in [p.pid for p, _ in procs] + [daemon] + [
                ready.get(r) for r in (2, 3)]:
            if pid is not None:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        _finish(procs, timeout=30)
        raise
    results = _finish(procs)
    output = "\n".join(out for _, out in results)
    assert results[0][0] == 0, output
    delays = {int(r): (float(t) - killed, line) for r, t, line in
              re.findall(r"SURVIVOR (\d+) ([0-9.]+) (.*)", output)}
    assert sorted(delays) == [0, 1], output
    for r, (seconds, line) in delays.items():
        assert re.match(
            r"JobFailedError: ABORTED: torch\.distributed\.all_reduce: job "
            rf"{job} failed \(NODE_LOST, node 1, ranks 2,3, ", line), line
        assert 0 <= seconds < SURVIVOR_LIMIT_S, (r, seconds, output)
    for r in (0, 1):
        assert re.search(rf"LATER {r} \d+ ms JobFailedError", output), output
    print("rankd: kill -9 of node 1 to each survivor's error: %s" % ", ".join(
        f"rank {r} {s * 1000:.0f} ms" for r, (s, _) in sorted(delays.items())))
    assert _pids_of(PROGRAM) == [], "rank processes left running"


@pytest.mark.parametrize("how,status", [("raise", 1), ("exit", 3)])
def test_a_rank_that_ends_with_an_error_is_named_lost(tmp, how, status):
    # The kill drill with a victim that ends of an uncaught exception or
    # sys.exit(3): it must not leave the job (a leave only drains it, and
    # survivors of a dead NCCL peer would hang), so rankd names it lost.
    job = f"torch-{how}"
    results = _run_two_nodes(tmp, job, [f"ops-{how}", str(VICTIM)])
    output = "\n".join(out for _, out in results)
    for r in range(4):
        assert f"TORCH OK {r}" in output, output
    if how == "raise":
        assert f"RuntimeError: rank {VICTIM} gave up" in output, output
    assert results[0][0] == 0, output
    # The victim's exit status is its own, not a signal's.
    assert results[1][0] == status, output
    delays = _survivor_delays(output)
    assert sorted(delays) == [0, 1, 3], output
    for r, (seconds, line) in delays.items():
        assert line.startswith(
            "JobFailedError: ABORTED: torch.distributed.all_reduce: job "
            f"{job} failed (MEMBER_LOST, node 1, rank {VICTIM}, "), line
        assert f"rank {VICTIM} (pid " in line, line
        assert 0 <= seconds < SURVIVOR_LIMIT_S, (r, seconds, output)
    assert _pids_of(PROGRAM) == [], "rank processes left running"


def test_a_lost_rank_is_replaced_and_the_survivors_serve_on_in_place(tmp):
    # rankrun --max_restarts=1 (its daemons recover in place): rank 2 kills
    # itself mid-step; the survivors catch EpochEndedError, rankd.torch.
    # rejoin(), init_process_group again, and serve on from the failed step
    # in the same processes with the same tensors; rankrun restarted rank 2,
    # whose new process joins epoch 2 and starts at that step.
    job = "torch-recover"
    results = _run_two_nodes(tmp, job, ["recover", str(VICTIM)],
                             rankrun_args=["--max_restarts=1"])
    output = "\n".join(out for _, out in results)
    assert [code for code, _ in results] == [0, 0], output
    starts = {}
    for r, pid, epoch in re.findall(r"START (\d+) pid (\d+) epoch (\d+)",
                                    output):
        starts.setdefault(int(r), []).append((int(pid), int(epoch)))
    assert sorted(starts) == [0, 1, 2, 3], output
    # The victim started twice: epoch 1, then its replacement at epoch 2.
    assert [e for _, e in starts[VICTIM]] == [1, 2], output
    recovered = {int(r): (int(e), int(pid), int(n)) for r, e, pid, n in
                 re.findall(r"RECOVERED (\d+) epoch (\d+) pid (\d+) "
                            r"restarts (\d+)", output)}
    assert sorted(recovered) == [0, 1, 2, 3], output
    for r in (0, 1, 3):
        # Same process, never restarted, now at epoch 2.
        assert recovered[r] == (2, starts[r][0][0], 0), (r, output)
        loss = re.search(rf"LOSS {r} (.*)", output)
        assert loss, output
        assert re.match(
            r"EpochEndedError: ABORTED: torch\.distributed\.all_reduce: job "
            rf"{job} epoch 1 ended \(MEMBER_LOST, node 1, rank {VICTIM}, ",
            loss.group(1)), loss.group(1)
    assert recovered[VICTIM] == (2, starts[VICTIM][1][0], 1), output
    killed = float(re.search(r"KILLING \d+ ([0-9.]+)", output).group(1))
    resumed = {int(r): (int(step), float(t)) for r, step, t in
               re.findall(r"RESUMED (\d+) (\d+) ([0-9.]+)", output)}
    assert sorted(resumed) == [0, 1, 2, 3], output
    assert {step for step, _ in resumed.values()} == {5}, output
    print("rankd: kill -9 of rank %d to every rank serving step 5 again: "
          "%.0f ms" % (VICTIM, (max(t for _, t in resumed.values()) -
                                killed) * 1000))
    assert _pids_of(PROGRAM) == [], "rank processes left running"


def test_a_job_that_recovers_by_domain_is_refused_at_the_rendezvous():
    # --recovery=domain with dp 2: a loss would end one replica's epoch
    # only, while torch's groups span the world.
    with LocalJob("torch-domain", 1, 2,
                  daemon_flags=["--kv_shared_prefixes=torch/",
                                "--recovery=domain"]) as job:
        results = job.run_ranks(PROGRAM, "ops",
                                env={"PYTHONPATH": PYTHONPATH}, timeout=60)
    for code, out in results:
        assert code == 1, out
        assert "FailedPreconditionError" in out, out
        assert "recovers by data-parallel domain (rankd --recovery=domain)" \
            in out, out
        assert "TORCH OK" not in out, out


@pytest.mark.skipif(os.environ.get("RANKD_TORCH_COMPARE") != "1",
                    reason="a measurement (bench/RESULTS.md), not a check: "
                    "RANKD_TORCH_COMPARE=1 runs it")
def test_torch_alone_kill_drill_for_comparison(tmp):
    # The same drill over env:// (TCPStore on rank 0) with Gloo's timeout
    # at 5 s: measured, not held to rankd's bound. Survivors stay up past
    # that timeout, so that no survivor's exit is what wakes another.
    port = _free_port()
    results = _run_two_nodes(
        tmp, "torch-alone", ["tcp-kill", str(VICTIM)],
        env={"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
             "TORCH_PROGRAM_TIMEOUT": "5", "TORCH_PROGRAM_LINGER": "6"})
    output = "\n".join(out for _, out in results)
    delays = _survivor_delays(output)
    assert sorted(delays) == [0, 1, 3], output
    for _, line in delays.values():
        assert "JobFailedError" not in line, line
    print("torch alone: kill -9 of rank %d to each survivor's error: %s" % (
        VICTIM, "; ".join(f"rank {r} {s * 1000:.0f} ms ({line[:90]})"
                          for r, (s, line) in sorted(delays.items()))))
    assert _pids_of(PROGRAM) == [], "rank processes left running"


@pytest.mark.parametrize("url,words", [
    ("rankd://?rank=0&wrld_size=2&colour=red",
     ["unknown parameters 'colour', 'wrld_size'", "job_id", "local_rank",
      "prefix", "rank", "token_file", "world_size"]),
    ("rankd://?rank=x", ["rank='x'", "non-negative integer"]),
    ("rankd://?world_size=-2", ["world_size='-2'", "non-negative integer"]),
    ("rankd://?local_rank=", ["local_rank=''", "non-negative integer"]),
    ("rankd://?rank=1&rank=2", ["rank", "more than once"]),
])
def test_rankd_url_parameters_are_checked(url, words, monkeypatch):
    # Refused before anything is joined: no daemon is needed.
    import rankd.torch
    monkeypatch.setenv("RANKD_TARGET", "unix:///nonexistent/rankd.sock")
    with pytest.raises(rankd.InvalidArgumentError) as refused:
        next(rankd.torch.rendezvous_handler(url))
    for w in words:
        assert w in str(refused.value), refused.value
    assert rankd.torch.joined_rank() is None


@pytest.mark.parametrize("local_rank", [True, False],
                         ids=["with_local_rank", "rank_only"])
def test_an_explicit_tcp_url_rendezvous_through_the_daemon(tmp, local_rank):
    """rankd://HOST:PORT?job_id=J&rank=R&world_size=W&token_file=F, with no
    launcher and no RANKD_* environment: the ranks reach their daemon over
    TCP and run the collectives. Without local_rank= the daemon gives each
    rank its own slot on the node (both used to claim slot 0)."""
    with LocalJob("torch-url", 1, 2,
                  daemon_flags=["--kv_shared_prefixes=torch/"]) as job:
        python = ["/usr/bin/python3"]
        if os.environ.get("LD_PRELOAD"):
            python = ["env", f"LD_PRELOAD={os.environ['LD_PRELOAD']}"] + \
                python
        base = {k: v for k, v in os.environ.items()
                if not k.startswith("RANKD_") or k == "RANKD_LIBRARY"}
        procs = []
        for r in range(2):
            token = os.path.join(tmp, f"rank{r}.token")
            with open(token, "w") as f:
                f.write(job.rank_token(0, r))
            url = (f"rankd://{job.addresses[0]}?job_id={job.job_id}"
                   f"&rank={r}&world_size=2&token_file={token}"
                   + (f"&local_rank={r}" if local_rank else ""))
            env = dict(base, PYTHONPATH=PYTHONPATH,
                       TORCH_PROGRAM_INIT_METHOD=url)
            procs.append(subprocess.Popen(
                [*python, PROGRAM, "ops"], env=env, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, text=True))
        for r, p in enumerate(procs):
            try:
                out, _ = p.communicate(timeout=90)
            except subprocess.TimeoutExpired:
                p.kill()
                out, _ = p.communicate()
            assert p.returncode == 0, out
            assert f"TORCH OK {r}" in out, out


def test_an_unreachable_daemon_is_named(monkeypatch):
    """A rankd:// URL whose daemon does not answer fails init_process_group
    with UNAVAILABLE naming the address, within the connect bound."""
    import rankd.torch  # noqa: F401
    port = _free_port()
    for name in list(os.environ):
        if name.startswith("RANKD_") and name != "RANKD_LIBRARY":
            monkeypatch.delenv(name)
    start = time.monotonic()
    with pytest.raises(rankd.UnavailableError) as refused:
        dist.init_process_group(
            "gloo", init_method=f"rankd://127.0.0.1:{port}?job_id=j&rank=0"
                                "&world_size=1",
            timeout=datetime.timedelta(seconds=5))
    assert f"127.0.0.1:{port}" in str(refused.value), refused.value
    assert time.monotonic() - start < 60
    assert rankd.torch.joined_rank() is None


# --- store conformance: the same cases on rankd's Store and TCPStore ------


@pytest.fixture(scope="module")
def rankd_rank():
    with LocalJob("torch-store", 1, 1,
                  daemon_flags=["--kv_shared_prefixes=torch/"]) as job:
        saved = dict(os.environ)
        os.environ.update({"RANKD_TARGET": job.socket_target(0),
                           "RANKD_JOB_ID": job.job_id,
                           "RANKD_LOCAL_RANK": "0",
                           "RANKD_RANK_TOKEN": job.rank_token(0, 0)})
        try:
            rank = rankd.join()
        finally:
            os.environ.clear()
            os.environ.update(saved)
        with rank:
            yield rank


_case_count = [0]


@pytest.fixture(params=["rankd", "tcp"])
def store(request, rankd_rank):
    # A fresh namespace per case, as a fresh TCPStore.
    _case_count[0] += 1
    timeout = datetime.timedelta(seconds=1)
    if request.param == "rankd":
        from rankd.torch import Store
        yield Store(rankd_rank, prefix=f"torch/case{_case_count[0]}/",
                    timeout=timeout)
    else:
        yield dist.TCPStore("127.0.0.1", 0, 1, True, timeout=timeout)


def _has(store, key):
    """Whether `key` exists, on both stores (torch 1.13's TCPStore has no
    check() in Python): a short wait."""
    try:
        store.wait([key], datetime.timedelta(milliseconds=100))
        return True
    except RuntimeError:
        return False


def test_store_set_get_bytes(store):
    store.set("a", b"\x00\x01value")
    store.set("s", "text")
    assert store.get("a") == b"\x00\x01value"
    assert store.get("s") == b"text"
    store.set("a", b"again")  # a second write replaces
    assert store.get("a") == b"again"


def test_store_one_mebibyte_value(store):
    value = bytes(range(256)) * 4096
    store.set("big", value)
    assert store.get("big") == value


def test_store_get_of_a_missing_key_times_out(store):
    with pytest.raises(RuntimeError):
        store.get("never")


def test_store_add(store):
    assert store.add("n", 3) == 3
    assert store.add("n", -5) == -2
    assert store.get("n") == b"-2"


def test_store_compare_set(store):
    assert store.compare_set("c", "", "first") == b"first"
    assert store.compare_set("c", "wrong", "x") == b"first"
    assert store.compare_set("c", "first", "second") == b"second"
    assert store.get("c") == b"second"
    # Absent with a non-empty expectation: TCPStore answers the expectation.
    assert store.compare_set("absent", "e", "x") == b"e"
    assert not _has(store, "absent")


def test_store_wait_delete(store):
    # (No wait for a key before it is set: torch 1.13's TCPStore client
    # then reads that wait's late answer as the next wait's.)
    store.set("k", b"v")
    store.set("k2", b"v")
    store.wait(["k", "k2"])
    store.wait(["k"], datetime.timedelta(seconds=1))
    with pytest.raises(RuntimeError):
        store.wait(["k", "missing"], datetime.timedelta(milliseconds=300))
    assert store.delete_key("k")
    assert not store.delete_key("k")
    assert not _has(store, "k")
    assert _has(store, "k2")


def test_store_timeout_is_settable(store):
    store.set_timeout(datetime.timedelta(seconds=2))
    assert store.timeout == datetime.timedelta(seconds=2)


def test_store_timeouts_over_an_hour_work(store):
    # The daemon takes waits of at most an hour; the store waits in slices.
    two_hours = datetime.timedelta(hours=2)
    store.set("k", b"v")
    store.set_timeout(two_hours)
    assert store.get("k") == b"v"
    store.wait(["k"], two_hours)
    store.wait(["k"])


def test_store_num_keys(store):
    # TCPStore counts a key of its own ("init/"); both count from there.
    before = store.num_keys()
    store.set("a", b"1")
    store.set("b", b"2")
    store.set("a", b"again")  # a second write adds no key
    assert store.num_keys() == before + 2
    assert store.add("n", 1) == 1
    assert store.num_keys() == before + 3
    assert store.delete_key("a")
    assert store.num_keys() == before + 2
    # What torch's own code holds: a PrefixStore over the store. (Not its
    # num_keys: torch 1.13's trampoline does not forward it to a Python
    # store, as it does not delete_key.)
    dist.PrefixStore("pg", store).set("x", b"1")
    assert store.num_keys() == before + 3


def _needs_torch_store(name):
    """Skips unless this torch's Store has `name` (torch 2.x's multi- and
    append-forms; torch 1.13 has none)."""
    if not hasattr(dist.Store, name):
        pytest.skip(f"this torch's Store has no {name}")


def test_store_append(store):
    _needs_torch_store("append")
    store.append("log", b"ab")  # absent: created
    store.append("log", b"\x00cd")
    assert store.get("log") == b"ab\x00cd"


def test_store_multi_set_get(store):
    _needs_torch_store("multi_get")
    store.multi_set(["x", "y"], [b"1", b"\x002"])
    assert store.multi_get(["y", "x"]) == [b"\x002", b"1"]
    with pytest.raises(RuntimeError):
        store.multi_get(["x", "never"])


def test_store_clone_through_torch(store):
    # torch 2.x clones a store in PrefixStore::clone (splitGroup): the
    # clone sees the same keys.
    if not hasattr(dist.PrefixStore, "clone"):
        pytest.skip("this torch's PrefixStore has no clone")
    p = dist.PrefixStore("pg", store)
    p.set("a", b"1")
    c = p.clone()
    assert c.get("a") == b"1"
    c.set("b", b"2")
    assert p.get("b") == b"2"


def test_rankd_store_zero_timeout_is_no_limit(rankd_rank):
    # torch's c10d::Store::kNoTimeout, as this package's C++ store reads
    # it: a get with the store's timeout at zero waits for the key, however
    # long (here 1.5 s). A declared difference: torch 1.13's Python
    # TCPStore keeps its previous socket timeout instead (a get then fails
    # after it, "Socket Timeout").
    from rankd.torch import Store
    store = Store(rankd_rank, prefix="torch/zero/",
                  timeout=datetime.timedelta(0))
    writer = threading.Timer(1.5, store.clone().set, args=("late", b"v"))
    writer.start()
    try:
        assert store.get("late") == b"v"
        store.wait(["late"], datetime.timedelta(0))
    finally:
        writer.join()


def test_rankd_store_timeouts_name_the_timeout_given(rankd_rank):
    # wait and multi_get report the timeout they were given, not the time
    # left for their last key.
    from rankd.torch import Store, StoreTimeoutError
    store = Store(rankd_rank, prefix="torch/timeouts/",
                  timeout=datetime.timedelta(milliseconds=400))
    store.set("a", b"1")
    with pytest.raises(StoreTimeoutError, match=r"'b' was not set within 1 s"):
        store.wait(["a", "b"], datetime.timedelta(seconds=1))
    with pytest.raises(StoreTimeoutError,
                       match=r"'b' was not set within 0.4 s"):
        store.multi_get(["a", "b"])


def test_rankd_store_append_multi_and_clone(rankd_rank):
    # The same forms called from Python, on any torch: append creates and
    # extends, multi_get waits for every key within one timeout, multi_set
    # sets each, and a clone is a store over the same rank, namespace,
    # timeout and world.
    from rankd.torch import Store, StoreTimeoutError
    store = Store(rankd_rank, prefix="torch/forms/", world_size=3,
                  timeout=datetime.timedelta(milliseconds=300))
    store.append("log", b"ab")
    store.append("log", "cd")
    assert store.get("log") == b"abcd"
    store.multi_set(["x", "y"], [b"1", "2"])
    assert store.multi_get(["y", "x", "log"]) == [b"2", b"1", b"abcd"]
    with pytest.raises(StoreTimeoutError, match="never"):
        store.multi_get(["x", "never"])
    with pytest.raises(rankd.InvalidArgumentError, match="2 keys but 1"):
        store.multi_set(["x", "y"], [b"1"])
    clone = store.clone()
    assert isinstance(clone, Store) and clone is not store
    assert (clone.rank, clone.prefix, clone.timeout) == \
        (store.rank, store.prefix, store.timeout)
    assert clone.get("x") == b"1"
    clone.set("z", b"3")
    assert store.get("z") == b"3"
    assert clone.num_keys() == store.num_keys() == 4


def test_rankd_store_check_and_num_keys(rankd_rank):
    from rankd.torch import Store
    store = Store(rankd_rank, prefix="torch/check/")
    assert not store.check(["a"])
    assert store.num_keys() == 0
    store.set("a", b"1")
    assert store.check(["a"]) and not store.check(["a", "b"])
    # Only the store's namespace counts: not another store's keys.
    other = Store(rankd_rank, prefix="torch/check2/")
    other.set("a", b"1")
    other.set("b", b"1")
    assert store.num_keys() == 1 and other.num_keys() == 2
    assert rankd_rank.kv_count("torch/check") == 3
    assert rankd_rank.kv_count("") >= 3



def test_store_errors_are_runtime_errors(rankd_rank):
    # torch code catches RuntimeError (torch 2.x: DistStoreError) from a
    # store; rankd's own classes still match too.
    from rankd.torch import Store
    store = Store(rankd_rank, prefix="torch/errors/",
                  timeout=datetime.timedelta(milliseconds=200))
    store_error = getattr(dist, "DistStoreError", RuntimeError)
    with pytest.raises(rankd.InvalidArgumentError) as bad_key:
        store.set("a\0b", b"1")
    with pytest.raises(rankd.RankdError) as too_big:
        store.set("big", b"x" * (2 << 20))
    with pytest.raises(rankd.DeadlineExceededError) as late:
        store.get("never")
    for e in (bad_key.value, too_big.value, late.value):
        assert isinstance(e, RuntimeError) and isinstance(e, store_error), \
            type(e).__mro__


@pytest.mark.parametrize("recovery", ["off", "on"])
def test_store_calls_after_a_lost_rank_raise_job_failed(tmp, recovery,
                                                        monkeypatch):
    # A store call pending when a rank is lost, and every later one, raise
    # rankd.torch.JobFailedError (a RuntimeError) naming the lost rank;
    # where the job recovers in place, its EpochEndedError, in the words of
    # an ended epoch. rankd.torch.rejoin() then refuses a job that does not
    # recover; one that does it leaves waiting for the replacement (no
    # replacement comes here) and retires the store.
    import rankd.torch
    from rankd.torch import EpochEndedError, JobFailedError, Store
    program = os.path.join(tmp, "lost_rank.py")
    with open(program, "w") as f:
        f.write("import os, sys, time, rankd\n"
                "rank = rankd.join()\n"
                "time.sleep(1.0)\n"
                "sys.stdout.flush()\n"
                "os._exit(3)  # dies without leaving\n")
    with LocalJob("torch-store-lost", 1, 2,
                  daemon_flags=["--kv_shared_prefixes=torch/",
                                f"--recovery={recovery}"]) as job:
        lost = job.start_rank(program, 0, 1, env={"PYTHONPATH": PYTHONPATH})
        saved = dict(os.environ)
        os.environ.update({"RANKD_TARGET": job.socket_target(0),
                           "RANKD_JOB_ID": job.job_id,
                           "RANKD_LOCAL_RANK": "0",
                           "RANKD_RANK_TOKEN": job.rank_token(0, 0)})
        try:
            rank = rankd.join(wait_for_world=30)
        finally:
            os.environ.clear()
            os.environ.update(saved)
        try:
            store = Store(rank, prefix="torch/lost/",
                          timeout=datetime.timedelta(seconds=30))
            started = time.monotonic()
            with pytest.raises(JobFailedError) as pending:
                store.get("never")  # rank 1 dies meanwhile
            assert time.monotonic() - started < 10, pending.value
            with pytest.raises(JobFailedError) as later:
                store.set("k", b"v")
            for e in (pending.value, later.value):
                assert isinstance(e, RuntimeError), type(e).__mro__
                assert isinstance(e, rankd.AbortedError), type(e).__mro__
                assert "MEMBER_LOST" in str(e) and "rank 1" in str(e), e
                assert isinstance(e, EpochEndedError) == (recovery == "on"), \
                    type(e).__mro__
                assert (" epoch 1 ended (MEMBER_LOST" if recovery == "on"
                        else " failed (MEMBER_LOST") in str(e), e
            assert "rankd store get" in str(pending.value), pending.value
            assert lost.wait(10) == 3, job.log("rank1.log")
            # rejoin(): this process's rankd:// rendezvous, stood in for.
            watch = rankd.torch._Watch(rank)
            monkeypatch.setattr(rankd.torch, "_watch", watch)
            watch.stores.append(store)
            if recovery == "off":
                with pytest.raises(JobFailedError,
                                   match="does not recover in place") as no:
                    rankd.torch.rejoin(timeout=1)
                assert "rank 1" in str(no.value), no.value
                return
            with pytest.raises(rankd.DeadlineExceededError) as late:
                rankd.torch.rejoin(timeout=0.5)
            assert "epoch 2" in late.value.message, late.value
            assert "ranks have not joined: 1 (node 0: 1)" in \
                late.value.message, late.value
            # Still in epoch 1: the store is not retired yet.
            assert watch.failure is not None and rank.epoch == 1
            watch.next_epoch(watch.failure)  # as a successful rejoin does
            with pytest.raises(EpochEndedError,
                               match="belongs to an ended epoch") as ended:
                store.get("k")
            assert "rank 1" in str(ended.value), ended.value
            assert watch.retired_stores == [store] and watch.stores == []
        finally:
            rank.close()


def test_rejoin_needs_a_rendezvous_and_an_ended_epoch(rankd_rank,
                                                      monkeypatch):
    import rankd.torch
    monkeypatch.setattr(rankd.torch, "_watch", None)
    with pytest.raises(rankd.FailedPreconditionError,
                       match="no rankd:// rendezvous"):
        rankd.torch.rejoin()
    monkeypatch.setattr(rankd.torch, "_watch", rankd.torch._Watch(rankd_rank))
    monkeypatch.setattr(rankd.torch, "failure_grace_seconds", 0.05)
    with pytest.raises(rankd.FailedPreconditionError,
                       match="epoch 1 of job .* has not ended"):
        rankd.torch.rejoin()


def test_a_key_with_a_nul_byte_is_refused(rankd_rank):
    # Keys cross the C ABI as C strings: "a\0b" would silently be "a".
    from rankd.torch import Store
    store = Store(rankd_rank, prefix="torch/nul/")
    calls = [lambda: rankd_rank.kv_set("torch/nul/a\0b", b"1"),
             lambda: rankd_rank.kv_get("torch/nul/a\0b", timeout=0),
             lambda: rankd_rank.kv_add("torch/nul/a\0b", 1),
             lambda: rankd_rank.kv_delete("torch/nul/a\0b"),
             lambda: rankd_rank.kv_compare_set("torch/nul/a\0b", None, b"1"),
             lambda: rankd_rank.kv_compare_delete("torch/nul/a\0b", b"1"),
             lambda: rankd_rank.kv_count("torch/nul/\0"),
             lambda: store.set("a\0b", b"1"),
             lambda: store.add("a\0b", 1)]
    for call in calls:
        with pytest.raises(rankd.InvalidArgumentError, match="NUL"):
            call()
    assert rankd_rank.kv_count("torch/nul/") == 0


def test_rankd_store_barrier_read_waits_for_the_last_arrival(rankd_rank):
    # torch 1.13's store-based barrier polls add(key, 0) until the count is
    # the world size; the store answers that read once the last rank
    # arrived, or after about a second, whichever is first.
    from rankd.torch import Store
    if not _barrier_counts_the_world():
        pytest.skip("this torch's store-based barrier takes "
                    "rendezvous_count: no read waits")
    store = Store(rankd_rank, prefix="torch/barrier/", world_size=2,
                  timeout=datetime.timedelta(seconds=20))
    key = "default_pg/store_based_barrier_key:1"
    assert store.add(key, 1) == 1
    late = threading.Timer(0.3, lambda: store.add(key, 1))  # "rank 1"
    late.start()
    try:
        assert store.add(key, 0) == 2  # without the wait: 1, at once
    finally:
        late.join()
    assert store.add(key, 0) == 2
    # A barrier nobody completes: each read ends after about a second with
    # the count as it is, never the store's whole timeout (torch's loop
    # keeps its own deadline, which starts after the first read).
    assert store.add("default_pg/store_based_barrier_key:2", 1) == 1
    started = time.monotonic()
    assert store.add("default_pg/store_based_barrier_key:2", 0) == 1
    assert 0.5 <= time.monotonic() - started < 3.0
    # Other counters are plain.
    assert store.add("n", 0) == 0


def _barrier_counts_the_world():
    import inspect
    return "rendezvous_count" not in inspect.signature(
        dist.distributed_c10d._store_based_barrier).parameters


def test_rankd_store_no_barrier_wait_when_torch_counts_rendezvous(
        rankd_rank, monkeypatch):
    # torch >= 2's barrier takes rendezvous_count (new_group with
    # use_local_synchronization=True counts fewer ranks than the world)
    # and waits on a key of its own: the store must not wait for the
    # world there.
    from rankd.torch import Store

    def barrier(rank, store, group_name, rendezvous_count, timeout,
                logging_interval=None):
        pass

    monkeypatch.setattr(dist.distributed_c10d, "_store_based_barrier",
                        barrier)
    store = Store(rankd_rank, prefix="torch/barrier2/", world_size=2,
                  timeout=datetime.timedelta(seconds=20))
    key = "default_pg/store_based_barrier_key:1"
    assert store.add(key, 1) == 1
    started = time.monotonic()
    assert store.add(key, 0) == 1
    assert time.monotonic() - started < 0.9  # the capped wait is ~1 s


def test_store_through_torch_prefix_store(store):
    # What torch's own code holds: a PrefixStore (C++) over the store, so
    # every call crosses torch's C++ -> Python trampoline.
    p = dist.PrefixStore("pg", store)
    p.set("a", b"\x00bytes")
    assert p.get("a") == b"\x00bytes"
    assert p.add("n", 2) == 2
    assert p.compare_set("c", "", "v") == b"v"
    assert p.compare_set("c", "v", "w") == b"w"
    assert p.compare_set("c", "x", "y") == b"w"
    p.wait(["a", "c"])
    # (Not delete_key: torch 1.13's trampoline does not forward it to a
    # Python store; torch's own code does not call it.)


def test_gpu_kit_torch_script_on_cpu():
    # The GPU kit's torch.distributed NCCL check (torch_dist_nccl.py), its
    # same steps on Gloo: a 1 x 2 job, exact collectives, one rank killed
    # and the survivor's error naming it within the script's deadline; then
    # the same in a job that recovers in place, the survivor rejoining
    # beside the killed rank's replacement.
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                          "torch_dist_nccl.py")
    # The ranks' own bound, for all three steps: importing torch and
    # forming the group under ASan on a loaded 2-core machine took more
    # than the GPU kit's 34 s for one step alone.
    env = dict(os.environ, TORCH_DIST_BACKEND="gloo",
               RANKD_KIT_RANK_TIMEOUT_S="300")
    env.pop("RANKD_REQUIRE_GPU", None)
    done = subprocess.run([sys.executable, script], env=env, timeout=360,
                          capture_output=True, text=True)
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and lines and lines[-1] == "PASSED", \
        done.stdout[-3000:] + done.stderr[-3000:]


# --- torch 2.x's paths, on this torch (1.13) with torch 2.x's API stood in --


def test_a_failure_aborts_the_process_groups_where_torch_can(monkeypatch):
    """torch 2.x has _abort_process_group (it aborts the NCCL
    communicators, so a pending collective ends): rankd.torch calls it at
    the job's failure once a default group exists, and never raises from
    the failure thread. torch 1.13 has none: nothing is called."""
    import rankd.torch as rt
    c10d = sys.modules["torch.distributed.distributed_c10d"]
    calls = []
    monkeypatch.setattr(c10d, "_abort_process_group",
                        lambda *a, **k: calls.append(a), raising=False)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    assert rt._abort_process_groups() is True
    assert calls == [()]
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    assert rt._abort_process_groups() is False
    assert calls == [()]

    def broken(*a, **k):
        raise RuntimeError("ProcessGroupGloo does not support abort")
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(c10d, "_abort_process_group", broken)
    assert rt._abort_process_groups() is False
    monkeypatch.delattr(c10d, "_abort_process_group")
    assert rt._abort_process_groups() is False


def test_the_barrier_read_waits_for_the_world_only_on_torch_1(monkeypatch):
    """torch 1.13's store barrier polls add(key, 0) until the world
    arrived, so the store waits for the world in the daemon; torch 2.x's
    takes a rendezvous_count (new_group(use_local_synchronization=True)
    counts fewer ranks) and the store must not wait for the world there."""
    import rankd.torch_store as ts
    c10d = sys.modules["torch.distributed.distributed_c10d"]

    def torch1(rank, store, timeout):
        pass

    def torch2(rank, store, group_name, rendezvous_count, timeout,
               logging_interval=None):
        pass
    monkeypatch.setattr(c10d, "_store_based_barrier", torch1)
    assert ts._barrier_counts_the_world() is True
    monkeypatch.setattr(c10d, "_store_based_barrier", torch2)
    assert ts._barrier_counts_the_world() is False
    monkeypatch.setattr(c10d, "_store_based_barrier", None)
    assert ts._barrier_counts_the_world() is False


def test_store_errors_are_torch_2s_dist_store_error_where_it_exists():
    """torch 2.x raises DistStoreError (a RuntimeError) for store failures:
    rankd's StoreError is one there, so torch code catching it catches
    rankd's; on torch 1.13 it is a RuntimeError. Checked in a fresh
    process, with torch 2.x's class stood in before rankd is imported."""
    program = (
        "import torch.distributed as dist\n"
        "class DistStoreError(RuntimeError): pass\n"
        "dist.DistStoreError = DistStoreError\n"
        "from rankd import torch_store as ts\n"
        "assert issubclass(ts.StoreError, DistStoreError)\n"
        "assert issubclass(ts.StoreTimeoutError, DistStoreError)\n"
        "e = ts._store_error_class(ts.errors.NotFoundError)('x')\n"
        "assert isinstance(e, DistStoreError), type(e).__mro__\n"
        "print('OK')\n")
    # A Python process: it keeps the sanitizer runtime a sanitizer build
    # preloads (python/run_pytest.sh).
    env = dict(os.environ, PYTHONPATH=PYTHONPATH)
    out = subprocess.run(["/usr/bin/python3", "-c", program], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip().endswith("OK"), \
        out.stdout
