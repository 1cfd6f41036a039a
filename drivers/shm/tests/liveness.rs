//! Liveness across processes: a peer PE in a child process (this test
//! binary run again as `child_pe`), found dead by progress once killed, on
//! the progress calls' own clock (no timing). The child is killed and not
//! reaped: a zombie, which `kill(pid, 0)` still calls alive and the pidfd
//! does not.

use std::{
    io::{BufRead, BufReader},
    path::PathBuf,
    process::{Command, Stdio},
};

use switchyard_core::transport::{Instant, LinkState, Transport};
use switchyard_shm::{Segment, SegmentConfig, ShmTransport};

const CHILD: &str = "SWITCHYARD_SHM_LIVENESS_CHILD";
const MS: u64 = 1_000_000;

/// The child's part: with `$SWITCHYARD_SHM_LIVENESS_CHILD` set to a job id,
/// creates PE 1's segment, prints its path, beats its heartbeat and waits
/// for its stdin to close (it is killed before). Without it, nothing.
#[test]
fn child_pe() {
    let Some(job) = std::env::var(CHILD)
        .ok()
        .and_then(|j| j.parse::<u64>().ok())
    else {
        return;
    };
    let s = Segment::create(&SegmentConfig::new(job, 1, 2, 4096)).unwrap();
    s.mapped().beat();
    println!("\npath {}", s.path().display());
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
}

#[test]
fn a_killed_peer_is_found_dead_by_progress_even_unreaped() {
    let job = (u64::from(std::process::id()) << 24) ^ 0x11FE_0000_0000_0000;
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_pe", "--nocapture", "--test-threads=1"])
        .env(CHILD, job.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = BufReader::new(child.stdout.take().unwrap());
    let path: PathBuf = out
        .lines()
        .map_while(Result::ok)
        // The harness may print its "test child_pe ... " first.
        .find_map(|l| l.split_once("path ").map(|(_, p)| PathBuf::from(p)))
        .expect("the child's segment path");
    let own = Segment::create(&SegmentConfig::new(job, 0, 2, 4096)).unwrap();
    let mut t = ShmTransport::new(own, job, 0, 2).unwrap();
    t.set_address(1, &path).unwrap();
    t.connect(1).unwrap();
    // Alive: many looks (each one peer per ms), a kernel check among them.
    for k in 1..=50 {
        t.progress(Instant::from_nanos(k * MS));
    }
    assert_eq!(t.state(1), LinkState::Up);
    child.kill().unwrap();
    // Killed, not reaped (a zombie until `wait` below). Its death is seen
    // within the kernel-check period plus a look, on progress's clock; the
    // real process may take a moment to exit, so the loop is bounded by
    // looks, not time.
    let mut k = 50;
    while t.state(1) != LinkState::Error && k < 50 + 1_000_000 {
        k += 1;
        t.progress(Instant::from_nanos(k * MS));
        if k % 64 == 0 {
            std::thread::yield_now();
        }
    }
    assert_eq!(t.state(1), LinkState::Error, "PE 1 not found dead");
    child.wait().unwrap();
    let _ = std::fs::remove_file(&path);
}
