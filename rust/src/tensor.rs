//! `HostTensor`: the Gloo session's value, a dense row-major tensor in host
//! memory (dtype, shape, bytes).
//!
//! A `HostTensor` is a handle: `clone` shares the same storage (use
//! [`HostTensor::deep_copy`] for a copy). The storage is shared with the
//! work that writes it, which is what keeps a submitted output alive until
//! its work is freed, however the caller drops its own handles. The library
//! writes a Gloo output only while the work's success is first observed
//! (inside `is_complete`, `wait` or `wait_bounded`), and those calls hold
//! the storage's lock, so reading a tensor (which takes the lock too) never
//! races a write; it blocks while a wait on the work writing it runs.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::contract::{TensorDtype, ValueDescriptor};
use crate::error::{Error, Result};

/// Element types with a Rust counterpart: constructors and typed
/// accessors of [`HostTensor`]. Sealed: implemented for bool (one byte,
/// 0 or 1), f32, f64 and the integers; f16, bf16 and complex64 values go in
/// and out as bytes ([`HostTensor::from_bytes`], [`HostTensor::to_bytes`]).
pub trait Element: Copy + sealed::Sealed + 'static {
    const DTYPE: TensorDtype;
    #[doc(hidden)]
    fn write(self, out: &mut [u8]);
    #[doc(hidden)]
    fn read(bytes: &[u8]) -> Self;
}

mod sealed {
    pub trait Sealed {}
}

macro_rules! numeric_element {
    ($($t:ty => $d:ident),* $(,)?) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: TensorDtype = TensorDtype::$d;
            fn write(self, out: &mut [u8]) {
                out.copy_from_slice(&self.to_ne_bytes());
            }
            fn read(bytes: &[u8]) -> Self {
                let mut b = [0u8; std::mem::size_of::<$t>()];
                b.copy_from_slice(bytes);
                <$t>::from_ne_bytes(b)
            }
        }
    )*};
}

numeric_element!(
    f32 => F32, f64 => F64,
    i8 => I8, i16 => I16, i32 => I32, i64 => I64,
    u8 => U8, u16 => U16, u32 => U32, u64 => U64,
);

impl sealed::Sealed for bool {}
impl Element for bool {
    const DTYPE: TensorDtype = TensorDtype::Bool;
    fn write(self, out: &mut [u8]) {
        out[0] = self as u8;
    }
    fn read(bytes: &[u8]) -> Self {
        bytes[0] != 0
    }
}

/// Bytes kept in 8-byte words, so that every dtype's elements are aligned
/// for the library.
pub(crate) struct Buffer {
    words: Vec<u64>,
    len: usize,
}

