"""Device arrays for the NCCL tests without a GPU: the CPU stand-in for
the CUDA runtime and NCCL (//dataplane/nccl:libcuda_nccl_standin.so, the
library rank processes name in $RANKD_CUDART_LIBRARY and
$RANKD_NCCL_LIBRARY) allocates "device" memory that is host memory, so a
test can fill and read it directly while rankd takes it for CUDA memory.

    cuda = StandinCuda()               # the library rankd loaded
    x = FakeDeviceArray(cuda, (4,), np.float32, stream=cuda.stream())
    x.host[:] = ...                    # numpy view of the "device" memory
    session.all_reduce_sum(x, out=y)   # through __cuda_array_interface__

FakeDLPackArray offers the same memory through DLPack only, as a DLPack 1.x
producer (versioned capsules) or one from before it.
"""

import ctypes
import os

import numpy as np


class StandinCuda:
    """The CUDA runtime functions the tests call, from the stand-in."""

    def __init__(self, path=None):
        path = path or os.environ["RANKD_CUDART_LIBRARY"]
        self.lib = ctypes.CDLL(os.path.abspath(path))
        L = self.lib
        for name, args in (
                ("cudaSetDevice", [ctypes.c_int]),
                ("cudaMalloc", [ctypes.POINTER(ctypes.c_void_p),
                                ctypes.c_size_t]),
                ("cudaFree", [ctypes.c_void_p]),
                ("cudaStreamCreateWithFlags",
                 [ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint]),
                ("cudaStreamDestroy", [ctypes.c_void_p]),
                ("cudaStreamSynchronize", [ctypes.c_void_p]),
                ("cudaLaunchHostFunc", [ctypes.c_void_p, ctypes.c_void_p,
                                        ctypes.c_void_p])):
            fn = getattr(L, name)
            fn.argtypes = args
            fn.restype = ctypes.c_int
        self._holds = []

    def check(self, error, what):
        if error != 0:
            raise RuntimeError(f"{what}: CUDA error {error}")

    def set_device(self, device):
        self.check(self.lib.cudaSetDevice(device), "cudaSetDevice")

    def malloc(self, nbytes):
        p = ctypes.c_void_p()
        self.check(self.lib.cudaMalloc(ctypes.byref(p), max(nbytes, 1)),
                   "cudaMalloc")
        return p.value

    def free(self, pointer):
        self.check(self.lib.cudaFree(pointer), "cudaFree")

    def stream(self):
        s = ctypes.c_void_p()
        self.check(self.lib.cudaStreamCreateWithFlags(ctypes.byref(s), 1),
                   "cudaStreamCreateWithFlags")
        return s.value

    def synchronize(self, stream):
        self.check(self.lib.cudaStreamSynchronize(stream),
                   "cudaStreamSynchronize")

    def hold(self, stream, event):
        """Holds `stream` until `event` (a threading.Event) is set."""
        fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(
            lambda _: event.wait(30))
        self._holds.append(fn)  # lives as long as this object
        self.check(self.lib.cudaLaunchHostFunc(
            stream, ctypes.cast(fn, ctypes.c_void_p), None),
            "cudaLaunchHostFunc")


class FakeDeviceArray:
    """Stand-in device memory behind __cuda_array_interface__ (version 3);
    `host` is a numpy view of it."""

    def __init__(self, cuda, shape, dtype, stream=None, strides=None):
        self.cuda = cuda
        self.dtype = np.dtype(dtype)
        self.shape = tuple(shape)
        nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        self.pointer = cuda.malloc(nbytes)
        buffer = (ctypes.c_char * max(nbytes, 1)).from_address(self.pointer)
        self.host = np.frombuffer(buffer, dtype=self.dtype,
                                  count=nbytes // self.dtype.itemsize) \
            .reshape(self.shape)
        self.stream = stream
        self.strides = strides

    @property
    def __cuda_array_interface__(self):
        cai = {"shape": self.shape, "typestr": self.dtype.str,
               "data": (self.pointer, False), "version": 3,
               "strides": self.strides}
        if self.stream is not None:
            cai["stream"] = self.stream
        return cai

    def __del__(self):
        if getattr(self, "pointer", None):
            self.cuda.free(self.pointer)
            self.pointer = None


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


DLPACK_FLAG_READ_ONLY = 1

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]

_DL_CODES = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}


class FakeDLPackArray:
    """The memory of `array` (a FakeDeviceArray, or anything with .pointer,
    .shape and .dtype) through DLPack only (kDLCUDA, device `device`), with
    no deleter (the array owns the memory).

    versioned: a DLPack 1.x producer (__dlpack__ takes max_version and
    gives a "dltensor_versioned" capsule of DLPack `version` with `flags`);
    False: one from before DLPack 1.0 (no max_version; "dltensor").
    `streams` records the stream= of every __dlpack__ call."""

    def __init__(self, array, device=0, versioned=True, version=(1, 1),
                 flags=0):
        self.array = array
        self.device = device
        self.versioned = versioned
        self.streams = []
        n = len(array.shape)
        self._shape = (ctypes.c_int64 * max(n, 1))(*array.shape)
        d = np.dtype(array.dtype)
        tensor = _DLTensor(
            array.pointer, _DLDevice(2, device), n,
            _DLDataType(_DL_CODES[d.kind], d.itemsize * 8, 1),
            ctypes.cast(self._shape, ctypes.POINTER(ctypes.c_int64)), None, 0)
        if versioned:
            self._managed = _DLManagedTensorVersioned(
                _DLPackVersion(*version), None, None, flags, tensor)
        else:
            self._managed = _DLManagedTensor(tensor, None, None)

    def __dlpack_device__(self):
        return (2, self.device)

    def __dlpack__(self, stream=None, **kwargs):
        if not self.versioned and kwargs:
            raise TypeError(f"__dlpack__() got unexpected keywords {kwargs}")
        self.streams.append(stream)
        address = ctypes.addressof(self._managed)
        if self.versioned and kwargs.get("max_version", (0, 0))[0] >= 1:
            return _capsule_new(address, b"dltensor_versioned", None)
        if self.versioned:  # asked for no version: the unversioned struct
            self._legacy = _DLManagedTensor(self._managed.dl_tensor, None,
                                            None)
            address = ctypes.addressof(self._legacy)
        return _capsule_new(address, b"dltensor", None)
