//! Threads of one PE, each on its own context ([`Pe::context`]): puts of
//! sequence-stamped values, atomic additions and quiets at once, from both
//! PEs of a pair toward the other, checked at the target; over shared
//! memory and over TCP. A context that wrote only over shared memory
//! quiets while another holds the PE's TCP entry lock.

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex, mpsc::channel},
    thread,
    time::{Duration, Instant},
};

use switchyard_core::{
    class::NO_SWITCH,
    route::{Op, PolicyConfig},
};
use switchyard_socket::{JobKey, SocketDriver, TcpConfig};

use super::{
    Cmp, Context, Error, MAX_CONTEXTS, PeerInfo, SHM, Sym,
    pes_test::{PeScript, exit_barrier, run_pes},
    progress,
    shm_pair_test::run_pair,
    tcp_pair_test::{self, WAIT},
};

/// Threads per PE.
const THREADS: usize = 3;
/// Puts (and additions) per thread over shared memory.
const OPS: usize = 2000;
/// Over TCP (each fetch-add a round trip).
const TCP_OPS: usize = 100;

/// The value thread `t` puts as its `i`-th.
fn stamp(t: usize, i: usize) -> u64 {
    ((t as u64 + 1) << 32) | i as u64
}

/// One PE's part: `THREADS` threads, each on a context of its own, put
/// their stamps into their own words of `data` at the other PE, add 1 (and
/// their thread number) to its counters, quiet now and then, and announce
/// themselves done with an atomic after a final quiet. Meanwhile this PE's
/// first context waits until the other PE's threads are done, then checks
/// every stamp and the totals in its own heap.
fn both_ways(mut ctx: Context, ops: usize) {
    let other = 1 - ctx.my_pe();
    let data = ctx.alloc::<u64>(THREADS * ops).unwrap();
    let counters = ctx.alloc::<u64>(2).unwrap();
    let done = ctx.alloc::<u64>(1).unwrap();
    let pe = ctx.pe();
    thread::scope(|s| {
        for t in 0..THREADS {
            let pe = pe.clone();
            s.spawn(move || {
                let mut c = pe.context().expect("a context per thread");
                for i in 0..ops {
                    c.put(&data, t * ops + i, &[stamp(t, i)], other).unwrap();
                    c.fetch_add(&counters, 0, 1, other).unwrap();
                    c.add(&counters, 1, t as u64, other).unwrap();
                    if i % 97 == 0 {
                        c.quiet().unwrap();
                    }
                }
                // This context's quiet completes its own puts before the
                // announcement.
                c.quiet().unwrap();
                c.add(&done, 0, 1, other).unwrap();
                c.quiet().unwrap();
                assert!(c.stats().ops.iter().sum::<u64>() >= 3 * ops as u64);
            });
        }
        let n = THREADS as u64;
        assert_eq!(ctx.wait_until(&done, 0, Cmp::Eq, n).unwrap(), n);
        check(&mut ctx, &data, &counters, ops);
    });
    ctx.barrier_all().unwrap();
    ctx.finalize().unwrap();
}

/// Every stamp where it belongs, and the counters' totals.
fn check(ctx: &mut Context, data: &Sym<u64>, counters: &Sym<u64>, ops: usize) {
    let mut got = vec![0u64; THREADS * ops];
    ctx.read_local(data, 0, &mut got).unwrap();
    for t in 0..THREADS {
        for i in 0..ops {
            assert_eq!(got[t * ops + i], stamp(t, i), "thread {t}, put {i}");
        }
    }
    let mut totals = [0u64; 2];
    ctx.read_local(counters, 0, &mut totals).unwrap();
    let per_thread: u64 = (0..THREADS as u64).sum();
    assert_eq!(totals, [(THREADS * ops) as u64, per_thread * ops as u64]);
}

const _: () = {
    const fn send<T: Send>() {}
    send::<Context>();
};

#[test]
fn threads_on_their_own_contexts_over_shm() {
    run_pair(tcp_pair_test::job(0x7E1), |ctx| both_ways(ctx, OPS));
}

#[test]
fn threads_on_their_own_contexts_over_tcp() {
    let pair = tcp_pair_test::Pair {
        job: tcp_pair_test::job(0x7E2),
        routed: false,
        policy: PolicyConfig::default(),
        tcp: TcpConfig {
            listen: vec!["127.0.0.1".parse().unwrap()],
            ..TcpConfig::default()
        },
    };
    pair.run(|ctx| both_ways(ctx, TCP_OPS));
}

