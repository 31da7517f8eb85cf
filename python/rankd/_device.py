"""Device tensors for NCCL sessions: what the library needs of a caller's
CUDA tensor (its device pointer, shape, rankd dtype and the stream its
producer used), read from

  - a torch.Tensor on CUDA (only when torch is already imported: data_ptr,
    shape, dtype, the current stream of its device),
  - any object with __cuda_array_interface__ (CuPy, Numba, JAX, ...): its
    'data' pointer, 'shape', 'typestr', 'strides' (must be contiguous) and
    'stream' when given,
  - any object with __dlpack__ / __dlpack_device__ on a CUDA device, its
    capsule read through ctypes: DLPack 1.x's versioned capsule
    (DLManagedTensorVersioned, asked for with max_version=(1, 0); its
    READ_ONLY flag is honoured) or, from producers that predate it, the
    unversioned one (DLManagedTensor). The capsule is kept, so the
    producer's memory stays alive, for as long as the work.

Nothing here allocates or copies device memory. Private to the package.
"""

import ctypes
import sys

import numpy as np

from . import errors

# numpy dtype -> rankd_dtype; bf16 (3) has no numpy dtype.
DTYPES = {
    np.dtype(np.bool_): 0,
    np.dtype(np.float32): 1,
    np.dtype(np.float16): 2,
    np.dtype(np.float64): 4,
    np.dtype(np.int8): 5,
    np.dtype(np.int16): 6,
    np.dtype(np.int32): 7,
    np.dtype(np.int64): 8,
    np.dtype(np.uint8): 9,
    np.dtype(np.uint16): 10,
    np.dtype(np.uint32): 11,
    np.dtype(np.uint64): 12,
    np.dtype(np.complex64): 13,
}
_ITEMSIZE = {0: 1, 1: 4, 2: 2, 3: 2, 4: 8, 5: 1, 6: 2, 7: 4, 8: 8, 9: 1,
             10: 2, 11: 4, 12: 8, 13: 8}

# CUDA's special stream handles.
STREAM_LEGACY = 1
STREAM_PER_THREAD = 2

# DLPack device types on CUDA: kDLCUDA, kDLCUDAManaged.
_DL_CUDA = (2, 13)
# (type code, bits) -> rankd_dtype. Codes: int 0, uint 1, float 2,
# bfloat 4, complex 5, bool 6.
_DL_DTYPES = {(6, 8): 0, (1, 8): 9, (2, 32): 1, (2, 16): 2,
              (4, 16): 3, (2, 64): 4, (0, 8): 5, (0, 16): 6, (0, 32): 7,
              (0, 64): 8, (1, 16): 10, (1, 32): 11, (1, 64): 12,
              (5, 64): 13}


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice),
                ("ndim", ctypes.c_int32), ("dtype", _DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


class _DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", _DLPackVersion), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64),
                ("dl_tensor", _DLTensor)]


# The DLPack major version this package reads, and DLPack 1.x's flag bits.
_DLPACK_MAJOR = 1
_DLPACK_FLAG_READ_ONLY = 1

_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype = ctypes.c_char_p
_capsule_name.argtypes = [ctypes.py_object]


class DeviceTensor:
    """A caller's CUDA tensor as the C ABI takes it. `source` is the
    caller's object (the output handed back), `keep` what must live as
    long as the work (the object, a DLPack capsule)."""

    def __init__(self, source, pointer, shape, dtype, device=None,
                 stream=None, readonly=False, keep=()):
        self.source = source
        self.pointer = int(pointer)
        self.shape = tuple(int(n) for n in shape)
        self.dtype = dtype  # a rankd_dtype
        self.device = device  # None when the interface does not say
        self.stream = stream  # the producer's stream (a handle), or None
        self.readonly = readonly
        self.keep = (source,) + tuple(keep)

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        n = 1
        for extent in self.shape:
            n *= extent
        return n

    @property
    def itemsize(self):
        return _ITEMSIZE[self.dtype]


def _torch_tensor(value):
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(value, torch.Tensor):
        return None
    return torch


