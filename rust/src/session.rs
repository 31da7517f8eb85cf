//! `Session`: a Gloo data-plane session over host memory
//! (`rankd_session_open`), implementing the contract's
//! `DistributedSession` with `HostTensor` values, and `Work`, its
//! `Completion` and `BoundedCompletion`.
//!
//! Ownership: a `Session` owns its `rankd_session` handle and keeps its
//! rank's handle alive; a `Work` owns its `rankd_work` handle and keeps its
//! session and every output it writes alive until it is dropped (the C ABI
//! writes a Gloo output only while a `Work` call observes success, never
//! after the handle is freed). Inputs are copied during the submitting
//! call, so they may be reused at once. Thread safety: the C ABI allows
//! every call from any thread, so `Session` and `Work` are `Send + Sync`.

use std::ffi::CString;
use std::os::raw::{c_char, c_void};
use std::ptr;
use std::sync::{Arc, MutexGuard, TryLockError};
use std::time::Duration;

use crate::contract::{
    BoundedCompletion, CancellationMode, CollectiveGroupDescriptor, CollectiveScope, Completion,
    DistributedCapabilities, DistributedSession, DistributedSessionDescriptor, PeerValue,
    Submission, TensorDtype, ValueDescriptor, WaitOutcome,
};
use crate::error::{Error, Result};
use crate::ffi;
use crate::rank::{
    all_gather_words, c_string, free_handle, seconds, PendingWords, Rank, RankHandle, SendPtr,
};
use crate::tensor::{lock, Buffer, HostTensor, Storage};

/// How to open a session. The backend is always Gloo (host memory):
/// `$RANKD_BACKEND` is not consulted, since `HostTensor` is host memory.
#[derive(Clone, Debug)]
pub struct SessionOptions {
    /// Every operation must complete within this (default 60 s).
    pub op_timeout: Option<Duration>,
    /// Members compare each operation's description before moving data and
    /// refuse disagreeing work on every member.
    pub verify_agreement: bool,
    /// The address peers reach this rank's transport at. Default:
    /// $RANKD_GLOO_HOSTNAME, else $POD_IP, else 127.0.0.1.
    pub gloo_hostname: Option<String>,
    /// The deadline of `DistributedSession::all_gather_words`, which takes
    /// none (default 60 s).
    pub words_timeout: Duration,
    /// Narrows what the session advertises and serves, as C++'s
    /// `GlooSessionOptions::restrict_capabilities`: with `Some(allow)` the
    /// session has only what both Gloo can do and `allow` allows (each
    /// flag, and the groups in `allow.collective_groups`); everything else
    /// fails closed with `Code::Unimplemented` naming the capability
    /// ("gloo backend: send needs capability 'point_to_point', which this
    /// backend does not advertise"), and without `exact_completion` works
    /// do not offer `QuarantineUntilComplete`. `None` (the default)
    /// narrows nothing.
    pub restrict_capabilities: Option<DistributedCapabilities>,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            op_timeout: None,
            verify_agreement: false,
            gloo_hostname: None,
            words_timeout: Duration::from_secs(60),
            restrict_capabilities: None,
        }
    }
}

pub(crate) struct SessionHandle {
    ptr: *mut ffi::rankd_session,
    rank: Arc<RankHandle>,
}

// SAFETY: the C ABI allows every call on a handle from any thread.
unsafe impl Send for SessionHandle {}
unsafe impl Sync for SessionHandle {}

impl Drop for SessionHandle {
    fn drop(&mut self) {
        let ptr = SendPtr(self.ptr);
        // Kept until the session is freed, where free_handle defers that:
        // the rank is freed after its sessions, on whichever thread.
        let rank = Arc::clone(&self.rank);
        free_handle(move || {
            // SAFETY: ours; every work made from it is gone (they hold this
            // Arc).
            unsafe { ffi::rankd_session_free(ptr.get()) };
            drop(rank);
        });
    }
}

/// A Gloo session of one rank. Every rank of the job opens one; finish the
/// data-plane work on every rank (for example with a last
/// `all_gather_words` round) before dropping it.
pub struct Session {
    handle: Arc<SessionHandle>,
    descriptor: DistributedSessionDescriptor,
    world_size: usize,
    words_timeout: Duration,
}

