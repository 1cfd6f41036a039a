//! Multi-threaded stress of the versioned topology: a writer publishes new
//! versions as fast as readers let it, while readers check that every row they
//! read comes wholly from one version. Bounded in versions and in time.
#![cfg(all(feature = "alloc", not(loom)))]

use std::{
    sync::atomic::{AtomicBool, AtomicU64, Ordering},
    time::{Duration, Instant},
};

use switchyard_core::{
    class::PathClass,
    topology::{Shape, Topology, TopologyBox, UpdateError},
};

const N_PES: u32 = 4096;
const MAX_VERSIONS: u32 = 3_000;
const MAX_TIME: Duration = Duration::from_secs(3);

/// Every version has a different row: peer p's class depends on (version + p).
fn class_of(version: u32, peer: u32) -> PathClass {
    const C: [PathClass; 4] = [
        PathClass::Shm,
        PathClass::Near,
        PathClass::Routed,
        PathClass::Unreachable,
    ];
    C[(version.wrapping_add(peer) % 4) as usize]
}

#[test]
fn readers_only_ever_see_whole_versions() {
    let shape = Shape {
        me: 0,
        n_pes: N_PES,
        n_transports: 1,
        load_hints: false,
    };
    let store = TopologyBox::new(shape, 3);
    let topo = Topology::new(store.mem(), shape, |p| class_of(1, p)).unwrap();
    let stop = AtomicBool::new(false);
    let rows_checked = AtomicU64::new(0);
    let busy = AtomicU64::new(0);
    let start = Instant::now();
    let published = std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                let mut reader = topo.reader().unwrap();
                let mut last = 0;
                while !stop.load(Ordering::Relaxed) {
                    let g = reader.pin();
                    let v = g.version();
                    assert!(v >= last, "version went backwards: {last} -> {v}");
                    last = v;
                    for peer in 1..N_PES {
                        assert_eq!(
                            g.class(peer),
                            Some(class_of(v, peer)),
                            "peer {peer} not from version {v}"
                        );
                    }
                    rows_checked.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        let mut w = topo.writer().unwrap();
        let mut version = 1;
        while version < MAX_VERSIONS && start.elapsed() < MAX_TIME {
            match w.try_update() {
                Ok(mut u) => {
                    let next = version + 1;
                    u.fill(|p| class_of(next, p));
                    version = u.publish();
                    assert_eq!(version, next);
                }
                Err(UpdateError::ReadersOnOldVersion { .. }) => {
                    busy.fetch_add(1, Ordering::Relaxed);
                    std::thread::yield_now();
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        version
    });
    assert!(published > 1, "the writer never got through");
    assert!(rows_checked.load(Ordering::Relaxed) > 0);
    println!(
        "published {published} versions, readers checked {} rows, writer found readers on the old slot {} times",
        rows_checked.load(Ordering::Relaxed),
        busy.load(Ordering::Relaxed)
    );
}
