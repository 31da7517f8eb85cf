"""rankd.torch_store: a torch.distributed Store over the node's rankd daemon
(the job's key-value broker), for torch's rendezvous (rankd.torch).

Every rank reads every key; torch's keys are written by several ranks (the
store-based barrier's counter, ProcessGroupGloo's address keys), so they live
under a prefix the job declares shared (rankd --kv_shared_prefixes; rankrun
declares "torch/"). Such keys belong to no rank and rankd writes them only
with compare-and-set, so set and delete_key here are compare-and-set loops;
their results are those of torch's TCPStore (python/tests/test_torch.py runs
the same cases on both). Values are bytes, at most 1 MiB (rankd's limit).
"""

import datetime
import functools
import math
import time

import torch.distributed as dist

from . import errors

__all__ = ["Store", "StoreError", "StoreTimeoutError", "JobFailedError",
           "EpochEndedError", "DEFAULT_PREFIX", "error_class_for"]

# The namespace rankrun and the deploy manifests declare shared for torch.
DEFAULT_PREFIX = "torch/"

# torch 1.13's store-based barrier (distributed_c10d._store_based_barrier,
# after init_process_group and new_group): every rank adds 1 to a counter
# under a key with this name, then polls it with add(key, 0) every 10 ms
# until it reaches the world size.
_BARRIER_KEY = "store_based_barrier_key:"
# The key the last rank to arrive at such a barrier creates: counter key +
# this suffix. The others wait for it in the daemon instead of polling.
_BARRIER_DONE = "/all_arrived"
# The longest single wait a get asks of the daemon (which refuses waits
# over an hour, rankd's kMaxTimeoutMs); longer ones go on in such slices.
_WAIT_SLICE_SECONDS = 600.0
# The longest one such read waits in the daemon. torch's loop keeps its
# own deadline (from after its first read), so a read must not use it up.
_BARRIER_READ_SECONDS = 1.0


def _barrier_counts_the_world():
    """Whether this torch's store-based barrier waits for the whole world
    by polling the counter (torch 1.13). torch >= 2's takes a
    rendezvous_count (fewer than the world for new_group(...,
    use_local_synchronization=True)) and waits on a key of its own, so
    the store must not wait for the world there."""
    import inspect
    barrier = getattr(dist.distributed_c10d, "_store_based_barrier", None)
    try:
        parameters = inspect.signature(barrier).parameters
    except (TypeError, ValueError):
        return False
    return "rendezvous_count" not in parameters


# torch 2.x raises DistStoreError (a RuntimeError) for a store's failures;
# torch 1.13 a plain RuntimeError.
_TorchStoreError = getattr(dist, "DistStoreError", RuntimeError)


class StoreError(_TorchStoreError):
    """Mixed into every error a Store call raises, JobFailedError aside: a
    RuntimeError, and torch's DistStoreError where torch has it (torch
    2.x), as TCPStore's errors are, so torch code catching those catches
    it. The error keeps rankd's class too (PermissionDeniedError, ...;
    rankd.RankdError), its code and message."""


class StoreTimeoutError(errors.DeadlineExceededError, StoreError):
    """A get or wait past the store's timeout."""


class JobFailedError(errors.AbortedError, RuntimeError):
    """A torch.distributed call or store call ended because the rankd job
    failed; the message is rankd's, naming the lost rank. A RuntimeError,
    like the errors torch raises for failed collectives."""


class EpochEndedError(JobFailedError, errors.EpochEndedError):
    """JobFailedError of a loss the job recovers from in place (rankd
    --recovery=on, or rankrun --max_restarts; the job was serving): it
    ended the job's epoch ("job J epoch E ended (MEMBER_LOST, ...): ..."),
    and the job waits for a replacement. This process's process groups
    are gone, its tensors are not: rankd.torch.rejoin(), then
    init_process_group(..., init_method="rankd://") again, continue in the
    next epoch. Also a rankd.EpochEndedError."""


