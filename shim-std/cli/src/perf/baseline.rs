//! Baselines measured in the same run as the tests they calibrate, each
//! timing the same thing as its test with nothing of the library in it:
//!
//! * `cacheline` (for `put-lat`): two threads pinned to two cores bounce one
//!   cache line (a store, a spin until the echo): the physical floor of any
//!   shared-memory ping-pong on this machine, timed exactly like `put-lat`
//!   (RTT/2).
//! * `remote-read` (for `get-lat`, one per size): a thread pinned to one core
//!   writes `size` bytes (whole 8-byte words, plain stores) and raises a
//!   flag; a thread pinned to another core waits for the flag, then times
//!   reading the `size` bytes alone, and hands back. The cost of reading
//!   lines another core just modified, as a `get-lat` sample is (one get of
//!   the block PE 1 just wrote).
//! * `remote-rmw` (for `atomic-lat`): the same hand-off, the writer
//!   storing a new value into one word and the timed side doing one
//!   `fetch_add` on it: a locked read-modify-write of a line another core
//!   modified, as an `atomic-lat` sample is.
//! * `memcpy`: one thread copying between two pre-faulted buffers, with the
//!   same sizes and message counts as `put-bw`.
//! * `tcp-pingpong`: `size`-byte messages bounced over one connected TCP pair
//!   (TCP_NODELAY, non-blocking, busy-polled `recv`) between two pinned
//!   threads: the floor of a TCP `put-lat`, timed like it (RTT/2).
//! * `tcp-rtt` (for `get-lat` and `atomic-lat` over TCP): the same ping-pong
//!   reported as the full round trip, as a TCP get or fetch-add is a request
//!   and its reply (the request of a get is smaller than `size`).
//! * `tcp-stream`: one thread writing `size`-byte messages over a TCP
//!   connection as fast as it can, another reading them: the ceiling of a TCP
//!   `put-bw`, with its sizes and message counts.
//!
//! The baselines of the rate tests are in [`rate`].
//!
//! The TCP baselines run over loopback by default, or between two network
//! namespaces (a sim's nodes, over a rail): see [`TcpPath`].

pub mod rate;

use std::{
    fs::File,
    hint::black_box,
    io::{self, Read, Write},
    net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream},
    path::{Path, PathBuf},
    sync::{
        Arc, Barrier,
        atomic::{AtomicU64, Ordering},
        mpsc,
    },
    time::{Duration, Instant},
};

use switchyard::config::format_size;
use switchyard_core::pad::CachePadded;

use super::{Test, stats::Measurement};

/// Bare cache-line ping-pong: one-way latency (RTT/2) percentiles. Both sides
/// run on threads of their own, so the caller's CPU affinity (which the PEs
/// launched later inherit the set of) is left alone.
pub fn cacheline(iters: u64, warmup: u64, cpus: (usize, usize)) -> Measurement {
    std::thread::spawn(move || cacheline_here(iters, warmup, cpus))
        .join()
        .unwrap_or_else(|_| Measurement::none("cacheline", 8))
}

fn cacheline_here(iters: u64, warmup: u64, cpus: (usize, usize)) -> Measurement {
    let ping = Arc::new(CachePadded::new(AtomicU64::new(0)));
    let pong = Arc::new(CachePadded::new(AtomicU64::new(0)));
    let total = iters + warmup;
    let start = Arc::new(Barrier::new(2));
    let echo = {
        let (ping, pong, start) = (ping.clone(), pong.clone(), start.clone());
        std::thread::spawn(move || {
            let _ = switchyard::sys::pin_current_thread(cpus.1);
            start.wait();
            for i in 1..=total {
                while ping.load(Ordering::Acquire) != i {
                    std::hint::spin_loop();
                }
                pong.store(i, Ordering::Release);
            }
        })
    };
    let _ = switchyard::sys::pin_current_thread(cpus.0);
    let mut samples = Vec::with_capacity(iters as usize);
    start.wait();
    let mut t0 = Instant::now();
    for i in 1..=total {
        ping.store(i, Ordering::Release);
        while pong.load(Ordering::Acquire) != i {
            std::hint::spin_loop();
        }
        let t1 = Instant::now();
        if i > warmup {
            samples.push((t1 - t0).as_nanos() as u64);
        }
        t0 = t1;
    }
    let _ = echo.join();
    Measurement::latency("cacheline", 8, iters, &mut samples, 0.5)
}

