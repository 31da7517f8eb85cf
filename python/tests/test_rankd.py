"""The Python package against real daemons: rank_program.py on every rank
of a local job (one daemon x 2 ranks, two daemons x 1 rank), a lost rank
named, and refusals that need no daemon. Run by //python:pytest, or by hand:

    RANKD_BIN_DIR=$(bazel info bazel-bin) \\
    RANKD_LIBRARY=$(bazel info bazel-bin)/capi/librankd.so \\
    PYTHONPATH=python /usr/bin/python3 -m pytest python/tests
"""

import os
import threading
import time

import numpy as np
import pytest

import rankd
from local_job import LocalJob
from rankd import _native

PROGRAM = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                       "rank_program.py")
PYTHONPATH = os.path.dirname(os.path.dirname(os.path.abspath(rankd.__file__)))


def _env():
    return {"PYTHONPATH": PYTHONPATH}


@pytest.mark.parametrize("nnodes,nproc", [(1, 2), (2, 1)], ids=["1x2", "2x1"])
def test_every_operation_gives_exact_values(nnodes, nproc):
    with LocalJob("py-ops", nnodes, nproc) as job:
        results = job.run_ranks(PROGRAM, "ops", env=_env())
    for r, (code, output) in enumerate(results):
        assert code == 0, f"rank {r}:\n{output}"
        assert f"PY RANK {r} OK" in output, output


def test_arrays_of_no_rows_work_everywhere_and_pair_in_order():
    # docs/contract.md, "Empty values"; a receive of no rows never
    # completes without its send.
    with LocalJob("py-empty", 1, 2) as job:
        results = job.run_ranks(PROGRAM, "empty", env=_env())
    for r, (code, output) in enumerate(results):
        assert code == 0, f"rank {r}:\n{output}"
        assert f"PY EMPTY {r} OK" in output, output
    assert "UNPAIRED DEADLINE_EXCEEDED: " in results[1][1], results[1][1]


def test_a_narrowed_session_refuses_naming_the_capability():
    with LocalJob("py-narrowed", 1, 2) as job:
        results = job.run_ranks(PROGRAM, "narrowed", env=_env())
    for r, (code, output) in enumerate(results):
        assert code == 0, f"rank {r}:\n{output}"
        assert f"PY NARROWED {r} OK" in output, output
        assert "NARROWED UNIMPLEMENTED: gloo backend: send needs capability " \
            "'point_to_point'" in output, output


def test_loads_into_a_process_that_imported_torch():
    # Debian's python3-torch (tools/setup.sh installs it); skipped where
    # torch is not installed.
    pytest.importorskip("torch")
    with LocalJob("py-torch", 1, 2) as job:
        env = dict(_env(), RANKD_TEST_WITH_TORCH="1")
        results = job.run_ranks(PROGRAM, "ops", env=env)
    for r, (code, output) in enumerate(results):
        assert code == 0, f"rank {r}:\n{output}"
        assert "TORCH " in output and f"PY RANK {r} OK" in output, output


def _standin_library():
    """The CPU stand-in for CUDA and NCCL: $RANKD_TEST_STANDIN_LIBRARY
    (//python:pytest sets it), else the one under $RANKD_BIN_DIR."""
    path = os.environ.get("RANKD_TEST_STANDIN_LIBRARY")
    if path:
        assert os.path.exists(path), path
        return os.path.abspath(path)
    path = os.path.join(os.environ.get("RANKD_BIN_DIR", ""),
                        "dataplane/nccl/libcuda_nccl_standin.so")
    if not os.path.exists(path):
        pytest.skip("the CUDA/NCCL stand-in is not built: bazel build "
                    "//dataplane/nccl:libcuda_nccl_standin.so")
    return os.path.abspath(path)


def test_nccl_sessions_take_device_arrays():
    # Two ranks on two stand-in GPUs whose memory is host memory, their
    # communicators meeting in a directory of the job's.
    standin = _standin_library()
    with LocalJob("py-nccl", 1, 2) as job:
        env = dict(_env(), RANKD_CUDART_LIBRARY=standin,
                   RANKD_NCCL_LIBRARY=standin, RANKD_STANDIN_DEVICES="2",
                   RANKD_STANDIN_CLIQUE_DIR=os.path.join(job.dir, "cliques"))
        results = job.run_ranks(PROGRAM, "nccl", env=env)
    for r, (code, output) in enumerate(results):
        assert code == 0, f"rank {r}:\n{output}"
        for case in ("all_reduce_sum", "stream_order", "all_gather",
                     "all_to_all_v", "send_receive", "bounded_wait"):
            assert f"CASE {case} OK" in output, output
        assert f"PY NCCL RANK {r} OK" in output, output


