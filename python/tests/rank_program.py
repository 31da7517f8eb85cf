"""One rank of a test job, in Python on the rankd package alone; started by
test_rankd.py on every rank with the launcher's environment.

    rank_program.py ops    every operation with exact values on a world of
                           2, and bad arguments refused; prints
                           "PY RANK <r> OK"
    rank_program.py lost   rank 1 dies (exit 3) once both opened a session;
                           rank 0's receive raises AbortedError naming it;
                           prints "LOST <class>: <message>"
    rank_program.py nccl   an NCCL session on fake device arrays over the
                           CPU stand-in's memory (fake_device.py): every
                           operation with exact values, through
                           __cuda_array_interface__ (with and without a
                           stream) and DLPack, the stream order in both
                           directions, a bounded wait, refusals; prints
                           "PY NCCL RANK <r> OK"
    rank_program.py torch  the same operations on torch CUDA tensors on
                           the current stream (a GPU host); prints
                           "PY TORCH RANK <r> OK"
    rank_program.py empty  arrays of no rows through every operation,
                           pairing in order; a (2, 0) array refused; a
                           receive of no rows that rank 0 never sends
                           fails naming rank 0; prints "PY EMPTY <r> OK"
    rank_program.py narrowed  sessions opened with restrict_capabilities
                           refuse what was left out naming the capability
                           and run the rest; prints "PY NARROWED <r> OK"
    rank_program.py domain_view (rankd --recovery=domain, tp 2 x dp 2)
                           rank 3 dies (exit 3), rank 2 exits once its
                           health names it; ranks 0 and 1 get a partial
                           world round with its view (replica 0 at epoch
                           1) and all_gather_words refusing one; print
                           "PY DOMAIN <r> OK"
    rank_program.py rejoin (rankd --recovery=on) rank 1 dies (exit 3);
                           rank 0 prints "SAW LOSS" once its job_health
                           names it, then rejoin(1) enters epoch 2 with the
                           replacement test_rankd.py starts; both run a
                           round; prints "PY REJOIN <r> OK"
    rank_program.py poison Session.poison, Session.abort and
                           Session.poison_cause: refusals; a poisoned
                           session raises the cause's class with its words,
                           the first cause stays; abort ends rank 0's
                           pending receive at once with its cause; prints
                           "PY POISON <r> OK"

Exits 1 with a traceback on the first unexpected result.
"""

import os
import sys
import threading
import time

import numpy as np

if os.environ.get("RANKD_TEST_WITH_TORCH"):
    import torch  # before rankd: librankd.so loads next to torch's libraries

import rankd


