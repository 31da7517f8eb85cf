"""rankd for Python: join a rankd job and run its data plane from a serving
process.

    import numpy as np
    import rankd

    with rankd.join() as rank:             # the launcher's environment
        frames = rank.all_gather_words([rank.rank, 7])   # (world, 2) uint32
        with rank.open_session() as session:             # Gloo, host memory
            total = session.all_reduce_sum(np.ones(4, np.float32)).wait()

Built with ctypes over the C ABI (librankd.so, capi/include/rankd/rankd.h):
no compiled extension, so the package works with any Python 3 and numpy and
can share a process with PyTorch (docs/client-api.md says why). Errors
raise the exception class of their status code (rankd.errors) with the
library's message.
"""

from . import errors
from .errors import *  # noqa: F401,F403 (the exception classes)
from .rank import WORLD, Group, PendingWords, Rank, join
from .session import Session, Work

__all__ = ["WORLD", "Group", "PendingWords", "Rank", "Session", "Work",
           "join", "errors"] + errors.__all__