def test_nccl_sessions_take_torch_cuda_tensors():
    # On a GPU host with PyTorch built for CUDA; skips elsewhere (CI). The
    # GPU kit runs the same check without pytest.
    import torch_nccl
    why = torch_nccl.unavailable()
    if why is not None:
        pytest.skip(why)
    found = torch_nccl.failures()
    assert not found, "\n".join(found)


def test_poison_refuses_with_the_cause_and_abort_ends_pending_work():
    # Session.poison / abort / poison_cause (issue 33).
    with LocalJob("py-poison", 1, 2) as job:
        results = job.run_ranks(PROGRAM, "poison", env=_env())
    for r, (code, output) in enumerate(results):
        assert code == 0, f"rank {r}:\n{output}"
        assert f"PY POISON {r} OK" in output, output
        assert f"POISONED UNAVAILABLE: gloo backend: all_reduce_sum " \
            f"refused: session poisoned by an earlier failure: rank {r} " \
            "drained by its scheduler" in output, output
    assert "ABORTED ABORTED: gloo receive from member 1 " in results[0][1], \
        results[0][1]


def test_calls_during_a_reform_on_another_thread_are_refused():
    flags = ["--recovery=on", "--recovery_deadline_ms=60000"]
    with LocalJob("py-reform-busy", 1, 2, daemon_flags=flags) as job:
        results = job.run_ranks(PROGRAM, "reform_busy", env=_env(),
                                timeout=60)
    for r, (code, output) in enumerate(results):
        assert code == 0, f"rank {r}:\n{output}"
        assert f"PY REFORM BUSY {r} OK" in output, output
        assert "BUSY FAILED_PRECONDITION: rankd_all_reduce_sum: the session " \
            "is being re-formed (rankd_session_reform on another thread)" \
            in output, output


def test_close_waits_for_a_call_on_another_thread():
    with LocalJob("py-close-busy", 1, 2) as job:
        results = job.run_ranks(PROGRAM, "close_busy", env=_env(),
                                timeout=60)
    for r, (code, output) in enumerate(results):
        assert code == 0, f"rank {r}:\n{output}"
        assert f"PY CLOSE BUSY {r} OK" in output, output


def test_session_close_leaves_the_freeing_to_a_call_on_another_thread():
    flags = ["--recovery=on", "--recovery_deadline_ms=60000"]
    with LocalJob("py-session-close-busy", 1, 2,
                  daemon_flags=flags) as job:
        results = job.run_ranks(PROGRAM, "session_close_busy", env=_env(),
                                timeout=60)
    for r, (code, output) in enumerate(results):
        assert code == 0, f"rank {r}:\n{output}"
        assert f"PY SESSION CLOSE BUSY {r} OK" in output, output


def test_a_handle_is_freed_once_by_the_last_call():
    freed = []
    handle = _native.Handle(7, freed.append, lambda: ValueError("closed"))
    inside = threading.Event()
    release = threading.Event()

    def blocking(h):
        inside.set()
        assert release.wait(10)
        return h

    thread = threading.Thread(target=handle.call, args=(blocking,))
    thread.start()
    assert inside.wait(10)
    handle.close()
    handle.close()
    assert freed == [] and handle.value == 7  # a call still uses it
    with pytest.raises(ValueError, match="closed"):
        handle.call(lambda h: h)
    release.set()
    thread.join(10)
    assert freed == [7] and handle.value is None
    handle.discard()
    assert freed == [7]
    idle = _native.Handle(8, freed.append, lambda: ValueError("closed"))
    assert idle.call(lambda h, x: h + x, 1) == 9
    idle.close()
    assert freed == [7, 8]


def test_poison_causes_are_read_as_codes():
    assert rankd.errors.code_of(rankd.AbortedError("m")) == 10
    assert rankd.errors.code_of(rankd.UnavailableError) == 14
    assert rankd.errors.code_of(rankd.errors.WaitTimeoutError("m")) == 4
    assert rankd.errors.code_of("FAILED_PRECONDITION") == 9
    assert rankd.errors.code_of(16) == 16
    with pytest.raises(rankd.InvalidArgumentError, match="status code"):
        rankd.errors.code_of("OK")
    with pytest.raises(rankd.InvalidArgumentError, match="int32_t"):
        rankd.errors.code_of(2**32 + 10)
    with pytest.raises(rankd.InvalidArgumentError, match="not 1.5"):
        rankd.errors.code_of(1.5)


