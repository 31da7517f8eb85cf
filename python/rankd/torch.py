"""rankd.torch: torch.distributed on rankd. Importing it registers the
`rankd://` rendezvous, so a torch program changes only its init line:

    import rankd.torch  # noqa: F401
    dist.init_process_group("gloo", init_method="rankd://")

The rank and world size come from the node's daemon (the environment
rankrun or the Kubernetes sidecar sets, or `rankd://HOST:PORT?...`
parameters; see rendezvous_handler), and torch's store is the job's
key-value broker (rankd.torch_store.Store).

When rankd reports the job failed (a lost rank or node), this module shuts
down the process's Gloo connections, so every pending torch collective ends,
and torch.distributed's functions then raise JobFailedError with rankd's
words ("... (MEMBER_LOST, node 1, rank 3, ...): rank 3 (pid ...) lost:
..."), as do later calls. Where torch has _abort_process_group (torch 2.x)
it aborts the process groups too, which ends pending NCCL collectives;
torch 1.13 (Debian's) has no process-group abort, and the shutdown stands
in for it (docs/client-api.md, "torch.distributed").

Where the job recovers in place (rankd --recovery=on; rankrun
--max_restarts), the same calls raise EpochEndedError (a JobFailedError:
"... job J epoch 1 ended (MEMBER_LOST, ...): ..."), and the survivor goes
on in the same process, its tensors kept: rejoin() destroys torch's
process groups and waits until the lost rank's replacement joined, then
init_process_group(..., init_method="rankd://") again forms the next
epoch's groups (docs/client-api.md, "Recovering in place").

At exit a rank leaves the job when the program ended cleanly; one that
ended of an uncaught exception or a failing sys.exit ends at once without
leaving, so that its peers see it lost, as a killed one (_leave_at_exit).
"""

import atexit
import builtins
import ctypes
import datetime
import functools
import importlib
import os
import signal
import socket
import stat
import sys
import threading
import time
import urllib.parse

import torch.distributed as dist

# The module (torch.distributed re-exports its function of the same name).
_torch_rendezvous = importlib.import_module("torch.distributed.rendezvous")

from . import errors
from .rank import join
from .torch_store import (DEFAULT_PREFIX, EpochEndedError, JobFailedError,
                          Store, StoreError, StoreTimeoutError,
                          error_class_for)

__all__ = ["JobFailedError", "EpochEndedError", "Store", "StoreError",
           "StoreTimeoutError", "DEFAULT_PREFIX",
           "rendezvous_handler", "use_rank", "joined_rank", "rejoin",
           "failure_grace_seconds"]

# How long a collective's own transport error waits for rankd's verdict
# (a local rank's loss arrives in milliseconds, a node's within the
# heartbeat timeout) before it is raised as torch's.
failure_grace_seconds = 2.0


# gloo's tcp Address: a sockaddr_storage (128 bytes), then a sequence
# number (8), once per pair in the values ProcessGroupGloo publishes.
_GLOO_ADDRESS_BYTES = 136


def _gloo_endpoints(data):
    """The (host, port) endpoints in a value ProcessGroupGloo published,
    or () when `data` is not one."""
    if not data or len(data) % _GLOO_ADDRESS_BYTES:
        return ()
    found = []
    for i in range(0, len(data), _GLOO_ADDRESS_BYTES):
        family = int.from_bytes(data[i:i + 2], sys.byteorder)
        port = int.from_bytes(data[i + 2:i + 4], "big")
        if family == socket.AF_INET:
            host = socket.inet_ntop(socket.AF_INET, data[i + 4:i + 8])
        elif family == socket.AF_INET6:
            host = socket.inet_ntop(socket.AF_INET6, data[i + 8:i + 24])
        else:
            return ()
        found.append((host, port))
    return found


