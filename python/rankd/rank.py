"""Joining a job and the control-plane services of a rank: identity and
groups, all_gather_words, the key-value broker, job failure and recovery
(rejoining the job's next epoch)."""

import ctypes
import math
import threading

import numpy as np

from . import _native, errors
from ._native import check, lib

__all__ = ["WORLD", "Group", "Rank", "PendingWords", "join"]

# The group id of the whole world (RANKD_WORLD_GROUP).
WORLD = 1

# rankd_recovery -> Rank.recovery.
_RECOVERY = {0: "off", 1: "job", 2: "domain"}


class Group:
    """A collective group this rank belongs to: `id`, `kind` ("world",
    "tensor", "pipeline", "expert", "data"), `members` (world ranks in
    group order) and `local_rank` (this rank's index in it)."""

    def __init__(self, id, kind, members, local_rank):
        self.id = id
        self.kind = kind
        self.members = members
        self.local_rank = local_rank

    @property
    def size(self):
        return len(self.members)

    def __repr__(self):
        return (f"Group(id={self.id}, kind={self.kind!r}, "
                f"members={self.members}, local_rank={self.local_rank})")


def _bytes(text):
    return None if text is None else str(text).encode()


def _key(key, what="key"):
    """`key` (a str) as the C string the library takes. The C ABI ends a
    key at its first NUL byte, so a key holding one would silently name
    another key: InvalidArgumentError instead."""
    if "\0" in key:
        raise errors.InvalidArgumentError(
            f"rankd: {what} {key!r} contains a NUL byte (\\0); keys are C "
            "strings and cannot hold one")
    return key.encode()


def _words(words):
    array = np.ascontiguousarray(words, dtype=np.uint32).reshape(-1)
    return array, array.ctypes.data_as(_native.c_uint32_p)


def join(*, target=None, job_id=None, local_rank=None, rank=None,
         world_size=None, device="cpu", device_index=None,
         wait_for_world=60.0, connect_timeout=10.0, token_file=None):
    """Connects to the node's rankd daemon and joins the job.

    Every argument left as None comes from the environment the launcher
    sets ($RANKD_TARGET, $RANKD_JOB_ID, $RANKD_LOCAL_RANK, $RANKD_RANK,
    $RANKD_WORLD_SIZE, $RANKD_TOKEN_FILE, $RANKD_RANK_TOKEN), then from
    rankd's defaults, so
    a process started by rankd-launch calls plain `rankd.join()`. Blocks
    until every rank joined (at most `wait_for_world` seconds; 0 returns
    once this rank is registered). Raises InvalidArgumentError for bad
    arguments, UnavailableError when the daemon cannot be reached,
    DeadlineExceededError naming the ranks that did not join.
    """
    o = _native.JoinOptions()
    lib.rankd_join_options_init(ctypes.byref(o))
    o.target = _bytes(target)
    o.job_id = _bytes(job_id)
    if local_rank is not None:
        o.local_rank = int(local_rank)
    if rank is not None:
        o.rank = int(rank)
    if world_size is not None:
        o.world_size = int(world_size)
    o.device_kind = _bytes(device)
    if device_index is not None:
        o.device_index = int(device_index)
    o.wait_for_world_seconds = float(wait_for_world)
    o.connect_timeout_seconds = float(connect_timeout)
    o.token_file = _bytes(token_file)
    handle = ctypes.c_void_p()
    check(lib.rankd_join(ctypes.byref(o), ctypes.byref(handle)))
    return Rank(handle)