def test_a_lost_rank_is_named():
    with LocalJob("py-lost", 1, 2) as job:
        results = job.run_ranks(PROGRAM, "lost", env=_env(), timeout=60)
    (code0, out0), (code1, out1) = results
    assert code1 == 3, out1
    assert code0 == 0, out0
    assert "LOST AbortedError: " in out0 and "rank 1" in out0, out0
    assert "CALLBACK AbortedError" in out0, out0


def test_a_failure_callback_may_close_the_session_and_the_rank():
    with LocalJob("py-closed-cb", 1, 2) as job:
        results = job.run_ranks(PROGRAM, "closed_in_callback", env=_env(),
                                timeout=60)
    (code0, out0), (code1, out1) = results
    assert code1 == 3, out1
    assert code0 == 0, out0
    assert "CLOSED IN CALLBACK AbortedError" in out0, out0


def test_inside_a_failure_callback_a_handle_is_freed_on_another_thread():
    freed_on = []
    done = threading.Event()

    def free(handle):
        freed_on.append((handle, threading.current_thread().name))
        done.set()

    with _native.in_failure_callback():
        _native.Handle(5, free, lambda: ValueError("closed")).close()
    assert done.wait(10)
    assert freed_on == [(5, "rankd-free")], freed_on
    _native.Handle(6, free, lambda: ValueError("closed")).close()
    assert freed_on[1] == (6, threading.current_thread().name), freed_on


def test_a_survivor_rejoins_the_next_epoch():
    flags = ["--recovery=on", "--recovery_deadline_ms=60000"]
    with LocalJob("py-rejoin", 1, 2, daemon_flags=flags) as job:
        survivor = job.start_rank(PROGRAM, 0, 0, "rejoin", env=_env())
        lost = job.start_rank(PROGRAM, 0, 1, "rejoin", env=_env())
        assert lost.wait(60) == 3, job.log("rank1.log")
        # The replacement joins once the survivor saw the slot let go.
        deadline = time.monotonic() + 20
        while "SAW LOSS" not in job.log("rank0.log"):
            assert survivor.poll() is None, job.log("rank0.log")
            assert time.monotonic() < deadline, job.log("rank0.log")
            time.sleep(0.01)
        replacement = job.start_rank(PROGRAM, 0, 1, "rejoin", env=_env(),
                                     log_name="rank1.replacement.log")
        assert survivor.wait(60) == 0, job.log("rank0.log")
        assert replacement.wait(60) == 0, job.log("rank1.replacement.log")
        assert "PY REJOIN 0 OK" in job.log("rank0.log")
        assert "PY REJOIN 1 OK" in job.log("rank1.replacement.log")


def test_a_partial_world_round_says_which_replicas_it_spans():
    flags = ["--recovery=domain", "--recovery_deadline_ms=60000",
             "--tensor_parallel=2"]
    with LocalJob("py-domain", 2, 2, daemon_flags=flags) as job:
        results = job.run_ranks(PROGRAM, "domain_view", env=_env(),
                                timeout=60)
        codes = [code for code, _ in results]
        assert codes == [0, 0, 0, 3], "\n".join(log for _, log in results)
        for r in (0, 1):
            assert f"PY DOMAIN {r} OK" in results[r][1], results[r][1]
        assert "PY DOMAIN 2 SAW LOSS" in results[2][1], results[2][1]


def test_join_without_a_job_id_is_refused(monkeypatch):
    monkeypatch.delenv("RANKD_JOB_ID", raising=False)
    with pytest.raises(rankd.InvalidArgumentError, match="RANKD_JOB_ID"):
        rankd.join(target="unix:///nonexistent.sock")


def test_a_bad_environment_value_is_named(monkeypatch):
    monkeypatch.setenv("RANKD_LOCAL_RANK", "two")
    with pytest.raises(rankd.InvalidArgumentError,
                       match=r"\$RANKD_LOCAL_RANK is 'two'"):
        rankd.join(job_id="j", target="unix:///nonexistent.sock")


def test_an_unreachable_daemon_is_unavailable_naming_it(tmp_path):
    target = f"unix://{tmp_path}/absent.sock"
    with pytest.raises(rankd.UnavailableError) as raised:
        rankd.join(job_id="j", target=target, connect_timeout=0.5)
    assert "absent.sock" in str(raised.value)
    assert isinstance(raised.value, ConnectionError)


