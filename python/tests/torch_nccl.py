"""The Python package on PyTorch CUDA tensors, on a GPU host:
rank_program.py's "torch" scenario on every rank of a one-node job of
min(2, visible GPUs) ranks over NCCL. test_rankd.py runs it under pytest;
the GPU kit's runner (tests/gpu/run.sh), on hosts without pytest, runs it
directly:

    RANKD_BIN_DIR=<bazel-bin or kit bin/> RANKD_LIBRARY=<librankd.so> \\
    PYTHONPATH=python python3 python/tests/torch_nccl.py

which prints one last line, "PASSED", "SKIPPED: <why>" or
"FAILED: <why>", and exits 1 only for FAILED. Where $RANKD_REQUIRE_GPU is 1
(the runner on a GPU host), torch without a usable CUDA device fails.
"""

import os
import sys

PROGRAM = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                       "rank_program.py")


def missing_modules():
    """Why this python3 cannot run the check (no numpy or no torch), or
    None."""
    for module in ("numpy", "torch"):
        try:
            __import__(module)
        except ImportError as e:
            return f"{module} is not importable under {sys.executable} ({e})"
    return None


def no_cuda_device():
    """Why torch (importable) has no CUDA device to run on, or None."""
    import torch
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} has no usable CUDA device"
    return None


def unavailable():
    """Why this host cannot run the check, or None."""
    return missing_modules() or no_cuda_device()


def failures():
    """Runs the job; returns what went wrong on which rank (empty when
    every rank passed)."""
    import rankd
    import torch
    from local_job import LocalJob
    world = min(2, torch.cuda.device_count())
    pythonpath = os.path.dirname(os.path.dirname(os.path.abspath(
        rankd.__file__)))
    with LocalJob("py-torch-nccl", 1, world) as job:
        results = job.run_ranks(PROGRAM, "torch",
                                env={"PYTHONPATH": pythonpath}, timeout=180)
    return [f"rank {r} exited {code}:\n{output}"
            for r, (code, output) in enumerate(results)
            if code != 0 or f"PY TORCH RANK {r} OK" not in output]


def main():
    why = missing_modules()
    if why is None:
        why = no_cuda_device()
        if why is not None and os.environ.get("RANKD_REQUIRE_GPU") == "1":
            print(f"FAILED: RANKD_REQUIRE_GPU=1 but {why}")
            return 1
    if why is not None:
        print(f"SKIPPED: {why}")
        return 0
    found = failures()
    for failure in found:
        print(failure)
    print(f"FAILED: {len(found)} rank(s) failed" if found else "PASSED")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
