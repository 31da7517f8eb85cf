"""Data-plane sessions and works: the DistributedSession operations of
docs/contract.md on numpy arrays (host memory, Gloo) or on CUDA tensors
(NCCL).

Every operation returns a Work at once; work.wait() returns the output.

Gloo: inputs are copied by the library while the call runs, so they may be
reused as soon as it returns; outputs (a new array, or `out=`) are written
when the work's success is first observed (work.wait() or
work.is_completed() returning True).

NCCL: inputs and outputs are CUDA tensors (a torch.Tensor on CUDA, or any
object with __cuda_array_interface__ or DLPack on a CUDA device), read and
written in place, never copied. Each operation is ordered on a CUDA stream
of the caller's: `stream=` (a handle, or an object with .cuda_stream), else
torch's current stream for torch tensors, else the 'stream' entry of the
input's __cuda_array_interface__; the operation runs after the work queued
there and work queued there afterwards sees the outputs, without waiting on
the host. A DLPack producer is handed `stream=` when one is given, so
that it orders its own work before the operation. When no stream is known
(an interface without 'stream', DLPack without `stream=`), none is used:
the inputs must be ready when the call is made and the outputs are valid
once work.wait() returned. Outputs are the caller's
(`out=`); only for torch tensors does rankd allocate them (torch.empty on
the input's device). The tensors must stay allocated until the work
completed; the Work keeps a reference to them.

Values with no rows (shape (0, ...)) are valid for every operation and pair
like any other (a receive of no rows waits for its send); only the leading
extent may be 0 (docs/contract.md, "Empty values")."""

import ctypes

import numpy as np

from . import _device, _native
from ._native import check, lib
from .rank import WORLD

__all__ = ["Session", "Work"]

# numpy dtype -> rankd_dtype (bf16 has no numpy dtype).
_DTYPES = _device.DTYPES

_BACKENDS = {None: 0, "gloo": 1, "nccl": 2}
_CANCELLATION = {"quarantine": 1, "native": 2}
_FLAGS = ("world_collectives", "point_to_point", "variable_all_to_all",
          "exact_completion")


def _restriction(options, restrict):
    """Sets options.restrict_* from `restrict` (Rank.open_session's
    restrict_capabilities); returns what must stay alive during the open."""
    if restrict is None:
        return ()
    unknown = set(restrict) - set(_FLAGS) - {"collective_groups"}
    if unknown:
        raise _native.errors.InvalidArgumentError(
            f"rankd: restrict_capabilities has unknown keys "
            f"{sorted(unknown)}; it takes {', '.join(_FLAGS)} and "
            "collective_groups")
    allow = _native.Capabilities()
    allow.struct_size = ctypes.sizeof(allow)
    for name in _FLAGS:
        setattr(allow, name, 1 if restrict.get(name, True) else 0)
    options.restrict_capabilities = ctypes.pointer(allow)
    keep = [allow]
    if "collective_groups" in restrict:
        ids = [int(g) for g in restrict["collective_groups"]]
        groups = (ctypes.c_uint32 * max(len(ids), 1))(*ids)
        options.restrict_groups = ctypes.cast(
            groups, ctypes.POINTER(ctypes.c_uint32))
        options.restrict_group_count = len(ids)
        keep.append(groups)
    return keep


def _host_array(value, what):
    """`value` as a C-contiguous numpy array (a copy only when needed).
    Device tensors are refused with a message that says why."""
    # The common case first, without the device-tensor probes (a numpy
    # array is never one; each probe costs about a microsecond).
    if type(value) is np.ndarray and value.flags.c_contiguous and \
            value.dtype in _DTYPES:
        return value
    if _device.is_device_tensor(value):
        raise _native.errors.InvalidArgumentError(
            f"rankd: {what} is a CUDA tensor, and this session runs on Gloo "
            "(host memory); open it with backend='nccl' for CUDA tensors")
    array = np.ascontiguousarray(value)
    if array.dtype not in _DTYPES:
        raise _native.errors.InvalidArgumentError(
            f"rankd: {what} has dtype {array.dtype}, which rankd does not "
            f"carry; use one of {', '.join(str(d) for d in _DTYPES)}")
    return array