def test_exceptions_follow_status_codes():
    assert isinstance(rankd.errors.error_for(3, "m"), ValueError)
    assert isinstance(rankd.errors.error_for(4, "m"), TimeoutError)
    e = rankd.errors.error_for(10, "rank 3 lost")
    assert isinstance(e, rankd.AbortedError) and e.message == "rank 3 lost"
    assert str(e) == "ABORTED: rank 3 lost"
    assert isinstance(rankd.errors.error_for(99, "m"), rankd.UnknownError)
    # The C ABI's marks: a bounded wait's timeout, an epoch's fence.
    assert isinstance(rankd.errors.error_for(4, "m", wait_timeout=True),
                      rankd.WaitTimeoutError)
    fence = rankd.errors.error_for(9, "m", epoch_fence=True)
    assert isinstance(fence, rankd.EpochFencedError)
    assert isinstance(fence, rankd.FailedPreconditionError)
    assert type(rankd.errors.error_for(9, "m")) is rankd.FailedPreconditionError
    # ... and a loss that ended an epoch: the mark, never the words.
    ended = rankd.errors.error_for(10, "job j epoch 1 ended (MEMBER_LOST)",
                                   epoch_ended=True)
    assert isinstance(ended, rankd.EpochEndedError)
    assert isinstance(ended, rankd.AbortedError)
    assert type(rankd.errors.error_for(
        10, "job j epoch 1 ended (MEMBER_LOST)")) is rankd.AbortedError


class _Interface:
    """An object with only a __cuda_array_interface__ (nothing is read
    through its pointer here)."""

    def __init__(self, **cai):
        self.__cuda_array_interface__ = dict(
            {"data": (0x1000, False), "version": 3, "strides": None}, **cai)


def test_cuda_array_interfaces_are_read_exactly():
    from rankd import _device
    t = _device.device_tensor(
        _Interface(shape=(2, 3), typestr="<f2", stream=7), "x")
    assert (t.pointer, t.shape, t.dtype, t.stream) == (0x1000, (2, 3), 2, 7)
    # Contiguous strides given explicitly, and size-1 extents' strides,
    # are accepted; others are refused.
    t = _device.device_tensor(
        _Interface(shape=(2, 1, 3), typestr="<i4", strides=(12, 99, 4)), "x")
    assert t.dtype == 7 and t.stream is None
    with pytest.raises(rankd.InvalidArgumentError, match="C-contiguous"):
        _device.device_tensor(
            _Interface(shape=(2, 3), typestr="<i4", strides=(4, 8)), "x")
    with pytest.raises(rankd.InvalidArgumentError, match="typestr"):
        _device.device_tensor(_Interface(shape=(2,), typestr="<U4"), "x")
    with pytest.raises(rankd.InvalidArgumentError, match="numpy array"):
        _device.device_tensor(np.ones(2), "x")
    # Stream handles: 0 is CUDA's legacy default stream (1 in the C ABI).
    assert _device.stream_handle(None) is None
    assert _device.stream_handle(0) == _device.STREAM_LEGACY
    assert _device.stream_handle(0xabc) == 0xabc


def test_cpu_torch_tensors_are_host_memory():
    torch = pytest.importorskip("torch")
    from rankd import _device
    t = torch.ones(3)
    assert not _device.is_device_tensor(t)
    with pytest.raises(rankd.InvalidArgumentError, match="CPU torch tensor"):
        _device.device_tensor(t, "x")


def test_dlpack_capsules_are_read_exactly():
    import types
    from fake_device import DLPACK_FLAG_READ_ONLY, FakeDLPackArray
    from rankd import _device
    memory = types.SimpleNamespace(pointer=0x2000, shape=(2, 3),
                                   dtype=np.int32)
    # A DLPack 1.x producer gives the versioned capsule, handed the stream.
    producer = FakeDLPackArray(memory, device=1)
    t = _device.device_tensor(producer, "x", stream=0xabc)
    assert (t.pointer, t.shape, t.dtype, t.device, t.readonly) == \
        (0x2000, (2, 3), 7, 1, False)
    assert producer.streams == [0xabc]
    assert _device.device_tensor(
        FakeDLPackArray(memory, flags=DLPACK_FLAG_READ_ONLY), "x").readonly
    with pytest.raises(rankd.InvalidArgumentError, match="DLPack 2.0"):
        _device.device_tensor(FakeDLPackArray(memory, version=(2, 0)), "x")
    # A producer from before DLPack 1.0 (no max_version) is read too.
    legacy = FakeDLPackArray(memory, versioned=False)
    t = _device.device_tensor(legacy, "x")
    assert (t.pointer, t.shape, t.dtype, t.readonly) == \
        (0x2000, (2, 3), 7, False)
    assert legacy.streams == [None]