def _shut_down_sockets(endpoints):
    """Shuts down this process's TCP sockets with an end in `endpoints`
    (both directions: the reads Gloo waits in see the end of the stream);
    returns how many."""
    count = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            if not stat.S_ISSOCK(os.fstat(int(name)).st_mode):
                continue
            s = socket.socket(fileno=os.dup(int(name)))
        except (OSError, ValueError):
            continue
        try:
            if s.family not in (socket.AF_INET, socket.AF_INET6):
                continue
            ends = set()
            for end in (s.getsockname, s.getpeername):
                try:
                    ends.add(tuple(end()[:2]))
                except OSError:
                    pass
            if ends & endpoints:
                s.shutdown(socket.SHUT_RDWR)
                count += 1
        except OSError:
            pass
        finally:
            s.close()  # the duplicate only
    return count


def _abort_process_groups():
    """Aborts torch's process groups where this torch can: torch 2.x's
    _abort_process_group, which aborts the NCCL communicators so that a
    pending collective ends (torch 1.13 has none; Gloo's sockets are shut
    down instead). Returns whether it aborted. Never raises: it runs on
    the library's failure thread."""
    c10d = sys.modules.get("torch.distributed.distributed_c10d")
    abort = getattr(c10d, "_abort_process_group", None)
    if abort is None:
        return False
    try:
        if not dist.is_initialized():
            return False
        abort()
        return True
    except Exception:  # noqa: BLE001 (torch's own errors; Gloo groups)
        return False


class _Watch:
    """This process's rank: its job failure, once reported, and the Gloo
    endpoints to shut down then."""

    def __init__(self, rank):
        self.rank = rank
        self.failure = None
        self.failed = threading.Event()
        self.sockets_shut = 0
        # Whether torch's process groups were aborted (NCCL, torch 2.x).
        self.aborted = False
        self.stores = []
        # Stores of ended epochs: retired, and kept referenced, since a
        # process group of theirs the program still holds calls into them.
        self.retired_stores = []
        self._lock = threading.Lock()
        self._endpoints = set()
        rank.on_job_failure(self._on_failure)

    def next_epoch(self, failure):
        """After the rank rejoined: forgets the ended epoch's failure
        (`failure`, a rankd error; the watch may not have seen it, when the
        rank's own health told first) and Gloo endpoints (their
        connections are gone), retires its stores with `failure`'s words,
        and listens for a loss of the new epoch (the rank dropped the
        ended epoch's callback)."""
        with self._lock:
            self.failure = None
            self._endpoints = set()
            stores, self.stores = self.stores, []
        self.failed.clear()
        self.aborted = False
        for store in stores:
            store.retire(failure.message)
        self.retired_stores.extend(stores)
        self.rank.on_job_failure(self._on_failure)

    def note_value(self, data):
        found = _gloo_endpoints(data)
        if found:
            with self._lock:
                self._endpoints.update(found)
                failed = self.failure is not None
            if failed:  # a group made after the failure
                self._shut_down()

    def _on_failure(self, error):
        with self._lock:
            if self.failure is None:
                self.failure = error
        self._shut_down()
        self.aborted = _abort_process_groups()
        self.failed.set()

    def _shut_down(self):
        with self._lock:
            endpoints = set(self._endpoints)
        self.sockets_shut += _shut_down_sockets(endpoints)


_lock = threading.Lock()
_watch = None
# The epoch of this process's latest rendezvous, and how many it made in
# that epoch: the store's keys are under [epoch/<epoch>/]<prefix><count>/,
# the same on every rank (a replacement's first rendezvous of an epoch and
# a survivor's first after rejoin() alike).
_rendezvous_epoch = 0
_rendezvous_count = 0


def use_rank(rank):
    """Makes `rank` (a joined rankd.Rank of a program that also uses rankd
    directly) the one `rankd://` rendezvous uses, instead of joining.
    FailedPreconditionError when this process already uses another rank,
    or when the job recovers by data-parallel domain (rankd
    --recovery=domain: a loss there ends only its replica's epoch, but
    torch's process groups span the world)."""
    global _watch
    if rank.recovery == "domain":
        raise errors.FailedPreconditionError(
            f"rankd.torch: job {rank.job_id!r} recovers by data-parallel "
            "domain (rankd --recovery=domain), where a loss ends only its "
            "replica's epoch, but torch's process groups span the world; "
            "run the daemons with --recovery=on (rankrun --recovery=on) or "
            "off")
    with _lock:
        if _watch is not None and _watch.rank is not rank:
            raise errors.FailedPreconditionError(
                "rankd.torch: this process already joined as rank "
                f"{_watch.rank.rank}")
        if _watch is None:
            _watch = _Watch(rank)
            _exit.install()
            atexit.register(_leave_at_exit)


