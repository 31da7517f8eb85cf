//! `Rank`: this process's membership of its job, through the node's rankd
//! daemon (`rankd_join`). It reads the rank's identity and groups, runs
//! `all_gather_words` rounds, uses the job's key-value broker, hears of a
//! lost peer, and opens data-plane sessions.
//!
//! Ownership: a `Rank` owns its `rankd_rank` handle, freed when the last of
//! the `Rank`, its sessions and their works is dropped (they share it), so
//! no handle outlives what it was made from. Thread safety: the C ABI
//! allows calls from any thread on the same handle, so `Rank` is `Send`
//! and `Sync`.

use std::cell::Cell;
use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int, c_void};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::ptr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::error::{Code, Error, Result};
use crate::ffi;

/// How to reach the node's daemon and what this process says about itself.
/// A field left `None` is taken from the environment the launcher
/// (`rankrun`) sets ($RANKD_TARGET, $RANKD_JOB_ID, $RANKD_LOCAL_RANK,
/// $RANKD_RANK, $RANKD_WORLD_SIZE, $RANKD_TOKEN_FILE, $RANKD_RANK_TOKEN),
/// then from the C
/// ABI's defaults (see `rankd_join_options` in rankd.h).
#[derive(Clone, Debug, Default)]
pub struct JoinOptions {
    /// "unix:///path.sock", "/path.sock", "host:port", ...
    pub target: Option<String>,
    pub job_id: Option<String>,
    pub local_rank: Option<u32>,
    /// The world rank to claim (default: the daemon assigns it).
    pub rank: Option<u32>,
    /// When given, must equal the job's world size.
    pub world_size: Option<u32>,
    /// "cpu" (default) or "cuda".
    pub device_kind: Option<String>,
    pub device_index: Option<i32>,
    /// How long to wait for every rank to join (default 60 s); zero returns
    /// once this rank is registered.
    pub wait_for_world: Option<Duration>,
    /// How long to wait for the daemon to answer (default 10 s).
    pub connect_timeout: Option<Duration>,
    /// A file holding this rank's own token (default: $RANKD_TOKEN_FILE,
    /// else the token in $RANKD_RANK_TOKEN, which rankrun sets).
    pub token_file: Option<PathBuf>,
}

pub(crate) fn c_string(what: &str, s: &str) -> Result<CString> {
    CString::new(s)
        .map_err(|_| Error::invalid_argument(format!("{} contains a NUL byte: {:?}", what, s)))
}

thread_local! {
    // Set while this thread runs a failure callback (call_failure).
    static IN_FAILURE_CALLBACK: Cell<bool> = Cell::new(false);
}

/// A raw handle moved to the thread that frees it.
pub(crate) struct SendPtr<T>(pub(crate) *mut T);
// SAFETY: the C ABI allows freeing a handle from any thread.
unsafe impl<T> Send for SendPtr<T> {}
impl<T> SendPtr<T> {
    pub(crate) fn get(self) -> *mut T {
        self.0
    }
}

/// Runs `free` (the freeing of a library handle) now, or on a thread of its
/// own when this thread is running a failure callback: the library forbids
/// freeing any of its handles there (rankd.h, rankd_on_job_failure), and a
/// callback dropping the last `Rank`, `Session` or `Work` it holds is safe
/// Rust. Freed from another thread, the rank's handle waits for the
/// callback to return before the callback's memory goes.
pub(crate) fn free_handle<F: FnOnce() + Send + 'static>(free: F) {
    if IN_FAILURE_CALLBACK.with(|c| c.get()) {
        std::thread::spawn(free);
    } else {
        free();
    }
}

/// Seconds for the C ABI, which refuses a non-positive or non-finite value
/// itself (naming the argument).
pub(crate) fn seconds(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// One collective group this rank belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    pub id: u32,
    /// "world", "tensor", "pipeline", "expert" or "data".
    pub kind: String,
    /// World ranks, in group order.
    pub members: Vec<u32>,
    /// This rank's index in `members`.
    pub local_rank: u32,
}

/// This rank's identity, fixed at join.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RankDescriptor {
    pub rank: u32,
    pub world_size: u32,
    pub local_rank: u32,
    pub node_index: u32,
    pub nnodes: u32,
    pub nproc_per_node: u32,
    pub job_incarnation: u64,
    /// The parallel layout: tensor x pipeline x expert x data = world size.
    pub tensor_parallel: u32,
    pub pipeline_parallel: u32,
    pub expert_parallel: u32,
    pub data_parallel: u32,
}

