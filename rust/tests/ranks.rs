//! The crate against real daemons: each test starts a rankd daemon for a
//! two-rank job (tests/common) and runs this test binary again as both
//! ranks (the ignored `rank_program` entry, its role chosen by
//! $RANKD_RUST_ROLE), or the hello example; then checks exit codes and
//! what each rank printed. Every wait has a deadline.

mod common;

use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use common::LocalJob;
use rankd::CollectiveScope::{Group, World};
use rankd::{
    BoundedCompletion, CancellationMode, Code, Completion, DistributedCapabilities,
    DistributedSession, Error, HostTensor, PeerValue, Rank, Recovery, Session, SessionOptions,
    TensorDtype, ValueDescriptor, WaitOutcome, Work,
};

const T: Duration = Duration::from_secs(30);

// ---- The rank roles (run in the child processes) ------------------------

extern "C" {
    // Dies at once, without leaving and without running exit handlers.
    fn _exit(code: i32) -> !;
}

type Contract = dyn DistributedSession<Value = HostTensor, Completion = Work, Error = Error>;

fn expect_err<T: std::fmt::Debug>(r: rankd::Result<T>, code: Code, needle: &str) -> Error {
    match r {
        Ok(v) => panic!("expected {} ({:?}), got Ok({:?})", code, needle, v),
        Err(e) => {
            assert_eq!(e.code(), code, "{}", e);
            assert!(e.message().contains(needle), "{:?} not in {}", needle, e);
            e
        }
    }
}

