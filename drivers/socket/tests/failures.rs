//! The TCP driver under failure, over loopback (127.0.0.1 and 127.0.0.2 give
//! two rails). Every wait has a deadline; nothing asserts a duration.

mod common;

use std::{
    io::{Read, Write},
    net::TcpStream,
    sync::{
        Arc, OnceLock,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

use common::heap_u64;
use switchyard_core::{
    route::{ContextId, LoadWatermark},
    transport::{AtomicOp, AtomicWidth, ErrorKind, Instant, LinkState, Transport, TransportError},
    wire::{AtomicKind, FrameOp, FrameSignal, HEADER_LEN, HeaderFields, encode, flags},
};
use switchyard_socket::{
    Backlog, Event, JobKey, PeerRailStats, RefuseReason, SocketDriver, SocketError, TcpConfig,
    handshake::{CHALLENGE_LEN, Hello, Role, decode_challenge},
};

const CX: ContextId = ContextId { pe: 0, seq: 1 };
const KEY: JobKey = JobKey(*b"failure-tests-32-byte-job-key!!!");
const JOB: u64 = 0xFA11;

fn now() -> Instant {
    static T0: OnceLock<std::time::Instant> = OnceLock::new();
    Instant::from_nanos(T0.get_or_init(std::time::Instant::now).elapsed().as_nanos() as u64)
}

fn config(me: u32, rails: usize) -> TcpConfig {
    let ips = ["127.0.0.1", "127.0.0.2"];
    TcpConfig {
        job_id: JOB,
        key: KEY,
        me,
        n_pes: 2,
        listen: ips[..rails]
            .iter()
            .map(|s| s.parse().expect("ip"))
            .collect(),
        window: 1 << 20,
        max_frame_payload: 64 << 10,
        // Cuts are seen at once (end of stream, EPIPE); a generous silence
        // window keeps a starved thread on a busy 2-core machine from taking
        // the other rail down too and turning a failover into a reconnect.
        detection_window: Duration::from_secs(2),
        ..TcpConfig::default()
    }
}

/// PE 1 progressing on its own thread (pausable) until stopped.
struct Pe1 {
    stop: Arc<AtomicBool>,
    pause: Arc<AtomicBool>,
    /// Set by the thread while it is paused (between progress steps).
    idle: Arc<AtomicBool>,
    thread: Option<JoinHandle<SocketDriver>>,
}

impl Pe1 {
    /// Pauses PE 1 and waits until it is between progress steps: from then
    /// on it reads and acknowledges nothing.
    fn pause_now(&self) {
        self.pause.store(true, Ordering::Relaxed);
        let end = std::time::Instant::now() + Duration::from_secs(10);
        while !self.idle.load(Ordering::Acquire) {
            assert!(std::time::Instant::now() < end, "PE 1 did not pause");
            std::thread::yield_now();
        }
    }

    fn finish(mut self) -> SocketDriver {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .expect("thread")
            .join()
            .expect("PE 1 thread")
    }
}

impl Drop for Pe1 {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn pair(c0: TcpConfig, c1: TcpConfig, heap: u64) -> (SocketDriver, Pe1) {
    let mut a = SocketDriver::with_owned_heap(c0, heap).expect("driver 0");
    let mut b = SocketDriver::with_owned_heap(c1, heap).expect("driver 1");
    let (la, lb) = (a.local_addrs().to_vec(), b.local_addrs().to_vec());
    a.set_peer(1, &lb, heap).expect("peer 1");
    b.set_peer(0, &la, heap).expect("peer 0");
    let stop = Arc::new(AtomicBool::new(false));
    let pause = Arc::new(AtomicBool::new(false));
    let idle = Arc::new(AtomicBool::new(false));
    let (s, ps, id) = (stop.clone(), pause.clone(), idle.clone());
    let thread = std::thread::spawn(move || {
        b.connect_all([0].into_iter(), now(), Duration::from_secs(10))
            .expect("PE 1 connects");
        while !s.load(Ordering::Relaxed) {
            if ps.load(Ordering::Relaxed) {
                id.store(true, Ordering::Release);
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            id.store(false, Ordering::Relaxed);
            b.progress(now());
        }
        b
    });
    a.connect_all([1].into_iter(), now(), Duration::from_secs(10))
        .expect("PE 0 connects");
    (
        a,
        Pe1 {
            stop,
            pause,
            idle,
            thread: Some(thread),
        },
    )
}

/// Retries `f` (with progress) while it says WouldBlock or PeerDown, for at
/// most `limit`.
fn retry<T>(
    d: &mut SocketDriver,
    limit: Duration,
    mut f: impl FnMut(&mut SocketDriver) -> Result<T, SocketError>,
) -> T {
    let end = std::time::Instant::now() + limit;
    loop {
        match f(d) {
            Ok(v) => return v,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::PeerDown) => {
                assert!(std::time::Instant::now() < end, "still failing: {e}");
                d.progress(now());
            }
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
}

fn quiet(d: &mut SocketDriver, limit: Duration) {
    let end = std::time::Instant::now() + limit;
    loop {
        d.progress(now());
        if d.quiet_poll().expect("quiet") {
            return;
        }
        assert!(std::time::Instant::now() < end, "quiet did not complete");
    }
}

/// The first Up rail toward PE 1, progressing until one is.
fn up_rail(d: &mut SocketDriver, limit: Duration) -> usize {
    let end = std::time::Instant::now() + limit;
    loop {
        for r in 0..d.rails() {
            if d.rail(r).state(1) == LinkState::Up {
                return r;
            }
        }
        assert!(std::time::Instant::now() < end, "no rail came up");
        d.progress(now());
    }
}

/// Puts `i + 1` into word `i` of PE 1's heap for `i` in `0..n`, with no
/// progress step between them (the first is written at once, the rest
/// queue behind it).
fn put_stamps(a: &mut SocketDriver, n: u64) {
    for i in 0..n {
        a.rail(0)
            .put(1, i * 8, &(i + 1).to_le_bytes(), CX)
            .expect("put");
    }
}

/// Checks that word `i` of `b`'s heap holds `i + 1` for `i` in `0..n`
/// (what [`put_stamps`] and the stamped loops write); `what` names the case.
fn assert_stamps(b: &SocketDriver, n: u64, what: &str) {
    for i in 0..n {
        assert_eq!(heap_u64(b, i * 8), i + 1, "slot {i}{what}");
    }
}

#[test]
fn two_rails_cut_mid_stream_lands_everything_once() {
    const N: u64 = 20_000;
    let (mut a, pe1) = pair(config(0, 2), config(1, 2), N * 8);
    assert_eq!(a.rails(), 2);
    for i in 0..N {
        if i == N / 4 {
            a.debug_cut(1, 0);
        }
        let stamp = (i + 1).to_le_bytes();
        retry(&mut a, Duration::from_secs(20), |d| {
            let r = (0..d.rails())
                .find(|&r| d.rail(r).state(1) == LinkState::Up)
                .unwrap_or(0);
            d.rail(r).put(1, i * 8, &stamp, CX)
        });
    }
    quiet(&mut a, Duration::from_secs(20));
    let st = a.stats();
    assert!(st.rail_failovers > 0, "{st:?}");
    let b = pe1.finish();
    assert_stamps(&b, N, "");
}

#[test]
fn only_rail_cut_reconnects_and_replays() {
    // Big frames and a paused target: frames are in flight (partly written)
    // when the rail is cut, so they must be replayed after the reconnect.
    let heap = 8u64 << 20;
    let cfg = |me| TcpConfig {
        window: 16 << 20,
        max_frame_payload: 1 << 20,
        ..config(me, 1)
    };
    let (mut a, pe1) = pair(cfg(0), cfg(1), heap);
    let mut model = vec![0u8; heap as usize];
    let chunk: Vec<u8> = (0..1u32 << 20).map(|i| (i * 7 + 3) as u8).collect();
    for round in 0..3u8 {
        pe1.pause.store(true, Ordering::Relaxed);
        // Fill the window (WouldBlock ends the burst).
        let mut sent = 0;
        for k in 0..16u64 {
            let off = (k % 8) << 20;
            let mut data = chunk.clone();
            data[0] = round;
            data[1] = k as u8;
            match a.rail(0).put(1, off, &data, CX) {
                Ok(()) => {
                    model[off as usize..off as usize + data.len()].copy_from_slice(&data);
                    sent += 1;
                }
                Err(e) => {
                    assert_eq!(e.kind(), ErrorKind::WouldBlock, "{e}");
                    break;
                }
            }
        }
        assert!(sent > 0);
        a.debug_cut(1, 0);
        pe1.pause.store(false, Ordering::Relaxed);
        quiet(&mut a, Duration::from_secs(20));
        up_rail(&mut a, Duration::from_secs(10));
    }
    let st = a.stats();
    assert!(st.replayed > 0, "{st:?}");
    assert!(st.reconnects > 0, "{st:?}");
    let b = pe1.finish();
    let (p, len) = b.local_heap();
    // SAFETY: the driver's own heap, its thread stopped.
    let got = unsafe { std::slice::from_raw_parts(p, len as usize) };
    assert!(got == &model[..], "target heap differs from the model");
}

#[test]
fn small_puts_queued_behind_a_send_go_out_gathered() {
    let (mut a, pe1) = pair(config(0, 1), config(1, 1), 1 << 20);
    quiet(&mut a, Duration::from_secs(10));
    let before = a.stats();
    // 64 puts with no progress step between them: the first is written at
    // once, the rest queue behind it and leave in gathered writes.
    put_stamps(&mut a, 64);
    quiet(&mut a, Duration::from_secs(10));
    let st = a.stats();
    assert_eq!(st.frames_sent - before.frames_sent, 64, "{st:?}");
    // 64 puts (and an ack request, a heartbeat) in a handful of writes (1,
    // then 32 at once, the rest with the next step), not 64.
    assert!(st.writes - before.writes <= 8, "{before:?} {st:?}");
    let b = pe1.finish();
    assert_stamps(&b, 64, "");
}

/// Quiet with `quiet_poll` alone (no progress step before it, as the
/// library's quiet does), for at most `limit`.
fn quiet_poll_only(d: &mut SocketDriver, limit: Duration) {
    let end = std::time::Instant::now() + limit;
    while !d.quiet_poll().expect("quiet") {
        assert!(std::time::Instant::now() < end, "quiet did not complete");
    }
}

#[test]
fn quiet_asks_for_its_ack_in_the_last_frame_it_writes() {
    // Compact frames (both sides offer them and the ACK_NOW flag in them),
    // and full frames (PE 1 decodes no compact frames).
    for compact in [true, false] {
        let cfg = |me, compact_puts| TcpConfig {
            compact_puts,
            ..config(me, 1)
        };
        let (mut a, pe1) = pair(cfg(0, true), cfg(1, compact), 1 << 20);
        quiet(&mut a, Duration::from_secs(10));
        let before = a.stats();
        // 40 puts with no progress step between them: the first is written
        // at once, 32 go together, the last 7 wait for the quiet's step.
        put_stamps(&mut a, 40);
        quiet_poll_only(&mut a, Duration::from_secs(10));
        let st = a.stats();
        assert_eq!(st.frames_sent - before.frames_sent, 40, "{st:?}");
        // The quiet marked the 40th frame ACK_NOW and sent no request of
        // its own: PE 1's ack for it completed the quiet.
        assert_eq!(st.acks_flagged - before.acks_flagged, 1, "{st:?}");
        assert_eq!(st.ack_requests, before.ack_requests, "{st:?}");
        assert_eq!(st.heartbeats_sent, before.heartbeats_sent, "{st:?}");
        // Every frame written already: the quiet asks on its own.
        a.rail(0)
            .put(1, 1024, &7u64.to_le_bytes(), CX)
            .expect("put");
        quiet_poll_only(&mut a, Duration::from_secs(10));
        let end = a.stats();
        assert_eq!(end.acks_flagged, st.acks_flagged, "{end:?}");
        assert_eq!(end.ack_requests - st.ack_requests, 1, "{end:?}");
        let b = pe1.finish();
        assert_stamps(&b, 40, &format!(" (compact {compact})"));
        assert_eq!(heap_u64(&b, 1024), 7);
    }
}

#[test]
fn a_replayed_frame_marked_ack_now_is_applied_once_and_acked_at_once() {
    // A raw PE 0 sends a put marked ACK_NOW (as every frame of `frame`),
    // then the same frame again marked as a replay: PE 1 applies it once,
    // and acks each in the progress step that read it.
    let mut b = lone_pe1();
    let (mut ctl, mut data) = raw_pe0(&mut b);
    ctl.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut put = frame(FrameOp::Put, 0, 1, 64, 8, &5u64.to_le_bytes());
    for replay in [false, true] {
        if replay {
            let f = HeaderFields {
                op: FrameOp::Put as u8,
                src_pe: 0,
                dst_pe: 1,
                seq: 1,
                offset: 64,
                span: 8,
                flags: flags::ACK_NOW | flags::REPLAY,
                ..HeaderFields::default()
            };
            encode(&mut put, &f, &5u64.to_le_bytes(), true).expect("encode");
        }
        let got = b.stats().frames_received;
        data.write_all(&put).expect("send");
        // One progress step reads it and acks it: no other step runs
        // before the ack is read (no ack delay, no frame count).
        pump_until(&mut b, |b| b.stats().frames_received > got);
        assert_eq!(read_ack(&mut ctl), 1, "replay {replay}");
    }
    assert_eq!(heap_u64(&b, 64), 5);
    assert_eq!(b.stats().duplicates_dropped, 1);
}

/// Reads frames from `s` until an ack (or a credit grant, which carries one)
/// and returns its ack.
fn read_ack(s: &mut TcpStream) -> u64 {
    loop {
        let mut h = [0u8; HEADER_LEN];
        s.read_exact(&mut h).expect("a frame");
        let len = u32::from_le_bytes(h[44..48].try_into().expect("4")) as usize;
        let mut payload = vec![0u8; len];
        s.read_exact(&mut payload).expect("its payload");
        if h[3] == FrameOp::Ack as u8 || h[3] == FrameOp::Credit as u8 {
            return u64::from_le_bytes(h[24..32].try_into().expect("8"));
        }
    }
}

#[test]
fn non_blocking_gets_queued_behind_a_send_go_out_gathered() {
    let (mut a, pe1) = pair(config(0, 1), config(1, 1), 1 << 20);
    // PE 1's words 0..64 hold i + 1.
    for i in 0..64u64 {
        retry(&mut a, Duration::from_secs(10), |d| {
            d.rail(0).put(1, i * 8, &(i + 1).to_le_bytes(), CX)
        });
    }
    quiet(&mut a, Duration::from_secs(10));
    let before = a.stats();
    // 64 gets with no progress step between them: the first is written at
    // once, the rest queue behind it and leave in gathered writes; each
    // reply carries the ack of its get, so the quiet needs nothing more.
    for i in 0..64u64 {
        a.rail(0)
            .get_into_heap(1, i * 8, 4096 + i * 8, 8, CX)
            .expect("get");
    }
    quiet(&mut a, Duration::from_secs(10));
    let st = a.stats();
    assert!(st.frames_received - before.frames_received >= 64, "{st:?}");
    assert!(st.writes - before.writes <= 8, "{before:?} {st:?}");
    for i in 0..64u64 {
        assert_eq!(heap_u64(&a, 4096 + i * 8), i + 1, "slot {i}");
    }
    drop(pe1.finish());
}

#[test]
fn a_cut_rails_replays_count_against_the_peer_and_the_rail_that_sent_them() {
    // Big frames on rail 0 and a paused target: frames are in flight when
    // rail 0 is cut, move to rail 1 and go out again there.
    let heap = 8u64 << 20;
    let cfg = |me| TcpConfig {
        window: 16 << 20,
        max_frame_payload: 1 << 20,
        ..config(me, 2)
    };
    let (mut a, pe1) = pair(cfg(0), cfg(1), heap);
    assert_eq!(a.rails(), 2);
    let chunk: Vec<u8> = (0..1u32 << 20).map(|i| (i * 7 + 3) as u8).collect();
    pe1.pause.store(true, Ordering::Relaxed);
    let mut sent = 0;
    for k in 0..16u64 {
        match a.rail(0).put(1, (k % 8) << 20, &chunk, CX) {
            Ok(()) => sent += 1,
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::WouldBlock, "{e}");
                break;
            }
        }
    }
    assert!(sent > 0);
    a.debug_cut(1, 0);
    pe1.pause.store(false, Ordering::Relaxed);
    quiet(&mut a, Duration::from_secs(20));
    let st = a.stats();
    let per = a.peer_stats(1);
    assert!(st.replayed > 0 && st.rail_failovers > 0, "{st:?}");
    assert_eq!(per[1].replayed, st.replayed, "{per:?} {st:?}");
    assert_eq!(per[0].replayed, 0, "{per:?}");
    assert_eq!(a.peer_stats(0), [PeerRailStats::default(); 4], "this PE");
    assert_eq!(per.iter().map(|c| c.bad_frames).sum::<u64>(), 0);
    let b = pe1.finish();
    // What PE 1 dropped as duplicates came from PE 0, counted on the rails
    // it arrived on: usually rail 1 (the replay after the original), but an
    // original still in rail 0's receive buffer may be read after its
    // replay was applied, and then it is the duplicate (1 run in 40 of the
    // whole file under load). Each copy is counted once, on one rail.
    let bst = b.stats();
    let bper = b.peer_stats(0);
    assert_eq!(
        bper.iter().map(|c| c.duplicates_dropped).sum::<u64>(),
        bst.duplicates_dropped,
        "{bper:?}"
    );
    assert!(
        bper[2..].iter().all(|c| c.duplicates_dropped == 0),
        "{bper:?}"
    );
}

#[test]
fn small_puts_are_compact_only_when_both_sides_offer_it() {
    for (c0, c1) in [(true, true), (true, false), (false, true)] {
        let cfg = |me, compact_puts| TcpConfig {
            compact_puts,
            ..config(me, 1)
        };
        let (mut a, pe1) = pair(cfg(0, c0), cfg(1, c1), 1 << 20);
        quiet(&mut a, Duration::from_secs(10));
        let before = a.stats();
        for i in 0..100u64 {
            retry(&mut a, Duration::from_secs(10), |d| {
                d.rail(0).put(1, i * 8, &(i + 1).to_le_bytes(), CX)
            });
        }
        quiet(&mut a, Duration::from_secs(10));
        let st = a.stats();
        assert_eq!(st.frames_sent - before.frames_sent, 100, "{st:?}");
        // 100 frames of 40 + 8 bytes, or of 64 + 8, and a few control
        // frames (an ack request, heartbeats).
        let bytes = st.bytes_sent - before.bytes_sent;
        if c0 && c1 {
            assert!(bytes < 100 * 72, "compact: {bytes} bytes");
        } else {
            assert!(bytes >= 100 * 72, "full: {bytes} bytes");
        }
        let b = pe1.finish();
        assert_stamps(&b, 100, &format!(" ({c0}, {c1})"));
    }
}

#[test]
fn compact_puts_cut_in_flight_are_replayed_once() {
    // The largest compact puts on rail 0 toward a paused PE 1 until the
    // window is full: written (all or in part), none acknowledged. Rail 0
    // is cut: they move to rail 1 and are resent there, compact and marked
    // as replays; PE 1 drops what it applied already.
    const SIZE: usize = 255;
    let cfg = |me| TcpConfig {
        detection_window: Duration::from_secs(5),
        ..config(me, 2)
    };
    let (mut a, pe1) = pair(cfg(0), cfg(1), 1 << 20);
    let mut model = vec![0u8; 1 << 20];
    pe1.pause_now();
    for i in 0..4096usize {
        let at = i * 256;
        let mut data = [(i % 253) as u8; SIZE];
        data[..2].copy_from_slice(&(i as u16).to_le_bytes());
        match a.rail(0).put(1, at as u64, &data, CX) {
            Ok(()) => model[at..at + SIZE].copy_from_slice(&data),
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::WouldBlock, "{e}");
                break;
            }
        }
    }
    a.progress(now());
    a.debug_cut(1, 0);
    pe1.pause.store(false, Ordering::Relaxed);
    quiet(&mut a, Duration::from_secs(20));
    let st = a.stats();
    assert!(st.replayed > 0 && st.rail_failovers > 0, "{st:?}");
    let b = pe1.finish();
    let (p, len) = b.local_heap();
    // SAFETY: the driver's own heap, its thread stopped.
    let got = unsafe { std::slice::from_raw_parts(p, len as usize) };
    assert!(got == &model[..], "target heap differs from the model");
}

#[test]
fn a_put_after_a_fence_goes_out_at_once_with_what_queued() {
    let (mut a, pe1) = pair(config(0, 1), config(1, 1), 1 << 20);
    quiet(&mut a, Duration::from_secs(10));
    a.progress(now());
    let before = a.stats();
    // No progress step from here: the first put is written, the next four
    // queue behind it, the fenced flag takes them along.
    put_stamps(&mut a, 5);
    assert_eq!(a.stats().frames_sent - before.frames_sent, 1);
    a.fence().expect("fence");
    a.rail(0).put(1, 64, &7u64.to_le_bytes(), CX).expect("flag");
    assert_eq!(a.stats().frames_sent - before.frames_sent, 6);
    quiet(&mut a, Duration::from_secs(10));
    let b = pe1.finish();
    assert_eq!(heap_u64(&b, 64), 7);
    assert_stamps(&b, 5, "");
}

/// Fills the window with small (batched) puts toward a paused PE 1, so that
/// writes stop part way into a gathered batch and part way into a frame;
/// optionally cuts the rail there. Everything lands exactly once.
fn small_puts_stalled_mid_batch(cut: bool) {
    const SIZE: u64 = 3000;
    const SLOTS: u64 = 4096;
    let cfg = |me| TcpConfig {
        window: 12 << 20,
        detection_window: Duration::from_secs(5),
        ..config(me, 1)
    };
    let (mut a, pe1) = pair(cfg(0), cfg(1), SLOTS * SIZE);
    let mut model = vec![0u8; (SLOTS * SIZE) as usize];
    let put = |d: &mut SocketDriver, model: &mut [u8], i: u64| {
        let at = (i % SLOTS) * SIZE;
        let mut data = vec![(i % 251) as u8; SIZE as usize];
        data[..8].copy_from_slice(&i.to_le_bytes());
        let r = d.rail(0).put(1, at, &data, CX);
        if r.is_ok() {
            model[at as usize..(at + SIZE) as usize].copy_from_slice(&data);
        }
        r
    };
    pe1.pause_now();
    let mut i = 0u64;
    loop {
        match put(&mut a, &mut model, i) {
            Ok(()) => i += 1,
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::WouldBlock, "{e}");
                break;
            }
        }
        assert!(i < 100_000, "never pushed back");
    }
    let st = a.stats();
    // The socket took a part only: the rest waits in the ring.
    assert!(st.would_block > 0, "{st:?}");
    assert!(st.frames_sent < i, "{i} puts, {st:?}");
    if cut {
        a.debug_cut(1, 0);
    }
    pe1.pause.store(false, Ordering::Relaxed);
    let n = i + 500;
    while i < n {
        retry(&mut a, Duration::from_secs(20), |d| put(d, &mut model, i));
        i += 1;
    }
    quiet(&mut a, Duration::from_secs(20));
    let st = a.stats();
    if cut {
        assert!(st.replayed > 0, "{st:?}");
    } else {
        assert_eq!(st.replayed, 0, "{st:?}");
    }
    let b = pe1.finish();
    let bst = b.stats();
    if !cut {
        assert_eq!(bst.duplicates_dropped, 0, "{bst:?}");
    }
    let (p, len) = b.local_heap();
    // SAFETY: the driver's own heap, its thread stopped.
    let got = unsafe { std::slice::from_raw_parts(p, len as usize) };
    assert!(got == &model[..], "target heap differs from the model");
}

