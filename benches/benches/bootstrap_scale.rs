//! The bootstrap rendezvous at scale: one root and N PEs on 127.0.0.1, each
//! PE a thread of a second process, for N = 64, 256, 1,024 and 4,096
//! (`cargo bench -p switchyard-benches --bench bootstrap_scale`; 16 only in
//! test mode, `cargo test --benches`), each size with every card to every
//! PE (`all`, [`Bootstrap::join`]), with lazy cards (`lazy`,
//! [`Bootstrap::join_lazy`]: localities to every PE, then each PE fetches
//! the cards of its node's other PEs, as a context does for shm) and with
//! lazy cards and only the node's localities (`node`,
//! [`Bootstrap::join_lazy_node`]: each PE gets its node's runs, then
//! fetches the same cards). `BOOTSTRAP_SCALE_MODE` runs one mode only;
//! `BOOTSTRAP_SCALE_PER_NODE` sets the PEs per node (64; 1 is a node per
//! PE, the worst case for `lazy`).
//!
//! Each size runs as two child processes of this binary, so that the root's
//! memory is its own: the root (`BOOTSTRAP_SCALE_ROLE=root`: binds, prints
//! its address, serves one job, prints its peak resident memory) and the
//! PEs (`BOOTSTRAP_SCALE_ROLE=pes`: N threads, each joining with a card the
//! size of a real one: a shm path, two TCP addresses, a verbs card; then one
//! barrier and the goodbye). Reported per size:
//!
//! * wall time from starting the PEs' process until the root is done, and
//!   per PE;
//! * the root process's peak resident memory (`VmHWM`) above what it had
//!   bound and idle, and per PE;
//! * the bytes the root sent ([`RootStats::bytes_sent`](switchyard_bootstrap::RootStats::bytes_sent)),
//!   per PE;
//! * the bytes of cards (and localities) one PE holds (`all`: every card,
//!   N² in all through the root; `lazy`: the runs, 20 bytes per node, and
//!   the cards of its node; `node`: its node's runs, 16 bytes each, and
//!   the cards of its node) and the PEs' process peak;
//! * an extrapolation to 1,000,000 PEs of the root's bytes and time per PE:
//!   a straight line through the two largest sizes, never below the largest
//!   size's figure (per PE, `all` grows with N; `lazy` only by the runs, 20
//!   bytes per 64 PEs; `node` not at all). One root serves the PEs one after another, so the
//!   time in all is N times the time per PE.
//!
//! A benchmark, not a test: nothing is asserted about the figures.