fn f32s(t: &HostTensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

fn session(rank: &Rank) -> Session {
    let options = SessionOptions {
        op_timeout: Some(T),
        ..SessionOptions::default()
    };
    rank.open_session(&options).unwrap()
}

fn collectives(rank: &Rank) {
    assert_eq!(rank.world_size(), 2);
    let r = rank.rank();
    {
        // reform (issue 38) refuses a zero timeout before it ends anything.
        let mut s = session(rank);
        expect_err(
            s.reform(Duration::ZERO),
            Code::InvalidArgument,
            "timeout_seconds",
        );
        rank.all_gather_words(&[r], T).unwrap();
    }
    // With its view: without recovery by domain, the whole world and no
    // domains.
    assert_eq!(
        rank.all_gather_words_with_view(&[7, 9], T).unwrap(),
        rankd::WorldWords {
            words: vec![7, 9, 7, 9],
            partial: false,
            domains: vec![],
        }
    );
    let s = session(rank);
    let contract: &Contract = &s; // through the trait object
    let d = contract.descriptor();
    assert_eq!((d.world_size(), d.rank()), (2, r));
    let world = d.group(rankd::WORLD_GROUP_ID).unwrap();
    assert_eq!((world.members(), world.local_rank()), (&[0u32, 1][..], r));
    let caps = contract.capabilities();
    assert!(caps.world_collectives && caps.point_to_point, "{:?}", caps);
    assert!(
        caps.variable_all_to_all && caps.exact_completion,
        "{:?}",
        caps
    );
    assert!(caps.collective_groups.contains(&1), "{:?}", caps);

    // all_gather_words: [7, 9] on both gives [7, 9, 7, 9].
    assert_eq!(
        contract.all_gather_words(&[7, 9]).unwrap(),
        vec![7, 9, 7, 9]
    );

    // all_reduce_sum: [1, 2] + [3, 4] = [4, 6]; allocating, into, in place.
    let x = HostTensor::from_vec(vec![1.0 + 2.0 * r as f32, 2.0 + 2.0 * r as f32]);
    let sum = contract.all_reduce_sum(World, &x).unwrap().wait().unwrap();
    assert_eq!((f32s(&sum), sum.shape()), (vec![4.0, 6.0], &[2usize][..]));
    let out = HostTensor::zeros(TensorDtype::F32, &[2]).unwrap();
    let sub = s.all_reduce_sum_into(World, &x, &out).unwrap();
    assert!(sub.output.shares_storage(&out));
    sub.completion.wait().unwrap();
    assert_eq!(f32s(&out), vec![4.0, 6.0]);
    s.all_reduce_sum_into(World, &x, &x)
        .unwrap()
        .wait_timeout(T)
        .unwrap();
    assert_eq!(f32s(&x), vec![4.0, 6.0]);
    let v = HostTensor::with_shape(&[2, 3], &[r as i64 + 1; 6]).unwrap();
    let s64 = s.all_reduce_sum(World, &v).unwrap().wait().unwrap();
    assert_eq!(
        (s64.to_vec::<i64>().unwrap(), s64.shape()),
        (vec![3; 6], &[2usize, 3][..])
    );
    let v = HostTensor::with_shape(&[3], &[r as u8 + 1; 3]).unwrap();
    assert_eq!(
        s.all_reduce_sum(World, &v)
            .unwrap()
            .wait()
            .unwrap()
            .to_vec::<u8>()
            .unwrap(),
        vec![3; 3]
    );
    let v = HostTensor::from_vec(vec![0.5f64 + r as f64]);
    assert_eq!(
        s.all_reduce_sum(World, &v)
            .unwrap()
            .wait()
            .unwrap()
            .to_vec::<f64>()
            .unwrap(),
        vec![2.0]
    );
    let v = HostTensor::from_vec(vec![-(r as i16) - 1; 4]);
    assert_eq!(
        s.all_reduce_sum(World, &v)
            .unwrap()
            .wait()
            .unwrap()
            .to_vec::<i16>()
            .unwrap(),
        vec![-3; 4]
    );

    // all_gather: [2, 3] on both gives [2, 3, 2, 3]; rows in member order.
    let g = contract
        .all_gather(World, &HostTensor::from_vec(vec![2.0f32, 3.0]))
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(
        (f32s(&g), g.shape()),
        (vec![2.0, 3.0, 2.0, 3.0], &[4usize][..])
    );
    let rows = HostTensor::with_shape(&[1, 2], &[10 * r as i32, 10 * r as i32 + 1]).unwrap();
    let sub = s.all_gather(World, &rows).unwrap();
    let deadline = Instant::now() + T;
    while !sub.completion.is_complete() {
        assert!(Instant::now() < deadline, "all_gather did not complete");
        std::thread::yield_now();
    }
    assert_eq!(sub.output.shape(), &[2, 2]);
    assert_eq!(sub.output.to_vec::<i32>().unwrap(), vec![0, 1, 10, 11]);
    // A scalar gives one element per member.
    let g = s
        .all_gather(World, &HostTensor::scalar(r))
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(
        (g.to_vec::<u32>().unwrap(), g.shape()),
        (vec![0, 1], &[2usize][..])
    );

    // Every group of the layout (tensor, pipeline, expert and data groups of
    // one or two ranks here): the sum of its members' rank + 1.
    for g in d.groups() {
        let v = HostTensor::from_vec(vec![r as i64 + 1]);
        let got = s.all_reduce_sum(Group(g.id()), &v).unwrap().wait().unwrap();
        let want: i64 = g.members().iter().map(|&m| m as i64 + 1).sum();
        assert_eq!(got.to_vec::<i64>().unwrap(), vec![want], "group {:?}", g);
    }

    s.all_gather_words(&[r]).unwrap(); // done with the data plane
    println!("RUST RANK {} OK", r);
}

fn point_to_point(rank: &Rank) {
    let r = rank.rank();
    let peer = 1 - r as usize;
    let s = session(rank);

    // all_to_all_v: rank 0 keeps 1 row and sends 2; rank 1 sends 3.
    let (send, recv) = if r == 0 {
        ([1, 2], [1, 3])
    } else {
        ([3, 0], [2, 0])
    };
    let a = HostTensor::from_vec((0..3).map(|i| (i + 100 * r) as f32).collect());
    let got = s
        .all_to_all_v(World, &a, &send, &recv)
        .unwrap()
        .wait()
        .unwrap();
    let want: Vec<f32> = if r == 0 {
        vec![0.0, 100.0, 101.0, 102.0]
    } else {
        vec![1.0, 2.0]
    };
    assert_eq!(f32s(&got), want);
    // Rows of a 2-D value: rank 0 sends both its rows to rank 1, which
    // sends nothing (an empty leading axis) and rank 0 receives nothing.
    let a = if r == 0 {
        HostTensor::with_shape(&[2, 2], &[1, 2, 3, 4]).unwrap()
    } else {
        HostTensor::zeros(TensorDtype::I32, &[0, 2]).unwrap()
    };
    let (send, recv) = if r == 0 {
        ([0, 2], [0, 0])
    } else {
        ([0, 0], [2, 0])
    };
    let got = s
        .all_to_all_v(World, &a, &send, &recv)
        .unwrap()
        .wait()
        .unwrap();
    let want: Vec<i32> = if r == 0 { vec![] } else { vec![1, 2, 3, 4] };
    assert_eq!(got.shape(), &[want.len() / 2, 2]);
    assert_eq!(got.to_vec::<i32>().unwrap(), want);

    // send / receive (the contract's, by descriptor), then bounded waits in
    // both cancellation modes on work that completes.
    let d = ValueDescriptor::new(vec![2], TensorDtype::F32).unwrap();
    if r == 0 {
        let sub = s
            .send(World, 1, &HostTensor::from_vec(vec![5.0f32, 6.0]))
            .unwrap();
        assert!(sub
            .completion
            .supports_cancellation(CancellationMode::NativeCancel));
        assert_eq!(
            sub.completion
                .wait_bounded(T, CancellationMode::NativeCancel)
                .unwrap(),
            WaitOutcome::Completed
        );
    } else {
        let sub = s.receive(World, 0, &d).unwrap();
        assert!(sub
            .completion
            .supports_cancellation(CancellationMode::QuarantineUntilComplete));
        assert_eq!(
            sub.completion
                .wait_bounded(T, CancellationMode::QuarantineUntilComplete)
                .unwrap(),
            WaitOutcome::Completed
        );
        assert_eq!(f32s(&sub.output), vec![5.0, 6.0]);
    }

    // A batched swap: each sends its rank and receives the other's.
    let mine = HostTensor::from_vec(vec![r as f32; 2]);
    let theirs = HostTensor::from_vec(vec![-1.0f32; 2]);
    let sub = s
        .batch_send_receive(
            World,
            &[PeerValue { peer, value: mine }],
            &[PeerValue {
                peer,
                value: theirs.clone(),
            }],
        )
        .unwrap();
    let outputs = sub.wait_timeout(T).unwrap();
    assert!(outputs[0].shares_storage(&theirs));
    assert_eq!(f32s(&theirs), vec![peer as f32; 2]);

    // The bounded all_gather_words.
    let pending = s.submit_all_gather_words(&[100 + r], T).unwrap();
    assert_eq!(pending.wait(T).unwrap(), vec![100, 101]);
    assert!(pending.is_ready());

    // The key-value broker.
    if r == 0 {
        rank.kv_set("rs/blob", b"hel\0lo").unwrap();
    }
    assert_eq!(rank.kv_get("rs/blob", T).unwrap(), b"hel\0lo".to_vec());
    // A key belongs to its creator; "r<rank>/" keys to that rank.
    let n = rank.kv_add(&format!("r{}/rs/counter", r), 5).unwrap();
    assert_eq!(n, 5);
    rank.all_gather_words(&[r], T).unwrap();
    // Every rank's counter and rank 0's blob exist now.
    assert_eq!(rank.kv_count("rs/").unwrap(), 1);
    assert_eq!(rank.kv_count(&format!("r{}/rs/", r)).unwrap(), 1);
    assert!(rank.kv_count("").unwrap() >= 2);
    if r == 1 {
        expect_err(
            rank.kv_delete("rs/blob"),
            Code::PermissionDenied,
            "created it",
        );
        expect_err(
            rank.kv_set("r0/rs/counter", b"1"),
            Code::PermissionDenied,
            "belong to rank 0",
        );
    }
    rank.all_gather_words(&[r], T).unwrap();
    if r == 0 {
        assert!(rank.kv_delete("rs/blob").unwrap());
        assert!(!rank.kv_delete("rs/blob").unwrap());
    }
    assert!(rank.job_health().is_none());

    rank.all_gather_words(&[r], T).unwrap();
    println!("RUST RANK {} OK", r);
}

fn refusals(rank: &Rank) {
    let r = rank.rank();
    let s = session(rank);
    let x = HostTensor::from_vec(vec![1.0f32, 2.0]);

    // all_to_all_v counts that do not match the input or the group.
    let three = HostTensor::from_vec(vec![1.0f32, 2.0, 3.0]);
    expect_err(
        s.all_to_all_v(World, &three, &[1, 1], &[1, 1]),
        Code::InvalidArgument,
        "",
    );
    expect_err(
        s.all_to_all_v(World, &x, &[1, 1, 0], &[1, 1, 0]),
        Code::InvalidArgument,
        "",
    );
    expect_err(
        s.all_to_all_v(World, &x, &[1, 1], &[2]),
        Code::InvalidArgument,
        "receive counts",
    );
    // A peer out of range, or this rank itself.
    expect_err(
        s.send(World, 5, &x),
        Code::InvalidArgument,
        "peer 5 is outside",
    );
    expect_err(
        s.receive(
            World,
            7,
            &ValueDescriptor::new(vec![2], TensorDtype::F32).unwrap(),
        ),
        Code::InvalidArgument,
        "peer 7",
    );
    expect_err(s.send(World, r as usize, &x), Code::InvalidArgument, "");
    // A group this rank is not in.
    expect_err(s.all_reduce_sum(Group(77), &x), Code::NotFound, "77");
    expect_err(s.all_gather(Group(77), &x), Code::NotFound, "77");
    // A sum of booleans is not a boolean.
    expect_err(
        s.all_reduce_sum(World, &HostTensor::from_vec(vec![true, false])),
        Code::InvalidArgument,
        "bool",
    );
    // An output of the wrong shape.
    let wrong = HostTensor::zeros(TensorDtype::F32, &[3]).unwrap();
    expect_err(
        s.all_reduce_sum_into(World, &x, &wrong),
        Code::InvalidArgument,
        "f32[3]",
    );
    // The key-value broker and words rounds.
    expect_err(
        rank.kv_get("rs/never", Duration::from_millis(200)),
        Code::DeadlineExceeded,
        "rs/never",
    );
    expect_err(rank.kv_set("bad\0key", b""), Code::InvalidArgument, "NUL");
    expect_err(
        rank.all_gather_words(&[1], Duration::ZERO),
        Code::InvalidArgument,
        "timeout",
    );

    // A bounded wait refuses a zero timeout before waiting; the work is
    // still there to wait for.
    let sub = s.all_reduce_sum(World, &x).unwrap();
    expect_err(
        sub.completion
            .wait_bounded(Duration::ZERO, CancellationMode::QuarantineUntilComplete),
        Code::InvalidArgument,
        "timeout",
    );
    assert_eq!(f32s(&sub.wait_timeout(T).unwrap()), vec![2.0, 4.0]);

    // Still usable after every refusal.
    let ones = HostTensor::from_vec(vec![1.0f32; 2]);
    assert_eq!(
        f32s(&s.all_reduce_sum(World, &ones).unwrap().wait().unwrap()),
        vec![2.0, 2.0]
    );
    rank.all_gather_words(&[r], T).unwrap();
    println!("RUST RANK {} OK", r);
}

/// Rank 1 never sends: rank 0's bounded receive misses its deadline, and
/// the session is poisoned.
fn deadline(rank: &Rank) {
    let r = rank.rank();
    // Work that itself fails with DeadlineExceeded (its peer never sends
    // within op_timeout) is an error, not the bounded wait's own timeout.
    {
        let short = SessionOptions {
            op_timeout: Some(Duration::from_secs(1)),
            ..SessionOptions::default()
        };
        let s = rank.open_session(&short).unwrap();
        if r == 0 {
            let d = ValueDescriptor::new(vec![2], TensorDtype::F32).unwrap();
            let sub = s.receive(World, 1, &d).unwrap();
            let e = expect_err(
                sub.completion.wait_bounded(
                    Duration::from_secs(20),
                    CancellationMode::QuarantineUntilComplete,
                ),
                Code::DeadlineExceeded,
                "",
            );
            assert!(!e.is_wait_timeout(), "{}", e);
            println!("OWN DEADLINE {}", e);
        }
        rank.all_gather_words(&[r], T).unwrap();
    }
    let options = SessionOptions {
        op_timeout: Some(Duration::from_secs(5)),
        ..SessionOptions::default()
    };
    let s = rank.open_session(&options).unwrap();
    if r == 0 {
        let d = ValueDescriptor::new(vec![2], TensorDtype::F32).unwrap();
        let sub = s.receive(World, 1, &d).unwrap();
        let start = Instant::now();
        let outcome = sub
            .completion
            .wait_bounded(
                Duration::from_millis(500),
                CancellationMode::QuarantineUntilComplete,
            )
            .unwrap();
        assert_eq!(
            outcome,
            WaitOutcome::DeadlineExceeded(CancellationMode::QuarantineUntilComplete)
        );
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{:?}",
            start.elapsed()
        );
        // Poisoned: later work fails at once with the cause.
        let x = HostTensor::from_vec(vec![1.0f32]);
        let e = match s.all_reduce_sum(World, &x) {
            Err(e) => e,
            Ok(sub) => sub.completion.wait().unwrap_err(),
        };
        println!("POISONED {}", e);
    }
    rank.all_gather_words(&[r], T).unwrap();
    println!("RUST RANK {} OK", r);
}