class _ExitWatch:
    """How the program is ending: whether an uncaught exception reached
    sys.excepthook (the interpreter's status is then 1) or the main
    thread's last sys.exit call had a failure status. Python gives an
    atexit handler neither, so both are wrapped once a rank is joined. (A
    failing sys.exit that the program catches and outlives, ending
    normally afterwards, still counts.)"""

    def __init__(self):
        self.status = 0
        self.signal = None  # SIGINT for an uncaught KeyboardInterrupt
        self._installed = False

    def install(self):
        if self._installed:
            return
        self._installed = True
        excepthook, exit_ = sys.excepthook, sys.exit

        def rankd_excepthook(kind, value, traceback):
            if issubclass(kind, KeyboardInterrupt):
                self.signal = signal.SIGINT
            self.status = 1
            excepthook(kind, value, traceback)

        def rankd_exit(status=None):
            # Elsewhere it ends only its thread.
            if threading.current_thread() is threading.main_thread():
                self.status = _exit_status(status)
            exit_(status)

        sys.excepthook = rankd_excepthook
        sys.exit = rankd_exit
        # The exit() and quit() builtins (site's) raise SystemExit the same
        # way; a hand-written `raise SystemExit(n)` is not seen.
        for name in ("exit", "quit"):
            quitter = getattr(builtins, name, None)
            if quitter is not None:
                setattr(builtins, name, self._wrap_quitter(quitter))

    def _wrap_quitter(self, quitter):
        def rankd_quitter(status=None):
            if threading.current_thread() is threading.main_thread():
                self.status = _exit_status(status)
            quitter(status)
        return rankd_quitter

    def failed(self):
        """(status, signal) of the program's end: a failure recorded by the
        wrappers, else an uncaught exception the interpreter recorded in
        sys.last_value before calling its excepthook (seen even when a
        library replaced the hook without calling rankd's), else (0, None).
        """
        if self.status != 0:
            return self.status, self.signal
        last = getattr(sys, "last_value", None)
        if isinstance(last, KeyboardInterrupt):
            return 1, signal.SIGINT
        if isinstance(last, BaseException) and \
                not isinstance(last, SystemExit):
            return 1, None
        return 0, None