/// The baselines of latency test `test` over shared memory, for its
/// `sizes`: `cacheline` for `put-lat`, `remote-read` at each size for
/// `get-lat`, `remote-rmw` for `atomic-lat` (see the module doc).
pub fn for_latency(
    test: Test,
    sizes: &[u64],
    iters: u64,
    warmup: u64,
    cpus: (usize, usize),
) -> Vec<Measurement> {
    match test {
        Test::GetLat => sizes
            .iter()
            .map(|&s| remote_read(s as usize, iters, warmup, cpus))
            .collect(),
        Test::AtomicLat => vec![remote_rmw(iters, warmup, cpus)],
        _ => vec![cacheline(iters, warmup, cpus)],
    }
}

/// `remote-read`: reading `size` bytes (rounded up to whole words) that a
/// thread on another core has just written; the read alone is timed.
pub fn remote_read(size: usize, iters: u64, warmup: u64, cpus: (usize, usize)) -> Measurement {
    let words: Arc<[AtomicU64]> = (0..size.div_ceil(8).max(1))
        .map(|_| AtomicU64::new(0))
        .collect();
    let written = Arc::clone(&words);
    let mut copy = vec![0u64; words.len()];
    let samples = handed_off(
        iters,
        warmup,
        cpus,
        move |i| {
            for w in written.iter() {
                w.store(i, Ordering::Relaxed);
            }
        },
        move |i| {
            for (c, w) in copy.iter_mut().zip(words.iter()) {
                *c = w.load(Ordering::Relaxed);
            }
            black_box(&mut copy);
            debug_assert!(copy.iter().all(|&c| c == i), "a stale word");
        },
    );
    latency_of("remote-read", size as u64, iters, samples)
}

/// `remote-rmw`: one `fetch_add` on a word that a thread on another
/// core has just stored to; the fetch-add alone is timed.
pub fn remote_rmw(iters: u64, warmup: u64, cpus: (usize, usize)) -> Measurement {
    let word = Arc::new(CachePadded::new(AtomicU64::new(0)));
    let written = Arc::clone(&word);
    let samples = handed_off(
        iters,
        warmup,
        cpus,
        move |i| written.store(2 * i, Ordering::Relaxed),
        move |i| {
            let old = word.fetch_add(1, Ordering::AcqRel);
            debug_assert_eq!(black_box(old), 2 * i, "a stale word");
        },
    );
    latency_of("remote-rmw", 8, iters, samples)
}

/// A latency measurement of `samples` (one operation each, not halved); no
/// figures when the threads failed.
fn latency_of(test: &str, size: u64, iters: u64, samples: Option<Vec<u64>>) -> Measurement {
    match samples {
        Some(mut s) => Measurement::latency(test, size, iters, &mut s, 1.0),
        None => Measurement::none(test, size),
    }
}

/// The hand-off of `remote-read` and `remote-rmw`, on two threads of
/// their own (the caller's CPU affinity stays as it is): the writer, pinned
/// to `cpus.1` (PE 1's role), runs `modify(i)` and raises `ready` to `i`;
/// the timer, pinned to `cpus.0` (PE 0's role), waits for it, times `op(i)`
/// alone, and raises `done` to `i`, which lets the writer go on. Returns the
/// `iters` samples after `warmup` (nanoseconds), or `None` when a thread
/// panicked.
fn handed_off<M, O>(
    iters: u64,
    warmup: u64,
    cpus: (usize, usize),
    mut modify: M,
    mut op: O,
) -> Option<Vec<u64>>
where
    M: FnMut(u64) + Send + 'static,
    O: FnMut(u64) + Send + 'static,
{
    let ready = Arc::new(CachePadded::new(AtomicU64::new(0)));
    let done = Arc::new(CachePadded::new(AtomicU64::new(0)));
    let total = iters + warmup;
    let writer = {
        let (ready, done) = (Arc::clone(&ready), Arc::clone(&done));
        std::thread::spawn(move || {
            let _ = switchyard::sys::pin_current_thread(cpus.1);
            for i in 1..=total {
                modify(i);
                // SYNC POINT with the Acquire load of `ready` by the timer:
                // the stores of `modify` come before the flag.
                ready.store(i, Ordering::Release);
                // SYNC POINT with the Release store of `done` by the timer.
                while done.load(Ordering::Acquire) != i {
                    std::hint::spin_loop();
                }
            }
        })
    };
    let timer = std::thread::spawn(move || {
        let _ = switchyard::sys::pin_current_thread(cpus.0);
        let mut samples = Vec::with_capacity(iters as usize);
        for i in 1..=total {
            // SYNC POINT with the Release store of `ready` by the writer.
            while ready.load(Ordering::Acquire) != i {
                std::hint::spin_loop();
            }
            let t0 = Instant::now();
            op(i);
            let dt = t0.elapsed().as_nanos() as u64;
            // SYNC POINT with the writer's Acquire load of `done`: `op` is
            // over before the writer modifies again.
            done.store(i, Ordering::Release);
            if i > warmup {
                samples.push(dt);
            }
        }
        samples
    });
    let samples = timer.join().ok();
    let writer = writer.join().ok();
    samples.filter(|_| writer.is_some())
}

