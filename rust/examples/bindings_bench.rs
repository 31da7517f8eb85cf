//! bindings_bench.rs: the Rust twin of bench/bindings/bindings_bench.cc
//! (see there): the same small all_reduce_sum loop (f32[4], Gloo, world
//! scope, submit then wait, into a preallocated output) through the rankd
//! crate, printing on rank 0
//!     BINDING rust world <W> ops <N> p50_ns <x> p99_ns <y> mean_ns <z>
//! Usage (under rankrun, or bench/run_bindings.sh): bindings_bench [ops] [warmup]
use std::time::{Duration, Instant};

use rankd::CollectiveScope::World;
use rankd::{Completion, HostTensor, Rank, SessionOptions};

fn arg(n: usize, default: i64) -> i64 {
    std::env::args()
        .nth(n)
        .map_or(default, |a| a.parse().unwrap_or(0))
}

fn run(ops: usize, warmup: usize) -> rankd::Result<()> {
    let rank = Rank::join_from_env()?;
    let session = rank.open_session(&SessionOptions::default())?;
    let x = HostTensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0]);
    let out = HostTensor::zeros(x.dtype(), x.shape())?;
    let mut ns: Vec<u64> = Vec::with_capacity(ops);
    for i in 0..warmup + ops {
        let start = Instant::now();
        session
            .all_reduce_sum_into(World, &x, &out)?
            .completion
            .wait()?;
        let elapsed = start.elapsed().as_nanos() as u64;
        if i >= warmup {
            ns.push(elapsed);
        }
        if i == 0 && out.to_vec::<f32>()?[0] != rank.world_size() as f32 {
            eprintln!("error: wrong sum {:?}", out.to_vec::<f32>()?);
            std::process::exit(1);
        }
    }
    ns.sort_unstable();
    let mean = ns.iter().map(|&v| v as f64 / ops as f64).sum::<f64>();
    if rank.rank() == 0 {
        println!(
            "BINDING rust world {} ops {} p50_ns {} p99_ns {} mean_ns {:.0}",
            rank.world_size(),
            ops,
            ns[ops / 2],
            ns[ops * 99 / 100],
            mean
        );
    }
    rank.all_gather_words(&[rank.rank()], Duration::from_secs(60))?;
    drop(session);
    rank.leave()
}

fn main() {
    let (ops, warmup) = (arg(1, 20000), arg(2, 2000));
    if ops < 1 || warmup < 1 {
        eprintln!("usage: bindings_bench [ops >= 1] [warmup >= 1]");
        std::process::exit(2);
    }
    if let Err(e) = run(ops as usize, warmup as usize) {
        eprintln!("error: {}", e);
        std::process::exit(1);
    }
}