pub(crate) fn dtype_raw(dtype: TensorDtype) -> i32 {
    // rankd_dtype's values are TensorDtype::ALL's order.
    TensorDtype::ALL.iter().position(|&d| d == dtype).unwrap() as i32
}

fn mode_raw(mode: CancellationMode) -> i32 {
    match mode {
        CancellationMode::QuarantineUntilComplete => ffi::RANKD_QUARANTINE_UNTIL_COMPLETE,
        CancellationMode::NativeCancel => ffi::RANKD_NATIVE_CANCEL,
    }
}

/// The locks of every distinct storage an operation touches, taken in
/// address order (so two threads never take them in opposite orders), and
/// the C views of its tensors.
struct Operands<'a> {
    guards: Vec<(*const (), MutexGuard<'a, Buffer>)>,
}

impl<'a> Operands<'a> {
    fn lock(tensors: &[&'a HostTensor]) -> Operands<'a> {
        let mut storages: Vec<&'a Storage> = tensors.iter().map(|t| &t.storage).collect();
        storages.sort_by_key(|s| Arc::as_ptr(s) as *const () as usize);
        storages.dedup_by_key(|s| Arc::as_ptr(s) as *const () as usize);
        Operands {
            guards: storages
                .into_iter()
                .map(|s| (Arc::as_ptr(s) as *const (), lock(s)))
                .collect(),
        }
    }

    fn view(&mut self, t: &HostTensor) -> ffi::rankd_tensor {
        let key = Arc::as_ptr(&t.storage) as *const ();
        let guard = &mut self
            .guards
            .iter_mut()
            .find(|(k, _)| *k == key)
            .expect("every operand was locked")
            .1;
        ffi::rankd_tensor {
            data: guard.bytes_mut().as_mut_ptr() as *mut c_void,
            dtype: dtype_raw(t.dtype()),
            ndim: t.shape().len(),
            shape: t.shape().as_ptr(),
        }
    }
}

impl Rank {
    /// Opens this rank's Gloo session; blocks until the data plane is
    /// connected to every peer (every rank must open one).
    /// DeadlineExceeded names peers that never connected.
    pub fn open_session(&self, options: &SessionOptions) -> Result<Session> {
        let hostname = options
            .gloo_hostname
            .as_deref()
            .map(|h| c_string("gloo_hostname", h))
            .transpose()?;
        // SAFETY: init writes every field of a struct of the header's layout.
        let mut o: ffi::rankd_session_options = unsafe {
            let mut o = std::mem::MaybeUninit::<ffi::rankd_session_options>::zeroed();
            ffi::rankd_session_options_init(o.as_mut_ptr());
            o.assume_init()
        };
        o.backend = ffi::RANKD_BACKEND_GLOO;
        if let Some(t) = options.op_timeout {
            o.op_timeout_seconds = seconds(t);
        }
        o.verify_agreement = options.verify_agreement as i32;
        o.gloo_hostname = hostname
            .as_ref()
            .map_or(ptr::null(), |h: &CString| h.as_ptr());
        // Read by rankd_session_open only: they live until it returned.
        let mut allow = ffi::rankd_capabilities {
            struct_size: std::mem::size_of::<ffi::rankd_capabilities>(),
            ..Default::default()
        };
        let mut groups: Vec<u32> = Vec::new();
        if let Some(r) = &options.restrict_capabilities {
            allow.world_collectives = r.world_collectives as i32;
            allow.point_to_point = r.point_to_point as i32;
            allow.variable_all_to_all = r.variable_all_to_all as i32;
            allow.exact_completion = r.exact_completion as i32;
            groups.extend(r.collective_groups.iter().copied());
            o.restrict_capabilities = &allow;
            // Never null, even when empty: an empty list allows no group.
            o.restrict_groups = groups.as_ptr();
            o.restrict_group_count = groups.len();
        }
        let mut raw = ptr::null_mut();
        // SAFETY: a live rank handle; `o` and what it points to outlive the
        // call; `raw` is written only on success.
        unsafe { Error::check(ffi::rankd_session_open(self.handle.ptr, &o, &mut raw))? };
        let handle = Arc::new(SessionHandle {
            ptr: raw,
            rank: Arc::clone(&self.handle),
        });
        let d = self.descriptor();
        let groups = self
            .groups()
            .iter()
            .map(|g| CollectiveGroupDescriptor::new(g.id, g.members.clone(), g.local_rank, d.rank))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let mut descriptor = DistributedSessionDescriptor::new(d.world_size, d.rank, groups)?;
        descriptor.set_node_placement(d.local_rank, d.nproc_per_node)?;
        Ok(Session {
            handle,
            descriptor,
            world_size: d.world_size as usize,
            words_timeout: options.words_timeout,
        })
    }
}

/// The C ABI's signature of rankd_all_reduce_sum and rankd_all_gather.
type CollectiveFn = unsafe extern "C" fn(
    *mut ffi::rankd_session,
    u32,
    *const ffi::rankd_tensor,
    *const ffi::rankd_tensor,
    *mut c_void,
    *mut *mut ffi::rankd_work,
) -> *mut ffi::rankd_status;

/// The C ABI's signature of rankd_send and rankd_receive.
type TransferFn = unsafe extern "C" fn(
    *mut ffi::rankd_session,
    u32,
    usize,
    *const ffi::rankd_tensor,
    *mut c_void,
    *mut *mut ffi::rankd_work,
) -> *mut ffi::rankd_status;

/// The C ABI's signature of rankd_session_poison and rankd_session_abort.
type LatchFn =
    unsafe extern "C" fn(*mut ffi::rankd_session, i32, *const c_char) -> *mut ffi::rankd_status;

/// Whether a transfer's tensor is read during the call (a send) or written
/// by the work (a receive).
#[derive(Clone, Copy)]
enum Direction {
    Send,
    Receive,
}

impl Session {
    /// The session's member count on `scope`; None when this rank is not in
    /// it (the library then refuses with NotFound).
    fn members(&self, scope: CollectiveScope) -> Option<usize> {
        self.descriptor
            .scope_group(scope)
            .map(|g| g.members().len())
    }

    fn work(&self, raw: *mut ffi::rankd_work, outputs: &[&HostTensor]) -> Work {
        let mut storages: Vec<Storage> = outputs.iter().map(|t| Arc::clone(&t.storage)).collect();
        storages.sort_by_key(|s| Arc::as_ptr(s) as *const () as usize);
        storages.dedup_by_key(|s| Arc::as_ptr(s) as *const () as usize);
        Work {
            ptr: raw,
            outputs: storages,
            _session: Arc::clone(&self.handle),
        }
    }

    /// Submits one operation: locks the storages of `inputs` and `outputs`
    /// (each once, in address order), hands `call` their views (inputs
    /// first, then outputs, in order) and the place for the work handle,
    /// and returns the work, which retains the outputs' storages. `call`
    /// makes the C ABI call and returns its status.
    fn submit<F>(&self, inputs: &[&HostTensor], outputs: &[&HostTensor], call: F) -> Result<Work>
    where
        F: FnOnce(&[ffi::rankd_tensor], &mut *mut ffi::rankd_work) -> *mut ffi::rankd_status,
    {
        let all: Vec<&HostTensor> = inputs.iter().chain(outputs).copied().collect();
        let mut ops = Operands::lock(&all);
        let views: Vec<ffi::rankd_tensor> = all.iter().map(|t| ops.view(t)).collect();
        let mut raw = ptr::null_mut();
        // SAFETY: the views point into storages locked until the call
        // returned (inputs are copied during it); the work retains the
        // outputs' storages for what the library writes later.
        unsafe { Error::check(call(&views, &mut raw))? };
        drop(ops);
        Ok(self.work(raw, outputs))
    }

    /// A collective of one input and one output (all_reduce_sum,
    /// all_gather): `call` is its C ABI function.
    fn collective_into(
        &self,
        call: CollectiveFn,
        scope: CollectiveScope,
        input: &HostTensor,
        output: &HostTensor,
    ) -> Result<Submission<HostTensor, Work>> {
        let completion = self.submit(&[input], &[output], |v, raw| {
            // SAFETY: see submit.
            unsafe {
                call(
                    self.handle.ptr,
                    scope.group_id(),
                    &v[0],
                    &v[1],
                    ptr::null_mut(),
                    raw,
                )
            }
        })?;
        Ok(Submission {
            output: output.clone(),
            completion,
        })
    }

    /// A send or a receive of `value` with member `peer`: `call` is its C
    /// ABI function. The submission's output is `value`.
    fn transfer(
        &self,
        call: TransferFn,
        direction: Direction,
        scope: CollectiveScope,
        peer: usize,
        value: &HostTensor,
    ) -> Result<Submission<HostTensor, Work>> {
        let (one, none): ([&HostTensor; 1], [&HostTensor; 0]) = ([value], []);
        let (inputs, outputs): (&[&HostTensor], &[&HostTensor]) = match direction {
            Direction::Send => (&one, &none),
            Direction::Receive => (&none, &one),
        };
        let completion = self.submit(inputs, outputs, |v, raw| {
            // SAFETY: see submit.
            unsafe {
                call(
                    self.handle.ptr,
                    scope.group_id(),
                    peer,
                    &v[0],
                    ptr::null_mut(),
                    raw,
                )
            }
        })?;
        Ok(Submission {
            output: value.clone(),
            completion,
        })
    }

    /// Element-wise sum into `output`, which must have the input's shape
    /// and dtype and may be the input itself (in place). A steady loop that
    /// reuses its output allocates no tensor memory.
    pub fn all_reduce_sum_into(
        &self,
        scope: CollectiveScope,
        input: &HostTensor,
        output: &HostTensor,
    ) -> Result<Submission<HostTensor, Work>> {
        self.collective_into(ffi::rankd_all_reduce_sum, scope, input, output)
    }

    /// all_gather into `output`, of exactly the result's shape
    /// (`[members * n, ...]`, or `[members]` for a scalar input).
    pub fn all_gather_into(
        &self,
        scope: CollectiveScope,
        input: &HostTensor,
        output: &HostTensor,
    ) -> Result<Submission<HostTensor, Work>> {
        self.collective_into(ffi::rankd_all_gather, scope, input, output)
    }

    /// all_to_all_v into `output` (`sum(receive_counts)` rows).
    pub fn all_to_all_v_into(
        &self,
        scope: CollectiveScope,
        input: &HostTensor,
        send_counts: &[usize],
        receive_counts: &[usize],
        output: &HostTensor,
    ) -> Result<Submission<HostTensor, Work>> {
        if send_counts.len() != receive_counts.len() {
            return Err(Error::invalid_argument(format!(
                "all_to_all_v: {} send counts but {} receive counts (one each per member of {})",
                send_counts.len(),
                receive_counts.len(),
                scope
            )));
        }
        let completion = self.submit(&[input], &[output], |v, raw| {
            // SAFETY: see submit; the counts are read during the call.
            unsafe {
                ffi::rankd_all_to_all_v(
                    self.handle.ptr,
                    scope.group_id(),
                    &v[0],
                    send_counts.as_ptr(),
                    receive_counts.as_ptr(),
                    send_counts.len(),
                    &v[1],
                    ptr::null_mut(),
                    raw,
                )
            }
        })?;
        Ok(Submission {
            output: output.clone(),
            completion,
        })
    }

    /// Receives into `output`, whose shape and dtype are the ones the peer
    /// sends.
    pub fn receive_into(
        &self,
        scope: CollectiveScope,
        peer: usize,
        output: &HostTensor,
    ) -> Result<Submission<HostTensor, Work>> {
        self.transfer(ffi::rankd_receive, Direction::Receive, scope, peer, output)
    }

    /// Sends and receives posted together and completing together (two
    /// members can swap values; a ring needs no even/odd ordering). Each
    /// receive's value is its caller-owned output; the submission's output
    /// is those values, in order.
    pub fn batch_send_receive(
        &self,
        scope: CollectiveScope,
        sends: &[PeerValue<HostTensor>],
        receives: &[PeerValue<HostTensor>],
    ) -> Result<Submission<Vec<HostTensor>, Work>> {
        let inputs: Vec<&HostTensor> = sends.iter().map(|p| &p.value).collect();
        let outputs: Vec<&HostTensor> = receives.iter().map(|p| &p.value).collect();
        let peered = |p: &PeerValue<HostTensor>, view: &ffi::rankd_tensor| ffi::rankd_peer_tensor {
            peer: p.peer,
            tensor: *view,
        };
        let completion = self.submit(&inputs, &outputs, |v, raw| {
            let (sv, rv) = v.split_at(sends.len());
            let s: Vec<ffi::rankd_peer_tensor> =
                sends.iter().zip(sv).map(|(p, t)| peered(p, t)).collect();
            let r: Vec<ffi::rankd_peer_tensor> =
                receives.iter().zip(rv).map(|(p, t)| peered(p, t)).collect();
            // SAFETY: see submit; the arrays are read during the call.
            unsafe {
                ffi::rankd_batch_send_receive(
                    self.handle.ptr,
                    scope.group_id(),
                    s.as_ptr(),
                    s.len(),
                    r.as_ptr(),
                    r.len(),
                    ptr::null_mut(),
                    raw,
                )
            }
        })?;
        Ok(Submission {
            output: receives.iter().map(|p| p.value.clone()).collect(),
            completion,
        })
    }

    /// The bounded all_gather_words: submits now, resolve with
    /// `PendingWords::wait`.
    pub fn submit_all_gather_words(
        &self,
        local: &[u32],
        round_timeout: Duration,
    ) -> Result<PendingWords> {
        PendingWords::submit(&self.handle.rank, self.world_size, local, round_timeout)
    }

    /// Whether collectives on `group` are supported.
    pub fn supports_group(&self, group: u32) -> bool {
        // SAFETY: a live handle.
        unsafe { ffi::rankd_session_supports_group(self.handle.ptr, group) != 0 }
    }

    // ---- reform (issue 38: re-forming after a loss) ----

    /// Replaces this session, in place, by its session of the next job
    /// epoch after a lost rank or node moved the job on (rankd
    /// --recovery=on; docs/dataplane.md, "Re-forming after a loss"): the
    /// ended session is aborted and closed (its pending works fail), then
    /// this waits up to `timeout` for the job to pass the ended epoch and
    /// for the world to be whole again, and opens the new epoch's session
    /// with the same options. Tensors the caller owns (its weights) are
    /// untouched. Every rank must re-form (the replacement: open) its
    /// sessions in the same order.
    ///
    /// Errors: InvalidArgument for a zero timeout; DeadlineExceeded naming
    /// the epoch when the world was not whole in time; the ended session's
    /// error when the job failed for good; Unimplemented when the rank
    /// cannot join a later epoch. After an error the session is gone:
    /// every later operation fails with that error.
    pub fn reform(&mut self, timeout: Duration) -> Result<()> {
        // SAFETY: a live handle, used by no other call meanwhile (&mut).
        unsafe {
            Error::check(ffi::rankd_session_reform(
                self.handle.ptr,
                seconds(timeout),
            ))
        }
    }

    // ---- end of reform ----

    // ---- poison and abort (issue 33; docs/contract.md, "Failures: one
    // vocabulary") ----

    /// Poisons the session with `cause` and tears nothing down: every later
    /// operation fails at once, before any data moves, with the cause's
    /// code and a message ending in the cause's message; work already
    /// running is not interrupted. For a caller that decided the session
    /// must not be used any more but whose submitted work is still good (a
    /// scheduler draining a rank). The first cause wins: on a session
    /// already poisoned this changes nothing. Only this rank's session:
    /// peers are not told.
    ///
    /// A cause whose code is InvalidArgument is latched as
    /// FailedPrecondition with its message (a poisoned session never
    /// answers InvalidArgument, "refused, the session is still usable").
    ///
    /// Errors, before anything is latched: InvalidArgument for a cause
    /// whose message contains a NUL byte.
    pub fn poison(&self, cause: &Error) -> Result<()> {
        self.latch(ffi::rankd_session_poison, cause)
    }

    /// `poison(cause)`, then aborts the session's native contexts (Gloo's
    /// contexts) so that its pending works fail now, with the cause,
    /// instead of waiting for a peer or the op timeout: for a caller that
    /// knows a peer is gone. On a session already poisoned the first cause
    /// stays and the contexts are aborted if they were not yet. Errors as
    /// `poison`.
    pub fn abort(&self, cause: &Error) -> Result<()> {
        self.latch(ffi::rankd_session_abort, cause)
    }

    /// None while the session is healthy; once poisoned, the first cause,
    /// its code and message unchanged, whether `poison`, `abort`, a native
    /// failure, a missed deadline or a lost peer poisoned it. After a
    /// failed `reform`, that error.
    pub fn poison_cause(&self) -> Option<Error> {
        // SAFETY: a live handle; the status returned is ours to free.
        unsafe { Error::check(ffi::rankd_session_poison_status(self.handle.ptr)) }.err()
    }

    fn latch(&self, call: LatchFn, cause: &Error) -> Result<()> {
        let message = c_string("the cause's message", cause.message())?;
        // SAFETY: a live handle; the message is read during the call.
        unsafe { Error::check(call(self.handle.ptr, cause.code().raw(), message.as_ptr())) }
    }

    // ---- end of poison and abort ----
}

impl DistributedSession for Session {
    type Value = HostTensor;
    type Completion = Work;
    type Error = Error;

    fn descriptor(&self) -> DistributedSessionDescriptor {
        self.descriptor.clone()
    }

    fn capabilities(&self) -> DistributedCapabilities {
        let mut c = ffi::rankd_capabilities {
            struct_size: std::mem::size_of::<ffi::rankd_capabilities>(),
            ..Default::default()
        };
        // SAFETY: a live handle and a struct of the header's layout. On an
        // error every capability stays false (fail closed).
        let ok = unsafe {
            Error::check(ffi::rankd_session_capabilities(self.handle.ptr, &mut c)).is_ok()
        };
        if !ok {
            return DistributedCapabilities::default();
        }
        DistributedCapabilities {
            world_collectives: c.world_collectives != 0,
            collective_groups: self
                .descriptor
                .groups()
                .iter()
                .map(|g| g.id())
                .filter(|&id| self.supports_group(id))
                .collect(),
            point_to_point: c.point_to_point != 0,
            variable_all_to_all: c.variable_all_to_all != 0,
            exact_completion: c.exact_completion != 0,
        }
    }

    fn all_reduce_sum(
        &self,
        scope: CollectiveScope,
        input: &HostTensor,
    ) -> Result<Submission<HostTensor, Work>> {
        let output = HostTensor::zeros(input.dtype(), input.shape())?;
        self.all_reduce_sum_into(scope, input, &output)
    }

    fn all_gather(
        &self,
        scope: CollectiveScope,
        input: &HostTensor,
    ) -> Result<Submission<HostTensor, Work>> {
        // Outside the scope: any output; the library refuses with NotFound.
        let members = self.members(scope).unwrap_or(1);
        let mut shape = input.shape().to_vec();
        match shape.first_mut() {
            Some(rows) => {
                *rows = rows.checked_mul(members).ok_or_else(|| {
                    Error::invalid_argument("all_gather: the output's size overflows")
                })?
            }
            None => shape.push(members),
        }
        let output = HostTensor::zeros(input.dtype(), &shape)?;
        self.all_gather_into(scope, input, &output)
    }

    fn all_to_all_v(
        &self,
        scope: CollectiveScope,
        input: &HostTensor,
        send_counts: &[usize],
        receive_counts: &[usize],
    ) -> Result<Submission<HostTensor, Work>> {
        let rows = receive_counts
            .iter()
            .try_fold(0usize, |a, &c| a.checked_add(c))
            .ok_or_else(|| Error::invalid_argument("all_to_all_v: receive_counts overflow"))?;
        let mut shape = vec![rows];
        shape.extend_from_slice(input.shape().get(1..).unwrap_or(&[]));
        let output = HostTensor::zeros(input.dtype(), &shape)?;
        self.all_to_all_v_into(scope, input, send_counts, receive_counts, &output)
    }

    /// The output is the input itself, retained until the send completes.
    fn send(
        &self,
        scope: CollectiveScope,
        peer: usize,
        input: &HostTensor,
    ) -> Result<Submission<HostTensor, Work>> {
        self.transfer(ffi::rankd_send, Direction::Send, scope, peer, input)
    }

    fn receive(
        &self,
        scope: CollectiveScope,
        peer: usize,
        value: &ValueDescriptor,
    ) -> Result<Submission<HostTensor, Work>> {
        self.receive_into(scope, peer, &HostTensor::zeros_like(value))
    }

    /// Over the daemons, with `SessionOptions::words_timeout` as deadline.
    fn all_gather_words(&self, local: &[u32]) -> Result<Vec<u32>> {
        all_gather_words(
            &self.handle.rank,
            self.world_size,
            local,
            self.words_timeout,
        )
    }
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("descriptor", &self.descriptor)
            .finish()
    }
}

/// The completion of one submitted operation. Dropping it without waiting
/// is allowed: running work keeps what the library owns for it, and its
/// output is then never written.
pub struct Work {
    ptr: *mut ffi::rankd_work,
    // The storages the library writes on success, locked (address order)
    // around each call that may deliver.
    outputs: Vec<Storage>,
    _session: Arc<SessionHandle>,
}

// SAFETY: the C ABI allows every work call from any thread; outputs are
// written only under their locks.
unsafe impl Send for Work {}
unsafe impl Sync for Work {}

impl Work {
    fn delivering<R>(&self, f: impl FnOnce() -> R) -> R {
        let guards: Vec<MutexGuard<'_, Buffer>> = self.outputs.iter().map(lock).collect();
        let r = f();
        drop(guards);
        r
    }

