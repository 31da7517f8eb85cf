"""The C ABI (capi/include/rankd/rankd.h) through ctypes: loading
librankd.so, the structs and prototypes, and turning a rankd_status into an
exception. Private to the package.

librankd.so is found, in order, at $RANKD_LIBRARY, next to this package
(rankd/librankd.so), in the install prefix's lib/ (tools/install.sh puts
the package in PREFIX/lib/python3/dist-packages), or by the dynamic
loader's search path (LD_LIBRARY_PATH, ldconfig). ctypes loads it with
RTLD_LOCAL, so its symbols never mix with other extensions'.
"""

import ctypes
import os
import threading

from . import errors

ABI_VERSION = 1

c_size_p = ctypes.POINTER(ctypes.c_size_t)
c_uint32_p = ctypes.POINTER(ctypes.c_uint32)


class JoinOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("target", ctypes.c_char_p),
        ("job_id", ctypes.c_char_p),
        ("local_rank", ctypes.c_int64),
        ("rank", ctypes.c_int64),
        ("world_size", ctypes.c_uint32),
        ("device_kind", ctypes.c_char_p),
        ("device_index", ctypes.c_int32),
        ("wait_for_world_seconds", ctypes.c_double),
        ("connect_timeout_seconds", ctypes.c_double),
        ("token_file", ctypes.c_char_p),
    ]


class Descriptor(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("rank", ctypes.c_uint32),
        ("world_size", ctypes.c_uint32),
        ("local_rank", ctypes.c_uint32),
        ("node_index", ctypes.c_uint32),
        ("nnodes", ctypes.c_uint32),
        ("nproc_per_node", ctypes.c_uint32),
        ("job_incarnation", ctypes.c_uint64),
        ("tensor_parallel", ctypes.c_uint32),
        ("pipeline_parallel", ctypes.c_uint32),
        ("expert_parallel", ctypes.c_uint32),
        ("data_parallel", ctypes.c_uint32),
        ("group_count", ctypes.c_size_t),
    ]


class Group(ctypes.Structure):
    _fields_ = [
        ("id", ctypes.c_uint32),
        ("kind", ctypes.c_char_p),
        ("size", ctypes.c_uint32),
        ("local_rank", ctypes.c_uint32),
        ("members", c_uint32_p),
    ]


class DomainEpoch(ctypes.Structure):
    _fields_ = [
        ("domain", ctypes.c_uint32),
        ("epoch", ctypes.c_uint64),
    ]


class Capabilities(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("world_collectives", ctypes.c_int),
        ("point_to_point", ctypes.c_int),
        ("variable_all_to_all", ctypes.c_int),
        ("exact_completion", ctypes.c_int),
    ]


class SessionOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("backend", ctypes.c_int32),
        ("op_timeout_seconds", ctypes.c_double),
        ("verify_agreement", ctypes.c_int),
        ("gloo_hostname", ctypes.c_char_p),
        ("restrict_capabilities", ctypes.POINTER(Capabilities)),
        ("restrict_groups", ctypes.POINTER(ctypes.c_uint32)),
        ("restrict_group_count", ctypes.c_size_t),
    ]


class Tensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int32),
        ("ndim", ctypes.c_size_t),
        ("shape", c_size_p),
    ]


class PeerTensor(ctypes.Structure):
    _fields_ = [("peer", ctypes.c_size_t), ("tensor", Tensor)]


FailureFn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int,
                             ctypes.c_char_p)

_P = ctypes.c_void_p  # every opaque handle, rankd_status* included
_PP = ctypes.POINTER(ctypes.c_void_p)
_T = ctypes.POINTER(Tensor)