use std::{
    io::{BufRead, BufReader, Write},
    net::SocketAddr,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use switchyard_benches::measuring;
use switchyard_bootstrap::{Bootstrap, Card, JobSecret, Localities, RootServer};

/// PEs per simulated node (the cards' node ids): `BOOTSTRAP_SCALE_PER_NODE`
/// (1 is the worst case for the localities: a node per PE), else 64.
fn per_node() -> u32 {
    std::env::var("BOOTSTRAP_SCALE_PER_NODE")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(64)
}

/// The job's secret (this benchmark's own).
const SECRET: &str = "b005b005b005b005b005b005b005b005b005b005b005b005b005b005b005b005";

/// How long any wait of a run may take.
const TIMEOUT: Duration = Duration::from_secs(300);

fn secret() -> JobSecret {
    JobSecret::from_hex("bootstrap_scale", SECRET).expect("a valid secret")
}

/// PE `rank`'s card: what a PE on a node with shm, two TCP rails and verbs
/// announces.
fn card(job: u64, rank: u32) -> Card {
    let mut c = Card::new(job, rank, 1000 + u64::from(rank / per_node()));
    c.shm = Some(format!("/switchyard-{job:016x}-{rank}"));
    let port = 20_000 + (rank % 40_000) as u16;
    c.tcp = vec![
        SocketAddr::from(([10, 0, (rank >> 8) as u8, rank as u8], port)),
        SocketAddr::from(([10, 1, (rank >> 8) as u8, rank as u8], port)),
    ];
    c.verbs = Some(vec![rank as u8; 40]);
    c
}

/// A line of `/proc/self/status`, in KiB.
fn status_kib(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// The root's process: binds, says where (`addr <addr> <rss KiB>`), serves
/// one job of `n`, then prints `peak <VmHWM KiB> <bytes sent>`.
fn root(n: u32, job: u64) {
    let root = RootServer::bind("127.0.0.1:0".parse().unwrap(), job, n, TIMEOUT, &secret())
        .expect("the root binds");
    let idle = status_kib("VmRSS:");
    println!("addr {} {idle}", root.local_addr());
    std::io::stdout().flush().expect("stdout");
    let stats = root.stats();
    root.serve().expect("the job runs");
    println!("peak {} {}", status_kib("VmHWM:"), stats.bytes_sent());
}

/// The PEs' process: `n` threads join at `addr` (lazily: and fetch their
/// node's cards), pass one barrier and say goodbye; prints `cards <bytes
/// rank 0 holds> <VmHWM KiB>`.
fn pes(n: u32, job: u64, addr: SocketAddr, mode: Mode) {
    let threads: Vec<_> = (0..n)
        .map(|rank| {
            std::thread::Builder::new()
                .stack_size(256 << 10)
                .spawn(move || {
                    if mode != Mode::All {
                        return lazy_pe(n, job, addr, rank, mode == Mode::Node);
                    }
                    let (mut b, cards) =
                        Bootstrap::join(addr, rank, n, job, card(job, rank), TIMEOUT, &secret())
                            .expect("join");
                    assert_eq!(cards.len(), n as usize);
                    let bytes: usize = if rank == 0 {
                        cards
                            .iter()
                            .map(|c| c.encode().map_or(0, |e| e.len()))
                            .sum()
                    } else {
                        0
                    };
                    drop(cards);
                    b.barrier(TIMEOUT).expect("barrier");
                    b.finish().expect("goodbye");
                    bytes
                })
                .expect("a PE thread")
        })
        .collect();
    let bytes: usize = threads.into_iter().map(|t| t.join().expect("a PE")).sum();
    println!("cards {bytes} {}", status_kib("VmHWM:"));
}

/// A lazy PE (`node`: asking for its node's localities only): joins,
/// fetches the cards of the other PEs of its node, passes a barrier, says
/// goodbye; returns what it holds (rank 0 only).
fn lazy_pe(n: u32, job: u64, addr: SocketAddr, rank: u32, node_only: bool) -> usize {
    let join = if node_only {
        Bootstrap::join_lazy_node
    } else {
        Bootstrap::join_lazy
    };
    let (mut b, locs): (Bootstrap, Localities) =
        join(addr, rank, n, job, card(job, rank), TIMEOUT, &secret()).expect("lazy join");
    let node = locs.get(rank).expect("my locality").node_id;
    let peers: Vec<u32> = locs
        .ranks_on(node)
        .into_iter()
        .filter(|&r| r != rank)
        .collect();
    let cards = if peers.is_empty() {
        Default::default()
    } else {
        b.fetch_cards(&peers).expect("fetch")
    };
    assert_eq!(cards.len(), peers.len());
    let bytes = if rank == 0 {
        locs.run_count() * if node_only { 16 } else { 20 }
            + cards
                .iter()
                .map(|c| c.encode().map_or(0, |e| e.len()))
                .sum::<usize>()
    } else {
        0
    };
    b.barrier(TIMEOUT).expect("barrier");
    b.finish().expect("goodbye");
    bytes
}

/// How the PEs join.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Every card.
    All,
    /// Lazy cards, every locality.
    Lazy,
    /// Lazy cards, the node's localities.
    Node,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::All => "all",
            Mode::Lazy => "lazy",
            Mode::Node => "node",
        }
    }

    fn of(name: &str) -> Mode {
        match name {
            "lazy" => Mode::Lazy,
            "node" => Mode::Node,
            _ => Mode::All,
        }
    }
}

/// One size's figures: PEs, seconds per PE, root bytes sent per PE.
struct Figures {
    n: u32,
    secs_per_pe: f64,
    sent_per_pe: f64,
}

