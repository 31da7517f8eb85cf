//! What needs no daemon: the loaded library's ABI version and enumerations
//! against the crate's declarations, refused joins (missing job id, bad
//! environment, unreachable daemon), the contract's types and their
//! validation, HostTensor, errors, and that the traits stay dyn compatible
//! and the handles Send + Sync.

use std::ffi::CStr;
use std::sync::Mutex;
use std::time::Duration;

use rankd::ffi;
use rankd::{
    BoundedCompletion, CancellationMode, Code, CollectiveGroupDescriptor, CollectiveScope,
    Completion, DistributedSession, DistributedSessionDescriptor, Error, HostTensor, JoinOptions,
    PendingWords, Rank, Session, TensorDtype, ValueDescriptor, Work,
};

// Tests that change the environment take turns.
static ENV: Mutex<()> = Mutex::new(());

#[test]
fn abi_version_matches_the_declarations() {
    assert_eq!(rankd::abi_version(), ffi::RANKD_ABI_VERSION);
    rankd::check_abi_version().unwrap();
}

#[test]
fn codes_match_the_library_names() {
    for raw in 1..=16 {
        // SAFETY: static storage.
        let name = unsafe { CStr::from_ptr(ffi::rankd_code_name(raw)) };
        let code = Code::from_raw(raw);
        assert_eq!(code.name(), name.to_str().unwrap());
        assert_eq!(code.raw(), raw);
    }
    assert_eq!(Code::from_raw(99), Code::Unknown);
}

#[test]
fn dtypes_match_the_library_order_and_sizes() {
    for (raw, dtype) in TensorDtype::ALL.iter().enumerate() {
        // SAFETY: a pure function.
        let size = unsafe { ffi::rankd_dtype_size(raw as i32) };
        assert_eq!(size, dtype.size(), "{}", dtype);
    }
    assert_eq!(unsafe { ffi::rankd_dtype_size(14) }, 0);
}

#[test]
fn join_without_a_job_id_is_refused_naming_the_variable() {
    let _env = ENV.lock().unwrap_or_else(|e| e.into_inner());
    std::env::remove_var("RANKD_JOB_ID");
    let options = JoinOptions {
        target: Some("unix:///nonexistent.sock".into()),
        ..JoinOptions::default()
    };
    let e = Rank::join(&options).unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{}", e);
    assert!(e.message().contains("RANKD_JOB_ID"), "{}", e);
}

#[test]
fn a_bad_environment_value_is_named() {
    let _env = ENV.lock().unwrap_or_else(|e| e.into_inner());
    std::env::set_var("RANKD_LOCAL_RANK", "two");
    let options = JoinOptions {
        target: Some("unix:///nonexistent.sock".into()),
        job_id: Some("j".into()),
        ..JoinOptions::default()
    };
    let e = Rank::join(&options).unwrap_err();
    std::env::remove_var("RANKD_LOCAL_RANK");
    assert_eq!(e.code(), Code::InvalidArgument, "{}", e);
    assert!(e.message().contains("$RANKD_LOCAL_RANK is 'two'"), "{}", e);
}

#[test]
fn an_unreachable_daemon_is_unavailable_naming_it() {
    let _env = ENV.lock().unwrap_or_else(|e| e.into_inner());
    let options = JoinOptions {
        target: Some("unix:///tmp/rankd-rust-absent.sock".into()),
        job_id: Some("j".into()),
        local_rank: Some(0),
        connect_timeout: Some(Duration::from_millis(500)),
        ..JoinOptions::default()
    };
    let e = Rank::join(&options).unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{}", e);
    assert!(e.message().contains("rankd-rust-absent.sock"), "{}", e);
    let e = Rank::join(&JoinOptions {
        job_id: Some("nul\0id".into()),
        ..JoinOptions::default()
    })
    .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
}

#[test]
fn host_tensors_hold_typed_values() {
    let t = HostTensor::from_vec(vec![1.5f32, -2.0]);
    assert_eq!(
        (t.dtype(), t.shape(), t.byte_size()),
        (TensorDtype::F32, &[2usize][..], 8)
    );
    assert_eq!(t.to_vec::<f32>().unwrap(), vec![1.5, -2.0]);
    let e = t.to_vec::<i32>().unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("holds f32, not i32"), "{}", e);
    let m = HostTensor::with_shape(&[2, 3], &[1u16, 2, 3, 4, 5, 6]).unwrap();
    assert_eq!(m.descriptor().to_string(), "u16[2, 3]");
    assert!(HostTensor::with_shape(&[2, 2], &[1i8; 3]).is_err());
    assert!(HostTensor::zeros(TensorDtype::F32, &[2, 0]).is_err());
    let empty = HostTensor::zeros(TensorDtype::I32, &[0, 4]).unwrap();
    assert_eq!((empty.element_count(), empty.descriptor().rows()), (0, 0));
    let s = HostTensor::scalar(true);
    assert_eq!(
        (s.shape(), s.to_vec::<bool>().unwrap()),
        (&[][..], vec![true])
    );
    let h = HostTensor::from_bytes(TensorDtype::F16, &[2], &[0, 0x3c, 0, 0x40]).unwrap();
    assert_eq!(h.to_bytes(), vec![0, 0x3c, 0, 0x40]);
    assert!(HostTensor::from_bytes(TensorDtype::Bf16, &[2], &[0; 3]).is_err());
    // clone shares; deep_copy does not.
    let c = t.clone();
    let d = t.deep_copy();
    t.copy_from(&[7.0f32, 8.0]).unwrap();
    assert_eq!(c.to_vec::<f32>().unwrap(), vec![7.0, 8.0]);
    assert_eq!(d.to_vec::<f32>().unwrap(), vec![1.5, -2.0]);
    assert!(c.shares_storage(&t) && !d.shares_storage(&t));
    let from: HostTensor = vec![1i64, 2].into();
    assert_eq!(from.with_bytes(|b| b.len()), 16);
}