def is_device_tensor(value):
    """Whether `value` is a tensor in CUDA device memory."""
    torch = _torch_tensor(value)
    if torch is not None:
        return value.is_cuda
    if hasattr(value, "__cuda_array_interface__"):
        return True
    if hasattr(value, "__dlpack_device__") and hasattr(value, "__dlpack__"):
        try:
            return int(value.__dlpack_device__()[0]) in _DL_CUDA
        except Exception:
            return False
    return False


def _contiguous(shape, strides, itemsize):
    expected = itemsize
    for extent, stride in zip(reversed(shape), reversed(strides)):
        if extent != 1 and stride != expected:
            return False
        expected *= extent
    return True


def _torch_dtype(torch, dtype, what):
    table = {torch.bool: 0, torch.float32: 1, torch.float16: 2,
             torch.bfloat16: 3, torch.float64: 4, torch.int8: 5,
             torch.int16: 6, torch.int32: 7, torch.int64: 8, torch.uint8: 9,
             torch.complex64: 13}
    for name, code in (("uint16", 10), ("uint32", 11), ("uint64", 12)):
        if hasattr(torch, name):
            table[getattr(torch, name)] = code
    if dtype not in table:
        raise errors.InvalidArgumentError(
            f"rankd: {what} has dtype {dtype}, which rankd does not carry")
    return table[dtype]


def _dlpack_tensor(value, stream, what):
    """(DLTensor, read_only, capsule) from `value`'s __dlpack__, asking for
    the versioned capsule and falling back to the unversioned one for
    producers without max_version. `stream` (a C ABI stream handle, whose
    1 and 2 are DLPack's legacy and per-thread default streams) is the
    consumer's stream the producer must order its work before; None lets
    the producer assume the legacy default stream."""
    kwargs = {} if stream is None else {"stream": stream}
    try:
        capsule = value.__dlpack__(max_version=(_DLPACK_MAJOR, 0), **kwargs)
    except TypeError:  # a producer from before DLPack 1.0
        capsule = value.__dlpack__(**kwargs)
    name = _capsule_name(capsule)
    if name == b"dltensor_versioned":
        managed = _DLManagedTensorVersioned.from_address(
            _capsule_pointer(capsule, name))
        if managed.version.major != _DLPACK_MAJOR:
            raise errors.InvalidArgumentError(
                f"rankd: {what} is a DLPack {managed.version.major}."
                f"{managed.version.minor} tensor; rankd reads DLPack "
                f"{_DLPACK_MAJOR}.x and the unversioned capsule")
        read_only = bool(managed.flags & _DLPACK_FLAG_READ_ONLY)
        return managed.dl_tensor, read_only, capsule
    if name == b"dltensor":
        managed = _DLManagedTensor.from_address(
            _capsule_pointer(capsule, name))
        return managed.dl_tensor, False, capsule
    raise errors.InvalidArgumentError(
        f"rankd: {what}.__dlpack__() gave a capsule named {name!r}, not an "
        "unused DLPack tensor ('dltensor' or 'dltensor_versioned')")


