"""Device arrays for the NCCL tests without a GPU: the CPU stand-in for
the CUDA runtime and NCCL (//dataplane/nccl:libcuda_nccl_standin.so, the
library rank processes name in $RANKD_CUDART_LIBRARY and
$RANKD_NCCL_LIBRARY) allocates "device" memory that is host memory, so a
test can fill and read it directly while rankd takes it for CUDA memory.

    cuda = StandinCuda()               # the library rankd loaded
    x = FakeDeviceArray(cuda, (4,), np.float32, stream=cuda.stream())
    x.host[:] = ...                    # numpy view of the "device" memory
    session.all_reduce_sum(x, out=y)   # through __cuda_array_interface__

FakeDLPackArray offers the same memory through DLPack only.
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


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]

_DL_CODES = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}


class FakeDLPackArray:
    """The memory of a FakeDeviceArray through DLPack only (kDLCUDA,
    device `device`), with no deleter (the array owns the memory)."""

    def __init__(self, array, device=0):
        self.array = array
        self.device = device
        n = len(array.shape)
        self._shape = (ctypes.c_int64 * max(n, 1))(*array.shape)
        d = array.dtype
        self._managed = _DLManagedTensor(
            _DLTensor(array.pointer, _DLDevice(2, device), n,
                      _DLDataType(_DL_CODES[d.kind], d.itemsize * 8, 1),
                      ctypes.cast(self._shape, ctypes.POINTER(ctypes.c_int64)),
                      None, 0), None, None)

    def __dlpack_device__(self):
        return (2, self.device)

    def __dlpack__(self, stream=None):
        return _capsule_new(ctypes.addressof(self._managed), b"dltensor", None)