/// docs/contract.md, "Empty values": tensors of no rows through every
/// operation, pairing in order; a receive of no rows that rank 0 never
/// sends fails naming rank 0.
fn empty(rank: &Rank) {
    let r = rank.rank();
    let peer = 1 - r as usize;
    let s = session(rank);
    let none = HostTensor::zeros(TensorDtype::F32, &[0, 3]).unwrap();
    let got = s.all_reduce_sum(World, &none).unwrap().wait().unwrap();
    assert_eq!(got.shape(), &[0, 3]);
    let got = s.all_gather(World, &none).unwrap().wait().unwrap();
    assert_eq!(got.shape(), &[0, 3]);
    let got = s
        .all_to_all_v(World, &none, &[0, 0], &[0, 0])
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(got.shape(), &[0, 3]);
    // Rank 0 sends no rows, then [5, 6]: they pair in order.
    if r == 0 {
        s.send(World, 1, &none).unwrap().wait().unwrap();
        let x = HostTensor::from_vec(vec![5.0f32, 6.0]);
        s.send(World, 1, &x).unwrap().wait().unwrap();
    } else {
        let got = s.receive(World, 0, &none.descriptor()).unwrap();
        assert_eq!(got.wait().unwrap().shape(), &[0, 3]);
        let d = ValueDescriptor::new(vec![2], TensorDtype::F32).unwrap();
        let got = s.receive(World, 0, &d).unwrap().wait().unwrap();
        assert_eq!(f32s(&got), vec![5.0, 6.0]);
    }
    let out = HostTensor::zeros(TensorDtype::F32, &[0, 3]).unwrap();
    s.batch_send_receive(
        World,
        &[PeerValue {
            peer,
            value: none.clone(),
        }],
        &[PeerValue { peer, value: out }],
    )
    .unwrap()
    .wait_timeout(T)
    .unwrap();
    let theirs = HostTensor::from_vec(vec![-1.0f32; 2]);
    s.batch_send_receive(
        World,
        &[PeerValue {
            peer,
            value: HostTensor::from_vec(vec![r as f32; 2]),
        }],
        &[PeerValue {
            peer,
            value: theirs.clone(),
        }],
    )
    .unwrap()
    .wait_timeout(T)
    .unwrap();
    assert_eq!(f32s(&theirs), vec![peer as f32; 2]);
    rank.all_gather_words(&[r], T).unwrap();
    drop(s);
    // Its send never comes: the receive waits for it and names rank 0.
    let short = SessionOptions {
        op_timeout: Some(Duration::from_secs(1)),
        ..SessionOptions::default()
    };
    let s = rank.open_session(&short).unwrap();
    if r == 1 {
        let sub = s.receive(World, 0, &none.descriptor()).unwrap();
        let e = expect_err(
            sub.wait(),
            Code::DeadlineExceeded,
            "rank 0 did not report operation #0",
        );
        println!("UNPAIRED {}", e);
    }
    rank.all_gather_words(&[r], T).unwrap();
    println!("RUST RANK {} OK", r);
}