/// What a loss does to the job (the daemons' `--recovery`; fixed at join).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recovery {
    /// It fails the job: `job_health` says "job J failed (...)"
    /// (`--recovery=off`).
    Off,
    /// It ends the whole job's epoch ("job J epoch E ended (...)"); the
    /// survivors continue with `rejoin` (`--recovery=on`).
    Job,
    /// It ends only the lost rank's data-parallel replica's epoch
    /// (`--recovery=domain` with data_parallel > 1).
    Domain,
}

/// Recovery by domain (docs/contract.md, "Data-parallel domains"): one
/// data-parallel replica a world round spans and the epoch it served at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DomainEpoch {
    pub domain: u32,
    pub epoch: u64,
}

/// A world round's result and the serving view it was taken in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorldWords {
    /// Rank-major frames of the ranks of `domains` (every rank's unless
    /// `partial`). A domain is a contiguous block of tensor x pipeline x
    /// expert ranks, so rank r's frame is block (index of r's domain in
    /// `domains`), offset r mod that block's size.
    pub words: Vec<u32>,
    /// True when the round did not span every replica (one was recovering).
    pub partial: bool,
    /// The replicas the round spans, ascending, with their epochs; empty
    /// without recovery by domain.
    pub domains: Vec<DomainEpoch>,
}

type FailureCallback = Box<dyn Fn(Error) + Send + Sync>;

/// The shared owner of the `rankd_rank` handle.
pub(crate) struct RankHandle {
    pub(crate) ptr: *mut ffi::rankd_rank,
    // Boxed failure callbacks whose addresses the library holds as
    // user_data; freed only after the handle, once nothing can call them.
    callbacks: Mutex<Vec<*mut FailureCallback>>,
}

// SAFETY: the C ABI allows every call on a handle from any thread; the
// callbacks are Send + Sync.
unsafe impl Send for RankHandle {}
unsafe impl Sync for RankHandle {}

impl Drop for RankHandle {
    fn drop(&mut self) {
        let ptr = SendPtr(self.ptr);
        let callbacks: Vec<SendPtr<FailureCallback>> = self
            .callbacks
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
            .map(SendPtr)
            .collect();
        free_handle(move || {
            // SAFETY: we own the handle; every session and work made from
            // it is gone (they hold this Arc), so the library leaves the
            // job, stops its threads (waiting for a callback running on
            // one: this is never a callback's thread, free_handle) and
            // calls no callback afterwards.
            unsafe { ffi::rankd_rank_free(ptr.get()) };
            for c in callbacks {
                // SAFETY: made by Box::into_raw in on_job_failure.
                drop(unsafe { Box::from_raw(c.get()) });
            }
        });
    }
}

/// A joined rank of a job. See the module documentation for ownership.
pub struct Rank {
    pub(crate) handle: Arc<RankHandle>,
    descriptor: RankDescriptor,
    groups: Vec<Group>,
    job_id: String,
}

impl Rank {
    /// Joins from the launcher's environment alone (`rankd_join(NULL)`).
    pub fn join_from_env() -> Result<Rank> {
        Rank::join(&JoinOptions::default())
    }