class Rank:
    """A joined rank. Use it as a context manager (leaves the job on exit)
    or call leave() and close(). Thread-safe: a close() while calls run on
    other threads frees the handle once the last of them returns."""

    def __init__(self, handle):
        # Freed only when no call uses it (close(), or the last call after
        # it: _native.Handle).
        self._guard = _native.Handle(
            handle, lib.rankd_rank_free,
            lambda: ValueError("rankd: this Rank is closed"))
        self._callbacks = []  # ctypes thunks the library may call
        self._lock = threading.Lock()  # guards _callbacks
        d = _native.Descriptor()
        d.struct_size = ctypes.sizeof(d)
        check(lib.rankd_rank_descriptor(handle, ctypes.byref(d)))
        self.rank = d.rank
        self.world_size = d.world_size
        self.local_rank = d.local_rank
        self.node_index = d.node_index
        self.nnodes = d.nnodes
        self.nproc_per_node = d.nproc_per_node
        self.job_incarnation = d.job_incarnation
        self.layout = {
            "tensor": d.tensor_parallel,
            "pipeline": d.pipeline_parallel,
            "expert": d.expert_parallel,
            "data": d.data_parallel,
        }
        self.job_id = lib.rankd_rank_job_id(handle).decode()
        self.groups = []
        for i in range(d.group_count):
            g = _native.Group()
            check(lib.rankd_rank_group(handle, i, ctypes.byref(g)))
            self.groups.append(
                Group(g.id, g.kind.decode(), [g.members[m] for m in
                                              range(g.size)], g.local_rank))

    def __repr__(self):
        return (f"Rank(job_id={self.job_id!r}, rank={self.rank}, "
                f"world_size={self.world_size})")

    def group(self, kind_or_id):
        """The group of `kind` ("tensor", ...) or with that id; KeyError
        when this rank belongs to none."""
        for g in self.groups:
            if kind_or_id in (g.kind, g.id):
                return g
        raise KeyError(f"rank {self.rank} belongs to no group {kind_or_id!r}")

    def _group_size(self, group):
        for g in self.groups:
            if g.id == group:
                return g.size
        return None

    @property
    def _handle(self):
        """The C handle until it is freed (it may be closing), else None."""
        return self._guard.value

    @property
    def handle(self):
        """The C handle (rankd_rank*), for ctypes callers; close() frees it
        without knowing of a caller holding it this way (use _call)."""
        if self._handle is None:
            raise ValueError("rankd: this Rank is closed")
        return self._handle

    def _call(self, fn, *args):
        """fn(handle, *args), the handle kept alive meanwhile: a close() on
        another thread leaves its freeing to the last call running.
        ValueError once the rank is closed."""
        return self._guard.call(fn, *args)

    # --- all_gather_words -------------------------------------------------

    def all_gather_words(self, words, timeout=60.0):
        """One world-wide round: every rank contributes the same number of
        uint32 words; returns a (world_size, count) uint32 array whose row
        r is rank r's frame. DeadlineExceededError names the ranks that did
        not contribute."""
        array, pointer = _words(words)
        out = np.empty((self.world_size, array.size), dtype=np.uint32)
        check(self._call(
            lib.rankd_all_gather_words, pointer, array.size, float(timeout),
            out.ctypes.data_as(_native.c_uint32_p), out.size))
        return out

    def all_gather_words_with_view(self, words, timeout=60.0):
        """all_gather_words that returns a partial round too, with its view
        (docs/contract.md, "Data-parallel domains"): under the daemons'
        --recovery=domain a world round spans the data-parallel replicas
        serving when it ran, and all_gather_words refuses one that did not
        span them all. Returns (frames, partial, domains): frames is a
        (ranks, count) uint32 array, one row per rank of the listed
        domains in rank order (every rank's unless partial); partial is
        True when the round did not span every replica; domains lists
        (domain, epoch) pairs, ascending, empty without recovery by
        domain. Errors as all_gather_words."""
        array, pointer = _words(words)
        out = np.empty((self.world_size, array.size), dtype=np.uint32)
        replicas = max(1, self.layout["data"])
        domains = (_native.DomainEpoch * replicas)()
        out_words = ctypes.c_size_t()
        partial = ctypes.c_int()
        domain_count = ctypes.c_size_t()
        check(self._call(
            lib.rankd_all_gather_words_with_view, pointer, array.size,
            float(timeout), out.ctypes.data_as(_native.c_uint32_p), out.size,
            ctypes.byref(out_words), ctypes.byref(partial), domains,
            replicas, ctypes.byref(domain_count)))
        rows = out_words.value // array.size if array.size else 0
        frames = out[:rows].copy()
        view = [(domains[i].domain, domains[i].epoch)
                for i in range(domain_count.value)]
        return frames, bool(partial.value), view

    def submit_all_gather_words(self, words, timeout=60.0):
        """The bounded form: submits the round now; `timeout` bounds the
        whole round. Returns a PendingWords."""
        array, pointer = _words(words)
        handle = ctypes.c_void_p()
        check(self._call(
            lib.rankd_submit_all_gather_words, pointer, array.size,
            float(timeout), ctypes.byref(handle)))
        return PendingWords(self, handle, array.size)

    # --- key-value broker -------------------------------------------------
    # A key (or prefix) holding a NUL byte raises InvalidArgumentError: the
    # C ABI takes keys as C strings (_key).

    def kv_set(self, key, value):
        """Stores `value` (bytes or str, at most 1 MiB) at `key`."""
        data = value.encode() if isinstance(value, str) else bytes(value)
        check(self._call(lib.rankd_kv_set, _key(key), data, len(data)))

    def kv_get(self, key, timeout=60.0):
        """The bytes at `key`, waiting up to `timeout` for it to exist
        (DeadlineExceededError naming the key); `timeout` 0 does not wait
        (NotFoundError when absent)."""
        handle = ctypes.c_void_p()
        check(self._call(lib.rankd_kv_get, _key(key), float(timeout),
                         ctypes.byref(handle)))
        try:
            size = lib.rankd_bytes_size(handle)
            return ctypes.string_at(lib.rankd_bytes_data(handle), size)
        finally:
            lib.rankd_bytes_free(handle)

    def kv_add(self, key, delta=1):
        """Adds `delta` to the integer at `key` (0 when absent); returns
        the new value."""
        result = ctypes.c_int64()
        check(self._call(lib.rankd_kv_add, _key(key), int(delta),
                         ctypes.byref(result)))
        return result.value

    def kv_delete(self, key):
        """Deletes `key`; True when it existed."""
        existed = ctypes.c_int()
        check(self._call(lib.rankd_kv_delete, _key(key),
                         ctypes.byref(existed)))
        return bool(existed.value)

    def kv_compare_set(self, key, expected, value):
        """Compare-and-set, the write for keys under a prefix the job
        declares shared: stores `value` only when `key` holds exactly
        `expected` (bytes or str), or, with `expected` None, only when
        `key` does not exist. Returns whether it stored."""
        data = value.encode() if isinstance(value, str) else bytes(value)
        if expected is None:
            want, if_absent = b"", 1
        else:
            want = expected.encode() if isinstance(expected, str) else \
                bytes(expected)
            if_absent = 0
        stored = ctypes.c_int()
        check(self._call(lib.rankd_kv_compare_set, _key(key), if_absent,
                         want, len(want), data, len(data),
                         ctypes.byref(stored)))
        return bool(stored.value)

    def kv_compare_delete(self, key, expected):
        """Deletes `key` only when it holds exactly `expected` (the delete
        for shared keys); returns whether it did."""
        want = expected.encode() if isinstance(expected, str) else \
            bytes(expected)
        deleted = ctypes.c_int()
        check(self._call(lib.rankd_kv_compare_delete, _key(key), want,
                         len(want), ctypes.byref(deleted)))
        return bool(deleted.value)

    def kv_count(self, prefix=""):
        """How many keys of the job's store start with `prefix` ("":
        every key, the data plane's own included), as of one moment."""
        count = ctypes.c_uint64()
        check(self._call(lib.rankd_kv_count, _key(prefix, "prefix"),
                         ctypes.byref(count)))
        return count.value

    # --- job failure ------------------------------------------------------

    def job_health(self):
        """None while the job is healthy; otherwise the failure as an
        exception instance (AbortedError naming the lost rank, ...;
        EpochEndedError where the loss ended an epoch the job recovers
        from), not raised. Never blocks."""
        status = self._call(lib.rankd_job_health)
        return _native.take_error(status) if status else None

    def on_job_failure(self, callback):
        """Calls `callback(error)` once, on a library thread, when the job
        fails (at once if it already has), with the failure job_health()
        reports (EpochEndedError where the loss ended an epoch). It must
        return quickly."""
        def thunk(_, code, message):
            try:
                # The C callback carries code and message only; the
                # failure's mark comes with job_health(), set by then
                # (unless the rank is being freed).
                try:
                    error = self.job_health()
                except ValueError:  # the rank is being closed
                    error = None
                if error is None:
                    error = _native.errors.error_for(
                        code, message.decode("utf-8", "replace"))
                with _native.in_failure_callback():
                    callback(error)
            except Exception:  # never unwind into the library
                pass

        fn = _native.FailureFn(thunk)
        with self._lock:
            self._callbacks.append(fn)
        check(self._call(lib.rankd_on_job_failure, fn, None))

    # --- recovery (rankd --recovery=on) ------------------------------------

    @property
    def epoch(self):
        """The job epoch this rank joined into: 1 when the job formed,
        later after rejoin()."""
        return self._call(lib.rankd_rank_epoch)

    @property
    def recovery(self):
        """What a loss does to the job (the daemons' --recovery, fixed at
        join): "off", it fails the job (job_health() says "job J failed
        (...)"); "job", it ends the whole job's epoch ("job J epoch E
        ended (...)") and rejoin() continues; "domain", it ends only the
        lost rank's data-parallel replica's epoch."""
        return _RECOVERY.get(self._call(lib.rankd_rank_recovery), "off")

    @property
    def recovers_in_place(self):
        """Whether a loss ends an epoch (recovery "job" or "domain")
        instead of failing the job."""
        return self.recovery != "off"

    def rejoin(self, ended_epoch, timeout=60.0):
        """Enters the job's next epoch after epoch `ended_epoch` ended (a
        rank or node was lost; job_health() names it) and returns the new
        epoch once this rank is joined there and every rank is back. At
        once when this rank is already in a later epoch. Afterwards
        job_health() is None again and all_gather_words rounds are numbered
        afresh; the descriptor (rank, groups, ...) does not change.

        Raises InvalidArgumentError for a timeout that is not positive and
        finite, FailedPreconditionError after leave(), the job's failure
        (AbortedError, ...) at once when the job FAILED (recovery off, or
        its recovery deadline passed), DeadlineExceededError naming the
        epoch waited for when `timeout` seconds pass."""
        check(self._call(lib.rankd_rejoin, int(ended_epoch), float(timeout)))
        return self.epoch

    # --- sessions and lifetime --------------------------------------------

    def open_session(self, backend=None, op_timeout=60.0,
                     verify_agreement=False, gloo_hostname=None,
                     restrict_capabilities=None):
        """Opens the data-plane session (every rank must). `backend` is
        "gloo" or "nccl" (None: $RANKD_BACKEND, else "gloo").

        `restrict_capabilities` narrows what the session advertises and
        serves (rankd_session_options.restrict_*; C++'s
        restrict_capabilities): a dict with any of "world_collectives",
        "point_to_point", "variable_all_to_all", "exact_completion"
        (bools) and "collective_groups" (the group ids whose collectives
        stay allowed). A flag set False, or a group left out of
        "collective_groups", is taken away; keys not given narrow nothing.
        What is taken away fails closed: UnimplementedError naming the
        capability ("gloo backend: send needs capability 'point_to_point',
        which this backend does not advertise"). InvalidArgumentError for
        an unknown key."""
        from .session import Session
        return Session(self, backend, op_timeout, verify_agreement,
                       gloo_hostname, restrict_capabilities)

    def leave(self):
        """Leaves the job cleanly (peers do not see this rank as lost)."""
        check(self._call(lib.rankd_leave))

    def close(self):
        """Frees the handle. Once its sessions are closed too, the rank
        leaves the job (ignoring errors; call leave() to see them) and the
        connection closes. Never waits: while calls run on other threads
        (each returns within its own timeout), the last of them frees the
        handle as it returns. Later calls raise ValueError."""
        self._guard.close()

    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        try:
            if kind is None and self._handle is not None:
                self.leave()
        finally:
            self.close()

    def __del__(self):
        # Sessions hold their Rank, so no session outlives this. The handle
        # is cleared first: a failure callback running while the library
        # frees it must not use it (close()'s order).
        guard = getattr(self, "_guard", None)
        if guard is not None:
            guard.discard()


class PendingWords:
    """A submitted all_gather_words round."""

    def __init__(self, rank, handle, count):
        self._rank = rank
        self._handle = handle
        self._count = count

    def is_ready(self):
        """True once the round finished (successfully or not)."""
        return bool(lib.rankd_pending_words_is_ready(self._handle))

    def wait(self, timeout=None):
        """The (world_size, count) result. `timeout` None waits for the
        round itself (its round timeout bounds it); WaitTimeoutError (a
        DeadlineExceededError) when `timeout` passes first (the round stays
        in flight)."""
        out = np.empty((self._rank.world_size, self._count), dtype=np.uint32)
        seconds = math.inf if timeout is None else float(timeout)
        check(lib.rankd_pending_words_wait(
            self._handle, seconds, out.ctypes.data_as(_native.c_uint32_p),
            out.size))
        return out

    def __del__(self):
        handle, self._handle = getattr(self, "_handle", None), None
        if handle is not None:
            _native.release(lib.rankd_pending_words_free, handle)