# name: (restype, argtypes)
_PROTOTYPES = {
    "rankd_abi_version": (ctypes.c_uint32, []),
    "rankd_status_code": (ctypes.c_int, [_P]),
    "rankd_status_message": (ctypes.c_char_p, [_P]),
    "rankd_status_free": (None, [_P]),
    "rankd_status_is_wait_timeout": (ctypes.c_int, [_P]),
    "rankd_status_is_epoch_fence": (ctypes.c_int, [_P]),
    "rankd_status_ends_an_epoch": (ctypes.c_int, [_P]),
    "rankd_join_options_init": (None, [ctypes.POINTER(JoinOptions)]),
    "rankd_join": (_P, [ctypes.POINTER(JoinOptions), _PP]),
    "rankd_leave": (_P, [_P]),
    "rankd_rank_free": (None, [_P]),
    "rankd_rank_descriptor": (_P, [_P, ctypes.POINTER(Descriptor)]),
    "rankd_rank_job_id": (ctypes.c_char_p, [_P]),
    "rankd_rank_group": (_P, [_P, ctypes.c_size_t, ctypes.POINTER(Group)]),
    "rankd_all_gather_words": (_P, [_P, c_uint32_p, ctypes.c_size_t,
                                    ctypes.c_double, c_uint32_p,
                                    ctypes.c_size_t]),
    "rankd_all_gather_words_with_view": (
        _P, [_P, c_uint32_p, ctypes.c_size_t, ctypes.c_double, c_uint32_p,
             ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t),
             ctypes.POINTER(ctypes.c_int), ctypes.POINTER(DomainEpoch),
             ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]),
    "rankd_submit_all_gather_words": (_P, [_P, c_uint32_p, ctypes.c_size_t,
                                           ctypes.c_double, _PP]),
    "rankd_pending_words_is_ready": (ctypes.c_int, [_P]),
    "rankd_pending_words_wait": (_P, [_P, ctypes.c_double, c_uint32_p,
                                      ctypes.c_size_t]),
    "rankd_pending_words_free": (None, [_P]),
    "rankd_bytes_data": (ctypes.c_void_p, [_P]),
    "rankd_bytes_size": (ctypes.c_size_t, [_P]),
    "rankd_bytes_free": (None, [_P]),
    "rankd_kv_set": (_P, [_P, ctypes.c_char_p, ctypes.c_char_p,
                          ctypes.c_size_t]),
    "rankd_kv_get": (_P, [_P, ctypes.c_char_p, ctypes.c_double, _PP]),
    "rankd_kv_add": (_P, [_P, ctypes.c_char_p, ctypes.c_int64,
                          ctypes.POINTER(ctypes.c_int64)]),
    "rankd_kv_delete": (_P, [_P, ctypes.c_char_p,
                             ctypes.POINTER(ctypes.c_int)]),
    "rankd_kv_compare_set": (_P, [_P, ctypes.c_char_p, ctypes.c_int,
                                  ctypes.c_char_p, ctypes.c_size_t,
                                  ctypes.c_char_p, ctypes.c_size_t,
                                  ctypes.POINTER(ctypes.c_int)]),
    "rankd_kv_compare_delete": (_P, [_P, ctypes.c_char_p, ctypes.c_char_p,
                                     ctypes.c_size_t,
                                     ctypes.POINTER(ctypes.c_int)]),
    "rankd_kv_count": (_P, [_P, ctypes.c_char_p,
                            ctypes.POINTER(ctypes.c_uint64)]),
    "rankd_job_health": (_P, [_P]),
    "rankd_on_job_failure": (_P, [_P, FailureFn, ctypes.c_void_p]),
    "rankd_rank_epoch": (ctypes.c_uint64, [_P]),
    "rankd_rank_recovery": (ctypes.c_int, [_P]),
    "rankd_rejoin": (_P, [_P, ctypes.c_uint64, ctypes.c_double]),
    "rankd_session_options_init": (None, [ctypes.POINTER(SessionOptions)]),
    "rankd_session_open": (_P, [_P, ctypes.POINTER(SessionOptions), _PP]),
    "rankd_session_free": (None, [_P]),
    "rankd_session_capabilities": (_P, [_P, ctypes.POINTER(Capabilities)]),
    "rankd_session_supports_group": (ctypes.c_int, [_P, ctypes.c_uint32]),
    "rankd_session_backend": (ctypes.c_int, [_P]),
    # rankd_session_reform (issue 38: re-forming after a loss).
    "rankd_session_reform": (_P, [_P, ctypes.c_double]),
    # Poisoning and aborting a session (issue 33).
    "rankd_session_poison": (_P, [_P, ctypes.c_int32, ctypes.c_char_p]),
    "rankd_session_abort": (_P, [_P, ctypes.c_int32, ctypes.c_char_p]),
    "rankd_session_poison_status": (_P, [_P]),
    "rankd_all_reduce_sum": (_P, [_P, ctypes.c_uint32, _T, _T, _P, _PP]),
    "rankd_all_gather": (_P, [_P, ctypes.c_uint32, _T, _T, _P, _PP]),
    "rankd_all_to_all_v": (_P, [_P, ctypes.c_uint32, _T, c_size_p, c_size_p,
                                ctypes.c_size_t, _T, _P, _PP]),
    "rankd_send": (_P, [_P, ctypes.c_uint32, ctypes.c_size_t, _T, _P, _PP]),
    "rankd_receive": (_P, [_P, ctypes.c_uint32, ctypes.c_size_t, _T, _P,
                           _PP]),
    "rankd_batch_send_receive": (_P, [_P, ctypes.c_uint32,
                                      ctypes.POINTER(PeerTensor),
                                      ctypes.c_size_t,
                                      ctypes.POINTER(PeerTensor),
                                      ctypes.c_size_t, _P, _PP]),
    "rankd_work_is_complete": (ctypes.c_int, [_P]),
    "rankd_work_wait": (_P, [_P]),
    "rankd_work_wait_bounded": (_P, [_P, ctypes.c_double, ctypes.c_int]),
    "rankd_work_supports_cancellation": (ctypes.c_int, [_P, ctypes.c_int]),
    "rankd_work_free": (None, [_P]),
}