/// `SessionOptions::restrict_capabilities`: what is left out is refused
/// naming the capability; the rest runs.
fn narrowed(rank: &Rank) {
    let r = rank.rank();
    let peer = 1 - r as usize;
    // A group besides the world with both ranks in it.
    let other = rank
        .groups()
        .iter()
        .find(|g| g.id != rankd::WORLD_GROUP_ID && g.members.len() == 2)
        .expect("a second group of both ranks")
        .id;
    let options = SessionOptions {
        op_timeout: Some(T),
        restrict_capabilities: Some(DistributedCapabilities {
            world_collectives: true,
            exact_completion: true,
            ..DistributedCapabilities::default()
        }),
        ..SessionOptions::default()
    };
    let s = rank.open_session(&options).unwrap();
    let caps = s.capabilities();
    assert!(
        caps.world_collectives && caps.exact_completion,
        "{:?}",
        caps
    );
    assert!(
        !caps.point_to_point && !caps.variable_all_to_all,
        "{:?}",
        caps
    );
    // (The world's id stands for the world here, as in the C ABI.)
    assert!(!caps.collective_groups.contains(&other), "{:?}", caps);
    assert!(!s.supports_group(other));
    let x = HostTensor::from_vec(vec![1.0f32, 2.0]);
    let e = expect_err(
        s.send(World, peer, &x),
        Code::Unimplemented,
        "gloo backend: send needs capability 'point_to_point', which this backend does not advertise",
    );
    println!("NARROWED {}", e);
    expect_err(
        s.all_to_all_v(World, &x, &[1, 1], &[1, 1]),
        Code::Unimplemented,
        "'variable_all_to_all'",
    );
    expect_err(
        s.all_reduce_sum(Group(other), &x),
        Code::Unimplemented,
        "'collective_groups'",
    );
    let sum = s.all_reduce_sum(World, &x).unwrap().wait().unwrap();
    assert_eq!(f32s(&sum), vec![2.0, 4.0]);
    rank.all_gather_words(&[r], T).unwrap();
    drop(s);
    // The world left out, the other group kept.
    let options = SessionOptions {
        op_timeout: Some(T),
        restrict_capabilities: Some(DistributedCapabilities {
            collective_groups: [other].into_iter().collect(),
            point_to_point: true,
            ..DistributedCapabilities::default()
        }),
        ..SessionOptions::default()
    };
    let s = rank.open_session(&options).unwrap();
    expect_err(
        s.all_reduce_sum(World, &x),
        Code::Unimplemented,
        "'world_collectives'",
    );
    let sum = s.all_reduce_sum(Group(other), &x).unwrap().wait().unwrap();
    assert_eq!(f32s(&sum), vec![2.0, 4.0]);
    rank.all_gather_words(&[r], T).unwrap();
    println!("RUST RANK {} OK", r);
}

