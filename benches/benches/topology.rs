//! The versioned topology's two sides.
//!
//! | id | what |
//! |---|---|
//! | `topology/pin_unpin` | `Reader::pin()` and dropping the guard (one store, a SeqCst fence, loads, one store) |
//! | `topology/publish_update/4096` | `try_update` (copies the 4,096-peer row into the free slot), one `set_class`, `publish` |
//! | `topology/health_flip/atomic_rmw` | `Topology::set_health`: one `fetch_or`/`fetch_and` on the link word, previous value returned |
//! | `topology/health_flip/bitvec` | the same bits flipped with `BitSlice<AtomicUsize>::set_aliased` over the same link words |
//! | `topology/fill/hand/4096` | `try_update`, `Update::fill` of the whole row (the core's shifts and masks), dropped unpublished |
//! | `topology/fill/bitvec/4096` | `try_update`, then the same row built word by word through `BitArray` 2-bit fields (`BitField::store_le`) and stored into a buffer of the same size |
//! | `topology/fill/bitvec_bits/4096` | as `bitvec`, each code set as two single bits |
//!
//! A flip iteration is [`FLIPS`] flips over pre-drawn peers; the two variants
//! must leave the same bits before timing. No reader is pinned while the writer
//! runs, so `try_update` never has to wait.

use std::hint::black_box;

use bitvec::{array::BitArray, field::BitField, order::Lsb0, slice::BitSlice};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use switchyard_benches::{
    N_TRANSPORTS, RDMA, class_of, initially_healthy, tid, topology, topology_box,
};
use switchyard_core::{
    class::PathClass,
    sync::atomic::{AtomicUsize, Ordering::Relaxed},
    topology::{PEERS_PER_WORD, Topology, class_words},
};

const ME: u32 = 5;
const N_PES: u32 = 4096;
/// Health flips per timed iteration.
const FLIPS: usize = 1024;
/// Bits per link word.
const WORD: usize = usize::BITS as usize;

/// Index of (`t`, `peer`)'s health bit in the link words seen as one bit slice
/// (the bench job has no load bits, so a group is `N_TRANSPORTS` words).
fn health_index(t: u8, peer: u32) -> usize {
    let p = peer as usize;
    ((p / WORD) * N_TRANSPORTS as usize + t as usize) * WORD + p % WORD
}

/// The class row of `classes` built with `bitvec`: each word a `BitArray` whose
/// 2-bit fields get the row codes (every lane past the job unreachable, 3),
/// as one `BitField` store each (`FIELD`) or as two single bits.
fn fill_bitvec<const FIELD: bool>(row: &[AtomicUsize], classes: &[PathClass]) {
    for (w, peers) in row.iter().zip(classes.chunks(PEERS_PER_WORD)) {
        let mut word = BitArray::<usize, Lsb0>::new(usize::MAX);
        if FIELD {
            for (field, class) in word.chunks_exact_mut(2).zip(peers) {
                field.store_le(class.row_code());
            }
        } else {
            for (lane, class) in peers.iter().enumerate() {
                let code = class.row_code();
                word.set(2 * lane, code & 1 != 0);
                word.set(2 * lane + 1, code & 2 != 0);
            }
        }
        w.store(word.into_inner(), Relaxed);
    }
}

/// Flips the RDMA health of `peers` in turn through the topology.
fn flip_rmw(topo: &Topology<'_>, peers: &[u32], up: bool) -> u64 {
    let rdma = tid(RDMA);
    peers.iter().fold(0, |acc, &p| {
        acc + topo.set_health(rdma, p, up).map_or(2, u64::from)
    })
}

/// Flips the same bits as [`flip_rmw`] through a `BitSlice` over the link words.
fn flip_bitvec(links: &BitSlice<AtomicUsize, Lsb0>, peers: &[u32], up: bool) -> u64 {
    for &p in peers {
        links.set_aliased(health_index(RDMA, p), up);
    }
    peers.len() as u64
}