/// A PE has at most `MAX_CONTEXTS` contexts at once (a typed error after);
/// a dropped one's place, and its trace ring, go to the next.
#[test]
fn contexts_are_bounded_and_reused() {
    let mut cfg = crate::config::Config::default();
    cfg.set(
        crate::config::Key::HeapSize,
        "1M",
        crate::config::Source::Default,
    )
    .unwrap();
    let mut first = Context::with_config(&cfg).unwrap();
    let sym = first.alloc::<u64>(1).unwrap();
    let pe = first.pe();
    let mut more: Vec<Context> = (1..MAX_CONTEXTS).map(|_| pe.context().unwrap()).collect();
    assert!(matches!(pe.context(), Err(Error::NoContext { .. })));
    // Handles of one context are valid in the others; they see one heap.
    more[5].put(&sym, 0, &[41], 0).unwrap();
    assert_eq!(more[9].fetch_add(&sym, 0, 1, 0).unwrap(), 41);
    let rings: Vec<*const _> = more[1..]
        .iter()
        .map(|c| core::ptr::from_ref(c.trace()))
        .collect();
    more.truncate(1);
    let again = pe.context().unwrap();
    assert!(
        rings.contains(&core::ptr::from_ref(again.trace())),
        "a dropped context's ring is reused"
    );
    let mut v = [0u64];
    first.read_local(&sym, 0, &mut v).unwrap();
    assert_eq!(v, [42]);
    drop((more, again));
    first.finalize().unwrap();
}

/// A context's `Stats::ops` are its own operations only, exactly, on the
/// PE's first context and on one that takes over the slot a dropped
/// context left (which keeps its counts in the segment).
#[test]
fn a_contexts_op_count_is_its_own_after_its_slot_was_used() {
    run_pair(tcp_pair_test::job(0x5107), |mut ctx| {
        let other = 1 - ctx.my_pe();
        let sym = ctx.alloc::<u64>(4).unwrap();
        let shm = super::SHM.index();
        // The collective alloc's own operations first.
        let before = ctx.stats().ops[shm];
        for i in 0..5 {
            ctx.put(&sym, 0, &[i], other).unwrap();
        }
        assert_eq!(ctx.stats().ops[shm], before + 5);
        let pe = ctx.pe();
        let mut first = pe.context().unwrap();
        for i in 0..7 {
            first.put(&sym, 1, &[i], other).unwrap();
        }
        assert_eq!(first.stats().ops[shm], 7);
        drop(first);
        let mut second = pe.context().unwrap();
        second.fetch_add(&sym, 2, 1u64, other).unwrap();
        second.put(&sym, 3, &[1], other).unwrap();
        assert_eq!(second.stats().ops[shm], 2, "{:?}", second.stats());
        drop(second);
        assert_eq!(ctx.stats().ops[shm], before + 5);
        ctx.barrier_all().unwrap();
        ctx.finalize().unwrap();
    });
}

/// Three PEs: 0 and 1 on one node (shared memory between them), 2 on
/// another (TCP over loopback), so PE 0 drives a TCP driver, and has its
/// entry lock, while its traffic to PE 1 is shared memory only.
fn three_pes(job: u64, script: impl Fn(Context) + Send + Clone + 'static) {
    type Card = (String, Vec<SocketAddr>);
    let book: Arc<Mutex<Vec<Option<Card>>>> = Arc::new(Mutex::new(vec![None; 3]));
    let leave = exit_barrier(3);
    let pes = (0..3u32)
        .map(|me| {
            let (book, script, leave) = (book.clone(), script.clone(), leave.clone());
            Box::new(move || {
                let mut s = tcp_pair_test::setup(job, me, PolicyConfig::default());
                s.n_pes = 3;
                let seg = Context::create_segment(&s).expect("segment");
                let (heap, len) = (seg.mapped().heap_ptr(), seg.mapped().heap_len());
                let tcfg = TcpConfig {
                    job_id: job,
                    key: JobKey(*b"three-PEs-two-nodes-shm-and-tcp!"),
                    me,
                    n_pes: 3,
                    listen: vec!["127.0.0.1".parse().unwrap()],
                    ..TcpConfig::default()
                };
                #[allow(unsafe_code)]
                // SAFETY: the segment's heap mapping, valid for `len` bytes;
                // the segment moves into the context with the driver and
                // outlives it.
                let tcp = unsafe { SocketDriver::new(tcfg, heap, len) }.expect("tcp driver");
                let mine = (
                    seg.path().to_string_lossy().into_owned(),
                    tcp.local_addrs().to_vec(),
                );
                book.lock().unwrap()[me as usize] = Some(mine);
                let start = Instant::now();
                let all = loop {
                    if let Some(all) = book
                        .lock()
                        .unwrap()
                        .iter()
                        .cloned()
                        .collect::<Option<Vec<_>>>()
                    {
                        break all;
                    }
                    assert!(start.elapsed() < WAIT, "the other PEs' cards");
                    thread::sleep(Duration::from_millis(1));
                };
                let peers: Vec<PeerInfo> = all
                    .into_iter()
                    .enumerate()
                    .map(|(pe, (path, tcp))| PeerInfo {
                        node: if pe < 2 { 1 } else { 2 },
                        switch: 5,
                        tree: NO_SWITCH,
                        shm: Some(path.into()),
                        tcp,
                    })
                    .collect();
                let mut ctx = Context::from_parts(s, seg, &peers, Some(tcp)).expect("context");
                leave(&mut ctx);
                script(ctx);
            }) as PeScript
        })
        .collect();
    run_pes(pes);
}