/// Rank 1 dies (exit 3, or killed by the test) once both opened a
/// session; rank 0's receive fails naming it, within a deadline.
fn lost(rank: &Rank, killed: bool) {
    let r = rank.rank();
    // Without recovery a loss fails the job.
    assert_eq!(rank.recovery(), Recovery::Off);
    let (tx, rx) = mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    rank.on_job_failure(move |e| {
        let _ = tx.lock().unwrap().send(e);
    })
    .unwrap();
    let s = session(rank);
    rank.all_gather_words(&[r], T).unwrap();
    if r == 1 {
        if killed {
            println!("READY");
            std::thread::sleep(Duration::from_secs(60)); // the test kills it
        }
        // SAFETY: ends the process on purpose, without leaving.
        unsafe { _exit(3) };
    }
    let d = ValueDescriptor::new(vec![2], TensorDtype::F32).unwrap();
    let sub = s.receive(World, 1, &d).unwrap();
    let start = Instant::now();
    let e = expect_err(
        sub.completion.wait_bounded(
            Duration::from_secs(20),
            CancellationMode::QuarantineUntilComplete,
        ),
        Code::Aborted,
        "rank 1",
    );
    assert!(start.elapsed() < Duration::from_secs(20));
    println!("LOST {}", e);
    let health = rank.job_health().expect("the job failed");
    assert_eq!(health.code(), Code::Aborted, "{}", health);
    assert!(!health.ends_an_epoch(), "{}", health);
    let seen = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the failure callback");
    assert_eq!(seen.code(), Code::Aborted, "{}", seen);
    println!("CALLBACK {}", seen.code());
    println!("RUST RANK {} OK", r);
}

