//! Connect-on-first-use at scale: many PEs that the target never declared
//! ("strangers") connect to one PE at the same moment, more than its
//! handshake budget for strangers, each puts and gets a word checked at the
//! target; an idle flood is mixed in, and a declared peer reconnects
//! meanwhile. One process, one thread: the drivers are progressed round-robin.
//! Every wait has a deadline; nothing asserts a duration (the time taken is
//! printed, `--nocapture`).

mod common;

use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream},
    sync::{Mutex, OnceLock},
    time::Duration,
};

use common::heap_u64;
use switchyard_core::{
    route::ContextId,
    transport::{Instant, LinkState, Ticket, Transport},
};
use switchyard_socket::{JobKey, RefuseReason, SocketDriver, SocketStats, TcpConfig};

const CX: ContextId = ContextId { pe: 0, seq: 1 };
const KEY: JobKey = JobKey(*b"strangers-tests-a-32-byte-jobkey");
const HEAP: u64 = 4096;
/// The target's address (loopback: 127/8 is all local).
const TARGET: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);
/// Where the declared peer's connects come from.
const KNOWN: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
/// Where the strangers' connects come from.
const STRANGERS: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);
/// Where the idle flood comes from.
const FLOOD: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 4);

/// The crowds share the machine: one at a time (each spins one thread).
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn now() -> Instant {
    static T0: OnceLock<std::time::Instant> = OnceLock::new();
    Instant::from_nanos(T0.get_or_init(std::time::Instant::now).elapsed().as_nanos() as u64)
}

/// A lazy driver for PE `me` of `n` on `ip`, with small buffers (hundreds
/// of them live at once) and a silence window that one thread stepping them
/// all keeps.
fn driver(me: u32, n: u32, ip: Ipv4Addr, give_up: Duration) -> SocketDriver {
    let cfg = TcpConfig {
        job_id: 0x5757,
        key: KEY,
        me,
        n_pes: n,
        listen: vec![IpAddr::V4(ip)],
        window: 64 << 10,
        max_frame_payload: 4 << 10,
        get_buffer: 16 << 10,
        heartbeat_interval: Duration::from_millis(100),
        detection_window: Duration::from_secs(1),
        give_up,
        ..TcpConfig::default()
    };
    // A word per PE.
    let heap = (8 * u64::from(n)).next_multiple_of(HEAP);
    let mut d = SocketDriver::with_owned_heap(cfg, heap).expect("driver");
    d.set_connect_on_first_use(true);
    d
}