def _exit_status(code):
    """The process's exit status for SystemExit(code), as Python's."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    return 1  # a message: Python prints it and exits 1


_exit = _ExitWatch()


def _leave_at_exit():
    """At interpreter exit: a program that ended cleanly leaves the job (its
    peers do not see it as lost; the job drains). One that ended of an
    uncaught exception or sys.exit with a failure status must be seen as
    lost instead, as a killed one is, or its peers would wait on it (a
    leave only drains the job; NCCL peers would hang): it ends the process
    at once, with the interpreter's exit status, without leaving or
    closing the rank, so the daemon names it lost (MEMBER_LOST) when its
    connection closes. Freeing the rank would leave (rankd_rank_free), and
    keeping it open through finalization would let the library call into
    a finalizing interpreter."""
    watch = _watch
    if watch is None or watch.rank._handle is None:
        return
    status, sig = _exit.failed()
    if status != 0:
        _die(status, sig)
    try:
        watch.rank.leave()
    except errors.RankdError:
        pass  # the job failed or the rank left already
    watch.rank.close()


def _die(status, sig):
    """Ends the process now, as the interpreter would have: output flushed,
    by `sig` (SIGINT for an uncaught KeyboardInterrupt) or with `status`.
    The atexit handlers registered before the rendezvous do not run, as on
    a kill; logging's buffers, Python's and C's standard streams are
    flushed, and multiprocessing's daemonic children (DataLoader workers,
    pools) are terminated as at a normal exit, first."""
    logging = sys.modules.get("logging")
    for flush in (getattr(logging, "shutdown", None), _end_daemonic_children,
                  sys.stdout.flush, sys.stderr.flush, _flush_c_streams):
        try:
            if flush is not None:
                flush()
        except Exception:  # noqa: BLE001 (a closed stream: nothing to do)
            pass
    if sig is not None:
        signal.signal(sig, signal.SIG_DFL)
        # Delivered to this thread at once, whatever other threads block.
        signal.raise_signal(sig)
    os._exit(status)


def _end_daemonic_children():
    """Terminates multiprocessing's daemonic children (DataLoader workers,
    pools), as a normal exit would; children that are not daemonic are
    left, since joining them could hold the loss back indefinitely."""
    mp = sys.modules.get("multiprocessing")
    if mp is None:
        return
    for child in mp.active_children():
        if child.daemon:
            child.terminate()


def _flush_c_streams():
    """fflush(NULL): what C code (NCCL's debug output, the library's)
    buffered in stdio, which os._exit would drop."""
    ctypes.CDLL(None).fflush(None)


def joined_rank():
    """The rankd.Rank the `rankd://` rendezvous joined (None before)."""
    return None if _watch is None else _watch.rank


# The query parameters a rankd:// URL may carry: the integers, then the
# strings.
_INT_PARAMETERS = ("rank", "world_size", "local_rank")
_PARAMETERS = _INT_PARAMETERS + ("job_id", "token_file", "prefix")


def _query(url):
    """The URL's query parameters as {name: value}, integers as int.
    InvalidArgumentError naming the parameter for one not in _PARAMETERS,
    one given twice, or an integer that is not a non-negative one."""
    pairs = urllib.parse.parse_qsl(urllib.parse.urlparse(url).query,
                                   keep_blank_values=True)
    unknown = sorted({name for name, _ in pairs} - set(_PARAMETERS))
    if unknown:
        raise errors.InvalidArgumentError(
            f"rankd.torch: {url!r}: unknown parameter"
            f"{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(repr(n) for n in unknown)}; a rankd:// URL takes "
            f"{', '.join(sorted(_PARAMETERS))}")
    q = {}
    for name, value in pairs:
        if name in q:
            raise errors.InvalidArgumentError(
                f"rankd.torch: {url!r}: parameter {name} is given more than "
                "once")
        if name in _INT_PARAMETERS:
            if not (value.isascii() and value.isdigit()):
                raise errors.InvalidArgumentError(
                    f"rankd.torch: {url!r}: {name}={value!r}; it must be a "
                    "non-negative integer")
            value = int(value)
        q[name] = value
    return q


def rendezvous_handler(url, timeout=datetime.timedelta(minutes=30),
                       **kwargs):
    """torch's rendezvous for `rankd://[HOST:PORT][/SOCKET]?[job_id=J]
    [&rank=R][&world_size=N][&local_rank=L][&token_file=F][&prefix=P]`.

    Joins the job through the node's daemon (HOST:PORT over TCP, or the
    Unix socket SOCKET, else $RANKD_TARGET; unset parameters come from the
    launcher's environment, as for rankd.join) and yields (store, rank,
    world size) once every rank joined (at most `timeout`). rank and
    world_size given to init_process_group are checked against the job's
    (InvalidArgumentError). The store's keys live under P (default
    "torch/", which the job must declare shared) plus "<n>/", a count of
    this process's rendezvous in its job epoch, so a second
    init_process_group gets fresh keys; where the job recovers in place,
    under "epoch/<e>/" + that (e: the rank's epoch). After the job failed
    (or, recovering in place, before rejoin()): JobFailedError
    (EpochEndedError) in the failure's words. A job that recovers by
    data-parallel domain (rankd --recovery=domain) is refused
    (FailedPreconditionError): torch's groups span the world.
    Any other parameter, one given twice, or an integer (rank, world_size,
    local_rank) that is not a non-negative one: InvalidArgumentError
    naming it, before anything is joined.
    """
    global _rendezvous_count, _rendezvous_epoch
    parsed = urllib.parse.urlparse(url)
    q = _query(url)
    target = None
    if parsed.netloc:
        target = parsed.netloc
    elif parsed.path not in ("", "/"):
        target = "unix://" + parsed.path
    seconds = timeout.total_seconds() if isinstance(
        timeout, datetime.timedelta) else float(timeout)
    with _lock:
        watch = _watch
    if watch is None:
        rank = join(target=target, job_id=q.get("job_id"),
                    local_rank=q.get("local_rank"), rank=q.get("rank"),
                    world_size=q.get("world_size"),
                    token_file=q.get("token_file"), wait_for_world=seconds)
        try:
            use_rank(rank)
        except errors.FailedPreconditionError:
            rank.close()  # leaves the job
            raise
        watch = _watch
    else:
        for name, have in (("rank", watch.rank.rank),
                           ("world_size", watch.rank.world_size)):
            given = q.get(name)
            if given is None or (name == "world_size" and given == 0):
                continue  # not given (world_size=0 too, as for rankd.join)
            if given != have:
                raise errors.InvalidArgumentError(
                    f"rankd.torch: {name}={q[name]} but this process is "
                    f"{name} {have} of job {watch.rank.job_id!r}")
    failure = watch.failure
    if failure is not None:
        cls = error_class_for(failure)
        hint = "; call rankd.torch.rejoin() first" \
            if cls is EpochEndedError else ""
        raise cls(
            f"rankd.torch: rankd:// rendezvous: {failure.message}{hint}")
    with _lock:
        epoch = watch.rank.epoch
        if epoch != _rendezvous_epoch:
            _rendezvous_epoch, _rendezvous_count = epoch, 0
        _rendezvous_count += 1
        prefix = f"{q.get('prefix', DEFAULT_PREFIX)}{_rendezvous_count}/"
    if watch.rank.recovers_in_place:
        # Epoch-scoped (docs/operations.md, "Recovery: job epochs"): written
        # only while the job is at this epoch, so a process of an ended
        # epoch cannot write into the next one's rendezvous, and dropped
        # once the job is READY at a later epoch.
        prefix = f"epoch/{epoch}/{prefix}"
    store = Store(watch.rank, prefix=prefix, timeout=timeout,
                  on_value=watch.note_value,
                  world_size=watch.rank.world_size)
    # torch keeps only the C++ side of a Python store; without a Python
    # reference its overrides vanish ("Tried to call pure virtual").
    watch.stores.append(store)
    yield store, watch.rank.rank, watch.rank.world_size
    raise RuntimeError("rankd.torch: the rankd:// rendezvous yields once")


# What a collective's own transport failure looks like (Gloo's IO errors).
_TRANSPORT_WORDS = ("Connection", "connection", "closed", "reset",
                    "Broken pipe", "Timed out", "timed out", "Socket",
                    "transport")


def _job_failure(exc):
    """rankd's failure when `exc` (torch's error, or None for a call not
    made yet) is due to it; None otherwise."""
    watch = _watch
    if watch is None:
        return None
    if watch.failure is None and exc is not None and \
            any(w in str(exc) for w in _TRANSPORT_WORDS):
        watch.failed.wait(failure_grace_seconds)
    return watch.failure


def _raise_failed(op, failure, cause):
    raise error_class_for(failure)(
        f"torch.distributed.{op}: {failure.message}") from cause


def rejoin(timeout=60.0):
    """Moves this process into the job's next epoch after an
    EpochEndedError (the job recovers in place: rankd --recovery=on, or
    rankrun --max_restarts): destroys torch's process groups of the ended
    epoch (dist.destroy_process_group(): the default group and every
    new_group), then waits, at most `timeout` seconds, until the lost
    rank's replacement (or node's) joined and this rank is joined into the
    next epoch (rankd.Rank.rejoin), and returns that epoch. Then call
    init_process_group(..., init_method="rankd://") again, and new_group
    for the subgroups, as at the start; the replacement process does the
    same from its start. Tensors are untouched; the ended epoch's stores
    raise EpochEndedError from now on.

    Raises FailedPreconditionError when no rankd:// rendezvous joined this
    process, or when its epoch has not ended (no loss reported within
    failure_grace_seconds); JobFailedError when the job does not recover
    in place (--recovery=off) or FAILED meanwhile (its recovery deadline
    passed, or the coordinator was lost); rankd.UnavailableError when
    this process lost its daemon; rankd.DeadlineExceededError naming the
    epoch and the ranks still missing when `timeout` passes (rejoin() may
    then be called again)."""
    watch = _watch
    if watch is None:
        raise errors.FailedPreconditionError(
            "rankd.torch.rejoin: no rankd:// rendezvous joined this process")
    rank = watch.rank
    ended = rank.epoch
    # A torch call may have seen the loss (the daemon's answer) a moment
    # before the rank's failure notice.
    deadline = time.monotonic() + failure_grace_seconds
    while (failure := watch.failure or rank.job_health()) is None:
        if time.monotonic() >= deadline:
            raise errors.FailedPreconditionError(
                f"rankd.torch.rejoin: epoch {ended} of job {rank.job_id!r} "
                "has not ended; rejoin() follows an EpochEndedError")
        watch.failed.wait(0.01)
    if not rank.recovers_in_place:
        raise JobFailedError(
            f"rankd.torch.rejoin: {failure.message} (job {rank.job_id!r} "
            "does not recover in place: its daemons run with "
            "--recovery=off)")
    if dist.is_initialized():
        dist.destroy_process_group()
    try:
        epoch = rank.rejoin(ended, timeout=timeout)
    except errors.AbortedError as e:
        raise JobFailedError(f"rankd.torch.rejoin: {e.message}") from e
    watch.next_epoch(failure)
    return epoch


class _GuardedWork:
    """An async torch Work whose wait() raises JobFailedError when the
    rankd job failed; everything else is the Work's."""

    def __init__(self, op, work):
        self._op = op
        self._work = work

    def wait(self, *args, **kwargs):
        try:
            return self._work.wait(*args, **kwargs)
        except RuntimeError as e:
            failure = _job_failure(e)
            if failure is None:
                raise
            _raise_failed(self._op, failure, e)

    def __getattr__(self, name):
        return getattr(self._work, name)


def _guarded(op, fn):
    @functools.wraps(fn)
    def call(*args, **kwargs):
        failure = _job_failure(None)
        if failure is not None:
            _raise_failed(op, failure, None)
        try:
            result = fn(*args, **kwargs)
        except RuntimeError as e:
            if isinstance(e, errors.RankdError):
                raise
            failure = _job_failure(e)
            if failure is None:
                raise
            _raise_failed(op, failure, e)
        if isinstance(result, dist.Work):
            return _GuardedWork(op, result)
        return result
    call.__rankd_guarded__ = True
    return call


# torch.distributed's calls that talk to peers, where this torch has them.
_GUARDED = (
    "all_reduce", "all_reduce_coalesced", "all_gather", "all_gather_coalesced",
    "all_gather_into_tensor", "_all_gather_base", "all_gather_object",
    "all_to_all", "all_to_all_single", "barrier", "monitored_barrier",
    "batch_isend_irecv", "broadcast", "broadcast_object_list", "gather",
    "gather_object", "irecv", "isend", "new_group", "recv", "reduce",
    "reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base",
    "scatter", "scatter_object_list", "send")


def _install():
    for op in _GUARDED:
        fn = getattr(dist, op, None)
        if fn is not None and not getattr(fn, "__rankd_guarded__", False):
            setattr(dist, op, _guarded(op, fn))
    _torch_rendezvous.register_rendezvous_handler("rankd",
                                                  rendezvous_handler)


if "rankd" not in getattr(_torch_rendezvous, "_rendezvous_handlers", {}):
    _install()