# size_t[n] array types by n (an operation builds one per tensor; making
# the type each time costs more than the array).
_SHAPE_TYPES = [ctypes.c_size_t * max(n, 1) for n in range(33)]


def _shape_array(shape):
    n = len(shape)
    return (_SHAPE_TYPES[n] if n < len(_SHAPE_TYPES) else
            ctypes.c_size_t * n)(*shape)


class _CTensor:
    """A rankd_tensor describing `array` (kept alive with its shape)."""

    def __init__(self, array):
        self.array = array
        self.shape = _shape_array(array.shape)
        self.tensor = _native.Tensor(
            array.ctypes.data if array.size else None, _DTYPES[array.dtype],
            array.ndim, self.shape)  # no cast: ctypes takes the array

    @property
    def pointer(self):
        return ctypes.byref(self.tensor)


class _CDeviceTensor:
    """A rankd_tensor describing a caller's CUDA tensor (a
    _device.DeviceTensor), kept alive with its shape."""

    def __init__(self, t):
        self.device_tensor = t
        self.shape = _shape_array(t.shape)
        self.tensor = _native.Tensor(
            t.pointer if t.pointer else None, t.dtype, t.ndim, self.shape)

    @property
    def pointer(self):
        return ctypes.byref(self.tensor)

    @property
    def source(self):
        return self.device_tensor.source


def _device_output(out, like, shape, what, stream):
    """The caller's CUDA output `out`, or (for a torch input `like`) a new
    torch tensor of `shape` on its device. `stream` is the caller's stream=
    argument."""
    if out is None:
        torch = _device._torch_tensor(like.source) if like is not None \
            else None
        if torch is None:
            raise _native.errors.InvalidArgumentError(
                f"rankd: {what}: pass out=, a CUDA tensor of shape "
                f"{tuple(shape) if shape is not None else '(the result)'}; "
                "rankd allocates device memory from Python only for torch "
                "tensors")
        out = torch.empty(tuple(shape), dtype=like.source.dtype,
                          device=like.source.device)
    t = _device.device_tensor(out, what, _device.stream_handle(stream))
    if t.readonly:
        raise _native.errors.InvalidArgumentError(
            f"rankd: {what} is read-only")
    return _CDeviceTensor(t)


def _output(out, shape, dtype, what):
    """`out` checked to be a writable C-contiguous array, or a new one."""
    if out is None:
        return np.empty(shape, dtype=dtype)
    if not isinstance(out, np.ndarray) or not out.flags.c_contiguous or \
            not out.flags.writeable:
        raise _native.errors.InvalidArgumentError(
            f"rankd: {what} must be a writable C-contiguous numpy array")
    return out


class Work:
    """A submitted operation. `output` is valid once it completed."""

    def __init__(self, session, handle, output, keep):
        self._session = session
        self._handle = handle
        self.output = output
        self._keep = keep  # what the library writes into at delivery

    def is_completed(self):
        """True once the work completed, successfully or not (its output
        is then written when wait() would return it). Never blocks."""
        return bool(lib.rankd_work_is_complete(self._handle))

    def wait(self, timeout=None, cancellation="quarantine"):
        """Returns the output once the work completed; raises its error
        (AbortedError naming a lost rank, ...). With `timeout` (seconds)
        the wait is bounded: past it, `cancellation` ("quarantine": the
        work keeps running, quarantined; "native": the communicators are
        aborted) is applied, the session is poisoned and WaitTimeoutError
        (a DeadlineExceededError) is raised."""
        if timeout is None:
            check(lib.rankd_work_wait(self._handle))
        else:
            mode = _CANCELLATION.get(cancellation)
            if mode is None:
                raise _native.errors.InvalidArgumentError(
                    f"rankd: cancellation must be 'quarantine' or 'native', "
                    f"not {cancellation!r}")
            check(lib.rankd_work_wait_bounded(self._handle, float(timeout),
                                              mode))
        return self.output

    def supports_cancellation(self, cancellation):
        mode = _CANCELLATION.get(cancellation, 0)
        return bool(lib.rankd_work_supports_cancellation(self._handle, mode))

    def __del__(self):
        handle, self._handle = getattr(self, "_handle", None), None
        if handle is not None:
            _native.release(lib.rankd_work_free, handle)