/// The word stranger `pe` puts at the target, and where.
fn word(pe: u32) -> (u64, u64) {
    (
        8 * u64::from(pe),
        0x5700_0000_0000_0000 | u64::from(pe) << 8 | 0xA5,
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Waiting for the link.
    Connecting,
    /// Its put is out, waiting for quiet.
    Put,
    /// Reading the word back.
    Get,
    Done,
}

struct Crowd {
    /// PE 0 is the target.
    ds: Vec<SocketDriver>,
    steps: Vec<Step>,
    tickets: Vec<Option<Ticket>>,
    target: Vec<SocketAddr>,
    rounds: u64,
}

impl Crowd {
    /// The target (PE 0), a declared peer (PE 1, on [`KNOWN`]) and
    /// `strangers` PEs (2 and up, on [`STRANGERS`]).
    fn new(strangers: u32, give_up: Duration) -> Crowd {
        let n = strangers + 2;
        let ds: Vec<SocketDriver> = (0..n)
            .map(|me| {
                let ip = match me {
                    0 => TARGET,
                    1 => KNOWN,
                    _ => STRANGERS,
                };
                driver(me, n, ip, give_up)
            })
            .collect();
        let target = ds[0].local_addrs().to_vec();
        Crowd {
            steps: vec![Step::Connecting; n as usize],
            tickets: (0..n).map(|_| None).collect(),
            ds,
            target,
            rounds: 0,
        }
    }

    /// One round: every driver one full progress step, the target a few
    /// (a busy target steps far more often than the PEs it serves), and
    /// every stranger's operation one step further.
    fn round(&mut self) {
        for _ in 0..4 {
            self.ds[0].run_timers(now());
        }
        for d in &mut self.ds[1..] {
            d.run_timers(now());
        }
        for pe in 2..self.ds.len() {
            self.step(pe);
        }
    }

    fn step(&mut self, pe: usize) {
        let (off, v) = word(pe as u32);
        let d = &mut self.ds[pe];
        match self.steps[pe] {
            Step::Connecting => {
                if d.rail(0).state(0) == LinkState::Up {
                    d.rail(0).put(0, off, &v.to_le_bytes(), CX).expect("put");
                    self.steps[pe] = Step::Put;
                }
            }
            Step::Put => {
                if d.rail(0).quiet_poll().expect("quiet") {
                    let t = d.rail(0).get_start(0, off, 8, CX).expect("get");
                    self.tickets[pe] = Some(t);
                    self.steps[pe] = Step::Get;
                }
            }
            Step::Get => {
                let t = self.tickets[pe].as_ref().expect("a ticket");
                let mut b = [0u8; 8];
                if d.rail(0).get_poll(t, &mut b).expect("get") {
                    assert_eq!(u64::from_le_bytes(b), v, "PE {pe} reads its word back");
                    self.tickets[pe] = None;
                    self.steps[pe] = Step::Done;
                }
            }
            Step::Done => {}
        }
    }

    fn done(&self) -> usize {
        self.steps.iter().filter(|s| **s == Step::Done).count()
    }

    /// Every stranger connects at once, then rounds until all are done (or
    /// `limit`, naming what is left). Returns the time taken.
    fn run(&mut self, limit: Duration, mut each: impl FnMut(&mut Crowd)) -> Duration {
        let t0 = std::time::Instant::now();
        for pe in 2..self.ds.len() {
            let a = self.target.clone();
            self.ds[pe].connect_on_first_use(0, &a).expect("connect");
        }
        let strangers = self.ds.len() - 2;
        while self.done() < strangers {
            assert!(
                t0.elapsed() < limit,
                "{} of {strangers} strangers done in {limit:?}; target {}; left: {:?}",
                self.done(),
                show(&self.ds[0].stats()),
                self.left(),
            );
            self.round();
            if std::env::var_os("SY_TRACE").is_some() && self.rounds.is_multiple_of(50) {
                let s = self.ds[0].stats();
                println!(
                    "{:?} round {} done {} peers {} {}",
                    t0.elapsed(),
                    self.rounds,
                    self.done(),
                    self.ds[0].peer_count(),
                    show(&s)
                );
            }
            self.rounds += 1;
            each(self);
            std::thread::sleep(Duration::from_micros(100));
        }
        t0.elapsed()
    }

    /// The strangers not done, with their step and stats (a few).
    fn left(&self) -> Vec<String> {
        (2..self.ds.len())
            .filter(|&pe| self.steps[pe] != Step::Done)
            .take(4)
            .map(|pe| {
                format!(
                    "PE {pe} {:?} {:?} {}",
                    self.steps[pe],
                    self.ds[pe].peer_state(0),
                    show(&self.ds[pe].stats())
                )
            })
            .collect()
    }

    /// Every stranger's word at the target, exactly.
    fn check_words(&self) {
        for pe in 2..self.ds.len() as u32 {
            let (off, v) = word(pe);
            assert_eq!(heap_u64(&self.ds[0], off), v, "PE {pe}'s word");
        }
    }
}

/// The counters that tell the story of a crowd.
fn show(s: &SocketStats) -> String {
    let by: Vec<String> = RefuseReason::ALL
        .iter()
        .filter(|r| s.refused_by[r.index()] > 0)
        .map(|r| format!("{}={}", r.name(), s.refused_by[r.index()]))
        .collect();
    format!(
        "refused {} [{}] evicted {} turned away {} stale {} reconnects {} first_use {}",
        s.refused,
        by.join(" "),
        s.handshakes_evicted,
        s.handshakes_turned_away,
        s.stale_conns,
        s.reconnects,
        s.first_use_connects
    )
}

/// A blocking TCP connection to `to` from `from` (any port).
fn connect_from(from: Ipv4Addr, to: SocketAddr) -> TcpStream {
    use std::os::fd::FromRawFd;
    let SocketAddr::V4(to) = to else {
        panic!("an IPv4 listener")
    };
    let sin = |ip: Ipv4Addr, port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: plain socket calls on a descriptor this function owns, with
    // addresses that live on the stack for each call.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        assert!(fd >= 0, "socket");
        let stream = TcpStream::from_raw_fd(fd);
        let me = sin(from, 0);
        let rc = libc::bind(fd, (&raw const me).cast(), len);
        assert_eq!(rc, 0, "bind {from}: {}", std::io::Error::last_os_error());
        let peer = sin(*to.ip(), to.port());
        let rc = libc::connect(fd, (&raw const peer).cast(), len);
        assert_eq!(rc, 0, "connect: {}", std::io::Error::last_os_error());
        stream
    }
}

