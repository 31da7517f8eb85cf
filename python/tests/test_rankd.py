"""The Python package against real daemons: rank_program.py on every rank
of a local job (one daemon x 2 ranks, two daemons x 1 rank), a lost rank
named, and refusals that need no daemon. Run by //python:pytest, or by hand:

    RANKD_BIN_DIR=$(bazel info bazel-bin) \\
    RANKD_LIBRARY=$(bazel info bazel-bin)/capi/librankd.so \\
    PYTHONPATH=python /usr/bin/python3 -m pytest python/tests
"""

import os

import numpy as np
import pytest

import rankd
from local_job import LocalJob

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


def test_loads_into_a_process_that_imported_torch():
    # Debian's python3-torch (installed by tools/setup.sh --bench); CI's
    # suite runs without it, so the case skips there.
    pytest.importorskip("torch")
    with LocalJob("py-torch", 1, 2) as job:
        env = dict(_env(), RANKD_TEST_WITH_TORCH="1")
        results = job.run_ranks(PROGRAM, "ops", env=env)
    for r, (code, output) in enumerate(results):
        assert code == 0, f"rank {r}:\n{output}"
        assert "TORCH " in output and f"PY RANK {r} OK" in output, output


def test_a_lost_rank_is_named():
    with LocalJob("py-lost", 1, 2) as job:
        results = job.run_ranks(PROGRAM, "lost", env=_env(), timeout=60)
    (code0, out0), (code1, out1) = results
    assert code1 == 3, out1
    assert code0 == 0, out0
    assert "LOST AbortedError: " in out0 and "rank 1" in out0, out0
    assert "CALLBACK AbortedError" in out0, out0


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