/// Words PE 0's second context puts to PE 1.
const SHM_WORDS: usize = 64;

/// A context that wrote only over shared memory puts, fences and quiets
/// while another context of its PE holds the TCP entry lock (it finishes,
/// bounded: the lock is given back after 10 s whatever happened); after a
/// put over TCP its quiet waits for the lock, and for the put (read at
/// PE 2 after a barrier).
#[test]
fn a_context_on_shm_quiets_while_another_holds_the_entry_lock() {
    three_pes(tcp_pair_test::job(0x7E3), |mut ctx| {
        let me = ctx.my_pe();
        let data = ctx.alloc::<u64>(SHM_WORDS).unwrap();
        let far = ctx.alloc::<u64>(1).unwrap();
        ctx.barrier_all().unwrap();
        if me == 0 {
            let mut c = ctx.pe().context().expect("a second context");
            assert_eq!(c.route(1, 8, Op::Put).unwrap().transport, SHM);
            assert_ne!(c.route(2, 8, Op::Put).unwrap().transport, SHM);
            // The first context takes the entry lock and keeps it.
            assert!(ctx.tcp.as_mut().map(progress::Tcp::get).is_some());
            let (tx, rx) = channel();
            let h = thread::spawn(move || {
                for i in 0..SHM_WORDS {
                    c.put(&data, i, &[i as u64 + 1], 1).unwrap();
                    c.fence().unwrap();
                    c.quiet().unwrap();
                }
                let _ = tx.send(());
                c
            });
            let in_time = rx.recv_timeout(Duration::from_secs(10)).is_ok();
            // Given back (whatever happened), so a blocked thread goes on.
            ctx.leave();
            let mut c = h.join().expect("the thread");
            assert!(
                in_time,
                "a quiet over shared memory waited for the entry lock"
            );
            // Over TCP to PE 2: its quiet needs the lock.
            c.put(&far, 0, &[9], 2).unwrap();
            assert!(ctx.tcp.as_mut().map(progress::Tcp::get).is_some());
            let (tx, rx) = channel();
            let h = thread::spawn(move || {
                let r = c.quiet();
                let _ = tx.send(());
                r
            });
            let in_time = rx.recv_timeout(Duration::from_millis(300)).is_ok();
            ctx.leave();
            h.join().expect("the thread").unwrap();
            assert!(!in_time, "a quiet with a TCP put pending took no lock");
        }
        ctx.barrier_all().unwrap();
        match me {
            1 => {
                let mut got = [0u64; SHM_WORDS];
                ctx.read_local(&data, 0, &mut got).unwrap();
                for (i, &g) in got.iter().enumerate() {
                    assert_eq!(g, i as u64 + 1, "put {i} over shared memory");
                }
            }
            2 => {
                let mut got = [0u64];
                ctx.read_local(&far, 0, &mut got).unwrap();
                assert_eq!(got[0], 9, "the put over TCP, quieted before the barrier");
            }
            _ => {}
        }
        ctx.barrier_all().unwrap();
        ctx.finalize().unwrap();
    });
}