    /// Waits at most `timeout` with QuarantineUntilComplete, as an error
    /// when the deadline passes: DeadlineExceeded naming the mode.
    pub fn wait_timeout(&self, timeout: Duration) -> Result<()> {
        self.bounded(timeout, CancellationMode::QuarantineUntilComplete)
    }

    fn bounded(&self, timeout: Duration, mode: CancellationMode) -> Result<()> {
        // SAFETY: a live handle; outputs locked while they may be written.
        self.delivering(|| unsafe {
            Error::check(ffi::rankd_work_wait_bounded(
                self.ptr,
                seconds(timeout),
                mode_raw(mode),
            ))
        })
    }
}

impl Completion for Work {
    type Error = Error;

    /// Never blocks: while another call holds an output (a `wait` on
    /// another thread, a reader of the output), the work reads as not
    /// complete yet, which is never early.
    fn is_complete(&self) -> bool {
        let mut guards: Vec<MutexGuard<'_, Buffer>> = Vec::with_capacity(self.outputs.len());
        for storage in &self.outputs {
            match storage.try_lock() {
                Ok(guard) => guards.push(guard),
                Err(TryLockError::Poisoned(poisoned)) => guards.push(poisoned.into_inner()),
                Err(TryLockError::WouldBlock) => return false,
            }
        }
        // SAFETY: as in bounded.
        let complete = unsafe { ffi::rankd_work_is_complete(self.ptr) != 0 };
        drop(guards);
        complete
    }