    /// Connects to the daemon and joins the job. Errors: InvalidArgument for
    /// bad options or environment (naming the field or variable),
    /// Unavailable naming an unreachable target, DeadlineExceeded naming the
    /// ranks that did not join in time, or the daemon's refusal.
    /// FailedPrecondition, before anything else, when the loaded library's
    /// ABI version is not the one this crate declares.
    pub fn join(options: &JoinOptions) -> Result<Rank> {
        crate::check_abi_version()?;
        let target = options
            .target
            .as_deref()
            .map(|s| c_string("target", s))
            .transpose()?;
        let job_id = options
            .job_id
            .as_deref()
            .map(|s| c_string("job_id", s))
            .transpose()?;
        let device_kind = options
            .device_kind
            .as_deref()
            .map(|s| c_string("device_kind", s))
            .transpose()?;
        let token_file = match &options.token_file {
            // The path's bytes as they are: a lossy conversion would name
            // another file.
            Some(p) => Some(CString::new(p.as_os_str().as_bytes()).map_err(|_| {
                Error::invalid_argument(format!("token_file contains a NUL byte: {:?}", p))
            })?),
            None => None,
        };
        // SAFETY: init writes every field of a struct of the header's layout.
        let mut o: ffi::rankd_join_options = unsafe {
            let mut o = std::mem::MaybeUninit::<ffi::rankd_join_options>::zeroed();
            ffi::rankd_join_options_init(o.as_mut_ptr());
            o.assume_init()
        };
        let opt = |s: &Option<CString>| s.as_ref().map_or(ptr::null(), |c| c.as_ptr());
        o.target = opt(&target);
        o.job_id = opt(&job_id);
        o.device_kind = opt(&device_kind);
        o.token_file = opt(&token_file);
        if let Some(v) = options.local_rank {
            o.local_rank = i64::from(v);
        }
        if let Some(v) = options.rank {
            o.rank = i64::from(v);
        }
        if let Some(v) = options.world_size {
            o.world_size = v;
        }
        if let Some(v) = options.device_index {
            o.device_index = v;
        }
        if let Some(v) = options.wait_for_world {
            o.wait_for_world_seconds = seconds(v);
        }
        if let Some(v) = options.connect_timeout {
            o.connect_timeout_seconds = seconds(v);
        }
        let mut raw: *mut ffi::rankd_rank = ptr::null_mut();
        // SAFETY: the strings live until the call returns; `raw` is written
        // only on success.
        unsafe { Error::check(ffi::rankd_join(&o, &mut raw))? };
        let handle = Arc::new(RankHandle {
            ptr: raw,
            callbacks: Mutex::new(Vec::new()),
        });
        Rank::describe(handle)
    }

