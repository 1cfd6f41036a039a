//! Connection churn against a live root: thousands of connect/close cycles
//! while a real job of three PEs rendezvous. The root serves every
//! connection from its one event loop, so the process's threads do not grow
//! and its resident memory stays within a fixed bound. Alone in its test
//! binary, so no other test's threads or memory are counted.

use std::{
    fs,
    io::Write,
    net::{SocketAddr, TcpStream},
    sync::mpsc,
    thread,
    time::Duration,
};

use switchyard_bootstrap::{Bootstrap, BootstrapError, Card, JobSecret, RootServer};

/// Connect/close cycles against the root.
const CYCLES: usize = 5000;
/// How far the resident set may grow over the churn.
const RSS_BOUND: u64 = 16 << 20;

fn threads() -> u64 {
    let status = fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("a Threads: line")
}

fn rss_bytes() -> u64 {
    let statm = fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("resident pages");
    // SAFETY: sysconf takes no pointers.
    #[allow(unsafe_code)]
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * u64::try_from(page).unwrap_or(4096)
}

fn pe(
    addr: SocketAddr,
    rank: u32,
    size: u32,
    job: u64,
    timeout: Duration,
    secret: JobSecret,
) -> thread::JoinHandle<Result<usize, BootstrapError>> {
    thread::spawn(move || {
        let card = Card::new(job, rank, 7);
        let (mut b, cards) = Bootstrap::join(addr, rank, size, job, card, timeout, &secret)?;
        b.barrier(timeout)?;
        b.finish()?;
        Ok(cards.len())
    })
}

#[test]
fn connection_churn_keeps_the_root_flat_and_the_job_runs() {
    let job = 0xc4u64;
    let size = 3;
    // Generous: the churn runs inside the allgather, and a loaded machine
    // may be slow; nothing here asserts a duration.
    let timeout = Duration::from_secs(120);
    let secret = JobSecret::from_hex("test", &"c4".repeat(32)).unwrap();
    let root =
        RootServer::bind("127.0.0.1:0".parse().unwrap(), job, size, timeout, &secret).unwrap();
    let addr = root.local_addr();
    let stats = root.stats();
    let served = root.spawn().unwrap();

    // Two PEs join first and wait in the allgather through the churn.
    let early: Vec<_> = (0..2)
        .map(|rank| pe(addr, rank, size, job, timeout, secret.clone()))
        .collect();

    let (threads_before, rss_before) = (threads(), rss_bytes());
    let (done_tx, done_rx) = mpsc::channel();
    let churn = thread::spawn(move || {
        let mut connected = 0usize;
        for i in 0..CYCLES {
            let Ok(mut s) = TcpStream::connect(addr) else {
                continue;
            };
            connected += 1;
            if i % 10 == 0 {
                // Some say something that is not a hello before leaving.
                let _ = s.write_all(b"GET / HTTP/1.1\r\n\r\n");
            }
        }
        done_tx.send(()).unwrap();
        connected
    });
    done_rx.recv().unwrap();
    let connected = churn.join().unwrap();
    // The churn thread is gone: the same threads as before (the root's own,
    // the test's, the two waiting PEs'), whatever the root did with the
    // connections.
    let (threads_after, rss_after) = (threads(), rss_bytes());

    // The last PE completes the job.
    let last = pe(addr, 2, size, job, timeout, secret);
    for p in early.into_iter().chain([last]) {
        assert_eq!(p.join().unwrap().unwrap(), size as usize);
    }
    served.join().unwrap().unwrap();

    eprintln!(
        "churn: {connected} of {CYCLES} connections; threads {threads_before} -> \
         {threads_after}; RSS {} KiB -> {} KiB; unauthenticated {}",
        rss_before >> 10,
        rss_after >> 10,
        stats.unauthenticated()
    );
    assert_eq!(connected, CYCLES, "every cycle reached the live root");
    assert!(
        threads_after <= threads_before,
        "threads grew from {threads_before} to {threads_after}"
    );
    assert!(
        rss_after <= rss_before + RSS_BOUND,
        "RSS grew from {rss_before} to {rss_after} bytes"
    );
    assert!(stats.unauthenticated() >= 1);
}
