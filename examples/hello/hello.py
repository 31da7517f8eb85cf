"""hello.py: the two-rank program of docs/client-api.md in Python, over the
rankd package (ctypes over librankd.so). Start it with the launcher:
    rankrun --nproc_per_node=2 hello.py
Every rank prints the same line as the C, C++ and Rust versions."""
import numpy as np

import rankd

with rankd.join() as rank:  # from the launcher's environment
    r, world = rank.rank, rank.world_size
    # Scheduling metadata: one frame [rank, 7] per rank, rank-major.
    words = rank.all_gather_words([r, 7])  # a (world, 2) uint32 array
    with rank.open_session() as session:  # Gloo, host memory
        # Rank r holds [2r+1, 2r+2]; two ranks sum to [4, 6].
        x = np.array([2 * r + 1, 2 * r + 2], np.float32)
        total = session.all_reduce_sum(x).wait(timeout=30)
        gathered = session.all_gather(np.array([r], np.int32)).wait(timeout=30)
        print(f"rank {r} of {world}: words [{' '.join(map(str, words.ravel()))}]"
              f" sum [{' '.join(f'{v:g}' for v in total)}]"
              f" gathered [{' '.join(map(str, gathered))}]", flush=True)
        # A last round is a barrier: nobody closes its session while a peer
        # still uses it.
        rank.all_gather_words([r, 7])