def device_tensor(value, what, stream=None):
    """`value` as a DeviceTensor; InvalidArgumentError naming `what` and
    the reason when it cannot be one. `stream` is the caller's explicit
    stream (a C ABI handle), which a DLPack producer is asked to order its
    work before."""
    if isinstance(value, np.ndarray):
        raise errors.InvalidArgumentError(
            f"rankd: {what} is a numpy array (host memory); an NCCL session "
            "needs a CUDA tensor")
    torch = _torch_tensor(value)
    if torch is not None:
        if not value.is_cuda:
            raise errors.InvalidArgumentError(
                f"rankd: {what} is a CPU torch tensor; an NCCL session needs "
                "CUDA tensors")
        if not value.is_contiguous():
            raise errors.InvalidArgumentError(
                f"rankd: {what} is not contiguous; pass .contiguous()")
        stream = torch.cuda.current_stream(value.device).cuda_stream
        # torch's default stream is the legacy default stream (handle 0,
        # which the C ABI reads as "no stream").
        return DeviceTensor(value, value.data_ptr(), value.shape,
                            _torch_dtype(torch, value.dtype, what),
                            device=value.device.index,
                            stream=stream or STREAM_LEGACY)
    if hasattr(value, "__cuda_array_interface__"):
        cai = value.__cuda_array_interface__
        pointer, readonly = cai["data"]
        shape = tuple(cai["shape"])
        try:
            dtype = DTYPES[np.dtype(cai["typestr"])]
        except (KeyError, TypeError):
            raise errors.InvalidArgumentError(
                f"rankd: {what} has typestr {cai['typestr']!r}, which rankd "
                "does not carry") from None
        if cai.get("mask") is not None:
            raise errors.InvalidArgumentError(
                f"rankd: {what} has a mask; rankd carries dense tensors only")
        strides = cai.get("strides")
        if strides is not None and \
                not _contiguous(shape, strides, _ITEMSIZE[dtype]):
            raise errors.InvalidArgumentError(
                f"rankd: {what} has strides {tuple(strides)}; rankd needs a "
                "C-contiguous tensor")
        stream = cai.get("stream")
        return DeviceTensor(value, pointer or 0, shape, dtype,
                            stream=stream if stream else None,
                            readonly=bool(readonly))
    if hasattr(value, "__dlpack__") and hasattr(value, "__dlpack_device__"):
        device_type, device_id = value.__dlpack_device__()
        if int(device_type) not in _DL_CUDA:
            raise errors.InvalidArgumentError(
                f"rankd: {what} is a DLPack tensor on device type "
                f"{int(device_type)}; an NCCL session needs a CUDA tensor "
                f"(device type {_DL_CUDA[0]} or {_DL_CUDA[1]})")
        t, read_only, capsule = _dlpack_tensor(value, stream, what)
        shape = tuple(t.shape[i] for i in range(t.ndim))
        key = (t.dtype.code, t.dtype.bits)
        if t.dtype.lanes != 1 or key not in _DL_DTYPES:
            raise errors.InvalidArgumentError(
                f"rankd: {what} has DLPack dtype code {t.dtype.code} bits "
                f"{t.dtype.bits} lanes {t.dtype.lanes}, which rankd does not "
                "carry")
        dtype = _DL_DTYPES[key]
        if t.strides:
            strides = tuple(t.strides[i] * _ITEMSIZE[dtype]
                            for i in range(t.ndim))
            if not _contiguous(shape, strides, _ITEMSIZE[dtype]):
                raise errors.InvalidArgumentError(
                    f"rankd: {what} is not contiguous (DLPack strides "
                    f"{tuple(t.strides[i] for i in range(t.ndim))})")
        # The capsule keeps the producer's memory: its destructor calls the
        # deleter once the capsule goes (it is never renamed "used_").
        return DeviceTensor(value, (t.data or 0) + t.byte_offset, shape,
                            dtype, device=int(device_id), readonly=read_only,
                            keep=(capsule,))
    raise errors.InvalidArgumentError(
        f"rankd: {what} is a {type(value).__name__}; an NCCL session needs a "
        "CUDA tensor (__cuda_array_interface__, DLPack on CUDA, or a CUDA "
        "torch.Tensor)")


def stream_handle(stream):
    """A stream= argument as a cudaStream_t value: None, an int handle, or
    an object with .cuda_stream (torch.cuda.Stream, CuPy) or .ptr."""
    if stream is None:
        return None
    for attribute in ("cuda_stream", "ptr"):
        if hasattr(stream, attribute):
            stream = getattr(stream, attribute)
            break
    try:
        handle = int(stream)
    except (TypeError, ValueError):
        raise errors.InvalidArgumentError(
            f"rankd: stream must be a CUDA stream handle (int) or a stream "
            f"object with .cuda_stream, not {type(stream).__name__}") from None
    # 0 is CUDA's legacy default stream, which the C ABI spells 1 (its NULL
    # means "no stream").
    return handle or STREAM_LEGACY
