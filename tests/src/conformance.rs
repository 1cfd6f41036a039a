//! The driver conformance suite: written once against the transport contract
//! ([`switchyard_core::transport::Transport`]), run for every driver.
//!
//! A driver joins by implementing [`Harness`]: a way to get PE 0's transport
//! connected to PE 1 (in one process or across two), and a way for the test
//! to look at PE 1's heap. Every check in [`run_all`] then runs against it.

use switchyard_core::{
    route::ContextId,
    transport::{AtomicOp, AtomicWidth, ErrorKind, LinkState, Transport, TransportError},
    wire::AtomicKind,
};

/// Sets up a driver for the suite.
pub trait Harness {
    /// The driver.
    type T: Transport;
    /// Whatever must live as long as the pair (PE 1's side).
    type Guard;
    /// PE 0's transport connected to PE 1, both heaps `heap` bytes, zeroed.
    fn pair(heap: u64) -> (Self::T, Self::Guard);
}

const CTX: ContextId = ContextId { pe: 0, seq: 1 };

/// A get of any length, in pieces of at most the driver's `max_get_len`.
fn blocking_get<T: Transport>(t: &mut T, pe: u32, off: u64, len: u32) -> Result<Vec<u8>, T::Error> {
    let mut buf = vec![0u8; len as usize];
    let max = t.max_get_len().max(1);
    let mut done = 0u32;
    loop {
        let n = (len - done).min(max);
        get_piece(
            t,
            pe,
            off + u64::from(done),
            &mut buf[done as usize..(done + n) as usize],
        )?;
        done += n;
        if done >= len {
            return Ok(buf);
        }
    }
}

fn get_piece<T: Transport>(t: &mut T, pe: u32, off: u64, buf: &mut [u8]) -> Result<(), T::Error> {
    let tk = t.get_start(pe, off, buf.len() as u32, CTX)?;
    for _ in 0..1_000_000 {
        if t.get_poll(&tk, buf)? {
            return Ok(());
        }
        t.progress(switchyard_core::transport::Instant::from_nanos(0));
    }
    panic!("get did not complete in a million polls");
}

fn quiet<T: Transport>(t: &mut T) {
    for _ in 0..1_000_000 {
        if t.quiet_poll().expect("quiet") {
            return;
        }
    }
    panic!("quiet did not complete in a million polls");
}

fn atomic<T: Transport>(t: &mut T, off: u64, op: AtomicOp) -> Result<u64, T::Error> {
    let tk = t.atomic_start(1, off, op, CTX)?;
    if !op.is_fetching() {
        quiet(t);
        return Ok(0);
    }
    for _ in 0..1_000_000 {
        if let Some(v) = t.atomic_poll(&tk)? {
            return Ok(v);
        }
    }
    panic!("atomic did not complete");
}

/// Deterministic pseudo-random numbers (xorshift), so failures reproduce.
pub struct Rng(pub u64);