/// Single-thread copy bandwidth of `size`-byte messages, `msgs` of them (on a
/// thread of its own, pinned to `cpu`).
pub fn memcpy(size: usize, msgs: u64, cpu: usize) -> Measurement {
    std::thread::spawn(move || memcpy_here(size, msgs, cpu))
        .join()
        .unwrap_or_else(|_| Measurement::none("memcpy", size as u64))
}

fn memcpy_here(size: usize, msgs: u64, cpu: usize) -> Measurement {
    let _ = switchyard::sys::pin_current_thread(cpu);
    let src = vec![0x5Au8; size.max(1)];
    let mut dst = vec![0u8; size.max(1)];
    // Warm both buffers (and the TLB) once.
    dst.copy_from_slice(&src);
    let t0 = Instant::now();
    for _ in 0..msgs {
        dst.copy_from_slice(black_box(&src));
        black_box(&mut dst);
    }
    Measurement::throughput("memcpy", size as u64, msgs, t0.elapsed().as_secs_f64())
}

/// Where the two threads of a TCP baseline run. The server (the echo side
/// of `tcp-pingpong`, the reader of `tcp-stream`: PE 1's role) listens on
/// `server_ip`; the client (the timing side: PE 0's role) connects to it.
/// Each first enters its network namespace, when one is given (a path such as
/// `/var/run/netns/<name>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpPath {
    /// The address the listener binds (the server node's rail address).
    pub server_ip: IpAddr,
    /// The server thread's network namespace; `None`: this process's.
    pub server_netns: Option<PathBuf>,
    /// The client thread's network namespace; `None`: this process's.
    pub client_netns: Option<PathBuf>,
}

impl TcpPath {
    /// Both ends in this process's namespace, over 127.0.0.1.
    pub fn loopback() -> TcpPath {
        TcpPath {
            server_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
            server_netns: None,
            client_netns: None,
        }
    }
}

/// How long a TCP baseline waits without progress (connect, accept, a
/// message) before it gives up.
const STALL: Duration = Duration::from_secs(20);

/// Busy-polled TCP ping-pong: `size`-byte messages bounced between two pinned
/// threads over one connected pair of non-blocking sockets (TCP_NODELAY on
/// both ends), each side spinning on `recv` while it returns `WouldBlock`.
/// One-way latency (RTT/2) percentiles, timed exactly like `put-lat`. No
/// framing: a message is `size` bytes on the stream.
///
/// # Errors
///
/// A namespace that cannot be entered, a socket error, or a stall longer
/// than 20 s, as text.
pub fn tcp_pingpong(
    size: usize,
    iters: u64,
    warmup: u64,
    path: &TcpPath,
    cpus: (usize, usize),
) -> Result<Measurement, String> {
    tcp_bounce("tcp-pingpong", 0.5, size, iters, warmup, path, cpus)
}

/// The TCP baseline of latency test `test`: [`tcp_pingpong`] (RTT/2) for
/// `put-lat`, `tcp-rtt` (the same ping-pong, the full round trip) for
/// `get-lat` and `atomic-lat`, whose operations are a request and a reply.
///
/// # Errors
///
/// As [`tcp_pingpong`].
pub fn tcp_latency(
    test: Test,
    size: usize,
    iters: u64,
    warmup: u64,
    path: &TcpPath,
    cpus: (usize, usize),
) -> Result<Measurement, String> {
    match test {
        Test::GetLat | Test::AtomicLat => {
            tcp_bounce("tcp-rtt", 1.0, size, iters, warmup, path, cpus)
        }
        _ => tcp_pingpong(size, iters, warmup, path, cpus),
    }
}

