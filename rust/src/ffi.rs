//! Raw declarations of the C ABI (`capi/include/rankd/rankd.h`, ABI
//! version [`RANKD_ABI_VERSION`]). Kept in sync with the header by hand:
//! same names, same field order, fixed-size integers where the header has
//! them. `tests/local.rs` checks the loaded library's `rankd_abi_version()`
//! and the enumerations' values against it. Everything here is `unsafe`;
//! the safe API is the rest of the crate.
#![allow(non_camel_case_types)]

use std::os::raw::{c_char, c_int, c_void};

/// The header's `RANKD_ABI_VERSION` this file follows.
pub const RANKD_ABI_VERSION: u32 = 1;
/// `RANKD_WORLD_GROUP`: the group id of the whole world.
pub const RANKD_WORLD_GROUP: u32 = 1;

// rankd_code: absl::StatusCode's values.
pub const RANKD_OK: i32 = 0;
pub const RANKD_CANCELLED: i32 = 1;
pub const RANKD_UNKNOWN: i32 = 2;
pub const RANKD_INVALID_ARGUMENT: i32 = 3;
pub const RANKD_DEADLINE_EXCEEDED: i32 = 4;
pub const RANKD_NOT_FOUND: i32 = 5;
pub const RANKD_ALREADY_EXISTS: i32 = 6;
pub const RANKD_PERMISSION_DENIED: i32 = 7;
pub const RANKD_RESOURCE_EXHAUSTED: i32 = 8;
pub const RANKD_FAILED_PRECONDITION: i32 = 9;
pub const RANKD_ABORTED: i32 = 10;
pub const RANKD_OUT_OF_RANGE: i32 = 11;
pub const RANKD_UNIMPLEMENTED: i32 = 12;
pub const RANKD_INTERNAL: i32 = 13;
pub const RANKD_UNAVAILABLE: i32 = 14;
pub const RANKD_DATA_LOSS: i32 = 15;
pub const RANKD_UNAUTHENTICATED: i32 = 16;

// rankd_backend.
pub const RANKD_BACKEND_GLOO: i32 = 1;
pub const RANKD_BACKEND_NCCL: i32 = 2;

// rankd_dtype.
pub const RANKD_BOOL: i32 = 0;
pub const RANKD_F32: i32 = 1;
pub const RANKD_F16: i32 = 2;
pub const RANKD_BF16: i32 = 3;
pub const RANKD_F64: i32 = 4;
pub const RANKD_I8: i32 = 5;
pub const RANKD_I16: i32 = 6;
pub const RANKD_I32: i32 = 7;
pub const RANKD_I64: i32 = 8;
pub const RANKD_U8: i32 = 9;
pub const RANKD_U16: i32 = 10;
pub const RANKD_U32: i32 = 11;
pub const RANKD_U64: i32 = 12;
pub const RANKD_COMPLEX64: i32 = 13;

// rankd_cancellation.
pub const RANKD_QUARANTINE_UNTIL_COMPLETE: i32 = 1;
pub const RANKD_NATIVE_CANCEL: i32 = 2;

/// `rankd_recovery` is a C enum: int-sized on every ABI rankd supports.
pub type rankd_recovery = c_int;
pub const RANKD_RECOVERY_OFF: rankd_recovery = 0;
pub const RANKD_RECOVERY_JOB: rankd_recovery = 1;
pub const RANKD_RECOVERY_DOMAIN: rankd_recovery = 2;

/// `rankd_code` is a C enum: int-sized on every ABI rankd supports.
pub type rankd_code = c_int;

// Opaque handles (only ever used behind pointers).
#[repr(C)]
pub struct rankd_status {
    _private: [u8; 0],
}
#[repr(C)]
pub struct rankd_rank {
    _private: [u8; 0],
}
#[repr(C)]
pub struct rankd_pending_words {
    _private: [u8; 0],
}
#[repr(C)]
pub struct rankd_bytes {
    _private: [u8; 0],
}
#[repr(C)]
pub struct rankd_session {
    _private: [u8; 0],
}
#[repr(C)]
pub struct rankd_work {
    _private: [u8; 0],
}