impl Rng {
    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A number below `n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// put/get at random offsets and sizes against a local model of PE 1's heap.
pub fn random_put_get<H: Harness>() {
    const HEAP: u64 = 64 * 1024;
    let (mut t, _g) = H::pair(HEAP);
    assert_eq!(t.state(1), LinkState::Up);
    assert_eq!(t.heap_len(1), Some(HEAP));
    let mut model = vec![0u8; HEAP as usize];
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for round in 0..500 {
        let len = 1 + rng.below(if round % 10 == 0 { 16 * 1024 } else { 64 }) as usize;
        let off = rng.below(HEAP - len as u64 + 1);
        let data: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
        t.put(1, off, &data, CTX).expect("put");
        model[off as usize..off as usize + len].copy_from_slice(&data);
        if round % 7 == 0 {
            quiet(&mut t);
            let glen = 1 + rng.below(4096) as u32;
            let goff = rng.below(HEAP - u64::from(glen) + 1);
            let got = blocking_get(&mut t, 1, goff, glen).expect("get");
            assert_eq!(
                got,
                model[goff as usize..goff as usize + glen as usize],
                "round {round}"
            );
        }
    }
    quiet(&mut t);
    let all = blocking_get(&mut t, 1, 0, HEAP as u32).expect("get all");
    assert_eq!(crc32(&all), crc32(&model));
    assert_eq!(all, model);
}

fn crc32(b: &[u8]) -> u32 {
    switchyard_core::crc::crc32c(b)
}

/// Out-of-bounds operations fail with `OutOfBounds`, name the peer, and
/// change nothing at the target.
pub fn bounds_are_enforced<H: Harness>() {
    const HEAP: u64 = 8192;
    let (mut t, _g) = H::pair(HEAP);
    let cases: [(u64, usize); 4] = [(HEAP, 1), (HEAP - 4, 5), (u64::MAX, 1), (u64::MAX - 2, 8)];
    for (off, len) in cases {
        let e = t
            .put(1, off, &vec![0xEE; len], CTX)
            .expect_err("out-of-bounds put");
        assert_eq!(e.kind(), ErrorKind::OutOfBounds, "{e}");
        assert_eq!(e.peer(), Some(1));
        assert!(
            t.get_start(1, off, len as u32, CTX)
                .and_then(|tk| {
                    let mut b = vec![0; len];
                    t.get_poll(&tk, &mut b)
                })
                .is_err()
        );
    }
    let e = t
        .put_from_heap(1, HEAP - 8, 0, 16, CTX)
        .expect_err("out-of-bounds heap put");
    assert_eq!(e.kind(), ErrorKind::OutOfBounds);
    let e = atomic(
        &mut t,
        HEAP,
        AtomicOp {
            kind: AtomicKind::FetchAdd,
            width: AtomicWidth::W64,
            operand: 1,
            compare: 0,
            fetch: true,
        },
    )
    .expect_err("out-of-bounds atomic");
    assert_eq!(e.kind(), ErrorKind::OutOfBounds);
    quiet(&mut t);
    let all = blocking_get(&mut t, 1, 0, HEAP as u32).expect("get");
    assert!(
        all.iter().all(|&b| b == 0),
        "a failed operation wrote something"
    );
    // An unknown PE.
    assert_eq!(
        t.put(7, 0, &[1], CTX).expect_err("bad PE").kind(),
        ErrorKind::InvalidPe
    );
}

/// Every atomic kind and width, fetching or not, matches [`AtomicOp::apply`];
/// misaligned ones fail.
pub fn atomics_match_reference<H: Harness>() {
    let (mut t, _g) = H::pair(4096);
    let mut rng = Rng(42);
    for (w, off) in [(AtomicWidth::W64, 256u64), (AtomicWidth::W32, 512u64)] {
        let mut model = 0u64;
        for i in 0..400 {
            let kind = AtomicKind::from_u8(1 + (rng.below(8) as u8)).expect("kind");
            let operand = w.truncate(if i % 5 == 0 {
                rng.next_u64()
            } else {
                rng.below(7)
            });
            let compare = if rng.below(2) == 0 {
                model
            } else {
                w.truncate(rng.next_u64())
            };
            // Every third one non-fetching (`fetch: false`, what an add or
            // bitwise op without a result is): complete by quiet, and the
            // next fetching one sees it applied once.
            let op = AtomicOp {
                kind,
                width: w,
                operand,
                compare,
                fetch: i % 3 != 0,
            };
            let old = atomic(&mut t, off, op).expect("atomic");
            if op.is_fetching() {
                assert_eq!(old, model, "{op:?} at step {i}");
            }
            model = op.apply(model);
        }
        let op = AtomicOp {
            kind: AtomicKind::Fetch,
            width: w,
            operand: 0,
            compare: 0,
            fetch: true,
        };
        assert_eq!(atomic(&mut t, off, op).expect("fetch"), model);
    }
    let op = AtomicOp {
        kind: AtomicKind::FetchAdd,
        width: AtomicWidth::W64,
        operand: 1,
        compare: 0,
        fetch: true,
    };
    let e = atomic(&mut t, 4, op).expect_err("misaligned");
    assert_eq!(e.kind(), ErrorKind::Misaligned);
}

/// Heap-to-heap put and get land by quiet.
pub fn heap_to_heap<H: Harness>() {
    let (mut t, _g) = H::pair(4096);
    t.put(0, 100, b"symmetric source", CTX).expect("local put");
    t.put_from_heap(1, 2000, 100, 16, CTX)
        .expect("put_from_heap");
    t.get_into_heap(1, 2000, 3000, 16, CTX)
        .expect("get_into_heap");
    quiet(&mut t);
    assert_eq!(
        blocking_get(&mut t, 0, 3000, 16).expect("get"),
        b"symmetric source"
    );
    assert_eq!(
        blocking_get(&mut t, 1, 2000, 16).expect("get"),
        b"symmetric source"
    );
}

/// Later writes win after a fence; a flag written after data never shows
/// ahead of it (checked from the target's side by a get of both).
pub fn fence_orders_puts<H: Harness>() {
    let (mut t, _g) = H::pair(4096);
    for i in 1..=200u64 {
        t.put(1, 0, &vec![i as u8; 1024], CTX).expect("data");
        t.fence().expect("fence");
        t.put(1, 2048, &i.to_le_bytes(), CTX).expect("flag");
    }
    quiet(&mut t);
    let flag = u64::from_le_bytes(
        blocking_get(&mut t, 1, 2048, 8).expect("get")[..]
            .try_into()
            .expect("8"),
    );
    assert_eq!(flag, 200);
    assert!(
        blocking_get(&mut t, 1, 0, 1024)
            .expect("get")
            .iter()
            .all(|&b| b == 200)
    );
}

/// `close` is idempotent and leaves the peer unusable.
pub fn close_is_final<H: Harness>() {
    let (mut t, _g) = H::pair(4096);
    t.close().expect("close");
    t.close().expect("close twice");
    assert_ne!(t.state(1), LinkState::Up);
    assert!(t.put(1, 0, &[1], CTX).is_err());
}

/// Runs the whole suite.
pub fn run_all<H: Harness>() {
    random_put_get::<H>();
    bounds_are_enforced::<H>();
    atomics_match_reference::<H>();
    heap_to_heap::<H>();
    fence_orders_puts::<H>();
    close_is_final::<H>();
}