/// (rankd --recovery=on.) Epoch 1: rank 1 dies (exit 3) after a round;
/// rank 0 hears of it, prints "LOST", and rejoins into epoch 2 once the
/// test started a replacement for rank 1, which joins into epoch 2. Both
/// run a round there.
fn rejoin(rank: &Rank) {
    let r = rank.rank();
    assert_eq!(rank.recovery(), Recovery::Job, "under rankd --recovery=on");
    if rank.epoch() == 1 {
        let (tx, rx) = mpsc::channel();
        let tx = std::sync::Mutex::new(tx);
        rank.on_job_failure(move |e| {
            let _ = tx.lock().unwrap().send(e);
        })
        .unwrap();
        expect_err(
            rank.rejoin(1, Duration::ZERO),
            Code::InvalidArgument,
            "timeout",
        );
        // Already past epoch 0: at once.
        rank.rejoin(0, T).unwrap();
        assert_eq!(rank.epoch(), 1);
        rank.all_gather_words(&[r], T).unwrap();
        if r == 1 {
            // SAFETY: ends the process on purpose, without leaving.
            unsafe { _exit(3) };
        }
        let lost = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("the failure callback");
        assert!(lost.message().contains("rank 1"), "{}", lost);
        assert!(lost.message().contains(" epoch 1 ended ("), "{}", lost);
        // The library's mark (rankd_status_ends_an_epoch), not the words.
        let health = rank.job_health().expect("the epoch ended");
        assert!(health.ends_an_epoch(), "{}", health);
        println!("LOST {}", lost);
        rank.rejoin(1, Duration::from_secs(60)).unwrap();
        assert_eq!(rank.epoch(), 2);
        assert!(rank.job_health().is_none(), "{:?}", rank.job_health());
        // A second user of the rank naming the same epoch: at once.
        let start = Instant::now();
        rank.rejoin(1, Duration::from_secs(60)).unwrap();
        assert!(start.elapsed() < Duration::from_secs(5));
    } else {
        assert_eq!(rank.epoch(), 2, "the replacement's epoch");
        assert!(rank.job_health().is_none(), "{:?}", rank.job_health());
    }
    // Round 1 of epoch 2, with the replacement.
    assert_eq!(rank.all_gather_words(&[r + 10], T).unwrap(), vec![10, 11]);
    println!("RUST RANK {} OK", r);
}