#[repr(C)]
pub struct rankd_join_options {
    pub struct_size: usize,
    pub target: *const c_char,
    pub job_id: *const c_char,
    pub local_rank: i64,
    pub rank: i64,
    pub world_size: u32,
    pub device_kind: *const c_char,
    pub device_index: i32,
    pub wait_for_world_seconds: f64,
    pub connect_timeout_seconds: f64,
    pub token_file: *const c_char,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct rankd_descriptor {
    pub struct_size: usize,
    pub rank: u32,
    pub world_size: u32,
    pub local_rank: u32,
    pub node_index: u32,
    pub nnodes: u32,
    pub nproc_per_node: u32,
    pub job_incarnation: u64,
    pub tensor_parallel: u32,
    pub pipeline_parallel: u32,
    pub expert_parallel: u32,
    pub data_parallel: u32,
    pub group_count: usize,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct rankd_domain_epoch {
    pub domain: u32,
    pub epoch: u64,
}

#[repr(C)]
pub struct rankd_group {
    pub id: u32,
    pub kind: *const c_char,
    pub size: u32,
    pub local_rank: u32,
    pub members: *const u32,
}

#[repr(C)]
pub struct rankd_session_options {
    pub struct_size: usize,
    pub backend: i32,
    pub op_timeout_seconds: f64,
    pub verify_agreement: c_int,
    pub gloo_hostname: *const c_char,
    pub restrict_capabilities: *const rankd_capabilities,
    pub restrict_groups: *const u32,
    pub restrict_group_count: usize,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct rankd_capabilities {
    pub struct_size: usize,
    pub world_collectives: c_int,
    pub point_to_point: c_int,
    pub variable_all_to_all: c_int,
    pub exact_completion: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct rankd_tensor {
    pub data: *mut c_void,
    pub dtype: i32,
    pub ndim: usize,
    pub shape: *const usize,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct rankd_peer_tensor {
    pub peer: usize,
    pub tensor: rankd_tensor,
}

pub type rankd_failure_fn =
    unsafe extern "C" fn(user_data: *mut c_void, code: rankd_code, message: *const c_char);

extern "C" {
    pub fn rankd_abi_version() -> u32;

    pub fn rankd_status_code(status: *const rankd_status) -> rankd_code;
    pub fn rankd_status_message(status: *const rankd_status) -> *const c_char;
    pub fn rankd_status_free(status: *mut rankd_status);
    pub fn rankd_status_is_wait_timeout(status: *const rankd_status) -> c_int;
    pub fn rankd_status_is_epoch_fence(status: *const rankd_status) -> c_int;
    pub fn rankd_status_ends_an_epoch(status: *const rankd_status) -> c_int;
    pub fn rankd_code_name(code: i32) -> *const c_char;

    pub fn rankd_join_options_init(options: *mut rankd_join_options);
    pub fn rankd_join(
        options: *const rankd_join_options,
        rank: *mut *mut rankd_rank,
    ) -> *mut rankd_status;
    pub fn rankd_leave(rank: *mut rankd_rank) -> *mut rankd_status;
    pub fn rankd_rank_free(rank: *mut rankd_rank);
    pub fn rankd_rank_descriptor(
        rank: *const rankd_rank,
        descriptor: *mut rankd_descriptor,
    ) -> *mut rankd_status;
    pub fn rankd_rank_job_id(rank: *const rankd_rank) -> *const c_char;
    pub fn rankd_rank_group(
        rank: *const rankd_rank,
        index: usize,
        group: *mut rankd_group,
    ) -> *mut rankd_status;

    pub fn rankd_all_gather_words(
        rank: *mut rankd_rank,
        words: *const u32,
        count: usize,
        timeout_seconds: f64,
        out: *mut u32,
        out_capacity: usize,
    ) -> *mut rankd_status;
    #[allow(clippy::too_many_arguments)]
    pub fn rankd_all_gather_words_with_view(
        rank: *mut rankd_rank,
        words: *const u32,
        count: usize,
        timeout_seconds: f64,
        out: *mut u32,
        out_capacity: usize,
        out_words: *mut usize,
        partial: *mut c_int,
        domains: *mut rankd_domain_epoch,
        domains_capacity: usize,
        domain_count: *mut usize,
    ) -> *mut rankd_status;
    pub fn rankd_submit_all_gather_words(
        rank: *mut rankd_rank,
        words: *const u32,
        count: usize,
        round_timeout_seconds: f64,
        pending: *mut *mut rankd_pending_words,
    ) -> *mut rankd_status;
    pub fn rankd_pending_words_is_ready(pending: *const rankd_pending_words) -> c_int;
    pub fn rankd_pending_words_wait(
        pending: *mut rankd_pending_words,
        timeout_seconds: f64,
        out: *mut u32,
        out_capacity: usize,
    ) -> *mut rankd_status;
    pub fn rankd_pending_words_free(pending: *mut rankd_pending_words);

    pub fn rankd_bytes_data(bytes: *const rankd_bytes) -> *const u8;
    pub fn rankd_bytes_size(bytes: *const rankd_bytes) -> usize;
    pub fn rankd_bytes_free(bytes: *mut rankd_bytes);
    pub fn rankd_kv_set(
        rank: *mut rankd_rank,
        key: *const c_char,
        value: *const c_void,
        size: usize,
    ) -> *mut rankd_status;
    pub fn rankd_kv_get(
        rank: *mut rankd_rank,
        key: *const c_char,
        timeout_seconds: f64,
        value: *mut *mut rankd_bytes,
    ) -> *mut rankd_status;
    pub fn rankd_kv_add(
        rank: *mut rankd_rank,
        key: *const c_char,
        delta: i64,
        result: *mut i64,
    ) -> *mut rankd_status;
    pub fn rankd_kv_delete(
        rank: *mut rankd_rank,
        key: *const c_char,
        existed: *mut c_int,
    ) -> *mut rankd_status;
    pub fn rankd_kv_count(
        rank: *mut rankd_rank,
        prefix: *const c_char,
        count: *mut u64,
    ) -> *mut rankd_status;

    pub fn rankd_job_health(rank: *const rankd_rank) -> *mut rankd_status;
    pub fn rankd_on_job_failure(
        rank: *mut rankd_rank,
        callback: rankd_failure_fn,
        user_data: *mut c_void,
    ) -> *mut rankd_status;
    pub fn rankd_rank_epoch(rank: *const rankd_rank) -> u64;
    pub fn rankd_rank_recovery(rank: *const rankd_rank) -> rankd_recovery;
    pub fn rankd_rejoin(
        rank: *mut rankd_rank,
        ended_epoch: u64,
        timeout_seconds: f64,
    ) -> *mut rankd_status;

    pub fn rankd_session_options_init(options: *mut rankd_session_options);
    pub fn rankd_session_open(
        rank: *mut rankd_rank,
        options: *const rankd_session_options,
        session: *mut *mut rankd_session,
    ) -> *mut rankd_status;
    pub fn rankd_session_free(session: *mut rankd_session);
    pub fn rankd_session_capabilities(
        session: *const rankd_session,
        capabilities: *mut rankd_capabilities,
    ) -> *mut rankd_status;
    pub fn rankd_session_supports_group(session: *const rankd_session, group: u32) -> c_int;
    pub fn rankd_session_backend(session: *const rankd_session) -> i32;
    // rankd_session_reform (issue 38: re-forming after a loss).
    pub fn rankd_session_reform(session: *mut rankd_session, timeout_seconds: f64)
        -> *mut rankd_status;
    // Poisoning and aborting a session (issue 33).
    pub fn rankd_session_poison(
        session: *mut rankd_session,
        code: i32,
        message: *const c_char,
    ) -> *mut rankd_status;
    pub fn rankd_session_abort(
        session: *mut rankd_session,
        code: i32,
        message: *const c_char,
    ) -> *mut rankd_status;
    pub fn rankd_session_poison_status(session: *const rankd_session) -> *mut rankd_status;

    pub fn rankd_dtype_size(dtype: i32) -> usize;

    pub fn rankd_all_reduce_sum(
        session: *mut rankd_session,
        group: u32,
        input: *const rankd_tensor,
        output: *const rankd_tensor,
        stream: *mut c_void,
        work: *mut *mut rankd_work,
    ) -> *mut rankd_status;
    pub fn rankd_all_gather(
        session: *mut rankd_session,
        group: u32,
        input: *const rankd_tensor,
        output: *const rankd_tensor,
        stream: *mut c_void,
        work: *mut *mut rankd_work,
    ) -> *mut rankd_status;
    pub fn rankd_all_to_all_v(
        session: *mut rankd_session,
        group: u32,
        input: *const rankd_tensor,
        send_counts: *const usize,
        receive_counts: *const usize,
        members: usize,
        output: *const rankd_tensor,
        stream: *mut c_void,
        work: *mut *mut rankd_work,
    ) -> *mut rankd_status;
    pub fn rankd_send(
        session: *mut rankd_session,
        group: u32,
        peer: usize,
        input: *const rankd_tensor,
        stream: *mut c_void,
        work: *mut *mut rankd_work,
    ) -> *mut rankd_status;
    pub fn rankd_receive(
        session: *mut rankd_session,
        group: u32,
        peer: usize,
        output: *const rankd_tensor,
        stream: *mut c_void,
        work: *mut *mut rankd_work,
    ) -> *mut rankd_status;
    pub fn rankd_batch_send_receive(
        session: *mut rankd_session,
        group: u32,
        sends: *const rankd_peer_tensor,
        send_count: usize,
        receives: *const rankd_peer_tensor,
        receive_count: usize,
        stream: *mut c_void,
        work: *mut *mut rankd_work,
    ) -> *mut rankd_status;

    pub fn rankd_work_is_complete(work: *mut rankd_work) -> c_int;
    pub fn rankd_work_wait(work: *mut rankd_work) -> *mut rankd_status;
    pub fn rankd_work_wait_bounded(
        work: *mut rankd_work,
        timeout_seconds: f64,
        mode: i32,
    ) -> *mut rankd_status;
    pub fn rankd_work_supports_cancellation(work: *const rankd_work, mode: i32) -> c_int;
    pub fn rankd_work_free(work: *mut rankd_work);
}