#[test]
fn small_puts_stalled_mid_batch_resume_exactly() {
    small_puts_stalled_mid_batch(false);
}

#[test]
fn small_puts_cut_mid_batch_are_replayed_once() {
    small_puts_stalled_mid_batch(true);
}

#[test]
fn traffic_ramps_up_gently_after_a_recovery() {
    let (mut a, pe1) = pair(config(0, 1), config(1, 1), 1 << 20);
    let burst = |a: &mut SocketDriver, tag: u64| {
        for i in 0..512u64 {
            retry(a, Duration::from_secs(10), |d| {
                d.rail(0).put(1, i * 8, &(tag << 32 | i).to_le_bytes(), CX)
            });
        }
        quiet(a, Duration::from_secs(10));
    };
    burst(&mut a, 1);
    assert_eq!(a.stats().ramp_waits, 0, "no ramp before any failure");
    // The only rail fails and comes back: new traffic starts small.
    a.debug_cut(1, 0);
    quiet(&mut a, Duration::from_secs(10));
    up_rail(&mut a, Duration::from_secs(10));
    burst(&mut a, 2);
    let st = a.stats();
    assert!(st.reconnects > 0, "{st:?}");
    assert!(
        st.ramp_waits > 0,
        "the burst after recovery was not held back: {st:?}"
    );
    let b = pe1.finish();
    for i in 0..512u64 {
        assert_eq!(heap_u64(&b, i * 8), 2 << 32 | i, "slot {i}");
    }
}