class Session:
    """A data-plane session over a joined Rank (Rank.open_session). Use it
    as a context manager or call close(); every rank should finish its
    data-plane work (a last all_gather_words round is a barrier) first."""

    def __init__(self, rank, backend, op_timeout, verify_agreement,
                 gloo_hostname, restrict_capabilities=None):
        if backend not in _BACKENDS:
            raise _native.errors.InvalidArgumentError(
                f"rankd: backend must be 'gloo' or 'nccl', not {backend!r}")
        self._rank = rank
        o = _native.SessionOptions()
        lib.rankd_session_options_init(ctypes.byref(o))
        o.backend = _BACKENDS[backend]
        o.op_timeout_seconds = float(op_timeout)
        o.verify_agreement = 1 if verify_agreement else 0
        o.gloo_hostname = None if gloo_hostname is None else \
            gloo_hostname.encode()
        keep = _restriction(o, restrict_capabilities)
        handle = ctypes.c_void_p()
        check(rank._call(lib.rankd_session_open, ctypes.byref(o),
                         ctypes.byref(handle)))
        del keep  # read during the open only
        # Freed only when no call uses it (close(), or the last call after
        # it: _native.Handle); the C ABI forbids freeing it under a call.
        self._guard = _native.Handle(
            handle, lib.rankd_session_free,
            lambda: _native.errors.FailedPreconditionError(
                "rankd: the session is closed"))
        self._nccl = lib.rankd_session_backend(handle) == 2

    @property
    def rank(self):
        return self._rank

    @property
    def _handle(self):
        """The C handle until it is freed (it may be closing), else None."""
        return self._guard.value

    def _call(self, fn, *args):
        """fn(handle, *args), the handle kept alive meanwhile: a close() on
        another thread leaves its freeing to the last call running.
        FailedPreconditionError once the session is closed."""
        return self._guard.call(fn, *args)

    @property
    def backend(self):
        return {1: "gloo", 2: "nccl"}[self._call(lib.rankd_session_backend)]

    @property
    def capabilities(self):
        """{"world_collectives": bool, "point_to_point": ..., ...}: what the
        session does; an operation it lacks raises UnimplementedError
        naming the capability (supports_group for groups)."""
        c = _native.Capabilities()
        c.struct_size = ctypes.sizeof(c)
        check(self._call(lib.rankd_session_capabilities, ctypes.byref(c)))
        return {name: bool(getattr(c, name)) for name, _ in c._fields_[1:]}

    def supports_group(self, group):
        return bool(self._call(lib.rankd_session_supports_group, group))

    def _work(self, handle, output, keep):
        return Work(self, handle, output, keep)

    def _members(self, group):
        size = self._rank._group_size(group)
        if size is None:
            raise _native.errors.NotFoundError(
                f"rankd: rank {self._rank.rank} is not a member of group "
                f"{group}")
        return size

    def _stream(self, stream, tensors):
        """The stream an NCCL operation is ordered on (see the module's
        docstring); None for Gloo unless given (which the library refuses).
        """
        if stream is not None:
            return _device.stream_handle(stream)
        for t in tensors:
            if t.device_tensor.stream is not None:
                return t.device_tensor.stream
        return None

    def _device_in(self, value, what, stream):
        return _CDeviceTensor(_device.device_tensor(
            value, what, _device.stream_handle(stream)))

    def all_reduce_sum(self, value, group=WORLD, out=None, stream=None):
        """Element-wise sum over the group's members. `out` may be `value`
        itself (in place)."""
        if self._nccl:
            cx = self._device_in(value, "value", stream)
            cy = cx if out is value else _device_output(
                out, cx.device_tensor, cx.device_tensor.shape, "out", stream)
            handle = ctypes.c_void_p()
            check(self._call(lib.rankd_all_reduce_sum, group, cx.pointer,
                             cy.pointer, self._stream(stream, (cx, cy)),
                             ctypes.byref(handle)))
            return self._work(handle, cy.source, (cx, cy))
        x = _host_array(value, "value")
        y = _output(out, x.shape, x.dtype, "out")
        cx, cy = _CTensor(x), _CTensor(y)
        handle = ctypes.c_void_p()
        check(self._call(lib.rankd_all_reduce_sum, group, cx.pointer,
                         cy.pointer, _device.stream_handle(stream),
                         ctypes.byref(handle)))
        return self._work(handle, y, (cx, cy))

    def all_gather(self, value, group=WORLD, out=None, stream=None):
        """Members' values concatenated along the leading axis in member
        order ([n, ...] gives [members * n, ...]; a scalar [members])."""
        members = self._members(group)
        if self._nccl:
            cx = self._device_in(value, "value", stream)
            s = cx.device_tensor.shape
            shape = (members,) if not s else (members * s[0],) + s[1:]
            cy = _device_output(out, cx.device_tensor, shape, "out", stream)
            handle = ctypes.c_void_p()
            check(self._call(lib.rankd_all_gather, group, cx.pointer,
                             cy.pointer, self._stream(stream, (cx, cy)),
                             ctypes.byref(handle)))
            return self._work(handle, cy.source, (cx, cy))
        x = _host_array(value, "value")
        shape = (members,) if x.ndim == 0 else \
            (members * x.shape[0],) + x.shape[1:]
        y = _output(out, shape, x.dtype, "out")
        cx, cy = _CTensor(x), _CTensor(y)
        handle = ctypes.c_void_p()
        check(self._call(lib.rankd_all_gather, group, cx.pointer,
                         cy.pointer, _device.stream_handle(stream),
                         ctypes.byref(handle)))
        return self._work(handle, y, (cx, cy))

    def all_to_all_v(self, value, send_counts, receive_counts, group=WORLD,
                     out=None, stream=None):
        """Leading-axis rows: send_counts[d] rows to member d,
        receive_counts[s] rows from member s (output source-major)."""
        if self._nccl:
            cx = self._device_in(value, "value", stream)
        else:
            x = _host_array(value, "value")
        n = len(send_counts)
        sends = (ctypes.c_size_t * max(n, 1))(*send_counts)
        receives = (ctypes.c_size_t * max(len(receive_counts), 1))(
            *receive_counts)
        if len(receive_counts) != n:
            raise _native.errors.InvalidArgumentError(
                f"rankd: all_to_all_v: {n} send counts and "
                f"{len(receive_counts)} receive counts")
        rows = sum(int(c) for c in receive_counts)
        if self._nccl:
            shape = (rows,) + cx.device_tensor.shape[1:]
            cy = _device_output(out, cx.device_tensor, shape, "out", stream)
            c_stream = self._stream(stream, (cx, cy))
            result = cy.source
        else:
            y = _output(out, (rows,) + x.shape[1:], x.dtype, "out")
            cx, cy = _CTensor(x), _CTensor(y)
            c_stream = _device.stream_handle(stream)
            result = y
        handle = ctypes.c_void_p()
        check(self._call(lib.rankd_all_to_all_v, group, cx.pointer,
                         ctypes.cast(sends, _native.c_size_p),
                         ctypes.cast(receives, _native.c_size_p), n,
                         cy.pointer, c_stream, ctypes.byref(handle)))
        return self._work(handle, result, (cx, cy, sends, receives))

    def send(self, value, peer, group=WORLD, stream=None):
        """Sends `value` to member `peer`; pairs with its receive of the
        same shape and dtype. wait() returns the value."""
        if self._nccl:
            cx = self._device_in(value, "value", stream)
            c_stream, result = self._stream(stream, (cx,)), value
        else:
            x = _host_array(value, "value")
            cx = _CTensor(x)
            c_stream, result = _device.stream_handle(stream), x
        handle = ctypes.c_void_p()
        check(self._call(lib.rankd_send, group, peer, cx.pointer, c_stream,
                         ctypes.byref(handle)))
        return self._work(handle, result, (cx,))

    def receive(self, peer, shape=None, dtype=None, group=WORLD, out=None,
                stream=None):
        """Receives from member `peer` into `out`, or a new array of
        `shape` and `dtype` (Gloo; an NCCL session needs `out`)."""
        if self._nccl:
            cy = _device_output(out, None, shape, "out", stream)
            handle = ctypes.c_void_p()
            check(self._call(lib.rankd_receive, group, peer, cy.pointer,
                             self._stream(stream, (cy,)),
                             ctypes.byref(handle)))
            return self._work(handle, cy.source, (cy,))
        if out is None:
            if shape is None or dtype is None:
                raise _native.errors.InvalidArgumentError(
                    "rankd: receive needs out=, or shape= and dtype=")
            out = np.empty(shape, dtype=np.dtype(dtype))
        y = _output(out, None, None, "out")
        if y.dtype not in _DTYPES:
            raise _native.errors.InvalidArgumentError(
                f"rankd: out has dtype {y.dtype}, which rankd does not carry")
        cy = _CTensor(y)
        handle = ctypes.c_void_p()
        check(self._call(lib.rankd_receive, group, peer, cy.pointer,
                         _device.stream_handle(stream),
                         ctypes.byref(handle)))
        return self._work(handle, y, (cy,))

    def batch_send_receive(self, sends, receives, group=WORLD, stream=None):
        """Posts every (peer, value) of `sends` and (peer, out) of
        `receives` together; they complete together, so members can swap
        values. wait() returns the receive outputs, in order."""
        if any(o is None for _, o in receives):
            raise _native.errors.InvalidArgumentError(
                "rankd: batch_send_receive needs an output array for every "
                "receive")
        if self._nccl:
            send_list = [(int(p), self._device_in(v, f"sends[{i}]", stream))
                         for i, (p, v) in enumerate(sends)]
            receive_list = [(int(p), _device_output(o, None, None,
                                                    f"receives[{i}]", stream))
                            for i, (p, o) in enumerate(receives)]
            c_stream = self._stream(
                stream, [t for _, t in send_list + receive_list])
        else:
            send_list = [(int(p), _CTensor(_host_array(v, f"sends[{i}]")))
                         for i, (p, v) in enumerate(sends)]
            receive_list = [(int(p), _CTensor(_output(o, None, None,
                                                      f"receives[{i}]")))
                            for i, (p, o) in enumerate(receives)]
            c_stream = _device.stream_handle(stream)
        s = (_native.PeerTensor * max(len(send_list), 1))(
            *[_native.PeerTensor(p, t.tensor) for p, t in send_list])
        r = (_native.PeerTensor * max(len(receive_list), 1))(
            *[_native.PeerTensor(p, t.tensor) for p, t in receive_list])
        handle = ctypes.c_void_p()
        check(self._call(lib.rankd_batch_send_receive, group, s,
                         len(send_list), r, len(receive_list), c_stream,
                         ctypes.byref(handle)))
        outputs = [t.source if self._nccl else t.array
                   for _, t in receive_list]
        return self._work(handle, outputs, (send_list, receive_list, s, r))

    # ---- reform (issue 38: re-forming after a loss) ----

    def reform(self, timeout=300.0):
        """Replaces this session, in place, by its session of the next job
        epoch after a lost rank or node moved the job on (rankd
        --recovery=on; docs/dataplane.md, "Re-forming after a loss"): the
        ended session is aborted and closed (its pending works fail), then
        this waits up to `timeout` seconds for the job to pass the ended
        epoch and for the world to be whole again, and opens the new
        epoch's session with the same options (NCCL: the same device).
        Arrays and tensors the caller owns (its weights) are untouched.
        Every rank must re-form (the replacement: open) its sessions in the
        same order. Meanwhile, calls on this session from other threads
        (a second reform included) raise FailedPreconditionError ("the
        session is being re-formed") at once.

        Raises InvalidArgumentError for a timeout that is not positive,
        DeadlineExceededError naming the epoch when the world was not whole
        in time, the ended session's error when the job failed for good,
        UnimplementedError when the rank cannot join a later epoch. After an
        error the session is gone: every later call raises that error."""
        def reform(handle):
            check(lib.rankd_session_reform(handle, float(timeout)))
            self._nccl = lib.rankd_session_backend(handle) == 2
        self._call(reform)

    # ---- end of reform ----

    # ---- poison and abort (issue 33; docs/contract.md, "Failures: one
    # vocabulary") ----

    def poison(self, cause, message=None):
        """Poisons the session with `cause` and tears nothing down: every
        later operation raises the cause's class with a message ending in
        the cause's message, before any data moves; work already running is
        not interrupted. For a caller that decided the session must not be
        used any more but whose submitted work is still good (a scheduler
        draining a rank). The first cause wins: on a session already
        poisoned this changes nothing. Only this rank's session: peers are
        not told.

        `cause` is a RankdError (poison(rankd.UnavailableError("drained")))
        or, with `message`, its class, a code's name or its value
        (poison("UNAVAILABLE", "drained")). An INVALID_ARGUMENT cause is
        latched as FAILED_PRECONDITION with its words (a poisoned session
        never answers INVALID_ARGUMENT, "refused, the session is still
        usable"). InvalidArgumentError, before anything is latched, for an
        OK code, a code that is none or a message with a NUL;
        FailedPreconditionError once the session is closed."""
        self._latch(lib.rankd_session_poison, cause, message)

    def abort(self, cause, message=None):
        """poison(cause, message), then aborts the session's native
        contexts (Gloo's contexts, NCCL's communicators) so that its
        pending works fail now, with the cause, instead of waiting for a
        peer or the op timeout: for a caller that knows a peer is gone. On
        a session already poisoned the first cause stays and the contexts
        are aborted if they were not yet. Same arguments and errors as
        poison()."""
        self._latch(lib.rankd_session_abort, cause, message)

    @property
    def poison_cause(self):
        """None while the session is healthy; once poisoned, the first
        cause as the exception its operations are refused with (its code's
        class, its message unchanged), whether poison(), abort(), a native
        failure, a missed deadline or a lost peer poisoned it; after a
        failed reform(), that error. Raises FailedPreconditionError once
        the session is closed."""
        status = self._call(lib.rankd_session_poison_status)
        return _native.take_error(status) if status else None

    def _latch(self, fn, cause, message):
        if message is None:
            if not isinstance(cause, _native.errors.RankdError):
                raise _native.errors.InvalidArgumentError(
                    "rankd: a cause is a RankdError, or a code with a "
                    "message")
            message = cause.message
        code = _native.errors.code_of(cause)
        message = str(message)
        if "\0" in message:
            raise _native.errors.InvalidArgumentError(
                "rankd: a cause's message must not contain NUL")
        check(self._call(fn, code, message.encode()))

    # ---- end of poison and abort ----

    def close(self):
        """Frees the session (it closes once its works are freed too).
        Never waits: while calls run on other threads (a reform() waiting
        for the next epoch, say), the last of them frees it as it returns.
        Later calls raise FailedPreconditionError. Idempotent."""
        self._guard.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        guard = getattr(self, "_guard", None)
        if guard is not None:
            guard.discard()