/// Session::poison, abort and poison_cause (issue 33): refusals; a
/// poisoned session fails operations with the cause's code and words, the
/// first cause stays; an abort ends rank 0's pending receive at once with
/// its cause.
fn poison(rank: &Rank) {
    assert_eq!(rank.world_size(), 2);
    let r = rank.rank();
    let peer = 1 - r as usize;
    let x = HostTensor::from_vec(vec![1.0f32, 2.0]);
    {
        let s = session(rank);
        assert_eq!(s.poison_cause(), None);
        // Refused before anything is latched.
        for latch in [Session::poison, Session::abort] {
            expect_err(
                latch(&s, &Error::new(Code::Aborted, "a\0b")),
                Code::InvalidArgument,
                "contains a NUL byte",
            );
        }
        assert_eq!(s.poison_cause(), None);
        let sum = s.all_reduce_sum(World, &x).unwrap().wait().unwrap();
        assert_eq!(f32s(&sum), vec![2.0, 4.0]);

        // Poison: operations fail with the cause's code and words; the
        // first cause stays.
        let cause = Error::new(
            Code::Unavailable,
            format!("rank {} drained by its scheduler", r),
        );
        s.poison(&cause).unwrap();
        assert_eq!(s.poison_cause(), Some(cause.clone()));
        let e = expect_err(
            s.all_reduce_sum(World, &x).map(|_| ()),
            Code::Unavailable,
            cause.message(),
        );
        println!("POISONED {}", e);
        expect_err(
            s.send(World, peer, &x).map(|_| ()),
            Code::Unavailable,
            cause.message(),
        );
        s.poison(&Error::new(Code::DataLoss, "a second cause"))
            .unwrap();
        assert_eq!(s.poison_cause(), Some(cause));
        rank.all_gather_words(&[r], T).unwrap();
    }
    // Abort: rank 0's receive that rank 1 never sends fails now with the
    // cause, not at op_timeout (60 s); rank 1 aborts after the barrier.
    let options = SessionOptions {
        op_timeout: Some(Duration::from_secs(60)),
        ..SessionOptions::default()
    };
    let s = rank.open_session(&options).unwrap();
    let cause = Error::new(
        Code::Aborted,
        format!("rank {}: its peer was declared gone", r),
    );
    if r == 0 {
        let d = ValueDescriptor::new(vec![2], TensorDtype::F32).unwrap();
        let sub = s.receive(World, 1, &d).unwrap();
        std::thread::sleep(Duration::from_millis(300)); // most likely running
        let start = Instant::now();
        s.abort(&cause).unwrap();
        let e = expect_err(sub.completion.wait(), Code::Aborted, cause.message());
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{:?}",
            start.elapsed()
        );
        println!("ABORTED {}", e);
    }
    rank.all_gather_words(&[r], T).unwrap();
    if r == 1 {
        s.abort(&cause).unwrap();
    }
    s.poison(&Error::new(Code::DataLoss, "a later cause"))
        .unwrap();
    s.abort(&Error::new(Code::DataLoss, "a later cause"))
        .unwrap();
    assert_eq!(s.poison_cause(), Some(cause.clone()));
    expect_err(
        s.all_reduce_sum(World, &x).map(|_| ()),
        Code::Aborted,
        cause.message(),
    );
    rank.all_gather_words(&[r], T).unwrap();
    println!("RUST RANK {} OK", r);
}

/// Rank 1 dies once both opened a session; rank 0's failure callback holds
/// rank 0's last `Rank` and `Session` and drops them itself, then uses
/// what it captured: the handles are freed off the callback's thread
/// (the library forbids freeing them on it), after the callback returned.
fn dropped_in_callback(rank: Rank) {
    let r = rank.rank();
    let s = session(&rank);
    rank.all_gather_words(&[r], T).unwrap();
    if r == 1 {
        // SAFETY: ends the process on purpose, without leaving.
        unsafe { _exit(3) };
    }
    let held = Arc::new(std::sync::Mutex::new(Some((s, rank))));
    let (tx, rx) = mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    let in_callback = held.clone();
    held.lock()
        .unwrap()
        .as_ref()
        .unwrap()
        .1
        .on_job_failure(move |e| {
            let last = in_callback.lock().unwrap().take();
            drop(last); // the last Session, then the last Rank
            let _ = tx.lock().unwrap().send(format!("{}", e.code()));
        })
        .unwrap();
    drop(held);
    let code = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the failure callback");
    println!("DROPPED IN CALLBACK {}", code);
    // The deferred frees run on a thread of their own meanwhile.
    std::thread::sleep(Duration::from_millis(200));
    println!("RUST RANK {} OK", r);
}

/// The entry the tests run as each rank (not a test case by itself).
#[test]
#[ignore]
fn rank_program() {
    let role = match std::env::var("RANKD_RUST_ROLE") {
        Ok(role) => role,
        Err(_) => return,
    };
    let rank = Rank::join_from_env().unwrap();
    if role == "dropped_in_callback" {
        return dropped_in_callback(rank);
    }
    match role.as_str() {
        "collectives" => collectives(&rank),
        "point_to_point" => point_to_point(&rank),
        "refusals" => refusals(&rank),
        "deadline" => deadline(&rank),
        "lost" => lost(&rank, false),
        "killed" => lost(&rank, true),
        "empty" => empty(&rank),
        "narrowed" => narrowed(&rank),
        "rejoin" => rejoin(&rank),
        "poison" => poison(&rank),
        other => panic!("unknown role {}", other),
    }
}

// ---- The tests (each starts a job) --------------------------------------

#[test]
fn collectives_give_exact_values() {
    LocalJob::start("rs-coll", 2).run_role_ok("collectives");
}

#[test]
fn point_to_point_all_to_all_v_and_kv_give_exact_values() {
    LocalJob::start("rs-p2p", 2).run_role_ok("point_to_point");
}

#[test]
fn bad_arguments_are_refused_with_the_right_code() {
    LocalJob::start("rs-bad", 2).run_role_ok("refusals");
}

#[test]
fn tensors_of_no_rows_work_everywhere_and_pair_in_order() {
    let mut job = LocalJob::start("rs-empty", 2);
    job.run_role_ok("empty");
    let out = job.log("rank1.log");
    assert!(out.contains("UNPAIRED DEADLINE_EXCEEDED: "), "{}", out);
}