/// The ping-pong of [`tcp_pingpong`], named `name`, its round trips scaled
/// by `scale`.
fn tcp_bounce(
    name: &str,
    scale: f64,
    size: usize,
    iters: u64,
    warmup: u64,
    path: &TcpPath,
    cpus: (usize, usize),
) -> Result<Measurement, String> {
    let size = size.max(1);
    let total = iters + warmup;
    let (client, ()) = tcp_pair(
        path,
        cpus,
        move |s| {
            s.set_nonblocking(true)?;
            let msg = vec![0x5Au8; size];
            let mut back = vec![0u8; size];
            let mut samples = Vec::with_capacity(iters as usize);
            let mut t0 = Instant::now();
            for i in 1..=total {
                send_spin(&s, &msg, Poll::Spin)?;
                recv_spin(&s, &mut back, Poll::Spin)?;
                let t1 = Instant::now();
                if i > warmup {
                    samples.push((t1 - t0).as_nanos() as u64);
                }
                t0 = t1;
            }
            Ok(samples)
        },
        move |s| {
            s.set_nonblocking(true)?;
            let mut buf = vec![0u8; size];
            for _ in 0..total {
                recv_spin(&s, &mut buf, Poll::Spin)?;
                send_spin(&s, &buf, Poll::Spin)?;
            }
            Ok(())
        },
    )
    .map_err(|e| format!("{name} {}: {e}", format_size(size as u64)))?;
    let mut samples = client;
    Ok(Measurement::latency(
        name,
        size as u64,
        iters,
        &mut samples,
        scale,
    ))
}

/// TCP streaming: the client thread writes `msgs` messages of `size` bytes as
/// fast as it can (one `write` per message, blocking socket, TCP_NODELAY), the
/// server thread reads them all; GB/s and msg/s, timed like `put-bw` (on the
/// writer, from the first message until the reader acknowledges the last
/// byte, as `quiet` waits for the target). `warmup` messages go first,
/// unmeasured. No framing.
///
/// # Errors
///
/// As [`tcp_pingpong`].
pub fn tcp_stream(
    size: usize,
    msgs: u64,
    warmup: u64,
    path: &TcpPath,
    cpus: (usize, usize),
) -> Result<Measurement, String> {
    let size = size.max(1);
    let msgs = msgs.max(1);
    let (secs, ()) = tcp_pair(
        path,
        cpus,
        move |mut s| {
            s.set_read_timeout(Some(STALL))?;
            s.set_write_timeout(Some(STALL))?;
            let msg = vec![0x5Au8; size];
            let mut ack = [0u8; 1];
            for _ in 0..warmup {
                s.write_all(black_box(&msg))?;
            }
            s.read_exact(&mut ack)?;
            let t0 = Instant::now();
            for _ in 0..msgs {
                s.write_all(black_box(&msg))?;
            }
            s.read_exact(&mut ack)?;
            Ok(t0.elapsed().as_secs_f64().max(1e-9))
        },
        move |mut s| {
            s.set_read_timeout(Some(STALL))?;
            s.set_write_timeout(Some(STALL))?;
            let mut buf = vec![0u8; size.max(64 << 10)];
            for n in [warmup, msgs] {
                let mut left = size as u64 * n;
                while left > 0 {
                    let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                    match s.read(&mut buf[..want]) {
                        Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                        Ok(k) => left -= k as u64,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                }
                s.write_all(&[1])?;
            }
            Ok(())
        },
    )
    .map_err(|e| format!("tcp-stream {}: {e}", format_size(size as u64)))?;
    Ok(Measurement::throughput(
        "tcp-stream",
        size as u64,
        msgs,
        secs,
    ))
}

/// Connects a TCP pair along `path` and runs `client` and `server` on it,
/// each on a thread of its own (entered into its namespace, then pinned to
/// `cpus.0` and `cpus.1`), so the caller's namespace and CPU set stay as
/// they are. Both sockets have TCP_NODELAY.
fn tcp_pair<C, S, RC, RS>(
    path: &TcpPath,
    cpus: (usize, usize),
    client: C,
    server: S,
) -> io::Result<(RC, RS)>
where
    C: FnOnce(TcpStream) -> io::Result<RC> + Send + 'static,
    S: FnOnce(TcpStream) -> io::Result<RS> + Send + 'static,
    RC: Send + 'static,
    RS: Send + 'static,
{
    let (port_tx, port_rx) = mpsc::channel::<u16>();
    let server_ip = path.server_ip;
    let server_ns = open_netns(path.server_netns.as_deref())?;
    let client_ns = open_netns(path.client_netns.as_deref())?;
    let srv = std::thread::Builder::new()
        .name("perf-tcp-server".into())
        .spawn(move || -> io::Result<RS> {
            if let Some(ns) = &server_ns {
                switchyard_launch::sim::enter_net_namespace(ns)?;
            }
            let _ = switchyard::sys::pin_current_thread(cpus.1);
            let listener = TcpListener::bind(SocketAddr::new(server_ip, 0))?;
            // Dropping the sender (on any error) tells the client to stop.
            let _ = port_tx.send(listener.local_addr()?.port());
            listener.set_nonblocking(true)?;
            let start = Instant::now();
            let stream = loop {
                match listener.accept() {
                    Ok((s, _)) => break s,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        if start.elapsed() > STALL {
                            return Err(io::Error::new(
                                io::ErrorKind::TimedOut,
                                "no connection to accept",
                            ));
                        }
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Err(e) => return Err(e),
                }
            };
            drop(listener);
            stream.set_nonblocking(false)?;
            stream.set_nodelay(true)?;
            server(stream)
        })?;
    let cli = std::thread::Builder::new()
        .name("perf-tcp-client".into())
        .spawn(move || -> io::Result<RC> {
            if let Some(ns) = &client_ns {
                switchyard_launch::sim::enter_net_namespace(ns)?;
            }
            let _ = switchyard::sys::pin_current_thread(cpus.0);
            let port = port_rx
                .recv_timeout(STALL)
                .map_err(|_| io::Error::other("the listener did not start"))?;
            let stream = TcpStream::connect_timeout(&SocketAddr::new(server_ip, port), STALL)?;
            stream.set_nodelay(true)?;
            client(stream)
        })?;
    let c = joined(cli.join(), "client");
    let s = joined(srv.join(), "server");
    // The client's error first: a server error is mostly its consequence.
    let c = c.map_err(|e| io::Error::new(e.kind(), format!("client: {e}")))?;
    let s = s.map_err(|e| io::Error::new(e.kind(), format!("server: {e}")))?;
    Ok((c, s))
}

/// A joined thread's result; a panic as an error.
fn joined<R>(r: std::thread::Result<io::Result<R>>, who: &str) -> io::Result<R> {
    r.unwrap_or_else(|_| Err(io::Error::other(format!("the {who} thread panicked"))))
}

fn open_netns(path: Option<&Path>) -> io::Result<Option<File>> {
    path.map(|p| {
        File::open(p).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))
    })
    .transpose()
}