def error_class_for(failure):
    """The error class a job failure (a rankd error, as the rank reported
    it) is raised as: EpochEndedError for a loss that ended an epoch (the
    library marks it: rankd.EpochEndedError; the words are not read), else
    JobFailedError (the job failed, or the daemon was lost)."""
    return EpochEndedError if isinstance(failure, errors.EpochEndedError) \
        else JobFailedError


# rankd's class -> its StoreError form (made on first use).
_store_errors = {}


def _store_error_class(cls):
    """`cls` (a rankd.RankdError class) with StoreError mixed in."""
    if issubclass(cls, StoreError):
        return cls
    found = _store_errors.get(cls)
    if found is None:
        found = type(cls.__name__, (cls, StoreError), {
            "__module__": __name__,
            "__doc__": f"rankd's {cls.__name__} from a Store call."})
        _store_errors[cls] = found
    return found


# How long a store call the daemon aborted waits for the job's failure to
# reach this rank (its watch stream may be a moment behind the call's
# answer), to raise it in the failure's own words (naming MEMBER_LOST ...).
_FAILURE_GRACE_SECONDS = 2.0


def _job_failure(rank, fallback):
    """`rank`'s job failure (a rankd error), once it arrived (at most
    _FAILURE_GRACE_SECONDS from now); `fallback` (may be None) when it did
    not."""
    deadline = time.monotonic() + _FAILURE_GRACE_SECONDS
    while True:
        failure = rank.job_health()
        if isinstance(failure, errors.RankdError):
            return failure
        if time.monotonic() >= deadline:
            return fallback
        time.sleep(0.01)


def _failure_behind(rank, error):
    """The job failure (a rankd error) behind `error` (a rankd error from a
    store call), or None when the error is the call's own. Any error while
    the rank knows of a failure; an AbortedError (the daemon's answer for a
    failed job); an EpochFencedError (a recovering job's daemon fences a
    process of an ended epoch, at times a moment before the rank's notice).
    The last two wait for the notice (_job_failure)."""
    health = rank.job_health()
    if health is not None:
        return health
    if isinstance(error, errors.AbortedError):
        return _job_failure(rank, error)
    if isinstance(error, errors.EpochFencedError):
        return _job_failure(rank, None)
    return None


def _translates_errors(method):
    """Store `method` raising JobFailedError (EpochEndedError), in the words
    of the job's failure, for an error the failure is behind
    (_failure_behind), and every other rankd error with StoreError mixed
    in."""
    @functools.wraps(method)
    def call(self, *args, **kwargs):
        if self._retired is not None:
            raise EpochEndedError(
                f"rankd store {method.__name__}: this store belongs to an "
                f"ended epoch ({self._retired}); rankd.torch.rejoin() "
                "moved this process on, and a new init_process_group "
                "gives the new epoch's store")
        try:
            return method(self, *args, **kwargs)
        except (StoreError, JobFailedError):
            raise
        except errors.RankdError as e:
            failure = _failure_behind(self._rank, e)
            if failure is not None:
                raise error_class_for(failure)(
                    f"rankd store {method.__name__}: {failure.message}"
                ) from e
            raise _store_error_class(type(e))(e.message).with_traceback(
                e.__traceback__) from None
    return call


def _data(value):
    return value.encode() if isinstance(value, str) else bytes(value)