impl Buffer {
    fn zeroed(len: usize) -> Buffer {
        Buffer {
            words: vec![0u64; (len + 7) / 8],
            len,
        }
    }
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: `words` holds at least `len` initialized bytes.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr() as *const u8, self.len) }
    }
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` makes the view unique.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr() as *mut u8, self.len) }
    }
}

pub(crate) type Storage = Arc<Mutex<Buffer>>;

/// Locks a storage, ignoring poisoning: the bytes stay valid whatever a
/// panicking reader did.
pub(crate) fn lock(storage: &Storage) -> MutexGuard<'_, Buffer> {
    storage.lock().unwrap_or_else(|e| e.into_inner())
}

/// A dense row-major host tensor; the empty shape is a scalar. Only the
/// leading extent may be 0: a tensor of no rows is valid for every
/// operation and pairs like any other (docs/contract.md, "Empty values").
#[derive(Clone)]
pub struct HostTensor {
    dtype: TensorDtype,
    shape: Vec<usize>,
    pub(crate) storage: Storage,
}

fn check_shape(dtype: TensorDtype, shape: &[usize]) -> Result<usize> {
    if let Some(i) = shape.iter().skip(1).position(|&d| d == 0) {
        return Err(Error::invalid_argument(format!(
            "HostTensor: dimension {} of {}{:?} is zero; only the leading extent may be 0",
            i + 1,
            dtype,
            shape
        )));
    }
    shape
        .iter()
        .try_fold(dtype.size(), |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| {
            Error::invalid_argument(format!("HostTensor: {}{:?} is too large", dtype, shape))
        })
}

impl HostTensor {
    /// A zero-filled tensor.
    pub fn zeros(dtype: TensorDtype, shape: &[usize]) -> Result<HostTensor> {
        let len = check_shape(dtype, shape)?;
        Ok(HostTensor {
            dtype,
            shape: shape.to_vec(),
            storage: Arc::new(Mutex::new(Buffer::zeroed(len))),
        })
    }

    /// A zero-filled tensor of `descriptor`.
    pub fn zeros_like(descriptor: &ValueDescriptor) -> HostTensor {
        // A ValueDescriptor is always a valid shape.
        HostTensor::zeros(descriptor.dtype(), descriptor.shape())
            .expect("a ValueDescriptor's shape is valid")
    }

    /// A 1-D tensor holding `values`.
    pub fn from_slice<T: Element>(values: &[T]) -> HostTensor {
        HostTensor::with_shape(&[values.len()], values).expect("a 1-D shape is valid")
    }

    /// A 1-D tensor holding `values`.
    pub fn from_vec<T: Element>(values: Vec<T>) -> HostTensor {
        HostTensor::from_slice(&values)
    }

    /// A scalar (shape `[]`).
    pub fn scalar<T: Element>(value: T) -> HostTensor {
        HostTensor::with_shape(&[], &[value]).expect("a scalar shape is valid")
    }

    /// `values` (row-major) shaped as `shape`; their count must match.
    pub fn with_shape<T: Element>(shape: &[usize], values: &[T]) -> Result<HostTensor> {
        let t = HostTensor::zeros(T::DTYPE, shape)?;
        if t.element_count() != values.len() {
            return Err(Error::invalid_argument(format!(
                "HostTensor: {} values for shape {:?} ({} elements)",
                values.len(),
                shape,
                t.element_count()
            )));
        }
        {
            let mut b = lock(&t.storage);
            let size = T::DTYPE.size();
            for (v, out) in values.iter().zip(b.bytes_mut().chunks_exact_mut(size)) {
                v.write(out);
            }
        }
        Ok(t)
    }

    /// Raw native-endian bytes of any dtype (f16, bf16, complex64, ...);
    /// their count must be the shape's byte size.
    pub fn from_bytes(dtype: TensorDtype, shape: &[usize], bytes: &[u8]) -> Result<HostTensor> {
        let t = HostTensor::zeros(dtype, shape)?;
        if t.byte_size() != bytes.len() {
            return Err(Error::invalid_argument(format!(
                "HostTensor: {} bytes for {}{:?} ({} bytes)",
                bytes.len(),
                dtype,
                shape,
                t.byte_size()
            )));
        }
        lock(&t.storage).bytes_mut().copy_from_slice(bytes);
        Ok(t)
    }

    pub fn dtype(&self) -> TensorDtype {
        self.dtype
    }
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    pub fn element_count(&self) -> usize {
        self.shape.iter().product()
    }
    pub fn byte_size(&self) -> usize {
        self.element_count() * self.dtype.size()
    }

    /// The contract's descriptor (shape and dtype).
    pub fn descriptor(&self) -> ValueDescriptor {
        // Both follow the same rule, so a tensor's shape is a descriptor's.
        ValueDescriptor::new(self.shape.clone(), self.dtype).expect("a HostTensor's shape is valid")
    }

    /// The elements, row-major; InvalidArgument unless `T` is the dtype.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        if T::DTYPE != self.dtype {
            return Err(Error::invalid_argument(format!(
                "HostTensor::to_vec: the tensor holds {}, not {}",
                self.dtype,
                T::DTYPE
            )));
        }
        let b = lock(&self.storage);
        Ok(b.bytes()
            .chunks_exact(self.dtype.size())
            .map(T::read)
            .collect())
    }

    /// A copy of the bytes, native-endian.
    pub fn to_bytes(&self) -> Vec<u8> {
        lock(&self.storage).bytes().to_vec()
    }

    /// Calls `f` with the bytes, without copying them. Do not wait on work
    /// writing this tensor inside `f` (it would wait for this lock).
    pub fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        f(lock(&self.storage).bytes())
    }

    /// Overwrites the elements (e.g. to reuse an input); InvalidArgument
    /// unless `T` is the dtype and the counts match.
    pub fn copy_from<T: Element>(&self, values: &[T]) -> Result<()> {
        if T::DTYPE != self.dtype || values.len() != self.element_count() {
            return Err(Error::invalid_argument(format!(
                "HostTensor::copy_from: {} {} values into {}{:?}",
                values.len(),
                T::DTYPE,
                self.dtype,
                self.shape
            )));
        }
        let mut b = lock(&self.storage);
        let size = self.dtype.size();
        for (v, out) in values.iter().zip(b.bytes_mut().chunks_exact_mut(size)) {
            v.write(out);
        }
        Ok(())
    }

    /// A tensor with its own storage holding the same values.
    pub fn deep_copy(&self) -> HostTensor {
        HostTensor::from_bytes(self.dtype, &self.shape, &self.to_bytes())
            .expect("same shape, same size")
    }

    /// Whether both share one storage (then one is an alias of the other).
    pub fn shares_storage(&self, other: &HostTensor) -> bool {
        Arc::ptr_eq(&self.storage, &other.storage)
    }
}

impl<T: Element> From<Vec<T>> for HostTensor {
    fn from(values: Vec<T>) -> HostTensor {
        HostTensor::from_vec(values)
    }
}

impl<T: Element> From<&[T]> for HostTensor {
    fn from(values: &[T]) -> HostTensor {
        HostTensor::from_slice(values)
    }
}

impl fmt::Debug for HostTensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HostTensor({}{:?})", self.dtype, self.shape)
    }
}