/// How a TCP baseline waits on a socket that is not ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Poll {
    /// Busy-polls (the latency and stream baselines).
    Spin,
    /// Busy-polls, and yields the CPU after every 64 polls that found
    /// nothing (the rate baselines: the library's adaptive progress yields
    /// too, so a side that is waiting lets a preempted peer run on a busy
    /// host; on idle cores a reply comes within far fewer polls).
    Yield,
}

/// Counts `WouldBlock` spins; after [`STALL`] without progress, an error.
struct Stall {
    spins: u32,
    since: Option<Instant>,
    poll: Poll,
}

impl Stall {
    const fn new(poll: Poll) -> Stall {
        Stall {
            spins: 0,
            since: None,
            poll,
        }
    }

    #[inline]
    fn progress(&mut self) {
        self.spins = 0;
        self.since = None;
    }

    #[inline]
    fn spin(&mut self) -> io::Result<()> {
        self.spins += 1;
        if self.spins.is_multiple_of(1024) {
            let now = Instant::now();
            match self.since {
                None => self.since = Some(now),
                Some(t) if now - t > STALL => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "no progress for 20 s",
                    ));
                }
                Some(_) => {}
            }
        }
        if self.poll == Poll::Yield && self.spins.is_multiple_of(64) {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
        Ok(())
    }
}

/// Sends all of `buf` on a non-blocking socket, polling as `poll` says on
/// `WouldBlock`.
fn send_spin(mut s: &TcpStream, buf: &[u8], poll: Poll) -> io::Result<()> {
    let mut off = 0;
    let mut stall = Stall::new(poll);
    while off < buf.len() {
        match s.write(&buf[off..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                off += n;
                stall.progress();
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => stall.spin()?,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Receives at least one byte into `buf` (not empty) from a non-blocking
/// socket, polling `recv` as `poll` says while it returns `WouldBlock`;
/// returns how many.
fn recv_some(mut s: &TcpStream, buf: &mut [u8], poll: Poll) -> io::Result<usize> {
    let mut stall = Stall::new(poll);
    loop {
        match s.read(buf) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => stall.spin()?,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Fills `buf` from a non-blocking socket, polling `recv` as `poll` says
/// while it returns `WouldBlock`.
fn recv_spin(s: &TcpStream, buf: &mut [u8], poll: Poll) -> io::Result<()> {
    let mut off = 0;
    while off < buf.len() {
        off += recv_some(s, &mut buf[off..], poll)?;
    }
    Ok(())
}
