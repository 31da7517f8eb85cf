//! main.rs: a rank program outside the rankd crate's package (see
//! Cargo.toml). It joins from the launcher's environment, agrees on one
//! word per rank and prints one line per rank.
use std::time::Duration;

fn run() -> rankd::Result<()> {
    let rank = rankd::Rank::join_from_env()?;
    let words = rank.all_gather_words(&[rank.rank() + 40], Duration::from_secs(30))?;
    println!(
        "dependent: rank {} of {}: words {:?}",
        rank.rank(),
        rank.world_size(),
        words
    );
    rank.leave()
}

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {}", e);
        std::process::exit(1);
    }
}