    /// Blocks until the work completed (the session's op_timeout bounds
    /// it): Aborted naming a lost rank, DeadlineExceeded naming who did not
    /// submit, ...
    fn wait(&self) -> Result<()> {
        // SAFETY: as in bounded.
        self.delivering(|| unsafe { Error::check(ffi::rankd_work_wait(self.ptr)) })
    }
}

impl BoundedCompletion for Work {
    type Error = Error;

    fn supports_cancellation(&self, mode: CancellationMode) -> bool {
        // SAFETY: a live handle.
        unsafe { ffi::rankd_work_supports_cancellation(self.ptr, mode_raw(mode)) != 0 }
    }

    fn wait_bounded(&self, timeout: Duration, mode: CancellationMode) -> Result<WaitOutcome> {
        match self.bounded(timeout, mode) {
            Ok(()) => Ok(WaitOutcome::Completed),
            // Its own missed deadline, not the work's failure (which may
            // also be DeadlineExceeded: a peer that never submitted).
            Err(e) if e.is_wait_timeout() => Ok(WaitOutcome::DeadlineExceeded(mode)),
            Err(e) => Err(e),
        }
    }
}

impl Drop for Work {
    fn drop(&mut self) {
        let ptr = SendPtr(self.ptr);
        // Kept until the work is freed: its session goes after it.
        let session = Arc::clone(&self._session);
        free_handle(move || {
            // SAFETY: ours, freed once. The library writes the outputs only
            // in the calls `delivering` wraps, none of which runs any more,
            // so they may go before a free deferred by free_handle.
            unsafe { ffi::rankd_work_free(ptr.get()) };
            drop(session);
        });
    }
}

impl std::fmt::Debug for Work {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Work").finish_non_exhaustive()
    }
}

impl<T> Submission<T, Work> {
    /// Waits at most `timeout` (QuarantineUntilComplete past it, reported
    /// as DeadlineExceeded) and returns the output, now authoritative.
    pub fn wait_timeout(self, timeout: Duration) -> Result<T> {
        self.completion.wait_timeout(timeout)?;
        Ok(self.output)
    }
}