#[test]
fn a_narrowed_session_refuses_naming_the_capability() {
    let mut job = LocalJob::start("rs-narrowed", 2);
    job.run_role_ok("narrowed");
    let out = job.log("rank0.log");
    assert!(
        out.contains(
            "NARROWED UNIMPLEMENTED: gloo backend: send needs capability 'point_to_point'"
        ),
        "{}",
        out
    );
}

#[test]
fn a_missed_bounded_wait_is_deadline_exceeded_and_poisons() {
    let mut job = LocalJob::start("rs-late", 2);
    job.run_role_ok("deadline");
    let out = job.log("rank0.log");
    assert!(out.contains("POISONED "), "{}", out);
}

#[test]
fn poison_refuses_with_the_cause_and_abort_ends_pending_work() {
    let mut job = LocalJob::start("rs-poison", 2);
    job.run_role_ok("poison");
    let out = job.log("rank0.log");
    assert!(
        out.contains(
            "POISONED UNAVAILABLE: gloo backend: all_reduce_sum refused: session poisoned by an \
             earlier failure: rank 0 drained by its scheduler"
        ),
        "{}",
        out
    );
    assert!(
        out.contains("ABORTED ABORTED: gloo receive from member 1 "),
        "{}",
        out
    );
}

#[test]
fn a_rank_that_exits_is_named_as_lost() {
    let mut job = LocalJob::start("rs-lost", 2);
    job.spawn_role("lost");
    let results = job.wait_ranks(Duration::from_secs(60));
    assert_eq!(results[1].code, Some(3), "{}", results[1].output);
    let out = &results[0].output;
    assert_eq!(results[0].code, Some(0), "{}", out);
    assert!(
        out.contains("LOST ABORTED: ") && out.contains("rank 1"),
        "{}",
        out
    );
    assert!(out.contains("CALLBACK ABORTED"), "{}", out);
}

#[test]
fn a_failure_callback_may_drop_the_last_handles() {
    let mut job = LocalJob::start("rs-drop-cb", 2);
    job.spawn_role("dropped_in_callback");
    let results = job.wait_ranks(Duration::from_secs(60));
    assert_eq!(results[1].code, Some(3), "{}", results[1].output);
    let out = &results[0].output;
    assert_eq!(results[0].code, Some(0), "{}", out);
    assert!(out.contains("DROPPED IN CALLBACK ABORTED"), "{}", out);
    assert!(out.contains("RUST RANK 0 OK"), "{}", out);
}

#[test]
fn a_killed_rank_is_named_as_lost() {
    let mut job = LocalJob::start("rs-kill", 2);
    job.spawn_role("killed");
    assert!(
        job.wait_for_output(1, "READY", Duration::from_secs(30)),
        "{}",
        job.log("rank1.log")
    );
    job.kill_rank(1);
    let results = job.wait_ranks(Duration::from_secs(60));
    assert_eq!(results[1].code, None, "killed by a signal");
    let out = &results[0].output;
    assert_eq!(results[0].code, Some(0), "{}", out);
    assert!(
        out.contains("LOST ABORTED: ") && out.contains("rank 1"),
        "{}",
        out
    );
}

#[test]
fn a_survivor_rejoins_the_next_epoch_with_a_replacement() {
    let mut job = LocalJob::start_with_flags(
        "rs-rejoin",
        2,
        &["--recovery=on", "--recovery_deadline_ms=60000"],
    );
    job.spawn_role("rejoin");
    // The survivor heard of the loss, so the job is RECOVERING and rank
    // 1's slot is free for a replacement.
    assert!(
        job.wait_for_output(0, "LOST ", Duration::from_secs(30)),
        "{}\n{}",
        job.log("rank0.log"),
        job.log("rank1.log")
    );
    job.spawn_replacement(1, "rejoin");
    let results = job.wait_ranks(Duration::from_secs(90));
    assert_eq!(results[1].code, Some(3), "{}", results[1].output);
    for (i, r) in [(0, 0), (2, 1)] {
        assert!(
            results[i].code == Some(0)
                && results[i].output.contains(&format!("RUST RANK {} OK", r)),
            "rank {} exited {:?}:\n{}\ndaemon:\n{}",
            r,
            results[i].code,
            results[i].output,
            job.log("daemon.log")
        );
    }
}

#[test]
fn hello_example_prints_the_same_line_as_the_other_languages() {
    // cargo test builds the examples next to the test binaries' folder.
    let exe = std::env::current_exe().unwrap();
    let hello = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples/hello");
    assert!(hello.exists(), "{} not built", hello.display());
    let mut job = LocalJob::start("rs-hello", 2);
    job.spawn_ranks(&hello, &[], &[]);
    let results = job.wait_ranks(Duration::from_secs(60));
    for (r, res) in results.iter().enumerate() {
        assert_eq!(res.code, Some(0), "{}", res.output);
        assert_eq!(
            res.output,
            format!(
                "rank {} of 2: words [0 7 1 7] sum [4 6] gathered [0 1]\n",
                r
            )
        );
    }
}