/// Raises this process's descriptor limit to `need` (the hard limit
/// allowing): each driver holds an epoll and a listener, each stranger two
/// connections at both ends.
fn ensure_fds(need: u64) {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `r` is valid for the call to write.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut r) };
    assert_eq!(rc, 0);
    if r.rlim_cur >= need {
        return;
    }
    r.rlim_cur = need.min(r.rlim_max);
    // SAFETY: `r` is valid for the call to read.
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raw const r) };
    assert_eq!(rc, 0);
    assert!(
        r.rlim_cur >= need,
        "this test needs {need} file descriptors; the hard limit is {}",
        r.rlim_max
    );
}

/// The library's default `give_up`.
const GIVE_UP: Duration = Duration::from_secs(5);

fn crowd(strangers: u32, give_up: Duration) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    ensure_fds(u64::from(strangers) * 8 + 256);
    let mut c = Crowd::new(strangers, give_up);
    let took = c.run(Duration::from_secs(30).max(give_up * 2), |_| {});
    c.check_words();
    let s = c.ds[0].stats();
    println!(
        "{strangers} strangers: all done in {took:?}; target {}",
        show(&s)
    );
    assert_eq!(c.ds[0].peer_count(), strangers as usize);
    for pe in 2..c.ds.len() {
        assert_eq!(c.ds[pe].peer_state(0), LinkState::Up, "PE {pe}");
    }
}

#[test]
fn sixty_four_strangers_at_once_all_get_through() {
    crowd(64, GIVE_UP);
}

#[test]
fn two_hundred_strangers_at_once_all_get_through() {
    crowd(200, GIVE_UP);
}

/// Strangers at once, an idle flood from another host through all of it,
/// and a declared peer cut and reconnecting in the middle: the strangers get
/// through, the peer's reconnect too, and none of its connections is closed
/// for overload.
#[test]
fn strangers_and_an_idle_flood_do_not_keep_out_a_peers_reconnect() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    ensure_fds(64 * 8 + 160 * 2 + 256);
    let mut c = Crowd::new(64, GIVE_UP);
    // PE 1 is declared at the target (its address is where its connects
    // come from), connects first and is up.
    let a1 = c.ds[1].local_addrs().to_vec();
    c.ds[0].set_peer(1, &a1, HEAP).expect("declare 1");
    let a0 = c.target.clone();
    c.ds[1].connect_on_first_use(0, &a0).expect("1 connects");
    let end = std::time::Instant::now() + Duration::from_secs(10);
    while c.ds[1].rail(0).state(0) != LinkState::Up || c.ds[0].rail(0).state(1) != LinkState::Up {
        assert!(std::time::Instant::now() < end, "PE 1 up");
        c.round();
    }
    let mut flood: Vec<TcpStream> = Vec::new();
    let mut cut = false;
    let mut reconnected = false;
    let took = c.run(Duration::from_secs(30), |c| {
        // 8 idle connections per round, up to 160: the strangers' budget
        // turns over many times.
        if flood.len() < 160 {
            for _ in 0..8 {
                flood.push(connect_from(FLOOD, c.target[0]));
            }
        }
        if !cut && c.done() >= 8 {
            c.ds[1].debug_cut(0, 0);
            cut = true;
        }
        if cut && !reconnected {
            reconnected = c.ds[1].stats().reconnects > 0
                && c.ds[1].rail(0).state(0) == LinkState::Up
                && c.ds[0].rail(0).state(1) == LinkState::Up;
        }
    });
    let end = std::time::Instant::now() + Duration::from_secs(10);
    while !reconnected {
        assert!(
            std::time::Instant::now() < end,
            "PE 1 reconnects: {}",
            show(&c.ds[1].stats())
        );
        c.round();
        reconnected =
            c.ds[1].rail(0).state(0) == LinkState::Up && c.ds[0].rail(0).state(1) == LinkState::Up;
    }
    c.check_words();
    let s = c.ds[0].stats();
    println!(
        "64 strangers and {} idle: all done in {took:?}; target {}",
        flood.len(),
        show(&s)
    );
    // The reconnect carries data.
    c.ds[1]
        .rail(0)
        .put(0, 8, &0x1111u64.to_le_bytes(), CX)
        .expect("put");
    let end = std::time::Instant::now() + Duration::from_secs(10);
    while !c.ds[1].rail(0).quiet_poll().expect("quiet") {
        assert!(std::time::Instant::now() < end, "quiet");
        c.round();
    }
    assert_eq!(heap_u64(&c.ds[0], 8), 0x1111);
    // No connection of the declared peer's was refused (closed to make
    // room, or otherwise).
    let mut known = Vec::new();
    while let Some(e) = c.ds[0].poll_event() {
        if let switchyard_socket::Event::Refused { addr, why } = e
            && addr.ip() == IpAddr::V4(KNOWN)
        {
            known.push(why);
        }
    }
    assert_eq!(known, [], "{}", show(&c.ds[1].stats()));
    assert!(
        s.refused_by[RefuseReason::Overload.index()] > 0,
        "{}",
        show(&s)
    );
    drop(flood);
}

