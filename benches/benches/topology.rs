//! The versioned topology's two sides.
//!
//! | id | what |
//! |---|---|
//! | `topology/pin_unpin` | `Reader::pin()` and dropping the guard (one store, a SeqCst fence, loads, one store) |
//! | `topology/publish_update/4096` | `try_update` (copies the 4,096-peer row into the free slot), one `set_class`, `publish` |
//!
//! No reader is pinned while the writer runs, so `try_update` never has to wait.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use switchyard_benches::{class_of, topology, topology_box};
use switchyard_core::class::PathClass;

const ME: u32 = 5;
const N_PES: u32 = 4096;

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
}

criterion_group! {
    name = benches;
    config = switchyard_benches::criterion_config();
    targets = topo
}
criterion_main!(benches);
