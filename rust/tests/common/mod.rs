//! A real local rankd job for the tests: fresh credentials (rankctl), one
//! rankd daemon on loopback and a Unix socket in a short /tmp folder, and
//! rank processes started with the environment the launcher sets. It stops
//! only what it started, by pid, and removes its folder.
//!
//! Binaries: $RANKD_BIN and $RANKCTL_BIN, else next to the librankd.so the
//! crate linked (a bazel-bin: daemon/rankd and client/rankctl; an install
//! prefix: bin/rankd and bin/rankctl).
#![allow(dead_code)]

use std::fs::{self, File};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

fn binary(var: &str, name: &str, subdir: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(var) {
        return PathBuf::from(p);
    }
    let lib = PathBuf::from(option_env!("RANKD_BUILD_LIB_DIR").unwrap_or(""));
    let root = lib.parent().unwrap_or(&lib).to_path_buf();
    for p in [root.join(subdir).join(name), root.join("bin").join(name)] {
        if p.exists() {
            return p;
        }
    }
    panic!(
        "{} not found: set ${} (e.g. $(bazel info bazel-bin)/{}/{})",
        name, var, subdir, name
    );
}

/// Native binaries carry their own sanitizer runtime: never preload one.
fn native(cmd: &mut Command) -> &mut Command {
    cmd.env_remove("LD_PRELOAD")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Sends SIGTERM to one process we started, then SIGKILL after `grace`.
fn stop(child: &mut Child, grace: Duration) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .stderr(Stdio::null())
        .status();
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// One exited (or killed) rank: its exit code (None: killed by a signal)
/// and everything it printed.
#[derive(Debug)]
pub struct RankResult {
    pub code: Option<i32>,
    pub output: String,
}

// Runs this test binary's ignored `rank_program` entry alone.
const ROLE_ARGS: [&str; 5] = [
    "rank_program",
    "--exact",
    "--ignored",
    "--nocapture",
    "--test-threads=1",
];

pub struct LocalJob {
    pub job_id: String,
    pub nproc: u32,
    pub dir: PathBuf,
    daemon: Child,
    ranks: Vec<Child>,
    // The log each of `ranks` writes, in the same order.
    logs: Vec<String>,
}

impl LocalJob {
    /// Starts one daemon for `nproc` ranks of `job_id` and waits (20 s at
    /// most) until it is ready.
    pub fn start(job_id: &str, nproc: u32) -> LocalJob {
        LocalJob::start_with_flags(job_id, nproc, &[])
    }

    /// `start`, the daemon also given `flags` ("--recovery=on", ...).
    pub fn start_with_flags(job_id: &str, nproc: u32, flags: &[&str]) -> LocalJob {
        let out = Command::new("mktemp")
            .args(["-d", "/tmp/rrs.XXXXXX"])
            .output()
            .expect("mktemp");
        let dir = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
        let rankd = binary("RANKD_BIN", "rankd", "daemon");
        let rankctl = binary("RANKCTL_BIN", "rankctl", "client");
        let creds = dir.join("credentials");
        let status = native(&mut Command::new(&rankctl))
            .arg("credentials")
            .arg("create")
            .arg(&creds)
            .stdout(Stdio::null())
            .status()
            .expect("rankctl");
        assert!(status.success(), "rankctl credentials create failed");
        let address = format!("127.0.0.1:{}", free_port());
        let log = File::create(dir.join("daemon.log")).unwrap();
        let daemon = native(&mut Command::new(&rankd))
            .arg(format!("--job_id={}", job_id))
            .arg("--nnodes=1")
            .arg("--node_index=0")
            .arg(format!("--nproc_per_node={}", nproc))
            .arg(format!("--listen={}", address))
            .arg(format!("--socket={}/node0.sock", dir.display()))
            .arg(format!("--credentials_dir={}", creds.display()))
            .arg("--heartbeat_interval_ms=100")
            .arg("--heartbeat_timeout_ms=1000")
            .args(flags)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("rankd");
        let mut job = LocalJob {
            job_id: job_id.to_string(),
            nproc,
            dir,
            daemon,
            ranks: Vec::new(),
            logs: Vec::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let ready = native(&mut Command::new(&rankctl))
                .arg(format!("--target={}", address))
                .args(["--service=readiness", "--timeout_ms=1000", "health"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            if ready {
                return job;
            }
            let exited = job.daemon.try_wait().ok().flatten().is_some();
            if exited || Instant::now() > deadline {
                panic!(
                    "the daemon did not become ready:\n{}",
                    job.log("daemon.log")
                );
            }
            sleep(Duration::from_millis(100));
        }
    }

    pub fn target(&self) -> String {
        format!("unix://{}/node0.sock", self.dir.display())
    }

    /// Rank `rank`'s own token (it joins through node 0), minted from the
    /// job's credentials as rankrun does.
    pub fn rank_token(&self, rank: u32) -> String {
        let rankctl = binary("RANKCTL_BIN", "rankctl", "client");
        let out = native(&mut Command::new(&rankctl))
            .args(["credentials", "rank-token"])
            .arg(self.dir.join("credentials"))
            .arg(&self.job_id)
            .arg("0")
            .arg(rank.to_string())
            .output()
            .expect("rankctl credentials rank-token");
        assert!(
            out.status.success(),
            "rankctl credentials rank-token failed"
        );
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    pub fn log(&self, name: &str) -> String {
        fs::read_to_string(self.dir.join(name)).unwrap_or_default()
    }

    /// Starts `program args` as every rank, with the launcher's
    /// environment plus `env`; returns their pids in rank order.
    pub fn spawn_ranks(&mut self, program: &Path, args: &[&str], env: &[(&str, &str)]) -> Vec<u32> {
        (0..self.nproc)
            .map(|local| self.spawn_rank(local, &format!("rank{}.log", local), program, args, env))
            .collect()
    }

    /// Starts `program args` as rank `local`, writing `log`; returns its
    /// pid. wait_ranks reports it after those started before it.
    fn spawn_rank(
        &mut self,
        local: u32,
        log: &str,
        program: &Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> u32 {
        let file = File::create(self.dir.join(log)).unwrap();
        let mut cmd = Command::new(program);
        cmd.args(args)
            .env("RANKD_RANK_TOKEN", self.rank_token(local))
            .env("RANKD_TARGET", self.target())
            .env("RANKD_JOB_ID", &self.job_id)
            .env("RANKD_LOCAL_RANK", local.to_string())
            .env_remove("RANKD_RANK")
            .env_remove("RANKD_WORLD_SIZE")
            .env_remove("RANKD_TOKEN_FILE")
            .env_remove("RANKD_BACKEND")
            .stdout(file.try_clone().unwrap())
            .stderr(file);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("spawn a rank");
        let pid = child.id();
        self.ranks.push(child);
        self.logs.push(log.to_string());
        pid
    }

    /// Runs this test binary's `rank_program` entry with
    /// `RANKD_RUST_ROLE=role` as a replacement process for rank `local`
    /// (a new incarnation), writing rank<local>.replacement.log.
    pub fn spawn_replacement(&mut self, local: u32, role: &str) -> u32 {
        let me = std::env::current_exe().unwrap();
        self.spawn_rank(
            local,
            &format!("rank{}.replacement.log", local),
            &me,
            &ROLE_ARGS,
            &[("RANKD_RUST_ROLE", role)],
        )
    }

    /// Runs this test binary's `rank_program` entry as every rank, with
    /// `RANKD_RUST_ROLE=role`.
    pub fn spawn_role(&mut self, role: &str) -> Vec<u32> {
        let me = std::env::current_exe().unwrap();
        self.spawn_ranks(&me, &ROLE_ARGS, &[("RANKD_RUST_ROLE", role)])
    }

    /// Waits for every rank process started, in the order started
    /// (killing those still running at `timeout`).
    pub fn wait_ranks(&mut self, timeout: Duration) -> Vec<RankResult> {
        let deadline = Instant::now() + timeout;
        let mut results = Vec::new();
        for (r, child) in self.ranks.iter_mut().enumerate() {
            let code = loop {
                if let Ok(Some(status)) = child.try_wait() {
                    break status.code();
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    break child.wait().ok().and_then(|s| s.code());
                }
                sleep(Duration::from_millis(20));
            };
            let output = fs::read_to_string(self.dir.join(&self.logs[r])).unwrap_or_default();
            results.push(RankResult { code, output });
        }
        results
    }

    /// SIGKILL to rank `r`, a process this job started.
    pub fn kill_rank(&mut self, r: usize) {
        let _ = self.ranks[r].kill();
    }

    /// Waits (at most `timeout`) until rank `r`'s output contains `needle`.
    pub fn wait_for_output(&self, r: usize, needle: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.log(&format!("rank{}.log", r)).contains(needle) {
                return true;
            }
            sleep(Duration::from_millis(20));
        }
        false
    }

    /// Runs `role` on every rank and asserts each exits 0 printing
    /// "RUST RANK <r> OK".
    pub fn run_role_ok(&mut self, role: &str) {
        self.spawn_role(role);
        let results = self.wait_ranks(Duration::from_secs(60));
        for (r, res) in results.iter().enumerate() {
            assert!(
                res.code == Some(0) && res.output.contains(&format!("RUST RANK {} OK", r)),
                "rank {} of role {} exited {:?}:\n{}\ndaemon:\n{}",
                r,
                role,
                res.code,
                res.output,
                self.log("daemon.log")
            );
        }
    }
}

impl Drop for LocalJob {
    fn drop(&mut self) {
        for child in self.ranks.iter_mut() {
            stop(child, Duration::from_secs(5));
        }
        stop(&mut self.daemon, Duration::from_secs(5));
        let _ = fs::remove_dir_all(&self.dir);
    }
}