/// A larger crowd, by hand: `SY_STRANGERS=1000 cargo test -p
/// switchyard-socket --test strangers -- --ignored --nocapture` (default
/// 500; `SY_GIVE_UP` in seconds, default 5; `SY_TRACE` prints the target's
/// counters every 50 rounds). One thread steps every driver in turn, so a
/// stranger answers its challenge a round after it is admitted: the
/// target admits a budget (16 strangers of two connections) per round,
/// and a round of 1,000 drivers takes about 0.1 s here.
#[test]
#[ignore = "minutes of one thread; run by hand with SY_STRANGERS"]
fn a_crowd_of_strangers_given_by_hand() {
    let n = std::env::var("SY_STRANGERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    let give_up = std::env::var("SY_GIVE_UP")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(GIVE_UP, Duration::from_secs);
    crowd(n, give_up);
}

/// Out of file descriptors (a PE serving hundreds of peers under the
/// common 1,024 limit), the target cannot accept: the failure is counted
/// (`accept_failures`), the listener leaves the epoll set for a while (a
/// parked waiter is not woken by it), the connection stays queued, and it
/// is accepted (its challenge sent) once descriptors are free again.
#[test]
fn out_of_descriptors_an_accept_fails_counted_and_recovers() {
    use std::io::Read;
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut t = driver(0, 2, TARGET, GIVE_UP);
    let mut client = connect_from(FLOOD, t.local_addrs()[0]);
    client.set_nonblocking(true).expect("nonblocking");
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `r` is valid for the call to write.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut r) };
    assert_eq!(rc, 0);
    let saved = r;
    // The lowest free descriptor number: the limit, so that no new one fits.
    let lowest = std::fs::File::open("/dev/null").expect("/dev/null");
    r.rlim_cur = std::os::fd::AsRawFd::as_raw_fd(&lowest) as u64;
    drop(lowest);
    // SAFETY: `r` is valid for the call to read.
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raw const r) };
    assert_eq!(rc, 0);
    for _ in 0..4 {
        t.run_timers(now());
        std::thread::sleep(Duration::from_millis(1));
    }
    let failures = t.stats().accept_failures;
    // A parked waiter is not woken by the connection it cannot take (the
    // listener stays readable: level-triggered, it would return at once,
    // and a parked progress thread would spin): it sleeps its timeout out.
    let parked = std::time::Instant::now();
    t.wait(Duration::from_millis(40));
    let slept = parked.elapsed();
    // SAFETY: `saved` is valid for the call to read.
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raw const saved) };
    assert_eq!(rc, 0);
    assert!(failures > 0, "{:?}", t.stats());
    assert!(
        slept >= Duration::from_millis(30),
        "a parked wait returned after {slept:?}: woken by the listener it cannot accept from"
    );
    assert_eq!(t.stats().refused, 0);
    // Descriptors again: accepted, and the challenge comes.
    let end = std::time::Instant::now() + Duration::from_secs(10);
    let mut b = [0u8; 1];
    loop {
        assert!(std::time::Instant::now() < end, "the challenge");
        t.run_timers(now());
        match client.read(&mut b) {
            Ok(1) => break,
            Ok(n) => panic!("read {n}: closed"),
            Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{e}"),
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}