    fn describe(handle: Arc<RankHandle>) -> Result<Rank> {
        let mut d = ffi::rankd_descriptor {
            struct_size: std::mem::size_of::<ffi::rankd_descriptor>(),
            ..Default::default()
        };
        // SAFETY: a live handle and a descriptor of the header's layout.
        unsafe { Error::check(ffi::rankd_rank_descriptor(handle.ptr, &mut d))? };
        let mut groups = Vec::with_capacity(d.group_count);
        for i in 0..d.group_count {
            let mut g = ffi::rankd_group {
                id: 0,
                kind: ptr::null(),
                size: 0,
                local_rank: 0,
                members: ptr::null(),
            };
            // SAFETY: as above; `kind` is static and `members` lives as long
            // as the handle; both are copied here.
            unsafe {
                Error::check(ffi::rankd_rank_group(handle.ptr, i, &mut g))?;
                let members = if g.size == 0 {
                    Vec::new()
                } else {
                    std::slice::from_raw_parts(g.members, g.size as usize).to_vec()
                };
                groups.push(Group {
                    id: g.id,
                    kind: CStr::from_ptr(g.kind).to_string_lossy().into_owned(),
                    members,
                    local_rank: g.local_rank,
                });
            }
        }
        // SAFETY: owned by the handle, copied at once.
        let job_id = unsafe {
            let p = ffi::rankd_rank_job_id(handle.ptr);
            if p.is_null() {
                String::new()
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
        Ok(Rank {
            handle,
            descriptor: RankDescriptor {
                rank: d.rank,
                world_size: d.world_size,
                local_rank: d.local_rank,
                node_index: d.node_index,
                nnodes: d.nnodes,
                nproc_per_node: d.nproc_per_node,
                job_incarnation: d.job_incarnation,
                tensor_parallel: d.tensor_parallel,
                pipeline_parallel: d.pipeline_parallel,
                expert_parallel: d.expert_parallel,
                data_parallel: d.data_parallel,
            },
            groups,
            job_id,
        })
    }

    pub fn descriptor(&self) -> &RankDescriptor {
        &self.descriptor
    }
    /// The world rank.
    pub fn rank(&self) -> u32 {
        self.descriptor.rank
    }
    pub fn world_size(&self) -> u32 {
        self.descriptor.world_size
    }
    pub fn local_rank(&self) -> u32 {
        self.descriptor.local_rank
    }
    pub fn job_id(&self) -> &str {
        &self.job_id
    }
    /// Every group this rank belongs to; the world first.
    pub fn groups(&self) -> &[Group] {
        &self.groups
    }
    /// The first group of `kind` ("world", "tensor", ...).
    pub fn group(&self, kind: &str) -> Option<&Group> {
        self.groups.iter().find(|g| g.kind == kind)
    }

    /// One world-wide round: every rank contributes `words` (the same count
    /// on every rank, at most 65536) and gets the rank-major concatenation
    /// (word i of rank r at `r * words.len() + i`). DeadlineExceeded names
    /// the ranks that did not contribute within `timeout`.
    pub fn all_gather_words(&self, words: &[u32], timeout: Duration) -> Result<Vec<u32>> {
        all_gather_words(&self.handle, self.world_size() as usize, words, timeout)
    }

    /// `all_gather_words` that returns a partial round too, with its view:
    /// under the daemons' `--recovery=domain` a world round spans the
    /// data-parallel replicas serving when it ran, and `all_gather_words`
    /// refuses one that did not span them all (FailedPrecondition naming
    /// those it spanned). Same numbering, errors and bounds.
    pub fn all_gather_words_with_view(
        &self,
        words: &[u32],
        timeout: Duration,
    ) -> Result<WorldWords> {
        let capacity = words.len() * self.world_size() as usize;
        let mut out = vec![0u32; capacity];
        let replicas = self.descriptor.data_parallel.max(1) as usize;
        let mut domains = vec![ffi::rankd_domain_epoch::default(); replicas];
        let mut out_words = 0usize;
        let mut partial: c_int = 0;
        let mut domain_count = 0usize;
        // SAFETY: every buffer is valid for the length given with it.
        unsafe {
            Error::check(ffi::rankd_all_gather_words_with_view(
                self.handle.ptr,
                words.as_ptr(),
                words.len(),
                seconds(timeout),
                out.as_mut_ptr(),
                capacity,
                &mut out_words,
                &mut partial,
                domains.as_mut_ptr(),
                replicas,
                &mut domain_count,
            ))?
        };
        out.truncate(out_words);
        Ok(WorldWords {
            words: out,
            partial: partial != 0,
            domains: domains[..domain_count]
                .iter()
                .map(|d| DomainEpoch {
                    domain: d.domain,
                    epoch: d.epoch,
                })
                .collect(),
        })
    }

    /// The bounded form: submits the round now (`round_timeout` bounds it
    /// on the daemon) and returns at once.
    pub fn submit_all_gather_words(
        &self,
        words: &[u32],
        round_timeout: Duration,
    ) -> Result<PendingWords> {
        PendingWords::submit(
            &self.handle,
            self.world_size() as usize,
            words,
            round_timeout,
        )
    }

    /// Sets `key` (1..512 bytes, no NUL) to `value` (at most 1 MiB) in the
    /// job's broker; keys are private to the job's incarnation.
    pub fn kv_set(&self, key: &str, value: &[u8]) -> Result<()> {
        let k = c_string("key", key)?;
        // SAFETY: both buffers are read during the call.
        unsafe {
            Error::check(ffi::rankd_kv_set(
                self.handle.ptr,
                k.as_ptr(),
                value.as_ptr() as *const c_void,
                value.len(),
            ))
        }
    }

    /// Waits at most `timeout` for `key` to exist (DeadlineExceeded naming
    /// the key) and returns its value.
    pub fn kv_get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>> {
        let k = c_string("key", key)?;
        let mut bytes: *mut ffi::rankd_bytes = ptr::null_mut();
        // SAFETY: on success `bytes` is ours; copied, then freed.
        unsafe {
            Error::check(ffi::rankd_kv_get(
                self.handle.ptr,
                k.as_ptr(),
                seconds(timeout),
                &mut bytes,
            ))?;
            let size = ffi::rankd_bytes_size(bytes);
            let value = if size == 0 {
                Vec::new()
            } else {
                std::slice::from_raw_parts(ffi::rankd_bytes_data(bytes), size).to_vec()
            };
            ffi::rankd_bytes_free(bytes);
            Ok(value)
        }
    }

    /// Adds `delta` to the integer at `key` (created as 0); the new value.
    pub fn kv_add(&self, key: &str, delta: i64) -> Result<i64> {
        let k = c_string("key", key)?;
        let mut result = 0i64;
        // SAFETY: plain out-parameter.
        unsafe {
            Error::check(ffi::rankd_kv_add(
                self.handle.ptr,
                k.as_ptr(),
                delta,
                &mut result,
            ))?
        };
        Ok(result)
    }

    /// Deletes `key`; whether it existed.
    pub fn kv_delete(&self, key: &str) -> Result<bool> {
        let k = c_string("key", key)?;
        let mut existed: c_int = 0;
        // SAFETY: plain out-parameter.
        unsafe {
            Error::check(ffi::rankd_kv_delete(
                self.handle.ptr,
                k.as_ptr(),
                &mut existed,
            ))?
        };
        Ok(existed != 0)
    }

    /// How many keys of the job's store start with `prefix` (`""`: every
    /// key, the data plane's own included), as of one moment.
    /// InvalidArgument for a prefix over 512 bytes.
    pub fn kv_count(&self, prefix: &str) -> Result<u64> {
        let p = c_string("prefix", prefix)?;
        let mut count: u64 = 0;
        // SAFETY: plain out-parameter.
        unsafe {
            Error::check(ffi::rankd_kv_count(
                self.handle.ptr,
                p.as_ptr(),
                &mut count,
            ))?
        };
        Ok(count)
    }

    /// `None` while the job is healthy as far as this rank knows, else the
    /// first failure seen (Aborted naming the lost rank or node, Unavailable
    /// when the daemon connection was lost). Never blocks.
    pub fn job_health(&self) -> Option<Error> {
        // SAFETY: the returned status is ours.
        unsafe { Error::check(ffi::rankd_job_health(self.handle.ptr)) }.err()
    }

    /// Calls `callback` once, on a library thread, when the job fails (at
    /// once, on this thread, when it already failed). It must return
    /// quickly; a panic in it aborts the process (it cannot unwind into C).
    /// It may drop the last `Rank`, `Session` or `Work` it holds (they are
    /// then freed on a thread of their own, once it returned). It lives as
    /// long as the rank: a strong reference it holds to this rank or to a
    /// session of it (an `Arc`) is a cycle that keeps the rank joined until
    /// the process ends; hold a `Weak` and upgrade it in the callback.
    pub fn on_job_failure<F>(&self, callback: F) -> Result<()>
    where
        F: Fn(Error) + Send + Sync + 'static,
    {
        let boxed: *mut FailureCallback = Box::into_raw(Box::new(Box::new(callback)));
        // Recorded first: the library may call it before returning.
        self.handle
            .callbacks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(boxed);
        // SAFETY: `boxed` lives until the handle is freed (RankHandle::drop).
        unsafe {
            Error::check(ffi::rankd_on_job_failure(
                self.handle.ptr,
                call_failure,
                boxed as *mut c_void,
            ))
        }
    }

    /// The job epoch this rank joined into (docs/architecture.md, "Epochs
    /// and recovery"): 1 when the job formed, later after `rejoin`. Never
    /// blocks.
    pub fn epoch(&self) -> u64 {
        // SAFETY: a live handle.
        unsafe { ffi::rankd_rank_epoch(self.handle.ptr) }
    }

    /// What a loss does to the job (`Recovery`). Never blocks.
    pub fn recovery(&self) -> Recovery {
        // SAFETY: a live handle.
        match unsafe { ffi::rankd_rank_recovery(self.handle.ptr) } {
            ffi::RANKD_RECOVERY_JOB => Recovery::Job,
            ffi::RANKD_RECOVERY_DOMAIN => Recovery::Domain,
            _ => Recovery::Off,
        }
    }

    /// Enters the job's next epoch after epoch `ended_epoch` ended (a rank
    /// or node was lost under `rankd --recovery=on`; `job_health` names it)
    /// and returns once this rank is joined there and every rank is back.
    /// Returns at once when this rank already joined into a later epoch, so
    /// each user of the rank may call it with the epoch its own failure
    /// named. Afterwards `epoch` is the new epoch, `job_health` is `None`
    /// again, and `all_gather_words` rounds are numbered afresh; the rank,
    /// world size and groups do not change. Sessions opened before are not
    /// re-formed by it.
    ///
    /// Errors: InvalidArgument for a zero timeout; FailedPrecondition after
    /// `leave`; the job's failure (Aborted, or Unavailable when the daemon
    /// connection was lost) at once when no epoch can follow (recovery off,
    /// or its deadline passed); DeadlineExceeded naming the epoch waited
    /// for and the ranks still missing when `timeout` passes. A failed
    /// rejoin may be retried.
    pub fn rejoin(&self, ended_epoch: u64, timeout: Duration) -> Result<()> {
        // SAFETY: a live handle.
        unsafe {
            Error::check(ffi::rankd_rejoin(
                self.handle.ptr,
                ended_epoch,
                seconds(timeout),
            ))
        }
    }

    /// Leaves the job cleanly (peers then do not see this rank as lost).
    /// Idempotent; dropping the last handle leaves too. Drop sessions first.
    pub fn leave(&self) -> Result<()> {
        // SAFETY: a live handle.
        unsafe { Error::check(ffi::rankd_leave(self.handle.ptr)) }
    }
}

/// `Rank::all_gather_words` on a shared handle (sessions use it too).
pub(crate) fn all_gather_words(
    rank: &Arc<RankHandle>,
    world_size: usize,
    words: &[u32],
    timeout: Duration,
) -> Result<Vec<u32>> {
    let capacity = words.len() * world_size;
    let mut out = vec![0u32; capacity];
    // SAFETY: `words` and `out` are valid for their lengths.
    unsafe {
        Error::check(ffi::rankd_all_gather_words(
            rank.ptr,
            words.as_ptr(),
            words.len(),
            seconds(timeout),
            out.as_mut_ptr(),
            capacity,
        ))?
    };
    Ok(out)
}

unsafe extern "C" fn call_failure(
    user_data: *mut c_void,
    code: ffi::rankd_code,
    message: *const c_char,
) {
    let result = std::panic::catch_unwind(|| {
        // SAFETY: user_data is a FailureCallback (on_job_failure), alive
        // until the rank's handle is freed, which waits for this call
        // (free_handle); the message is valid during the call.
        let callback = &*(user_data as *const FailureCallback);
        let message = CStr::from_ptr(message).to_string_lossy().into_owned();
        let outer = IN_FAILURE_CALLBACK.with(|c| c.replace(true));
        callback(Error::new(Code::from_raw(code), message));
        IN_FAILURE_CALLBACK.with(|c| c.set(outer));
    });
    if result.is_err() {
        std::process::abort();
    }
}

impl std::fmt::Debug for Rank {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rank")
            .field("job_id", &self.job_id)
            .field("descriptor", &self.descriptor)
            .finish()
    }
}

/// A submitted all_gather_words round (`Rank::submit_all_gather_words`).
/// Dropping it before it resolved cancels the round (later rounds then
/// fail, as after any failed round).
pub struct PendingWords {
    ptr: *mut ffi::rankd_pending_words,
    capacity: usize,
    _rank: Arc<RankHandle>,
}

// SAFETY: the C ABI allows these calls from any thread.
unsafe impl Send for PendingWords {}
unsafe impl Sync for PendingWords {}

impl PendingWords {
    pub(crate) fn submit(
        rank: &Arc<RankHandle>,
        world_size: usize,
        words: &[u32],
        round_timeout: Duration,
    ) -> Result<PendingWords> {
        let mut raw = ptr::null_mut();
        // SAFETY: `words` is read during the call.
        unsafe {
            Error::check(ffi::rankd_submit_all_gather_words(
                rank.ptr,
                words.as_ptr(),
                words.len(),
                seconds(round_timeout),
                &mut raw,
            ))?
        };
        Ok(PendingWords {
            ptr: raw,
            capacity: words.len() * world_size,
            _rank: Arc::clone(rank),
        })
    }

    /// Whether the round finished (successfully or not). Never blocks.
    pub fn is_ready(&self) -> bool {
        // SAFETY: a live handle.
        unsafe { ffi::rankd_pending_words_is_ready(self.ptr) != 0 }
    }

    /// Waits at most `timeout` for the round's words. DeadlineExceeded with
    /// `is_wait_timeout()` when the wait timed out: the round stays in
    /// flight and may be waited for again.
    pub fn wait(&self, timeout: Duration) -> Result<Vec<u32>> {
        let mut out = vec![0u32; self.capacity];
        // SAFETY: `out` holds `capacity` words.
        unsafe {
            Error::check(ffi::rankd_pending_words_wait(
                self.ptr,
                seconds(timeout),
                out.as_mut_ptr(),
                self.capacity,
            ))?
        };
        Ok(out)
    }
}

impl Drop for PendingWords {
    fn drop(&mut self) {
        let ptr = SendPtr(self.ptr);
        // Kept until the round is freed: the rank goes after it.
        let rank = Arc::clone(&self._rank);
        free_handle(move || {
            // SAFETY: ours, freed once.
            unsafe { ffi::rankd_pending_words_free(ptr.get()) };
            drop(rank);
        });
    }
}