#[test]
fn stalled_peer_pushes_back_then_resumes() {
    let cfg = |me| TcpConfig {
        window: 256 << 10,
        max_frame_payload: 16 << 10,
        detection_window: Duration::from_secs(5),
        ..config(me, 1)
    };
    let (mut a, pe1) = pair(cfg(0), cfg(1), 1 << 20);
    let cap = a.backlog_capacity();
    assert_eq!(
        cap,
        Backlog {
            frames: 4096,
            bytes: 256 << 10
        }
    );
    assert_eq!(a.backlog(1, 0), Backlog::default());
    pe1.pause_now();
    // No progress here and none there: nothing is acknowledged, so every
    // put accepted is one more frame (64-byte header + 4 KiB) held on rail
    // 0, until the window pushes back.
    let data = vec![0xABu8; 4096];
    let wm = LoadWatermark { per_mille: 750 };
    let mut ok = 0u64;
    let mut crossed_at = None;
    let blocked = loop {
        match a.rail(0).put(1, (ok % 256) * 4096, &data, CX) {
            Ok(()) => ok += 1,
            Err(e) => break e,
        }
        let held = a.backlog(1, 0);
        assert_eq!((u64::from(held.frames), held.bytes), (ok, ok * 4160));
        if crossed_at.is_none() && held.exceeds(wm, cap) {
            crossed_at = Some(ok);
        }
        assert!(ok < 100_000, "never pushed back");
    };
    assert_eq!(blocked.kind(), ErrorKind::WouldBlock, "{blocked}");
    assert_eq!(blocked.peer(), Some(1));
    // Bounded by the window, not by the caller's appetite.
    assert!(ok * 4160 <= 256 << 10, "{ok} puts accepted");
    // Over the load watermark, first at 75% of the window's bytes.
    let crossed = crossed_at.expect("crossed the watermark");
    assert!(crossed * 4160 * 1000 > 750 * (256 << 10));
    assert!((crossed - 1) * 4160 * 1000 <= 750 * (256 << 10));
    assert_eq!(a.backlog(0, 0), Backlog::default(), "this PE");
    assert_eq!(a.backlog(1, 1), Backlog::default(), "no such rail");
    pe1.pause.store(false, Ordering::Relaxed);
    for i in 0..200u64 {
        retry(&mut a, Duration::from_secs(10), |d| {
            d.rail(0).put(1, (i % 256) * 4096, &data, CX)
        });
    }
    quiet(&mut a, Duration::from_secs(10));
    assert_eq!(a.backlog(1, 0), Backlog::default(), "quiet drains it");
    drop(pe1);
}