class Store(dist.Store):
    """A torch.distributed.Store whose keys are rankd keys `prefix` + key.

    `rank` is a joined rankd.Rank; `prefix` must lie in a namespace the job
    declares shared (PermissionDeniedError naming the rule otherwise, on the
    first write another rank owns). get and wait block up to the store's
    timeout (set_timeout; `timeout` at first) and then raise
    StoreTimeoutError naming the key. After the job failed every operation
    (and one pending then) raises JobFailedError in the words of the job's
    failure, naming the lost rank (EpochEndedError where the job recovers
    in place; after retire(), every call raises it); any other error is
    rankd's class with StoreError mixed in (a RuntimeError; torch's
    DistStoreError where torch has it). `on_value` (may be None) is
    called with every value this store sets, gets or waits for
    (rankd.torch reads Gloo's addresses from them: a connection's one end
    is an address its rank published, the other an address it read).

    With `world_size` (rankd.torch passes the job's) and a torch whose
    store-based barrier polls for the whole world (torch 1.13; not torch
    >= 2, whose barrier takes a rendezvous_count), a read of the barrier's
    counter (add(key, 0) on a key named "...store_based_barrier_key:N")
    that finds fewer arrivals than `world_size` waits in the daemon, at
    most about a second, until the last rank arrived, and then answers
    the counter as it is; torch would otherwise poll the counter every
    10 ms, and its own deadline still bounds the loop. The last rank to
    arrive marks the barrier done with one more key (counter key +
    "/all_arrived"), which num_keys counts.

    append, multi_get, multi_set and clone are there on any torch; torch
    2.x's C++ side calls them (torch 1.13's has none of them)."""

    def __init__(self, rank, prefix=DEFAULT_PREFIX,
                 timeout=datetime.timedelta(seconds=300), on_value=None,
                 world_size=None):
        super().__init__()
        self.set_timeout(timeout)
        self._rank = rank
        self._prefix = prefix
        self._on_value = on_value
        self._world_size_given = world_size
        # This store and its clones, each holding the list: torch keeps
        # only a clone's C++ side, whose Python overrides need the object.
        self._clones = [self]
        # The ended epoch's failure, once retire()d.
        self._retired = None
        # The world a barrier read waits for (None: no such waits).
        self._world_size = world_size if _barrier_counts_the_world() \
            else None

    @property
    def rank(self):
        """The joined rankd.Rank this store talks through."""
        return self._rank

    def retire(self, failure):
        """Ends this store and its clones with the epoch it served
        (rankd.torch.rejoin calls it): from now on every call raises
        EpochEndedError naming `failure` (the ended epoch's words), so
        that a process group of the ended epoch, still referenced, never
        reads the next epoch's keys."""
        for store in self._clones:
            store._retired = failure

    @property
    def prefix(self):
        return self._prefix

    def _key(self, key):
        return self._prefix + key

    def _peek(self, full_key):
        """The value at `full_key`, or None when absent (no waiting)."""
        try:
            return self._rank.kv_get(full_key, timeout=0)
        except errors.NotFoundError:
            return None

    def _seconds(self, timeout):
        """`timeout` (the store's when None) in seconds; zero is no limit,
        as torch's c10d::Store::kNoTimeout and this package's C++ store
        read it."""
        if timeout is None:
            timeout = self.timeout
        if isinstance(timeout, datetime.timedelta):
            seconds = timeout.total_seconds()
        else:
            seconds = float(timeout)
        return math.inf if seconds == 0 else seconds

    @_translates_errors
    def set(self, key, value):
        data = _data(value)
        if self._on_value is not None:
            self._on_value(data)
        k = self._key(key)
        # Most torch keys are written once: create-only first, one call.
        if self._rank.kv_compare_set(k, None, data):
            return
        while True:
            current = self._peek(k)
            if self._rank.kv_compare_set(k, current, data):
                return

    @_translates_errors
    def get(self, key):
        return self._get(self._key(key), self._seconds(None), key)

    def _get(self, full_key, seconds, key, deadline=None):
        """The value at `full_key`, waited for until `deadline` (monotonic;
        `seconds` from now when None); StoreTimeoutError naming `key` and
        `seconds`, the timeout the caller was given, after it."""
        if deadline is None:
            deadline = time.monotonic() + max(seconds, 0.0)
        while True:
            left = max(deadline - time.monotonic(), 0.0)
            try:
                # In slices: the daemon takes waits of at most an hour.
                value = self._rank.kv_get(
                    full_key, timeout=min(left, _WAIT_SLICE_SECONDS))
                if self._on_value is not None:
                    self._on_value(value)
                return value
            except (errors.DeadlineExceededError, errors.NotFoundError) as e:
                if time.monotonic() < deadline:
                    continue
                # NotFound: a wait whose time was used up by earlier keys.
                raise StoreTimeoutError(
                    f"rankd store: key {key!r} was not set within "
                    f"{seconds:g} s ({e.message})") from None

    @_translates_errors
    def add(self, key, value):
        delta = int(value)
        k = self._key(key)
        count = self._rank.kv_add(k, delta)
        if self._world_size is None or _BARRIER_KEY not in key:
            return count
        if delta > 0 and count == self._world_size:
            # The last arrival: release the others' waits (create-only, so
            # a repeated barrier key is harmless).
            self._rank.kv_compare_set(k + _BARRIER_DONE, None, b"1")
        elif delta == 0 and count < self._world_size:
            try:
                self._rank.kv_get(k + _BARRIER_DONE, timeout=max(min(
                    self._seconds(None), _BARRIER_READ_SECONDS), 0.0))
            except (errors.DeadlineExceededError, errors.NotFoundError):
                return count  # torch's own timeout check then fails it
            count = self._rank.kv_add(k, 0)
        return count

    @_translates_errors
    def compare_set(self, key, expected_value, desired_value):
        """TCPStore's semantics: sets `desired_value` when the key holds
        `expected_value`, or when it is absent and `expected_value` is
        empty; returns the value the key then holds (`expected_value` when
        the key is absent and it was not empty, as TCPStore does)."""
        expected, desired = _data(expected_value), _data(desired_value)
        k = self._key(key)
        while True:
            current = self._peek(k)
            if current is None:
                if expected:
                    return expected
                if self._rank.kv_compare_set(k, None, desired):
                    return desired
            elif current == expected:
                if self._rank.kv_compare_set(k, current, desired):
                    return desired
            else:
                return current

    @_translates_errors
    def delete_key(self, key):
        k = self._key(key)
        while True:
            current = self._peek(k)
            if current is None:
                return False
            if self._rank.kv_compare_delete(k, current):
                return True

    @_translates_errors
    def check(self, keys):
        return all(self._peek(self._key(k)) is not None for k in keys)

    @_translates_errors
    def wait(self, keys, timeout=None):
        seconds = self._seconds(timeout)
        deadline = time.monotonic() + max(seconds, 0.0)
        for key in keys:
            self._get(self._key(key), seconds, key, deadline)

    @_translates_errors
    def append(self, key, value):
        """Appends `value` to the bytes at `key` (creating it), as
        TCPStore does; a compare-and-set loop, like set."""
        data = _data(value)
        k = self._key(key)
        while True:
            current = self._peek(k)
            if self._rank.kv_compare_set(k, current, (current or b"") + data):
                return

    @_translates_errors
    def multi_get(self, keys):
        """The values at `keys`, in order, each waited for as get does,
        all within one store timeout (StoreTimeoutError naming the first
        key missing then)."""
        seconds = self._seconds(None)
        deadline = time.monotonic() + max(seconds, 0.0)
        return [self._get(self._key(key), seconds, key, deadline)
                for key in keys]

    @_translates_errors
    def multi_set(self, keys, values):
        """Sets each of `keys` to the value at the same index, one after
        another (not as one atomic write, unlike TCPStore)."""
        keys, values = list(keys), list(values)
        if len(keys) != len(values):
            raise errors.InvalidArgumentError(
                f"rankd store multi_set: {len(keys)} keys but "
                f"{len(values)} values")
        for key, value in zip(keys, values):
            self.set(key, value)

    def clone(self):
        """A Store over the same rank connection, namespace, timeout and
        world size (torch 2.x clones a store in PrefixStore::clone, for
        split groups). It stays referenced as long as this store."""
        twin = Store(self._rank, prefix=self._prefix, timeout=self.timeout,
                     on_value=self._on_value,
                     world_size=self._world_size_given)
        twin._retired = self._retired
        twin._clones = self._clones
        self._clones.append(twin)
        return twin

    @_translates_errors
    def num_keys(self):
        """The keys in this store's namespace (its prefix): every key set
        through a store of this rendezvous, on any rank. TCPStore counts
        its whole store, which also holds one key of its own ("init/");
        torch 1.13's rendezvous does not call num_keys."""
        return self._rank.kv_count(self._prefix)