fn topo(c: &mut Criterion) {
    let store = topology_box(ME, N_PES, 2);
    let topo = topology(&store, ME, N_PES);
    let mut reader = topo.reader().expect("a free reader slot");
    let mut writer = topo.writer().expect("the writer");

    // Correctness before timing: a published update is what the next pin sees.
    let peer = 1000;
    let v = {
        let mut u = writer.try_update().expect("no reader pinned");
        assert!(u.set_class(peer, PathClass::Unreachable));
        u.publish()
    };
    {
        let g = reader.pin();
        assert_eq!(g.version(), v);
        assert_eq!(g.class(peer), Some(PathClass::Unreachable));
        assert_eq!(g.class(peer + 1), Some(class_of(ME, peer + 1)));
    }

    // Health flips: both ways must leave the same bits.
    let peers: Vec<u32> = (0..FLIPS as u32)
        .map(|i| i.wrapping_mul(2_654_435_761) % N_PES)
        .collect();
    let links = BitSlice::<AtomicUsize, Lsb0>::from_slice(store.mem().links);
    for up in [false, true] {
        flip_bitvec(links, &peers, up);
        assert!(peers.iter().all(|&p| topo.is_healthy(tid(RDMA), p) == up));
        flip_rmw(&topo, &peers, !up);
        assert!(peers.iter().all(|&p| links[health_index(RDMA, p)] != up));
    }
    // Fills: the bitvec row is word for word the one `Update::fill` writes.
    let classes: Vec<PathClass> = (0..N_PES).map(|p| class_of(ME, p)).collect();
    let fill_to: Vec<AtomicUsize> = (0..class_words(N_PES))
        .map(|_| AtomicUsize::new(0))
        .collect();
    fill_bitvec::<false>(&fill_to, &classes);
    let by_bits: Vec<usize> = fill_to.iter().map(|w| w.load(Relaxed)).collect();
    fill_bitvec::<true>(&fill_to, &classes);
    assert!(fill_to.iter().map(|w| w.load(Relaxed)).eq(by_bits));
    {
        let mut u = writer.try_update().expect("no reader pinned");
        u.fill(|p| classes[p as usize]);
        u.publish();
    }
    {
        let g = reader.pin();
        for p in (0..N_PES).filter(|&p| p != ME) {
            let w = fill_to[p as usize / PEERS_PER_WORD].load(Relaxed);
            let code = (w >> ((p as usize % PEERS_PER_WORD) * 2)) & 3;
            assert_eq!(g.class(p), Some(PathClass::from_row_code(code)), "peer {p}");
        }
    }

    let mut g = c.benchmark_group("topology");
    g.bench_function("pin_unpin", |b| {
        b.iter(|| {
            let guard = reader.pin();
            black_box(guard.version())
        })
    });
    g.bench_function(format!("publish_update/{N_PES}"), |b| {
        let mut flip = false;
        b.iter(|| {
            flip = !flip;
            let class = if flip {
                PathClass::Routed
            } else {
                PathClass::Unreachable
            };
            let mut u = writer.try_update().expect("no reader pinned");
            u.set_class(black_box(peer), class);
            u.publish()
        })
    });
    g.finish();

    let mut g = c.benchmark_group("topology/health_flip");
    g.throughput(Throughput::Elements(FLIPS as u64));
    g.bench_function("atomic_rmw", |b| {
        let mut up = false;
        b.iter(|| {
            up = !up;
            flip_rmw(&topo, black_box(&peers), up)
        })
    });
    g.bench_function("bitvec", |b| {
        let mut up = false;
        b.iter(|| {
            up = !up;
            flip_bitvec(links, black_box(&peers), up)
        })
    });
    g.finish();
    for &p in &peers {
        topo.set_health(tid(RDMA), p, initially_healthy(RDMA, p));
    }

    let mut g = c.benchmark_group("topology/fill");
    g.throughput(Throughput::Elements(u64::from(N_PES)));
    g.bench_function(format!("hand/{N_PES}"), |b| {
        b.iter(|| {
            let mut u = writer.try_update().expect("no reader pinned");
            u.fill(|p| classes[p as usize]);
            black_box(u.class(black_box(peer)))
        })
    });
    g.bench_function(format!("bitvec/{N_PES}"), |b| {
        b.iter(|| {
            let u = writer.try_update().expect("no reader pinned");
            fill_bitvec::<true>(&fill_to, black_box(&classes));
            black_box(u.class(black_box(peer)))
        })
    });
    g.bench_function(format!("bitvec_bits/{N_PES}"), |b| {
        b.iter(|| {
            let u = writer.try_update().expect("no reader pinned");
            fill_bitvec::<false>(&fill_to, black_box(&classes));
            black_box(u.class(black_box(peer)))
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = switchyard_benches::criterion_config();
    targets = topo
}
criterion_main!(benches);