#[test]
fn backlog_moves_with_the_frames_on_failover() {
    let cfg = |me| TcpConfig {
        detection_window: Duration::from_secs(10),
        ..config(me, 2)
    };
    let (mut a, pe1) = pair(cfg(0), cfg(1), 1 << 20);
    pe1.pause_now();
    for i in 0..10u64 {
        a.rail(0).put(1, i * 8, &i.to_le_bytes(), CX).expect("put");
    }
    // A fetching atomic on rail 0 too: held until its reply.
    let t = a
        .rail(0)
        .atomic_start(
            1,
            1024,
            AtomicOp {
                kind: AtomicKind::FetchAdd,
                width: AtomicWidth::W64,
                operand: 5,
                compare: 0,
                fetch: true,
            },
            CX,
        )
        .expect("atomic");
    let held = a.backlog(1, 0);
    assert_eq!(held.frames, 11);
    assert_eq!(a.backlog(1, 1), Backlog::default());
    a.debug_cut(1, 0);
    let end = std::time::Instant::now() + Duration::from_secs(10);
    while a.rail(0).state(1) == LinkState::Up {
        assert!(std::time::Instant::now() < end, "the cut was not seen");
        a.progress(now());
    }
    assert_eq!(a.rail(1).state(1), LinkState::Up);
    assert_eq!(
        a.backlog(1, 0),
        Backlog::default(),
        "moved off the cut rail"
    );
    assert_eq!(a.backlog(1, 1), held, "onto the rail still up");
    pe1.pause.store(false, Ordering::Relaxed);
    let old = retry(&mut a, Duration::from_secs(10), |d| {
        d.rail(1).atomic_poll(&t).and_then(|v| {
            v.ok_or(SocketError::WouldBlock {
                peer: 1,
                what: "atomic reply",
            })
        })
    });
    assert_eq!(old, 0);
    quiet(&mut a, Duration::from_secs(10));
    for rail in 0..2 {
        assert_eq!(a.backlog(1, rail), Backlog::default(), "rail {rail}");
    }
    drop(pe1);
}

