//! A counting allocator proves that the data path never allocates: select,
//! health and load flips, topology updates, frame encode/decode, ring push/pop
//! and trace records.
#![cfg(all(feature = "alloc", not(loom)))]

use std::{
    alloc::{GlobalAlloc, Layout, System},
    cell::Cell,
};

use switchyard_core::{
    class::{PathClass, TransportId},
    credit::{CreditGranter, CreditWindow},
    ring::Ring,
    route::{Op, Policy, PolicyConfig, Selector, TransportRoles},
    topology::{Shape, Topology, TopologyBox},
    trace::{TraceRecord, TraceRing},
    wire::{self, Frame, FrameOp, HeaderFields},
};

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations made by this thread while running `f`.
fn allocations(f: impl FnOnce()) -> u64 {
    let before = ALLOCS.with(Cell::get);
    f();
    ALLOCS.with(Cell::get) - before
}

fn t(i: u8) -> TransportId {
    TransportId::new(i).unwrap()
}

#[test]
fn data_path_does_not_allocate() {
    // Set-up may allocate.
    let shape = Shape {
        me: 0,
        n_pes: 4096,
        n_transports: 3,
        load_hints: true,
    };
    let store = TopologyBox::new(shape, 2);
    let topo = Topology::new(store.mem(), shape, |p| match p % 4 {
        0 => PathClass::Shm,
        1 => PathClass::Near,
        2 => PathClass::Routed,
        _ => PathClass::Unreachable,
    })
    .unwrap();
    let roles = TransportRoles {
        shm: Some(t(0)),
        rdma: Some(t(1)),
        stream: [Some(t(2)), None, None, None],
    };
    let policy = Policy::new(PolicyConfig {
        roles,
        ..PolicyConfig::default()
    });
    let mut sel = Selector::new(&topo, policy).unwrap();
    let mut writer = topo.writer().unwrap();
    let mut ring = Box::new(Ring::<u64, 1024>::new());
    let trace = Box::new(TraceRing::<256>::new());
    let mut trace_out = vec![TraceRecord::default(); 256];
    let mut frame_buf = vec![0u8; wire::HEADER_LEN + 4096];
    let payload = vec![7u8; 4096];

    let n = allocations(|| {
        // Health and load flips.
        for p in 0..4096 {
            topo.set_health(t((p % 3) as u8), p, true);
            topo.set_overloaded(t(1), p, p % 7 == 0);
        }
        topo.set_health(t(1), 5, false);
        // Selects, pinned and not, successful and failing.
        {
            let mut pinned = sel.pin();
            for p in 0..4096 {
                let _ = pinned.select(p, (p * 37) % 20_000, Op::Put);
            }
        }
        for p in 0..4096 {
            let _ = sel.select(p, 64, Op::FetchingAtomic);
        }
        let _ = sel.select(1_000_000, 8, Op::Get); // invalid PE error
        // A topology update.
        let mut u = writer.try_update().unwrap();
        u.set_class(9, PathClass::Unreachable);
        u.publish();
        // Frames.
        for len in [0usize, 64, 4096] {
            let f = HeaderFields {
                op: FrameOp::Put as u8,
                span: len as u32,
                offset: 128,
                ..HeaderFields::default()
            };
            let total = wire::encode(&mut frame_buf, &f, &payload[..len], true).unwrap();
            let frame = Frame::new_checked(&frame_buf[..total]).unwrap();
            frame.check_heap(1 << 20).unwrap();
            assert_eq!(frame.payload().len(), len);
            let _ = Frame::new_checked(&frame_buf[..total - 1]).unwrap_err();
        }
        // Ring.
        let (mut p, mut c) = ring.split();
        for i in 0..2000u64 {
            let _ = p.push(i);
            let _ = c.pop();
        }
        p.push_slice(&[1, 2, 3, 4]);
        let mut out = [0u64; 4];
        c.pop_slice(&mut out);
        // Trace ring.
        let mut w = trace.writer().unwrap();
        for i in 0..1000 {
            w.record(&TraceRecord {
                seq: i,
                ..TraceRecord::default()
            });
        }
        trace.snapshot(&mut trace_out);
        // Credits.
        let mut tx = CreditWindow::new(64);
        let mut rx = CreditGranter::new(64, 16);
        for _ in 0..100 {
            if tx.try_consume(4).is_ok() {
                rx.on_receive(4).unwrap();
            }
            if let Some(g) = rx.on_release(4) {
                tx.on_grant(g);
            }
        }
    });
    assert_eq!(n, 0, "the data path allocated {n} times");
}

#[test]
fn the_counter_counts() {
    let n = allocations(|| {
        let v: Vec<u64> = Vec::with_capacity(10);
        std::hint::black_box(v);
    });
    assert_eq!(n, 1);
}