def expect_raises(kind, needle, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except kind as e:
        assert needle in str(e), f"{kind.__name__} without {needle!r}: {e}"
        return e
    raise AssertionError(f"{fn.__name__}{args} did not raise {kind.__name__}")


def ops(rank):
    assert rank.world_size == 2, rank
    r, peer = rank.rank, 1 - rank.rank
    world = rank.group("world")
    assert world.id == rankd.WORLD and world.members == [0, 1], world
    assert world.local_rank == r

    # all_gather_words: [7, 9] on both gives [7, 9, 7, 9].
    frames = rank.all_gather_words([7, 9], timeout=30)
    assert frames.tolist() == [[7, 9], [7, 9]], frames
    # With its view: without recovery by domain, the whole world and no
    # domains.
    frames, partial, domains = rank.all_gather_words_with_view([7, 9],
                                                               timeout=30)
    assert frames.tolist() == [[7, 9], [7, 9]], frames
    assert partial is False and domains == [], (partial, domains)
    pending = rank.submit_all_gather_words([100 + r], timeout=30)
    assert pending.wait().reshape(-1).tolist() == [100, 101]
    assert pending.is_ready()
    expect_raises(rankd.InvalidArgumentError, "timeout_seconds",
                  rank.all_gather_words, [1], timeout=0)

    # Key-value broker.
    if r == 0:
        rank.kv_set("py/blob", b"hel\0lo")
    assert rank.kv_get("py/blob", timeout=30) == b"hel\0lo"
    # A key belongs to the rank that created it; "r<rank>/" keys to that
    # rank from the start.
    assert rank.kv_add(f"r{r}/py/counter", 5) == 5
    if r == 1:
        expect_raises(rankd.PermissionDeniedError, "created it", rank.kv_set,
                      "py/blob", b"poison")
        expect_raises(rankd.PermissionDeniedError, "belong to rank 0",
                      rank.kv_set, "r0/py/counter", b"1")
    e = expect_raises(rankd.DeadlineExceededError, "py/never", rank.kv_get,
                      "py/never", timeout=0.2)
    assert not isinstance(e, rankd.WaitTimeoutError), e
    # A bounded wait on a round that rank 1 holds back (it submits once
    # rank 0 saw the wait time out) is the wait's own timeout.
    if r == 0:
        pending = rank.submit_all_gather_words([100], timeout=30)
        expect_raises(rankd.WaitTimeoutError, "still pending", pending.wait,
                      timeout=0.2)
        assert not pending.is_ready()
        rank.kv_set("py/go", b"1")
    else:
        rank.kv_get("py/go", timeout=30)
        pending = rank.submit_all_gather_words([101], timeout=30)
    assert pending.wait().reshape(-1).tolist() == [100, 101]


    with rank.open_session(op_timeout=30) as session:
        caps = session.capabilities
        assert all(caps.values()), caps
        assert session.backend == "gloo"

        # all_reduce_sum: [1, 2] + [3, 4] = [4, 6]; into out=, in place.
        x = np.array([1 + 2 * r, 2 + 2 * r], dtype=np.float32)
        assert session.all_reduce_sum(x).wait().tolist() == [4, 6]
        out = np.zeros(2, np.float32)
        work = session.all_reduce_sum(x, out=out)
        assert work.wait(timeout=30) is out and out.tolist() == [4, 6]
        session.all_reduce_sum(x, out=x).wait(timeout=30,
                                              cancellation="native")
        assert x.tolist() == [4, 6]
        for dtype in (np.int64, np.float64, np.uint8, np.int16):
            v = np.full((2, 3), r + 1, dtype=dtype)
            s = session.all_reduce_sum(v).wait()
            assert s.dtype == dtype and (s == 3).all(), s

        # all_gather: [2, 3] on both gives [2, 3, 2, 3]; rows by member.
        g = session.all_gather(np.array([2, 3], np.float32)).wait()
        assert g.tolist() == [2, 3, 2, 3], g
        rows = np.array([[10 * r, 10 * r + 1]], np.int32)
        work = session.all_gather(rows)
        while not work.is_completed():
            pass
        assert work.output.tolist() == [[0, 1], [10, 11]], work.output

        # all_to_all_v: rank 0 keeps 1 row and sends 2; rank 1 sends 3.
        send = [1, 2] if r == 0 else [3, 0]
        recv = [1, 3] if r == 0 else [2, 0]
        a = np.arange(3, dtype=np.float32) + 100 * r
        got = session.all_to_all_v(a, send, recv).wait()
        assert got.tolist() == ([0, 100, 101, 102] if r == 0 else [1, 2]), got

        # send / receive, and a batched swap.
        if r == 0:
            session.send(np.array([5, 6], np.float32), peer=1).wait()
        else:
            v = session.receive(0, shape=(2,), dtype=np.float32).wait()
            assert v.tolist() == [5, 6], v
        mine = np.full(2, r, np.float32)
        theirs = np.full(2, -1, np.float32)
        outputs = session.batch_send_receive([(peer, mine)],
                                             [(peer, theirs)]).wait()
        assert outputs[0] is theirs and theirs.tolist() == [peer, peer]

        # In a process that imported PyTorch first: its CPU tensors go in
        # as they are (numpy views of the same memory).
        if os.environ.get("RANKD_TEST_WITH_TORCH"):
            t = torch.tensor([1.0, 2.0]) + 2 * r
            assert session.all_reduce_sum(t).wait().tolist() == [4, 6]
            print(f"TORCH {torch.__version__}", flush=True)

        # Refusals, before any data moves.
        expect_raises(rankd.InvalidArgumentError, "f32[3]",
                      session.all_reduce_sum, x, out=np.zeros(3, np.float32))
        expect_raises(rankd.NotFoundError, "77", session.all_reduce_sum, x,
                      group=77)
        expect_raises(rankd.InvalidArgumentError, "peer 5 is outside",
                      session.send, x, peer=5)
        expect_raises(rankd.InvalidArgumentError, "dtype object",
                      session.all_reduce_sum, np.array(["a"], dtype=object))
        # Without the CUDA runtime an NCCL session is unavailable, naming
        # what was looked for (read when CUDA is first needed: now).
        os.environ["RANKD_CUDART_LIBRARY"] = "/nonexistent/libcudart.so.13"
        expect_raises(rankd.UnavailableError, "/nonexistent/libcudart.so.13",
                      rank.open_session, backend="nccl")
        expect_raises(ValueError, "backend", rank.open_session,
                      backend="mpi")
        # reform (issue 38) refuses a bad timeout before it ends anything.
        expect_raises(ValueError, "timeout_seconds", session.reform,
                      timeout=0)

        # Still usable after the refusals.
        assert session.all_reduce_sum(np.ones(2, np.float32)).wait() \
            .tolist() == [2, 2]
        rank.all_gather_words([r], timeout=30)  # done with the data plane
    print(f"PY RANK {r} OK", flush=True)


def empty(rank):
    """docs/contract.md, "Empty values"."""
    assert rank.world_size == 2, rank
    r, peer = rank.rank, 1 - rank.rank
    none = np.zeros((0, 3), np.float32)
    with rank.open_session(op_timeout=30) as session:
        assert session.all_reduce_sum(none).wait().shape == (0, 3)
        assert session.all_gather(none).wait().shape == (0, 3)
        assert session.all_to_all_v(none, [0, 0], [0, 0]).wait().shape == \
            (0, 3)
        # Rank 0 sends no rows, then [5, 6]: they pair in order.
        if r == 0:
            session.send(none, peer=1).wait()
            session.send(np.array([5, 6], np.float32), peer=1).wait()
        else:
            got = session.receive(0, shape=(0, 3), dtype=np.float32).wait()
            assert got.shape == (0, 3), got.shape
            v = session.receive(0, shape=(2,), dtype=np.float32).wait()
            assert v.tolist() == [5, 6], v
        out = np.zeros((0, 3), np.float32)
        assert session.batch_send_receive([(peer, none)],
                                          [(peer, out)]).wait()[0] is out
        theirs = np.full(2, -1, np.float32)
        session.batch_send_receive([(peer, np.full(2, r, np.float32))],
                                   [(peer, theirs)]).wait()
        assert theirs.tolist() == [peer, peer], theirs
        # Only the leading extent may be 0.
        expect_raises(rankd.InvalidArgumentError,
                      "only the leading extent may be 0",
                      session.all_reduce_sum, np.zeros((2, 0), np.float32))
        rank.all_gather_words([r], timeout=30)
    # A receive of no rows whose send never comes waits for it and fails
    # naming rank 0, instead of completing at once.
    with rank.open_session(op_timeout=1) as session:
        if r == 1:
            work = session.receive(0, shape=(0,), dtype=np.float32)
            e = expect_raises(rankd.DeadlineExceededError,
                              "rank 0 did not report operation #0",
                              work.wait)
            print(f"UNPAIRED {e}", flush=True)
        rank.all_gather_words([r], timeout=30)
    print(f"PY EMPTY {r} OK", flush=True)


def narrowed(rank):
    """Rank.open_session(restrict_capabilities=...)."""
    assert rank.world_size == 2, rank
    r, peer = rank.rank, 1 - rank.rank
    other = [g for g in rank.groups if g.id != rankd.WORLD][0]
    x = np.array([1, 2], np.float32)
    with rank.open_session(op_timeout=30, restrict_capabilities={
            "point_to_point": False, "variable_all_to_all": False,
            "collective_groups": []}) as session:
        assert session.capabilities == {
            "world_collectives": True, "point_to_point": False,
            "variable_all_to_all": False, "exact_completion": True}, \
            session.capabilities
        assert session.supports_group(rankd.WORLD)
        assert not session.supports_group(other.id)
        e = expect_raises(
            rankd.UnimplementedError,
            "gloo backend: send needs capability 'point_to_point', which "
            "this backend does not advertise", session.send, x, peer=peer)
        print(f"NARROWED {e}", flush=True)
        expect_raises(rankd.UnimplementedError, "'point_to_point'",
                      session.receive, peer, shape=(2,), dtype=np.float32)
        expect_raises(rankd.UnimplementedError, "'variable_all_to_all'",
                      session.all_to_all_v, x, [1, 1], [1, 1])
        expect_raises(rankd.UnimplementedError, "'collective_groups'",
                      session.all_reduce_sum, x, group=other.id)
        assert session.all_reduce_sum(x).wait().tolist() == [2, 4]
        rank.all_gather_words([r], timeout=30)
    # The world left out, one group kept.
    with rank.open_session(op_timeout=30, restrict_capabilities={
            "world_collectives": False,
            "collective_groups": [other.id]}) as session:
        expect_raises(rankd.UnimplementedError, "'world_collectives'",
                      session.all_reduce_sum, x)
        got = session.all_reduce_sum(x, group=other.id).wait()
        assert got.tolist() == (x * other.size).tolist(), got
        rank.all_gather_words([r], timeout=30)
    expect_raises(rankd.InvalidArgumentError, "point_two_point",
                  rank.open_session, restrict_capabilities={
                      "point_two_point": False})
    print(f"PY NARROWED {r} OK", flush=True)


def watch_failures(rank):
    """The failures `rank`'s callback got (a list) and an Event set by the
    first."""
    seen = []
    called = threading.Event()

    def on_failure(error):
        seen.append(error)
        called.set()

    rank.on_job_failure(on_failure)
    return seen, called


def lost(rank):
    seen, called = watch_failures(rank)
    session = rank.open_session()
    rank.all_gather_words([rank.rank], timeout=30)
    if rank.rank == 1:
        sys.stdout.flush()
        os._exit(3)  # dies without leaving
    work = session.receive(1, shape=(2,), dtype=np.float32)
    error = expect_raises(rankd.AbortedError, "rank 1", work.wait)
    print(f"LOST {type(error).__name__}: {error.message}", flush=True)
    health = rank.job_health()
    assert isinstance(health, rankd.AbortedError), health
    # Without recovery a loss fails the job.
    assert rank.recovery == "off" and not rank.recovers_in_place
    assert " failed (MEMBER_LOST" in health.message, health.message
    assert not isinstance(health, rankd.EpochEndedError), health
    assert called.wait(10), "the failure callback was not called"
    assert isinstance(seen[0], rankd.AbortedError), seen
    assert not isinstance(seen[0], rankd.EpochEndedError), seen
    print("CALLBACK AbortedError", flush=True)
    session.close()


def closed_in_callback(rank):
    """Rank 1 dies; rank 0's failure callback closes its session and its
    rank itself (the C ABI forbids freeing a handle inside the callback:
    the frees run on a thread of their own, after it returned)."""
    session = rank.open_session()
    rank.all_gather_words([rank.rank], timeout=30)
    if rank.rank == 1:
        sys.stdout.flush()
        os._exit(3)  # dies without leaving
    done = threading.Event()
    seen = []

    def on_failure(error):
        session.close()
        rank.close()
        seen.append(type(error).__name__)
        done.set()

    rank.on_job_failure(on_failure)
    assert done.wait(20), "the failure callback was not called"
    deadline = time.monotonic() + 10
    while rank._handle is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert rank._handle is None, "the rank was never freed"
    expect_raises(ValueError, "closed", rank.job_health)
    print(f"CLOSED IN CALLBACK {seen[0]}", flush=True)


def rejoin(rank):
    r = rank.rank
    assert rank.recovery == "job", rank.recovery  # --recovery=on
    if rank.epoch == 1:
        seen, called = watch_failures(rank)
        expect_raises(rankd.InvalidArgumentError, "timeout", rank.rejoin, 1,
                      timeout=0)
        assert rank.rejoin(0, timeout=5) == 1  # already past epoch 0
        rank.all_gather_words([r], timeout=30)
        if r == 1:
            sys.stdout.flush()
            os._exit(3)  # dies without leaving
        deadline = time.monotonic() + 10
        while rank.job_health() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        health = rank.job_health()
        # The library's mark (rankd_status_ends_an_epoch), not the words.
        assert isinstance(health, rankd.EpochEndedError), health
        assert isinstance(health, rankd.AbortedError), health
        assert "rank 1" in health.message, health.message
        assert " epoch 1 ended (MEMBER_LOST" in health.message, health.message
        assert called.wait(10), "the failure callback was not called"
        assert isinstance(seen[0], rankd.EpochEndedError), seen
        print("SAW LOSS", flush=True)  # the test starts a replacement
        assert rank.rejoin(1, timeout=60) == 2
        assert rank.job_health() is None, rank.job_health()
    else:
        assert rank.epoch == 2, rank.epoch  # the replacement
    out = rank.all_gather_words([r], timeout=30)
    assert out.reshape(-1).tolist() == [0, 1], out
    print(f"PY REJOIN {r} OK", flush=True)


def domain_view(rank):
    r = rank.rank
    assert rank.layout["data"] == 2 and rank.layout["tensor"] == 2, rank.layout
    assert rank.recovery == "domain" and rank.recovers_in_place, rank.recovery
    if r == 3:
        sys.stdout.flush()
        os._exit(3)  # dies without leaving: replica 1 recovers
    if r == 2:
        # Its own replica's loss is its failure; it ends without leaving (a
        # clean leave while a replica recovers would fail the job).
        deadline = time.monotonic() + 30
        while rank.job_health() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert "rank 3" in rank.job_health().message, rank.job_health()
        print("PY DOMAIN 2 SAW LOSS", flush=True)
        os._exit(0)
    # Replica 0 serves on: a round in flight at a loss fails (ABORTED) and
    # the next spans replica 0 alone, saying so.
    deadline = time.monotonic() + 30
    while True:
        assert time.monotonic() < deadline, "no partial round within 30 s"
        try:
            frames, partial, domains = rank.all_gather_words_with_view(
                [10 + r], timeout=30)
        except rankd.AbortedError:
            continue
        if partial:
            break
    assert frames.tolist() == [[10], [11]], frames
    assert domains == [(0, 1)], domains
    assert rank.job_health() is None, rank.job_health()
    # all_gather_words promises the whole world: it refuses a partial round.
    expect_raises(rankd.FailedPreconditionError, "domain",
                  rank.all_gather_words, [r], timeout=30)
    print(f"PY DOMAIN {r} OK", flush=True)


def nccl(rank):
    from fake_device import FakeDeviceArray, FakeDLPackArray, StandinCuda

    r, world = rank.rank, rank.world_size
    assert world == 2, world
    peer = 1 - r
    cuda = StandinCuda()
    cuda.set_device(rank.local_rank)
    stream = cuda.stream()

    def array(values, dtype, stream=None):
        values = np.asarray(values, dtype=dtype)
        a = FakeDeviceArray(cuda, values.shape, dtype, stream=stream)
        a.host[...] = values
        return a

    with rank.open_session(backend="nccl", op_timeout=30) as session:
        assert session.backend == "nccl"
        assert all(session.capabilities.values()), session.capabilities

        # all_reduce_sum on the array's stream (its CAI 'stream'): the
        # result is in stream order, read after synchronizing the stream
        # without waiting for the work.
        x = array([1 + 2 * r, 2 + 2 * r, 7], np.float32, stream=stream)
        y = FakeDeviceArray(cuda, (3,), np.float32, stream=stream)
        work = session.all_reduce_sum(x, out=y)
        cuda.synchronize(stream)
        assert y.host.tolist() == [4, 6, 14], y.host
        assert work.is_completed() and work.wait() is y
        # In place, no stream: outputs valid after wait().
        z = array([r, 10 * r], np.int64)
        assert session.all_reduce_sum(z, out=z).wait() is z
        assert z.host.tolist() == [1, 10], z.host
        print("CASE all_reduce_sum OK", flush=True)

        # Stream order both ways: the stream is held, the input written on
        # it only after the hold (a host function), so the collective must
        # wait for it; stream= given explicitly.
        import threading
        release = threading.Event()
        a = array([0, 0], np.int32)
        b = array([0, 0], np.int32)
        cuda.hold(stream, release)
        fill = ctypes_fill(cuda, stream, a, [100 * (r + 1), 1])
        work = session.all_reduce_sum(a, out=b, stream=stream)
        import time
        time.sleep(0.3)
        assert not work.is_completed(), "completed behind a held stream"
        release.set()
        cuda.synchronize(stream)
        assert b.host.tolist() == [300, 2], b.host
        work.wait()
        del fill
        print("CASE stream_order OK", flush=True)

        # all_gather: [2, 3] rows by member.
        g_in = array([[10 * r, 10 * r + 1, 10 * r + 2]] * 2, np.float32,
                     stream=stream)
        g_out = FakeDeviceArray(cuda, (4, 3), np.float32)
        session.all_gather(g_in, out=g_out).wait()
        assert g_out.host.tolist() == [[0, 1, 2]] * 2 + [[10, 11, 12]] * 2, \
            g_out.host
        print("CASE all_gather OK", flush=True)

        # all_to_all_v: rank 0 keeps 1 row and sends 2; rank 1 sends 3.
        send = [1, 2] if r == 0 else [3, 0]
        recv = [1, 3] if r == 0 else [2, 0]
        t_in = array(np.arange(3) + 100 * r, np.float64, stream=stream)
        t_out = FakeDeviceArray(cuda, (sum(recv),), np.float64)
        session.all_to_all_v(t_in, send, recv, out=t_out).wait()
        assert t_out.host.tolist() == ([0, 100, 101, 102] if r == 0
                                       else [1, 2]), t_out.host
        print("CASE all_to_all_v OK", flush=True)

        # send / receive, then a batched swap, through DLPack.
        if r == 0:
            v = array([5, 6], np.float32)
            assert session.send(v, peer=1, stream=stream).wait() is v
        else:
            v = FakeDeviceArray(cuda, (2,), np.float32)
            assert session.receive(0, out=v, stream=stream).wait() is v
            assert v.host.tolist() == [5, 6], v.host
        mine_mem = array([r, r, r], np.uint8)
        theirs_mem = array([255] * 3, np.uint8)
        # A DLPack 1.x producer and one from before it; both are handed
        # the caller's stream.
        mine = FakeDLPackArray(mine_mem, device=rank.local_rank)
        theirs = FakeDLPackArray(theirs_mem, device=rank.local_rank,
                                 versioned=False)
        outputs = session.batch_send_receive(
            [(peer, mine)], [(peer, theirs)], stream=stream).wait()
        assert outputs[0] is theirs and theirs_mem.host.tolist() == [peer] * 3
        assert mine.streams == theirs.streams == [stream], \
            (mine.streams, theirs.streams)
        print("CASE send_receive OK", flush=True)

        # Refusals, before any data moves.
        expect_raises(rankd.InvalidArgumentError, "needs a CUDA tensor",
                      session.all_reduce_sum, np.ones(2, np.float32))
        expect_raises(rankd.InvalidArgumentError, "pass out=",
                      session.all_reduce_sum, x)
        strided = FakeDeviceArray(cuda, (2, 2), np.float32, strides=(4, 8))
        expect_raises(rankd.InvalidArgumentError, "C-contiguous",
                      session.all_reduce_sum, strided, out=strided)
        expect_raises(rankd.InvalidArgumentError, "f32[2]",
                      session.all_reduce_sum, x,
                      out=FakeDeviceArray(cuda, (2,), np.float32))
        expect_raises(rankd.NotFoundError, "77", session.all_reduce_sum, x,
                      out=y, group=77)
        expect_raises(rankd.InvalidArgumentError, "stream must be",
                      session.all_reduce_sum, x, out=y, stream="s")

        # A bounded wait that misses its deadline (the stream held):
        # DeadlineExceededError, and the session is poisoned.
        release = threading.Event()
        cuda.hold(stream, release)
        work = session.all_reduce_sum(x, out=y, stream=stream)
        assert work.supports_cancellation("quarantine")
        expect_raises(rankd.WaitTimeoutError, "QuarantineUntilComplete",
                      work.wait, timeout=0.3)
        release.set()
        cuda.synchronize(stream)
        try:
            session.all_reduce_sum(x, out=y, stream=stream).wait()
            raise AssertionError("work after a missed deadline succeeded")
        except rankd.RankdError:
            pass
        print("CASE bounded_wait OK", flush=True)
        rank.all_gather_words([r], timeout=30)  # done with the data plane
    print(f"PY NCCL RANK {r} OK", flush=True)


def ctypes_fill(cuda, stream, array, values):
    """Queues a host function on `stream` that writes `values` into the
    stand-in memory of `array` (host memory) when the stream reaches it:
    a producer kernel's stand-in. Returns what must stay alive until then."""
    import ctypes
    values = np.asarray(values, dtype=array.dtype)

    def fill(_):
        array.host[...] = values

    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(fill)
    cuda.check(cuda.lib.cudaLaunchHostFunc(
        stream, ctypes.cast(fn, ctypes.c_void_p), None), "cudaLaunchHostFunc")
    return fn


def torch_ops(rank):
    import torch
    r, world = rank.rank, rank.world_size
    device = torch.device("cuda", rank.local_rank)
    torch.cuda.set_device(device)
    with rank.open_session(backend="nccl", op_timeout=60) as session:
        x = torch.arange(4, dtype=torch.float32, device=device) + 10 * r
        total = session.all_reduce_sum(x).wait()  # allocated by torch
        want = sum(torch.arange(4, dtype=torch.float32) + 10 * m
                   for m in range(world))
        assert torch.equal(total.cpu(), want), total
        # Stream order: a side stream produces, the collective runs on it,
        # the result is read there without waiting on the host.
        side = torch.cuda.Stream(device)
        with torch.cuda.stream(side):
            b = torch.full((1024,), float(r + 1), device=device,
                           dtype=torch.bfloat16)
            out = torch.empty_like(b)
            session.all_reduce_sum(b, out=out)
            check = out.float().sum()
        side.synchronize()
        assert check.item() == 1024 * sum(m + 1 for m in range(world))
        g = session.all_gather(x).wait()
        assert g.shape == (4 * world,)
        assert torch.equal(g.cpu(), torch.cat(
            [torch.arange(4, dtype=torch.float32) + 10 * m
             for m in range(world)]))
        if world >= 2:
            peer = 1 - r
            theirs = torch.empty(3, device=device)
            session.batch_send_receive(
                [(peer, torch.full((3,), float(r), device=device))],
                [(peer, theirs)]).wait()
            assert theirs.cpu().tolist() == [peer] * 3
        # The same sum through DLPack alone: torch is a DLPack 1.x producer
        # (versioned capsules), handed the caller's stream.
        class DLPackOnly:
            def __init__(self, tensor):
                self.tensor = tensor

            def __dlpack__(self, **kwargs):
                return self.tensor.__dlpack__(**kwargs)

            def __dlpack_device__(self):
                return self.tensor.__dlpack_device__()

        via_dlpack = torch.zeros(4, dtype=torch.float32, device=device)
        session.all_reduce_sum(
            DLPackOnly(x), out=DLPackOnly(via_dlpack),
            stream=torch.cuda.current_stream(device)).wait()
        assert torch.equal(via_dlpack.cpu(), want), via_dlpack
        expect_raises(rankd.InvalidArgumentError, "not contiguous",
                      session.all_reduce_sum,
                      torch.ones(4, 4, device=device).t())
        torch.cuda.synchronize(device)
        rank.all_gather_words([r], timeout=30)
    print(f"PY TORCH RANK {r} OK", flush=True)


def poison(rank):
    """Session.poison / abort / poison_cause (issue 33)."""
    assert rank.world_size == 2, rank
    r, peer = rank.rank, 1 - rank.rank
    x = np.array([1, 2], np.float32)
    with rank.open_session(op_timeout=30) as session:
        assert session.poison_cause is None
        # Refused before anything is latched.
        for latch in (session.poison, session.abort):
            expect_raises(rankd.InvalidArgumentError, "code is RANKD_OK",
                          latch, 0, "m")
            expect_raises(rankd.InvalidArgumentError,
                          "code is 17, not a rankd_code", latch, 17, "m")
            expect_raises(rankd.InvalidArgumentError,
                          "'BROKEN' is not a status code's name", latch,
                          "BROKEN", "m")
            expect_raises(rankd.InvalidArgumentError, "a code with a message",
                          latch, "ABORTED")
            expect_raises(rankd.InvalidArgumentError, "NUL", latch,
                          "ABORTED", "a\0b")
        assert session.poison_cause is None, session.poison_cause
        assert session.all_reduce_sum(x).wait().tolist() == [2, 4]

        # Poison: operations raise the cause's class with its words; the
        # first cause stays.
        cause = f"rank {r} drained by its scheduler"
        session.poison(rankd.UnavailableError(cause))
        got = session.poison_cause
        assert isinstance(got, rankd.UnavailableError), got
        assert got.message == cause, got
        e = expect_raises(rankd.UnavailableError, cause,
                          session.all_reduce_sum, x)
        print(f"POISONED {e}", flush=True)
        expect_raises(rankd.UnavailableError, cause, session.send, x,
                      peer=peer)
        session.poison("DATA_LOSS", "a second cause")
        assert session.poison_cause.message == cause, session.poison_cause
        rank.all_gather_words([r], timeout=30)

    # Abort: rank 0's receive that rank 1 never sends fails now with the
    # cause, not at op_timeout (60 s); rank 1 aborts after the barrier.
    with rank.open_session(op_timeout=60) as session:
        cause = f"rank {r}: its peer was declared gone"
        if r == 0:
            work = session.receive(1, shape=(2,), dtype=np.float32)
            time.sleep(0.3)  # most likely running by now
            start = time.monotonic()
            session.abort(rankd.AbortedError, cause)
            e = expect_raises(rankd.AbortedError, cause, work.wait)
            assert time.monotonic() - start < 20, time.monotonic() - start
            print(f"ABORTED {e}", flush=True)
        rank.all_gather_words([r], timeout=30)
        if r == 1:
            session.abort("ABORTED", cause)
        session.poison(rankd.DataLossError("a later cause"))
        session.abort(rankd.DataLossError("a later cause"))
        got = session.poison_cause
        assert isinstance(got, rankd.AbortedError) and got.message == cause, \
            got
        expect_raises(rankd.AbortedError, cause, session.all_reduce_sum, x)
        rank.all_gather_words([r], timeout=30)
    expect_raises(rankd.FailedPreconditionError, "closed",
                  lambda: session.poison_cause)
    print(f"PY POISON {r} OK", flush=True)


def reform_busy(rank):
    """Session.reform on one thread while another uses the session: the
    other calls are refused, never run against the ended session's
    teardown (rankd.h, rankd_session_reform)."""
    assert rank.world_size == 2, rank
    r = rank.rank
    x = np.array([1, 2], np.float32)
    session = rank.open_session(op_timeout=30)
    assert session.all_reduce_sum(x).wait().tolist() == [2, 4]
    rank.all_gather_words([r], timeout=30)  # both summed before reforming
    outcome = []

    def reform():
        # The job is healthy: after `timeout` without a loss notice, the
        # re-form gives up with FAILED_PRECONDITION.
        start = time.monotonic()
        try:
            session.reform(timeout=6)
        except rankd.FailedPreconditionError as e:
            outcome.append(("refused", time.monotonic() - start, str(e)))
        else:
            outcome.append(("reformed", time.monotonic() - start, ""))

    thread = threading.Thread(target=reform)
    thread.start()
    # Until the re-form holds the session (a call that touches no peer).
    deadline = time.monotonic() + 5
    while True:
        try:
            _ = session.capabilities  # a property: a call through the gate
        except rankd.FailedPreconditionError as busy:
            assert "being re-formed" in str(busy), busy
            break
        assert time.monotonic() < deadline, "the re-form never started"
        time.sleep(0.01)
    e = expect_raises(rankd.FailedPreconditionError,
                      "the session is being re-formed", session.all_reduce_sum,
                      x)
    print(f"BUSY {e}", flush=True)
    expect_raises(rankd.FailedPreconditionError,
                  "the session is being re-formed already", session.reform,
                  timeout=5)
    expect_raises(rankd.FailedPreconditionError,
                  "the session is being re-formed", session.poison,
                  rankd.UnavailableError("drained"))
    thread.join(30)
    assert not thread.is_alive()
    assert len(outcome) == 1 and outcome[0][0] == "refused", outcome
    # After the failed re-form the session is gone, and says so.
    expect_raises(rankd.FailedPreconditionError, "the session is gone",
                  session.all_reduce_sum, x)
    session.close()
    rank.all_gather_words([r], timeout=30)
    print(f"PY REFORM BUSY {r} OK", flush=True)


def close_busy(rank):
    """Rank.close() while another thread waits in a call on the rank: the
    close returns at once, the call goes on to its own timeout, and the
    handle is freed as it returns, not under it; later calls raise
    ValueError."""
    r = rank.rank
    rank.all_gather_words([r], timeout=30)  # both joined
    outcome = []
    calling = threading.Event()

    def wait_for_a_key_never_set():
        calling.set()
        try:
            rank.kv_get(f"never/{r}", timeout=3)
        except rankd.DeadlineExceededError as e:
            outcome.append(("timeout", e))
        except Exception as e:  # noqa: BLE001 - reported below
            outcome.append(("other", e))

    thread = threading.Thread(target=wait_for_a_key_never_set)
    thread.start()
    assert calling.wait(10)
    time.sleep(0.3)  # the get is most likely waiting in the daemon by now
    start = time.monotonic()
    rank.close()
    took = time.monotonic() - start
    assert took < 1.0, f"close waited {took:.2f} s"
    assert rank._handle is not None, "freed under the waiting get"
    expect_raises(ValueError, "closed", rank.kv_get, "k", 0)
    thread.join(30)
    assert outcome and outcome[0][0] == "timeout", outcome
    assert rank._handle is None, "not freed once the get returned"
    print(f"PY CLOSE BUSY {r} OK", flush=True)


def session_close_busy(rank):
    """Session.close() while another thread waits in reform() on it: the
    close returns at once, the re-form goes on to its own timeout, and the
    session is freed as it returns, not under it; later calls raise
    FailedPreconditionError."""
    r = rank.rank
    session = rank.open_session(op_timeout=30)
    rank.all_gather_words([r], timeout=30)  # both opened
    outcome = []

    def reform():
        # The job is healthy: the re-form gives up after its timeout.
        try:
            session.reform(timeout=3)
        except rankd.FailedPreconditionError as e:
            outcome.append(("refused", e))
        except Exception as e:  # noqa: BLE001 - reported below
            outcome.append(("other", e))
        else:
            outcome.append(("reformed", None))

    thread = threading.Thread(target=reform)
    thread.start()
    deadline = time.monotonic() + 5
    while True:  # until the re-form holds the session
        try:
            _ = session.capabilities
        except rankd.FailedPreconditionError as busy:
            assert "being re-formed" in str(busy), busy
            break
        assert time.monotonic() < deadline, "the re-form never started"
        time.sleep(0.01)
    start = time.monotonic()
    session.close()
    took = time.monotonic() - start
    assert took < 1.0, f"close waited {took:.2f} s"
    assert session._handle is not None, "freed under the waiting re-form"
    expect_raises(rankd.FailedPreconditionError, "the session is closed",
                  session.all_reduce_sum, np.array([1], np.float32))
    thread.join(30)
    assert not thread.is_alive()
    assert len(outcome) == 1 and outcome[0][0] == "refused", outcome
    assert session._handle is None, "not freed once the re-form returned"
    session.close()  # idempotent
    rank.all_gather_words([r], timeout=30)
    print(f"PY SESSION CLOSE BUSY {r} OK", flush=True)


def main():
    scenario = sys.argv[1]
    with rankd.join() as rank:
        {"ops": ops, "lost": lost, "nccl": nccl, "torch": torch_ops,
         "empty": empty, "narrowed": narrowed, "rejoin": rejoin,
         "domain_view": domain_view, "poison": poison,
         "reform_busy": reform_busy, "close_busy": close_busy,
         "session_close_busy": session_close_busy,
         "closed_in_callback": closed_in_callback}[scenario](rank)


if __name__ == "__main__":
    main()