def _load():
    package_dir = os.path.dirname(os.path.abspath(__file__))
    here = os.path.join(package_dir, "librankd.so")
    # tools/install.sh puts the package in PREFIX/lib/python3/dist-packages
    # and the library in PREFIX/lib.
    prefix_lib = os.path.normpath(
        os.path.join(package_dir, "..", "..", "..", "librankd.so"))
    candidates = [
        os.environ.get("RANKD_LIBRARY"), here, prefix_lib, "librankd.so"
    ]
    tried = []
    for path in candidates:
        if not path:
            continue
        if path != "librankd.so" and not os.path.exists(path):
            tried.append(f"{path} (absent)")
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path} ({e})")
            continue
        for name, (restype, argtypes) in _PROTOTYPES.items():
            fn = getattr(lib, name)
            fn.restype = restype
            fn.argtypes = argtypes
        version = lib.rankd_abi_version()
        if version != ABI_VERSION:
            raise ImportError(
                f"rankd: {path} has C ABI version {version}; this package "
                f"needs {ABI_VERSION}")
        return lib
    raise ImportError(
        "rankd: cannot load librankd.so; tried " + "; ".join(tried) +
        ". Set RANKD_LIBRARY to its path, or install rankd (tools/install.sh)")


lib = _load()


def check(status):
    """Raises the exception for `status` (a rankd_status*, freed here)
    unless it is NULL."""
    if status:
        raise take_error(status)


def take_error(status):
    """The exception for a non-NULL rankd_status*, which is freed."""
    code = lib.rankd_status_code(status)
    message = lib.rankd_status_message(status).decode("utf-8", "replace")
    wait_timeout = bool(lib.rankd_status_is_wait_timeout(status))
    epoch_fence = bool(lib.rankd_status_is_epoch_fence(status))
    epoch_ended = bool(lib.rankd_status_ends_an_epoch(status))
    lib.rankd_status_free(status)
    return errors.error_for(code, message, wait_timeout, epoch_fence,
                            epoch_ended)


# Set on a thread while it runs a failure callback (in_failure_callback).
_callback_state = threading.local()


class in_failure_callback:
    """Marks this thread as running a failure callback while the `with`
    block runs: a handle freed meanwhile (the callback closed or dropped
    the last reference to a Rank or Session) is freed on a thread of its
    own, since the C ABI forbids freeing any handle inside the callback
    (rankd.h, rankd_on_job_failure); the rank's free then waits for the
    callback to return."""

    def __enter__(self):
        self._outer = getattr(_callback_state, "active", False)
        _callback_state.active = True

    def __exit__(self, *exc):
        _callback_state.active = self._outer


def release(free, handle):
    """free(handle) now, or on a thread of its own inside a failure
    callback (in_failure_callback)."""
    if getattr(_callback_state, "active", False):
        threading.Thread(target=free, args=(handle,), daemon=True,
                         name="rankd-free").start()
    else:
        free(handle)


class Handle:
    """A C handle that close() may free while calls on other threads use
    it: the C ABI forbids freeing a handle under a running call, so the
    last call running frees it as it returns, and close() never waits
    (a call may block for its own timeout). Inside a failure callback the
    free happens on a thread of its own (in_failure_callback). Thread-safe.

    `free` is the C function that frees the handle; `closed` makes the
    exception raised by a call after close()."""

    def __init__(self, handle, free, closed):
        self._lock = threading.Lock()
        self._handle = handle  # None once freed
        self._free = free
        self._closed = closed
        self._calls = 0  # calls using the handle now
        self._closing = False

    @property
    def value(self):
        """The handle while it is not freed (it may be closing), else None.
        """
        return self._handle

    def call(self, fn, *args):
        """fn(handle, *args), the handle kept alive meanwhile. Raises
        closed() once close() was called."""
        with self._lock:
            if self._handle is None or self._closing:
                raise self._closed()
            self._calls += 1
            handle = self._handle
        try:
            return fn(handle, *args)
        finally:
            last = None
            with self._lock:
                self._calls -= 1
                if self._calls == 0 and self._closing:
                    last, self._handle = self._handle, None
            if last is not None:
                release(self._free, last)

    def close(self):
        """Frees the handle now, or (while calls run) as the last of them
        returns; later calls raise. Idempotent; never waits."""
        with self._lock:
            if self._handle is None or self._closing:
                return
            self._closing = True
            if self._calls:
                return  # the last call running frees it (call)
            handle, self._handle = self._handle, None
        release(self._free, handle)

    def discard(self):
        """For a finalizer: frees the handle unless it is gone. No call can
        be running then (each holds a reference to the handle's owner)."""
        handle, self._handle = self._handle, None
        if handle is not None:
            release(self._free, handle)
