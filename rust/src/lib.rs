//! rankd for Rust: join a rankd job, exchange scheduling metadata and
//! bootstrap blobs, hear of a lost peer, and run Gloo host-memory
//! collectives through the data-plane contract's `DistributedSession`
//! (docs/contract.md), all over the C ABI (`rankd/rankd.h`, librankd.so).
//!
//! ```no_run
//! use rankd::{CollectiveScope, DistributedSession, HostTensor, Rank, SessionOptions};
//! use std::time::Duration;
//!
//! let rank = Rank::join_from_env()?; // the environment rankrun sets
//! let session = rank.open_session(&SessionOptions::default())?;
//! let x = HostTensor::from_vec(vec![1.0f32, 2.0]);
//! let sum = session
//!     .all_reduce_sum(CollectiveScope::World, &x)?
//!     .wait_timeout(Duration::from_secs(30))?;
//! println!("{:?}", sum.to_vec::<f32>()?);
//! # Ok::<(), rankd::Error>(())
//! ```
//!
//! Modules: [`contract`] (the traits and types, backend-neutral), [`ffi`]
//! (the raw C declarations), and the safe wrappers re-exported here:
//! [`Rank`], [`Session`], [`Work`], [`HostTensor`], [`Error`].

pub mod contract;
mod error;
pub mod ffi;
mod rank;
mod session;
mod tensor;

pub use contract::{
    BoundedCompletion, CancellationMode, CollectiveGroupDescriptor, CollectiveGroupId,
    CollectiveScope, Completion, DescriptorError, DistributedCapabilities, DistributedSession,
    DistributedSessionDescriptor, PeerValue, Submission, TensorDtype, ValueDescriptor, WaitOutcome,
    WORLD_GROUP_ID,
};
pub use error::{Code, Error, Result};
pub use rank::{
    DomainEpoch, Group, JoinOptions, PendingWords, Rank, RankDescriptor, Recovery, WorldWords,
};
pub use session::{Session, SessionOptions, Work};
pub use tensor::{Element, HostTensor};

/// The ABI version of the loaded librankd.so (`rankd_abi_version()`).
pub fn abi_version() -> u32 {
    // SAFETY: no arguments, no state.
    unsafe { ffi::rankd_abi_version() }
}

/// Refuses a loaded library of another ABI version than the one [`ffi`]
/// declares (FailedPrecondition naming both).
pub fn check_abi_version() -> Result<()> {
    let loaded = abi_version();
    if loaded == ffi::RANKD_ABI_VERSION {
        Ok(())
    } else {
        Err(Error::new(
            Code::FailedPrecondition,
            format!(
                "librankd.so has ABI version {}; this crate was written for {}",
                loaded,
                ffi::RANKD_ABI_VERSION
            ),
        ))
    }
}