/// One size: the two processes, and the figures.
fn run(n: u32, mode: Mode) -> Figures {
    let job = 0x5CA1E_u64 << 32 ^ u64::from(n);
    let me = std::env::current_exe().expect("this binary");
    let mut root = Command::new(&me)
        .env("BOOTSTRAP_SCALE_ROLE", "root")
        .env("BOOTSTRAP_SCALE_N", n.to_string())
        .env("BOOTSTRAP_SCALE_JOB", job.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the root's process");
    let mut out = BufReader::new(root.stdout.take().expect("its stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("the root's address");
    let mut words = line.split_whitespace().skip(1);
    let addr = words.next().expect("an address").to_owned();
    let idle: u64 = words.next().and_then(|w| w.parse().ok()).unwrap_or(0);
    let start = Instant::now();
    let pes = Command::new(&me)
        .env("BOOTSTRAP_SCALE_ROLE", "pes")
        .env("BOOTSTRAP_SCALE_N", n.to_string())
        .env("BOOTSTRAP_SCALE_JOB", job.to_string())
        .env("BOOTSTRAP_SCALE_ADDR", &addr)
        .env("BOOTSTRAP_SCALE_MODE", mode.name())
        .output()
        .expect("the PEs' process");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).expect("the root's report");
    assert!(root.wait().expect("the root").success(), "the root failed");
    let secs = start.elapsed().as_secs_f64();
    assert!(pes.status.success(), "the PEs failed: {pes:?}");
    let field = |text: &str, key: &str, i: usize| -> u64 {
        text.lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(i)?.parse().ok())
            .unwrap_or(0)
    };
    let peak = field(&rest, "peak", 1);
    let sent = field(&rest, "peak", 2);
    let pes_out = String::from_utf8_lossy(&pes.stdout);
    let (cards, pes_peak) = (field(&pes_out, "cards", 1), field(&pes_out, "cards", 2));
    let grown = peak.saturating_sub(idle);
    let sent_per_pe = sent as f64 / f64::from(n);
    println!(
        "{n:>7} {:>5} {secs:>9.3} {:>10.1} {:>10.1} {:>12.2} {:>12.2} {:>10.1} {:>9.1}",
        mode.name(),
        secs * 1e6 / f64::from(n),
        grown as f64 / 1024.0,
        grown as f64 / f64::from(n),
        sent_per_pe / 1024.0,
        cards as f64 / 1024.0,
        pes_peak as f64 / 1024.0,
    );
    Figures {
        n,
        secs_per_pe: secs / f64::from(n),
        sent_per_pe,
    }
}

/// The straight line through the two largest sizes' per-PE figures, at
/// one million PEs.
fn extrapolate(mode: &str, f: &[Figures]) {
    let [.., a, b] = f else {
        return;
    };
    // Never below the largest size's figure: a per-PE time that fell
    // between the two sizes (noise, or a fixed cost spread thinner) is
    // taken as flat.
    let at = |ya: f64, yb: f64| {
        let slope = (yb - ya) / f64::from(b.n - a.n);
        (yb + slope * (1e6 - f64::from(b.n))).max(yb)
    };
    let sent = at(a.sent_per_pe, b.sent_per_pe);
    let secs = at(a.secs_per_pe, b.secs_per_pe);
    println!(
        "{:>7} {mode:>5}  extrapolated: root sends {:.1} KiB per PE ({:.1} GiB in all), {:.1} us per PE ({:.0} s in all, one root)",
        "1000000",
        sent / 1024.0,
        sent * 1e6 / f64::from(1u32 << 30),
        secs * 1e6,
        secs * 1e6,
    );
}

fn main() {
    let env = |k: &str| std::env::var(k).ok();
    if let Some(role) = env("BOOTSTRAP_SCALE_ROLE") {
        let n: u32 = env("BOOTSTRAP_SCALE_N")
            .and_then(|v| v.parse().ok())
            .expect("BOOTSTRAP_SCALE_N");
        let job: u64 = env("BOOTSTRAP_SCALE_JOB")
            .and_then(|v| v.parse().ok())
            .expect("BOOTSTRAP_SCALE_JOB");
        match role.as_str() {
            "root" => root(n, job),
            _ => {
                let addr = env("BOOTSTRAP_SCALE_ADDR")
                    .and_then(|v| v.parse().ok())
                    .expect("BOOTSTRAP_SCALE_ADDR");
                pes(
                    n,
                    job,
                    addr,
                    Mode::of(env("BOOTSTRAP_SCALE_MODE").as_deref().unwrap_or("all")),
                );
            }
        }
        return;
    }
    let sizes: &[u32] = if measuring() {
        &[64, 256, 1024, 4096]
    } else {
        &[16]
    };
    println!(
        "bootstrap of N PEs (threads of one process) against one root (another), 127.0.0.1{}:",
        if measuring() {
            ""
        } else {
            "; test mode: not a measurement"
        }
    );
    println!(
        "{:>7} {:>5} {:>9} {:>10} {:>10} {:>12} {:>12} {:>10} {:>9}",
        "PEs",
        "cards",
        "wall s",
        "us per PE",
        "root MiB",
        "root KiB/PE",
        "sent KiB/PE",
        "held KiB",
        "PEs MiB"
    );
    // `BOOTSTRAP_SCALE_MODE=all`, `lazy` or `node` runs only that mode.
    let only = env("BOOTSTRAP_SCALE_MODE");
    for mode in [Mode::All, Mode::Lazy, Mode::Node] {
        if only.as_deref().is_some_and(|m| m != mode.name()) {
            continue;
        }
        let figures: Vec<Figures> = sizes.iter().map(|&n| run(n, mode)).collect();
        extrapolate(mode.name(), &figures);
    }
}
