//! hello.rs: the two-rank program of docs/client-api.md in Rust, over the
//! rankd crate (the C ABI, librankd.so). Start it with the launcher:
//!     rankrun --nproc_per_node=2 rust/target/debug/examples/hello
//! Every rank prints the same line as the C++, C and Python versions.
use std::time::Duration;

use rankd::CollectiveScope::World;
use rankd::{DistributedSession, HostTensor, Rank, SessionOptions};

fn run() -> rankd::Result<()> {
    // From the launcher's environment; every wait below is bounded.
    let rank = Rank::join_from_env()?;
    let (r, world) = (rank.rank(), rank.world_size());
    let timeout = Duration::from_secs(30);

    // Scheduling metadata: one frame [rank, 7] per rank, rank-major.
    let words = rank.all_gather_words(&[r, 7], timeout)?;

    // Tensors over Gloo: rank r holds [2r+1, 2r+2]; two ranks sum to [4, 6].
    let session = rank.open_session(&SessionOptions::default())?;
    let x = HostTensor::from_vec(vec![2.0 * r as f32 + 1.0, 2.0 * r as f32 + 2.0]);
    let sum = session.all_reduce_sum(World, &x)?.wait_timeout(timeout)?;
    let mine = HostTensor::from_vec(vec![r as i32]);
    let gathered = session.all_gather(World, &mine)?.wait_timeout(timeout)?;

    println!(
        "rank {} of {}: words [{}] sum [{}] gathered [{}]",
        r,
        world,
        joined(&words),
        joined(&sum.to_vec::<f32>()?),
        joined(&gathered.to_vec::<i32>()?)
    );

    // A last round is a barrier: nobody closes its session while a peer
    // still uses it. Then leave cleanly.
    rank.all_gather_words(&[r, 7], timeout)?;
    drop(session);
    rank.leave()
}

fn joined<T: ToString>(values: &[T]) -> String {
    let strings: Vec<String> = values.iter().map(T::to_string).collect();
    strings.join(" ")
}

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {}", e);
        std::process::exit(1);
    }
}