#[test]
fn contract_types_validate_as_the_contract_says() {
    assert!(ValueDescriptor::new(vec![4, 0], TensorDtype::F32).is_err());
    let v = ValueDescriptor::new(vec![4, 8], TensorDtype::F32).unwrap();
    assert_eq!(
        (v.to_string(), v.byte_size(), v.rows()),
        ("f32[4, 8]".into(), 128, 4)
    );
    let none = ValueDescriptor::rows_of(0, &v.row_descriptor()).unwrap();
    assert_eq!(none.shape(), &[0, 8]);
    assert_eq!(ValueDescriptor::scalar(TensorDtype::I8).rows(), 1);
    assert!(ValueDescriptor::new(vec![usize::MAX, 2], TensorDtype::U8).is_err());

    assert!(CollectiveGroupDescriptor::new(2, vec![], 0, 0).is_err());
    assert!(CollectiveGroupDescriptor::new(2, vec![1, 1], 0, 1).is_err());
    assert!(CollectiveGroupDescriptor::new(2, vec![0, 1], 0, 1).is_err());
    let g = CollectiveGroupDescriptor::new(2, vec![3, 1], 1, 1).unwrap();
    assert!(DistributedSessionDescriptor::new(0, 0, vec![]).is_err());
    assert!(DistributedSessionDescriptor::new(2, 1, vec![g.clone()]).is_err());
    let mut d = DistributedSessionDescriptor::new(4, 1, vec![g.clone(), g.clone()]);
    assert!(d.is_err());
    d = DistributedSessionDescriptor::new(4, 1, vec![g]);
    let mut d = d.unwrap();
    assert_eq!((d.local_rank(), d.ranks_on_node()), (1, 4));
    assert!(d.set_node_placement(2, 2).is_err());
    d.set_node_placement(1, 2).unwrap();
    assert_eq!(d.group(2).unwrap().members(), &[3, 1]);
    assert!(d.scope_group(CollectiveScope::World).is_none());
    assert_eq!(CollectiveScope::Group(5).to_string(), "group 5");
    assert_eq!(
        rankd::DistributedCapabilities::default()
            .collective_groups
            .len(),
        0
    );
}

// docs/contract.md, "Empty values": the one rule, as C++ and C state it.
#[test]
fn only_the_leading_extent_may_be_zero() {
    for shape in [vec![0], vec![0, 4], vec![0, 2, 3]] {
        let d = ValueDescriptor::new(shape.clone(), TensorDtype::F32).unwrap();
        assert_eq!((d.shape(), d.rows(), d.byte_size()), (&shape[..], 0, 0));
        assert_eq!(d, ValueDescriptor::rows_of(0, &d.row_descriptor()).unwrap());
        let t = HostTensor::zeros(TensorDtype::F32, &shape).unwrap();
        assert_eq!(t.descriptor(), d);
    }
    for shape in [vec![4, 0], vec![0, 0], vec![2, 3, 0]] {
        let e = ValueDescriptor::new(shape.clone(), TensorDtype::F32).unwrap_err();
        assert!(
            e.message().contains("only the leading extent may be 0"),
            "{}",
            e
        );
        let e = HostTensor::zeros(TensorDtype::F32, &shape).unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument);
        assert!(
            e.message().contains("only the leading extent may be 0"),
            "{}",
            e
        );
    }
}

#[test]
fn errors_display_code_and_message() {
    let e = Error::new(Code::Aborted, "rank 3 lost");
    assert_eq!(e.to_string(), "ABORTED: rank 3 lost");
    let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(e.clone());
    assert_eq!(boxed.to_string(), e.to_string());
    let from: Error = ValueDescriptor::new(vec![0, 0], TensorDtype::F32)
        .unwrap_err()
        .into();
    assert_eq!(from.code(), Code::InvalidArgument);
}

// The traits stay dyn compatible: this compiles.
#[allow(dead_code)]
fn as_objects(s: &Session, w: Work) {
    let _: &dyn DistributedSession<Value = HostTensor, Completion = Work, Error = Error> = s;
    let b: Box<dyn BoundedCompletion<Error = Error>> = Box::new(w);
    let _ = b.supports_cancellation(CancellationMode::NativeCancel);
    let _: Option<Box<dyn Completion<Error = Error>>> = None;
}

fn send_sync<T: Send + Sync>() {}

#[test]
fn handles_are_send_and_sync() {
    send_sync::<Rank>();
    send_sync::<Session>();
    send_sync::<Work>();
    send_sync::<PendingWords>();
    send_sync::<HostTensor>();
    send_sync::<Error>();
}