#[test]
fn dead_peer_is_reported_within_give_up() {
    let cfg = |me| TcpConfig {
        give_up: Duration::from_millis(300),
        ..config(me, 1)
    };
    let (mut a, pe1) = pair(cfg(0), cfg(1), 4096);
    a.rail(0).put(1, 0, &[1; 64], CX).expect("put");
    pe1.pause.store(true, Ordering::Relaxed);
    drop(pe1.finish()); // PE 1 is gone: sockets and listener closed
    let end = std::time::Instant::now() + Duration::from_secs(10);
    let mut dead_event = false;
    let mut quiet_err = None;
    while std::time::Instant::now() < end && !(dead_event && quiet_err.is_some()) {
        a.progress(now());
        while let Some(e) = a.poll_event() {
            dead_event |= e == Event::PeerDead { peer: 1 };
        }
        if dead_event && quiet_err.is_none() {
            match a.quiet_poll() {
                Err(e) => quiet_err = Some(e),
                Ok(true) => quiet_err = Some(SocketError::PeerDead { peer: 1 }),
                Ok(false) => {}
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(dead_event, "no PeerDead event");
    assert_eq!(a.peer_state(1), LinkState::Error);
    let e = a.rail(0).put(1, 0, &[1], CX).expect_err("dead peer");
    assert_eq!(e.kind(), ErrorKind::PeerDown);
    assert_eq!(e.peer(), Some(1));
    let q = quiet_err.expect("quiet reported");
    assert_eq!(q.peer(), Some(1), "{q}");
    assert!(
        a.quiet_poll().expect("reported once"),
        "nothing pending after"
    );
}

/// PE 1 alone, driven here; a raw client plays PE 0.
fn lone_pe1() -> SocketDriver {
    let mut b = SocketDriver::with_owned_heap(config(1, 1), 4096).expect("driver 1");
    b.set_peer(0, &["127.0.0.1:9".parse().expect("addr")], 4096)
        .expect("peer 0");
    b
}

fn pump_until(b: &mut SocketDriver, mut done: impl FnMut(&mut SocketDriver) -> bool) {
    let end = std::time::Instant::now() + Duration::from_secs(10);
    while !done(b) {
        assert!(std::time::Instant::now() < end, "timed out");
        b.progress(now());
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Reads the challenge PE 1 sends first on every accepted connection.
fn read_challenge(s: &mut TcpStream, b: &mut SocketDriver) -> [u8; 16] {
    let mut f = [0u8; HEADER_LEN + CHALLENGE_LEN];
    s.set_nonblocking(true).expect("nonblocking");
    let mut got = 0;
    pump_until(b, |_| {
        match s.read(&mut f[got..]) {
            Ok(n) => got += n,
            Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{e}"),
        }
        got == f.len()
    });
    s.set_nonblocking(false).expect("blocking");
    assert_eq!(f[3], FrameOp::Hello as u8);
    decode_challenge(&f[HEADER_LEN..]).expect("a challenge")
}

#[test]
fn strangers_are_refused_and_counted() {
    let mut b = lone_pe1();
    let addr = b.local_addrs()[0];
    let hello = |c: u8| Hello {
        src: 0,
        dst: 1,
        rail: 0,
        conn: c,
        n_conns: 2,
        features: 0,
        heap_len: 4096,
        ..Hello::default()
    };
    // Another key, and the right key over the wrong nonce (a replay).
    let mut wrong = TcpStream::connect(addr).expect("connect");
    let challenge = read_challenge(&mut wrong, &mut b);
    let h = hello(0).seal(&JobKey([9; 32]), Role::Connect, JOB, &challenge);
    wrong.write_all(&h.frame()).expect("write");
    let mut replay = TcpStream::connect(addr).expect("connect");
    let challenge = read_challenge(&mut replay, &mut b);
    let mut old = challenge;
    old[0] ^= 1;
    let h = hello(0).seal(&KEY, Role::Connect, JOB, &old);
    replay.write_all(&h.frame()).expect("write");
    // No proof at all.
    let mut bare = TcpStream::connect(addr).expect("connect");
    bare.write_all(&hello(0).frame()).expect("write");
    let mut garbage = TcpStream::connect(addr).expect("connect");
    garbage.write_all(&[0x5A; 200]).expect("write");
    pump_until(&mut b, |b| b.stats().refused >= 4);
    let mut why = Vec::new();
    while let Some(e) = b.poll_event() {
        if let Event::Refused { why: w, .. } = e {
            why.push(w);
        }
    }
    why.sort_by_key(|w| format!("{w:?}"));
    assert_eq!(
        why,
        [
            RefuseReason::Garbage,
            RefuseReason::Unauthenticated,
            RefuseReason::Unauthenticated,
            RefuseReason::Unauthenticated
        ]
    );
    // The counters say the same, by reason.
    let s = b.stats();
    let by = |r: RefuseReason| s.refused_by[r.index()];
    assert_eq!(
        (
            by(RefuseReason::Unauthenticated),
            by(RefuseReason::Garbage),
            s.refused
        ),
        (3, 1, 4)
    );
    assert_eq!(s.refused_by.iter().sum::<u64>(), s.refused);
    // All were closed.
    for mut s in [wrong, replay, bare, garbage] {
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        // What is left of the challenge, then the end: no Hello came back.
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
        assert!(rest.len() <= HEADER_LEN + CHALLENGE_LEN, "{rest:?}");
    }
    assert_eq!(b.peer_state(0), LinkState::Down);
}

/// A raw, valid PE 0: control and data connections with their handshakes.
fn raw_pe0(b: &mut SocketDriver) -> (TcpStream, TcpStream) {
    let addr = b.local_addrs()[0];
    let mut conns = Vec::new();
    let mut nonces = Vec::new();
    for c in 0..2u8 {
        let mut s = TcpStream::connect(addr).expect("connect");
        let challenge = read_challenge(&mut s, b);
        let nonce = [c + 1; 16];
        let h = Hello {
            nonce,
            src: 0,
            dst: 1,
            rail: 0,
            conn: c,
            n_conns: 2,
            features: 0,
            heap_len: 4096,
            ..Hello::default()
        }
        .seal(&KEY, Role::Connect, JOB, &challenge);
        s.write_all(&h.frame()).expect("hello");
        conns.push(s);
        nonces.push(nonce);
    }
    pump_until(b, |b| b.rail(0).state(0) == LinkState::Up);
    for (s, nonce) in conns.iter_mut().zip(&nonces) {
        let mut reply = [0u8; HEADER_LEN + 96];
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        s.read_exact(&mut reply).expect("hello reply");
        assert_eq!(reply[3], FrameOp::Hello as u8);
        let h = Hello::decode(&reply[HEADER_LEN..]).expect("a Hello");
        assert!(
            h.is_authentic(&KEY, Role::Accept, JOB, nonce),
            "PE 1 proves the key"
        );
    }
    let d = conns.pop().expect("data");
    (conns.pop().expect("control"), d)
}

fn frame(op: FrameOp, aux: u8, seq: u64, offset: u64, span: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; HEADER_LEN + payload.len()];
    let f = HeaderFields {
        op: op as u8,
        aux,
        src_pe: 0,
        dst_pe: 1,
        seq,
        offset,
        span,
        flags: flags::ACK_NOW,
        ..HeaderFields::default()
    };
    encode(&mut out, &f, payload, true).expect("encode");
    out
}

#[test]
fn duplicates_are_dropped_and_replayed_atomics_answered_once() {
    let mut b = lone_pe1();
    let (_control, mut data) = raw_pe0(&mut b);
    let put = frame(FrameOp::Put, 0, 1, 64, 8, &7u64.to_le_bytes());
    data.write_all(&put).expect("put");
    data.write_all(&put).expect("put again (a replay)");
    let mut operand = [0u8; 16];
    operand[..8].copy_from_slice(&5u64.to_le_bytes());
    let add = frame(
        FrameOp::Atomic,
        AtomicKind::FetchAdd as u8,
        2,
        128,
        8,
        &operand,
    );
    data.write_all(&add).expect("add");
    data.write_all(&add).expect("add again (a replay)");
    pump_until(&mut b, |b| {
        b.stats().duplicates_dropped >= 1 && b.stats().frames_received >= 4
    });
    assert_eq!(heap_u64(&b, 64), 7);
    assert_eq!(heap_u64(&b, 128), 5, "the replayed fetch-add applied once");
    // Both copies of the atomic were answered with the same old value.
    let mut replies = [0u8; 2 * (HEADER_LEN + 8)];
    data.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    data.read_exact(&mut replies).expect("two replies");
    for r in replies.chunks(HEADER_LEN + 8) {
        assert_eq!(r[3], FrameOp::AtomicReply as u8);
        assert_eq!(
            u64::from_le_bytes(r[16..24].try_into().expect("8")),
            2,
            "seq"
        );
        assert_eq!(
            u64::from_le_bytes(r[HEADER_LEN..].try_into().expect("8")),
            0,
            "old"
        );
    }
    assert_eq!(b.stats().duplicates_dropped, 1);
    // Counted against PE 0's rail 0 too (the put; the atomic was answered).
    let per = b.peer_stats(0);
    assert_eq!(per[0].duplicates_dropped, 1, "{per:?}");
    assert_eq!(per[0].replayed + per[0].bad_frames, 0, "{per:?}");
    assert_eq!(per[1], PeerRailStats::default(), "{per:?}");
}

#[test]
fn malformed_frame_is_never_applied_and_cuts_the_connection() {
    let mut b = lone_pe1();
    let (_control, mut data) = raw_pe0(&mut b);
    let mut bad = frame(FrameOp::Put, 0, 1, 0, 8, &[0xEE; 8]);
    bad[HEADER_LEN + 3] ^= 0x10; // payload bit flip: CRC mismatch
    data.write_all(&bad).expect("bad put");
    pump_until(&mut b, |b| b.stats().bad_frames >= 1);
    assert_eq!(heap_u64(&b, 0), 0, "a bad frame was applied");
    // Cut after the handshake named PE 0: counted against it and rail 0.
    assert_eq!(b.peer_stats(0)[0].bad_frames, b.stats().bad_frames);
    assert_eq!(b.rail(0).state(0), LinkState::Down);
    data.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut buf = [0u8; 256];
    let mut closed = false;
    for _ in 0..100 {
        match data.read(&mut buf) {
            Ok(0) | Err(_) => {
                closed = true;
                break;
            }
            Ok(_) => {} // acks or heartbeats sent before the cut
        }
    }
    assert!(closed, "connection still open");
}

#[test]
fn fetching_atomics_across_cuts_apply_exactly_once() {
    const N: u64 = 2_000;
    let (mut a, pe1) = pair(config(0, 1), config(1, 1), 4096);
    let op = AtomicOp {
        kind: AtomicKind::FetchAdd,
        width: AtomicWidth::W64,
        operand: 1,
        compare: 0,
        fetch: true,
    };
    let mut olds = Vec::with_capacity(N as usize);
    let mut i = 0;
    while i < N {
        // Eight in flight, then (every 250) a cut before they are answered.
        let batch = 8.min(N - i);
        let mut tickets = Vec::new();
        for _ in 0..batch {
            tickets.push(retry(&mut a, Duration::from_secs(20), |d| {
                d.rail(0).atomic_start(1, 512, op, CX)
            }));
        }
        if i % 248 == 0 {
            a.debug_cut(1, 0);
        }
        for t in tickets {
            let end = std::time::Instant::now() + Duration::from_secs(20);
            loop {
                a.progress(now());
                if let Some(v) = a.rail(0).atomic_poll(&t).expect("atomic_poll") {
                    olds.push(v);
                    break;
                }
                assert!(std::time::Instant::now() < end, "atomic never completed");
            }
        }
        i += batch;
    }
    olds.sort_unstable();
    assert_eq!(
        olds,
        (0..N).collect::<Vec<_>>(),
        "old values not distinct 0..N"
    );
    quiet(&mut a, Duration::from_secs(10));
    let st = a.stats();
    assert!(st.reconnects > 0, "{st:?}");
    let b = pe1.finish();
    assert_eq!(heap_u64(&b, 512), N);
}

/// Non-fetching atomics (fetching kinds with `fetch: false`: what
/// `shmem_atomic_add` and `_xor` become) across cuts: each returns a
/// ticket with no table slot (answered at once), keeps nothing for the
/// reply, completes by quiet, and applies exactly once: an add replayed
/// twice would show in the sum, an XOR of one bit in the XOR word.
#[test]
fn non_fetching_atomics_across_cuts_apply_exactly_once() {
    const N: u64 = 4_000;
    let (mut a, pe1) = pair(config(0, 1), config(1, 1), 4096);
    let add = |i: u64| AtomicOp {
        kind: AtomicKind::FetchAdd,
        width: AtomicWidth::W64,
        operand: i % 7 + 1,
        compare: 0,
        fetch: false,
    };
    let xor = |i: u64| AtomicOp {
        kind: AtomicKind::FetchXor,
        width: AtomicWidth::W32,
        operand: 1 << (i % 32),
        compare: 0,
        fetch: false,
    };
    assert!(!add(0).is_fetching() && !xor(0).is_fetching());
    let (mut sum, mut bits) = (0u64, 0u64);
    for i in 0..N {
        let t = retry(&mut a, Duration::from_secs(20), |d| {
            d.rail(0).atomic_start(1, 512, add(i), CX)
        });
        // Nothing to wait for: answered at once, no progress step.
        assert_eq!(a.rail(0).atomic_poll(&t).expect("poll"), Some(0));
        let t = retry(&mut a, Duration::from_secs(20), |d| {
            d.rail(0).atomic_start(1, 1024, xor(i), CX)
        });
        assert_eq!(a.rail(0).atomic_poll(&t).expect("poll"), Some(0));
        sum += i % 7 + 1;
        bits ^= 1 << (i % 32);
        if i % 500 == 250 {
            a.debug_cut(1, 0);
        }
    }
    quiet(&mut a, Duration::from_secs(10));
    let st = a.stats();
    assert!(st.reconnects > 0, "{st:?}");
    // The table of fetching atomics is all free: one per slot still fits.
    let fetch = AtomicOp {
        kind: AtomicKind::Fetch,
        width: AtomicWidth::W64,
        operand: 0,
        compare: 0,
        fetch: true,
    };
    let t = retry(&mut a, Duration::from_secs(20), |d| {
        d.rail(0).atomic_start(1, 512, fetch, CX)
    });
    let end = std::time::Instant::now() + Duration::from_secs(20);
    let got = loop {
        a.progress(now());
        if let Some(v) = a.rail(0).atomic_poll(&t).expect("atomic_poll") {
            break v;
        }
        assert!(std::time::Instant::now() < end, "fetch never completed");
    };
    assert_eq!(got, sum, "adds lost or applied twice");
    let b = pe1.finish();
    assert_eq!(heap_u64(&b, 512), sum);
    assert_eq!(
        heap_u64(&b, 1024) & 0xFFFF_FFFF,
        bits,
        "an XOR applied twice or lost"
    );
}

#[test]
fn ipv6_loopback_rail_works() {
    // Skipped (with the reason) where the host has no IPv6 loopback, except
    // where a skip is a failure: as root (CI), or with `CI` or
    // `SWITCHYARD_NO_SKIP` set (the rule of `switchyard_tests::skip`, which a
    // driver does not depend on).
    if let Err(e) = std::net::TcpListener::bind("[::1]:0") {
        // SAFETY: geteuid has no preconditions, touches no memory and cannot fail.
        let root = unsafe { libc::geteuid() } == 0;
        let forbidden = root
            || ["CI", "SWITCHYARD_NO_SKIP"]
                .iter()
                .any(|v| std::env::var_os(v).is_some());
        assert!(
            !forbidden,
            "no IPv6 loopback on this host ({e}); a skip is a failure here"
        );
        eprintln!("skipped: no IPv6 loopback on this host ({e})");
        return;
    }
    let cfg = |me| TcpConfig {
        listen: vec!["::1".parse().expect("ip")],
        ..config(me, 1)
    };
    let (mut a, pe1) = pair(cfg(0), cfg(1), 1 << 20);
    let data: Vec<u8> = (0..100_000u32).map(|i| (i * 13) as u8).collect();
    retry(&mut a, Duration::from_secs(10), |d| {
        d.rail(0).put(1, 4096, &data, CX)
    });
    quiet(&mut a, Duration::from_secs(10));
    let b = pe1.finish();
    let (p, _) = b.local_heap();
    // SAFETY: the driver's own heap (1 MiB), its thread stopped.
    let got = unsafe { std::slice::from_raw_parts(p.add(4096), data.len()) };
    assert!(got == &data[..], "put over IPv6 did not land");
}

/// More idle, unauthenticated connections than the accepting side has
/// handshake slots, from the peer's own address (loopback: every PE's): the
/// oldest make room (counted as overload), and a real peer's connections,
/// which answer the challenge at once, still get in.
#[test]
fn an_idle_flood_does_not_keep_a_peer_out() {
    let mut b = lone_pe1();
    let addr = b.local_addrs()[0];
    // 48 slots (32 for strangers, 16 more for peers' addresses) and 8 over.
    let idle: Vec<TcpStream> = (0..56)
        .map(|_| TcpStream::connect(addr).expect("connect"))
        .collect();
    pump_until(&mut b, |b| b.stats().refused >= 8);
    let (_control, _data) = raw_pe0(&mut b);
    assert_eq!(b.peer_state(0), LinkState::Up);
    let mut overload = 0;
    while let Some(e) = b.poll_event() {
        if let Event::Refused {
            why: RefuseReason::Overload,
            ..
        } = e
        {
            overload += 1;
        }
    }
    assert!(overload >= 8, "{overload}");
    let s = b.stats();
    assert_eq!(s.refused_by[RefuseReason::Overload.index()], overload);
    assert_eq!(s.refused_by.iter().sum::<u64>(), s.refused);
    drop(idle);
}

/// A blocking TCP connection to `to` from `from` (any port): a host other
/// than the peers' (127.0.0.2 is loopback too, but no peer's address).
fn connect_from(from: std::net::Ipv4Addr, to: std::net::SocketAddr) -> TcpStream {
    use std::os::fd::FromRawFd;
    let std::net::SocketAddr::V4(to) = to else {
        panic!("an IPv4 listener")
    };
    let sin = |ip: std::net::Ipv4Addr, port: u16| libc::sockaddr_in {
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

/// A flood of idle connections from a host that is no peer's spends only
/// the strangers' handshake budget: a peer's connections, accepted before
/// the flood and answering only after it cycled through every slot, are
/// not closed, and the link comes up.
#[test]
fn a_flood_from_another_host_cannot_close_a_peers_handshake() {
    let mut b = lone_pe1();
    let addr = b.local_addrs()[0];
    // PE 0 (from 127.0.0.1, its address on the rail) connects and reads its
    // challenges, but holds its answer.
    let mut conns: Vec<(TcpStream, [u8; 16])> = (0..2)
        .map(|_| {
            let mut s = TcpStream::connect(addr).expect("connect");
            let challenge = read_challenge(&mut s, &mut b);
            (s, challenge)
        })
        .collect();
    // 80 idle strangers: the 32 slots of their budget turn over twice.
    let stranger: std::net::Ipv4Addr = [127, 0, 0, 2].into();
    let flood: Vec<TcpStream> = (0..80).map(|_| connect_from(stranger, addr)).collect();
    pump_until(&mut b, |b| b.stats().refused >= 48);
    let mut overload = Vec::new();
    while let Some(e) = b.poll_event() {
        if let Event::Refused {
            addr,
            why: RefuseReason::Overload,
        } = e
        {
            overload.push(addr);
        }
    }
    assert_eq!(overload.len(), 48, "{overload:?}");
    assert!(
        overload.iter().all(|a| a.ip() == stranger),
        "only strangers were closed: {overload:?}"
    );
    // Now PE 0 answers: its connections were kept, and the link comes up.
    for (c, (s, challenge)) in conns.iter_mut().enumerate() {
        let h = Hello {
            nonce: [c as u8 + 1; 16],
            src: 0,
            dst: 1,
            rail: 0,
            conn: c as u8,
            n_conns: 2,
            features: 0,
            heap_len: 4096,
            ..Hello::default()
        }
        .seal(&KEY, Role::Connect, JOB, challenge);
        s.write_all(&h.frame()).expect("hello");
    }
    pump_until(&mut b, |b| b.rail(0).state(0) == LinkState::Up);
    drop(flood);
}

/// A `PutSignal` payload: `data`, then the signal word's offset and value.
fn signal_payload(data: &[u8], at: u64, value: u64) -> Vec<u8> {
    let mut p = data.to_vec();
    p.extend_from_slice(&at.to_le_bytes());
    p.extend_from_slice(&value.to_le_bytes());
    p
}

#[test]
fn put_signals_across_cuts_apply_once_data_before_signal() {
    // Two data connections: the slots and the counter share a block, so
    // every frame is one PutSignal on one connection.
    const N: u64 = 4_000;
    let cfg = |me| TcpConfig {
        data_connections: 2,
        ..config(me, 1)
    };
    let counter = N * 8;
    let (mut a, pe1) = pair(cfg(0), cfg(1), 128 << 10);
    assert!(a.put_signal_fits(0, 8, counter));
    // Data in block 0, signal in block 1 (the other connection): refused,
    // nothing sent; the caller puts, fences and signals instead.
    assert!(!a.put_signal_fits(0, 8, 64 << 10));
    let far = FrameSignal {
        offset: 64 << 10,
        value: 1,
        kind: AtomicKind::Set,
    };
    let e = a.rail(0).put_signal(1, 0, &[1; 8], far, CX).unwrap_err();
    assert!(matches!(e, SocketError::TooLong { .. }), "{e}");
    let misaligned = FrameSignal { offset: 4, ..far };
    let e = a
        .rail(0)
        .put_signal(1, 0, &[1; 8], misaligned, CX)
        .unwrap_err();
    assert!(matches!(e, SocketError::Misaligned { .. }), "{e}");
    let outside = FrameSignal {
        offset: 128 << 10,
        ..far
    };
    let e = a
        .rail(0)
        .put_signal(1, 0, &[1; 8], outside, CX)
        .unwrap_err();
    assert!(matches!(e, SocketError::OutOfBounds { .. }), "{e}");
    let add = FrameSignal {
        offset: counter,
        value: 1,
        kind: AtomicKind::FetchAdd,
    };
    for i in 0..N {
        if i % 1_000 == 500 {
            a.debug_cut(1, 0);
        }
        let stamp = (i + 1).to_le_bytes();
        retry(&mut a, Duration::from_secs(20), |d| {
            d.rail(0).put_signal(1, i * 8, &stamp, add, CX)
        });
    }
    quiet(&mut a, Duration::from_secs(20));
    let st = a.stats();
    assert!(st.reconnects > 0, "{st:?}");
    let b = pe1.finish();
    assert_stamps(&b, N, "");
    assert_eq!(heap_u64(&b, counter), N, "every signal added exactly once");
}

#[test]
fn replayed_put_signal_applies_once_and_bad_ones_cut() {
    let mut b = lone_pe1();
    let (_control, mut data) = raw_pe0(&mut b);
    let add = AtomicKind::FetchAdd as u8;
    let ps = frame(
        FrameOp::PutSignal,
        add,
        1,
        64,
        8,
        &signal_payload(&7u64.to_le_bytes(), 128, 5),
    );
    data.write_all(&ps).expect("put_signal");
    data.write_all(&ps).expect("put_signal again (a replay)");
    let set = frame(
        FrameOp::PutSignal,
        AtomicKind::Set as u8,
        2,
        72,
        3,
        &signal_payload(&[1, 2, 3], 136, 9),
    );
    data.write_all(&set).expect("put_signal set");
    pump_until(&mut b, |b| b.stats().frames_received >= 3);
    assert_eq!(heap_u64(&b, 64), 7);
    assert_eq!(heap_u64(&b, 128), 5, "the replayed add applied once");
    assert_eq!(heap_u64(&b, 72) & 0xFF_FFFF, 0x03_0201);
    assert_eq!(heap_u64(&b, 136), 9);
    assert_eq!(b.stats().duplicates_dropped, 1);
    // The signal word beyond the heap: not applied (neither the data), cut.
    let bad = frame(
        FrameOp::PutSignal,
        add,
        3,
        256,
        8,
        &signal_payload(&[0xEE; 8], 4096, 1),
    );
    data.write_all(&bad).expect("bad put_signal");
    pump_until(&mut b, |b| {
        b.stats().bad_frames >= 1 || b.rail(0).state(0) != LinkState::Up
    });
    assert_eq!(heap_u64(&b, 256), 0, "a bad frame's data was applied");
    assert_eq!(b.rail(0).state(0), LinkState::Down);
}

#[test]
fn short_put_signal_payload_cuts_the_connection() {
    let mut b = lone_pe1();
    let (_control, mut data) = raw_pe0(&mut b);
    // Declares 8 bytes of data but carries only 8 bytes of payload.
    let bad = frame(
        FrameOp::PutSignal,
        AtomicKind::Set as u8,
        1,
        0,
        8,
        &[0xEE; 8],
    );
    data.write_all(&bad).expect("short put_signal");
    pump_until(&mut b, |b| b.rail(0).state(0) != LinkState::Up);
    assert_eq!(heap_u64(&b, 0), 0, "a bad frame was applied");
}

/// The timers a caller that makes no progress steps runs itself
/// (`timers_due`, `run_timers`): due half a heartbeat interval after the
/// last full pass, and a run sends the idle rails' heartbeats.
#[test]
fn overdue_timers_are_due_and_a_run_sends_heartbeats() {
    let (mut a, pe1) = pair(config(0, 2), config(1, 2), 4096);
    let half = config(0, 2).heartbeat_interval.as_nanos() as u64 / 2;
    // Past every timer: the run is a full pass (the last one is at `t`).
    let t = Instant::from_nanos(now().nanos + 4 * half);
    let before = a.stats().heartbeats_sent;
    a.run_timers(t);
    assert!(
        a.stats().heartbeats_sent >= before + 2,
        "a heartbeat per idle rail: {:?}",
        a.stats()
    );
    assert!(!a.timers_due(Instant::from_nanos(t.nanos + half - 1)));
    assert!(a.timers_due(Instant::from_nanos(t.nanos + half)));
    // Ordinary steps between full passes do not reset it.
    a.progress(Instant::from_nanos(t.nanos + 1));
    assert!(a.timers_due(Instant::from_nanos(t.nanos + half)));
    drop(pe1.finish());
}

/// A raw PE 0's connection `c` of rail 0 to `b`, its `Hello` sent.
fn raw_conn(b: &mut SocketDriver, c: u8) -> TcpStream {
    let mut s = TcpStream::connect(b.local_addrs()[0]).expect("connect");
    let challenge = read_challenge(&mut s, b);
    let h = Hello {
        nonce: [c + 1; 16],
        src: 0,
        dst: 1,
        rail: 0,
        conn: c,
        n_conns: 2,
        features: 0,
        heap_len: 4096,
        ..Hello::default()
    }
    .seal(&KEY, Role::Connect, JOB, &challenge);
    s.write_all(&h.frame()).expect("hello");
    s
}

/// A connect attempt that failed part-way (its control connection closed
/// for overload, say) left its data connection installed at the accepting
/// side, which does not read the connections of a peer it has no address
/// for (connect-on-first-use: a stranger) while its rail is down; the
/// peer closed it and tries again. The newer attempt's control
/// connection does not bring the rail up with the leftover (which would
/// have its own data connection taken for a reconnect: the rail down, and
/// up again with the next leftover, for ever): the leftover is dropped, and
/// the rail comes up with the newer attempt's two connections, and stays.
#[test]
fn a_rail_never_comes_up_with_a_connection_of_an_earlier_attempt() {
    let mut b = SocketDriver::with_owned_heap(config(1, 1), 4096).expect("driver 1");
    b.set_connect_on_first_use(true);
    // Attempt 1: only its data connection got through, then it failed.
    let old = raw_conn(&mut b, 1);
    let end = std::time::Instant::now() + Duration::from_secs(10);
    while b.stats().bytes_received == 0 {
        assert!(std::time::Instant::now() < end, "the Hello read");
        b.run_timers(now());
        std::thread::sleep(Duration::from_micros(200));
    }
    assert_eq!(b.rail(0).state(0), LinkState::Down);
    drop(old);
    // Attempt 2: control, then data.
    let _control = raw_conn(&mut b, 0);
    for _ in 0..20 {
        b.run_timers(now());
        std::thread::sleep(Duration::from_micros(200));
    }
    // Not up with the leftover, not even for a moment.
    let mut links = Vec::new();
    while let Some(e) = b.poll_event() {
        if let Event::Link { state, .. } = e {
            links.push(state);
        }
    }
    assert_eq!(links, [], "no link transition yet");
    assert_eq!(b.rail(0).state(0), LinkState::Down);
    assert_eq!(b.stats().stale_conns, 1);
    let _data = raw_conn(&mut b, 1);
    pump_until(&mut b, |b| b.rail(0).state(0) == LinkState::Up);
    for _ in 0..20 {
        b.run_timers(now());
        std::thread::sleep(Duration::from_micros(200));
    }
    assert_eq!(b.rail(0).state(0), LinkState::Up);
    while let Some(e) = b.poll_event() {
        if let Event::Link { state, .. } = e {
            links.push(state);
        }
    }
    assert_eq!(links, [LinkState::Up], "up once, no flap");
}
