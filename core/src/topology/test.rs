extern crate std;
use std::vec::Vec;

use super::{versioned::READER_IDLE, *};
use crate::{
    class::{InterSwitch, Locality, PathClass, TransportId},
    sync::atomic::Ordering,
};

/// Ten PEs, one transport, no load bits: enough for the protocol tests.
fn small_shape() -> Shape {
    Shape {
        me: 0,
        n_pes: 10,
        n_transports: 1,
        load_hints: false,
    }
}

fn t(i: u8) -> TransportId {
    TransportId::new(i).unwrap()
}

#[test]
fn lookup_health_and_versions() {
    let shape = Shape {
        me: 1,
        n_pes: 100,
        n_transports: 3,
        load_hints: true,
    };
    let store = TopologyBox::new(shape, 2);
    let topo = Topology::new(store.mem(), shape, |p| {
        PathClass::from_row_code((p % 4) as usize)
    })
    .unwrap();
    let mut r = topo.reader().unwrap();
    {
        let g = r.pin();
        assert_eq!(g.version(), 1);
        assert_eq!(g.class(1), Some(PathClass::Local));
        assert_eq!(g.class(0), Some(PathClass::Shm));
        assert_eq!(g.class(2), Some(PathClass::Routed));
        assert_eq!(g.class(99), Some(PathClass::Unreachable));
        assert_eq!(g.class(100), None);
    }
    assert!(!topo.is_healthy(t(2), 70));
    assert_eq!(topo.apply_link_state(t(2), 70, LinkState::Up), Some(true));
    assert_eq!(topo.apply_link_state(t(2), 70, LinkState::Up), Some(false));
    assert!(topo.is_healthy(t(2), 70));
    assert!(!topo.is_healthy(t(1), 70));
    assert!(!topo.is_healthy(t(2), 71));
    assert_eq!(
        topo.apply_link_state(t(2), 70, LinkState::Error),
        Some(true)
    );
    assert!(!topo.is_healthy(t(2), 70));
    assert_eq!(topo.set_health(t(3), 0, true), None);
    assert_eq!(topo.set_health(t(0), 100, true), None);
    assert_eq!(topo.set_overloaded(t(0), 5, true), Some(false));
    assert!(topo.is_overloaded(t(0), 5));
    // The previous value, each way: set again is no change, and one clear
    // sees the bit it clears.
    assert_eq!(topo.set_overloaded(t(0), 5, true), Some(true));
    assert_eq!(topo.set_overloaded(t(0), 5, false), Some(true));
    assert_eq!(topo.set_overloaded(t(0), 5, false), Some(false));
    assert_eq!(topo.set_overloaded(t(0), 5, true), Some(false));
    assert!(
        !topo.is_healthy(t(0), 5),
        "load bit must not leak into health"
    );

    let mut w = topo.writer().unwrap();
    assert!(topo.writer().is_none(), "single writer");
    let mut u = w.try_update().unwrap();
    assert!(u.set_class(3, PathClass::Near));
    assert!(!u.set_class(1, PathClass::Near), "owner stays local");
    assert_eq!(u.publish(), 2);
    let g = r.pin();
    assert_eq!(g.version(), 2);
    assert_eq!(g.class(3), Some(PathClass::Near));
    assert_eq!(
        g.class(2),
        Some(PathClass::Routed),
        "update copies the old row"
    );
}

#[test]
fn writer_waits_for_readers_on_old_version() {
    let shape = small_shape();
    let store = TopologyBox::new(shape, 2);
    let topo = Topology::new(store.mem(), shape, |_| PathClass::Near).unwrap();
    let mut r = topo.reader().unwrap();
    let mut w = topo.writer().unwrap();
    let g = r.pin(); // on version 1
    let mut u = w.try_update().unwrap(); // writes slot 1: fine
    u.set_class(2, PathClass::Routed);
    assert_eq!(u.publish(), 2);
    // The next update writes slot 0, where the reader still is.
    assert_eq!(
        w.try_update().unwrap_err(),
        UpdateError::ReadersOnOldVersion { reader: 0 }
    );
    assert_eq!(g.class(2), Some(PathClass::Near), "old version stays whole");
    drop(g);
    let mut u = w.try_update().unwrap();
    u.set_class(3, PathClass::Routed);
    assert_eq!(u.publish(), 3);
}

#[test]
fn a_class_set_in_place_is_seen_by_readers_of_every_version() {
    let shape = small_shape();
    let store = TopologyBox::new(shape, 2);
    let topo = Topology::new(store.mem(), shape, |p| {
        if p == 3 {
            PathClass::Unreachable
        } else {
            PathClass::Near
        }
    })
    .unwrap();
    let mut old = topo.reader().unwrap();
    let mut new = topo.reader().unwrap();
    let mut w = topo.writer().unwrap();
    let g_old = old.pin_sticky();
    assert_eq!(g_old.version(), 1);
    let mut u = w.try_update().unwrap();
    u.set_class(2, PathClass::Routed);
    assert_eq!(u.publish(), 2);
    let g_new = new.pin_sticky();
    assert_eq!(g_new.version(), 2);
    // A new version would reuse the slot the old reader holds: refused;
    // the class in place is not.
    assert!(w.try_update().is_err());
    assert!(w.set_class_in_place(3, PathClass::Unreachable, PathClass::Near));
    assert_eq!(g_old.class(3), Some(PathClass::Near));
    assert_eq!(g_new.class(3), Some(PathClass::Near));
    // Nothing else moved: the old reader still sees its version's row.
    assert_eq!((g_old.version(), topo.version()), (1, 2));
    assert_eq!(g_old.class(2), Some(PathClass::Near));
    assert_eq!(g_new.class(2), Some(PathClass::Routed));
    // Only from `from`, never the owner nor past the job.
    assert!(!w.set_class_in_place(3, PathClass::Unreachable, PathClass::Routed));
    assert!(!w.set_class_in_place(2, PathClass::Unreachable, PathClass::Near));
    assert!(!w.set_class_in_place(shape.me, PathClass::Shm, PathClass::Near));
    assert!(!w.set_class_in_place(shape.n_pes, PathClass::Unreachable, PathClass::Near));
    assert_eq!(g_new.class(3), Some(PathClass::Near));
    // A later version copies it.
    drop((g_old, g_new));
    old.unpin();
    let mut u = w.try_update().unwrap();
    u.set_class(4, PathClass::Routed);
    assert_eq!(u.publish(), 3);
    assert_eq!(new.pin_sticky().class(3), Some(PathClass::Near));
}

#[test]
fn sticky_pin_holds_its_version_until_unpinned() {
    let shape = small_shape();
    let store = TopologyBox::new(shape, 2);
    let topo = Topology::new(store.mem(), shape, |_| PathClass::Near).unwrap();
    let mut r = topo.reader().unwrap();
    let mut w = topo.writer().unwrap();
    assert_eq!(r.pin_sticky().version(), 1);
    // Guard dropped, announcement kept: version 2 may be written (other
    // slot), version 3 may not (it would reuse the held slot).
    let mut u = w.try_update().unwrap();
    u.set_class(2, PathClass::Routed);
    assert_eq!(u.publish(), 2);
    assert_eq!(
        w.try_update().unwrap_err(),
        UpdateError::ReadersOnOldVersion { reader: 0 }
    );
    // The next sticky pin sees version 2 at once and moves there.
    {
        let g = r.pin_sticky();
        assert_eq!(g.version(), 2);
        assert_eq!(g.class(2), Some(PathClass::Routed));
    }
    let mut u = w.try_update().unwrap();
    u.set_class(3, PathClass::Routed);
    assert_eq!(u.publish(), 3);
    // Held on 3 again; unpin releases it for the writer.
    assert_eq!(r.pin_sticky().version(), 3);
    let mut u = w.try_update().unwrap();
    u.set_class(4, PathClass::Routed);
    assert_eq!(u.publish(), 4);
    assert!(w.try_update().is_err());
    r.unpin();
    assert!(w.try_update().is_ok());
    // A plain pin after a sticky one leaves the reader idle on drop.
    assert_eq!(r.pin_sticky().version(), 4);
    drop(r.pin());
    let mut u = w.try_update().unwrap();
    u.set_class(5, PathClass::Routed);
    assert_eq!(u.publish(), 5);
    assert!(w.try_update().is_ok());
}

#[test]
fn rebuild_from_localities_and_overrides() {
    let loc: Vec<Locality> = (0..8)
        .map(|pe| Locality {
            node: pe / 2,
            switch: pe / 4,
        })
        .collect();
    let shape = Shape {
        me: 0,
        n_pes: 8,
        n_transports: 2,
        load_hints: false,
    };
    let store = TopologyBox::new(shape, 1);
    let topo = Topology::new(store.mem(), shape, |_| PathClass::Unreachable).unwrap();
    let mut w = topo.writer().unwrap();
    let mut u = w.try_update().unwrap();
    u.rebuild(
        &loc,
        InterSwitch::Routed,
        &[Override::Node {
            node: 3,
            class: PathClass::Unreachable,
        }],
    )
    .unwrap();
    u.publish();
    let mut r = topo.reader().unwrap();
    let g = r.pin();
    let got: Vec<_> = (0..8).map(|p| g.class(p).unwrap()).collect();
    use PathClass::*;
    assert_eq!(
        got,
        [
            Local,
            Shm,
            Near,
            Near,
            Routed,
            Routed,
            Unreachable,
            Unreachable
        ]
    );
}

#[test]
fn layout_errors() {
    let shape = small_shape();
    let store = TopologyBox::new(shape, 1);
    let bad = Shape {
        n_pes: 1000,
        ..shape
    };
    assert!(matches!(
        Topology::new(store.mem(), bad, |_| PathClass::Near),
        Err(LayoutError::WrongSize { .. })
    ));
    let bad = Shape { me: 10, ..shape };
    assert_eq!(
        Topology::new(store.mem(), bad, |_| PathClass::Near).unwrap_err(),
        LayoutError::MeOutOfRange { me: 10, n_pes: 10 }
    );
    let bad = Shape {
        n_transports: 9,
        ..shape
    };
    assert_eq!(
        Topology::new(store.mem(), bad, |_| PathClass::Near).unwrap_err(),
        LayoutError::Transports(9)
    );
}

#[test]
fn laying_a_topology_twice_is_refused() {
    let shape = small_shape();
    let store = TopologyBox::new(shape, 1);
    let topo = Topology::new(store.mem(), shape, |_| PathClass::Near).unwrap();
    let mut r = topo.reader().unwrap();
    let g = r.pin();
    assert_eq!(
        Topology::new(store.mem(), shape, |_| PathClass::Unreachable).unwrap_err(),
        LayoutError::AlreadyInitialized
    );
    assert_eq!(
        g.class(3),
        Some(PathClass::Near),
        "the live topology is untouched"
    );
}

#[test]
fn version_wrap_never_publishes_free_or_idle_words() {
    let shape = small_shape();
    let store = TopologyBox::new(shape, 1);
    let topo = Topology::new(store.mem(), shape, |_| PathClass::Near).unwrap();
    // The last version before the counter wraps, in slot 1.
    store.control.current.store(usize::MAX, Ordering::Relaxed);
    let mut w = topo.writer().unwrap();
    let mut u = w.try_update().unwrap();
    u.set_class(2, PathClass::Routed);
    u.publish();
    let word = store.control.current.load(Ordering::Relaxed);
    assert!(
        word > READER_IDLE,
        "published word {word} reads as a free or idle reader"
    );
    assert_eq!(word & 1, 0, "the update went to the other slot");
    let mut r = topo.reader().unwrap();
    assert_eq!(r.pin().class(2), Some(PathClass::Routed));
}

#[test]
fn million_pe_row_fits_in_a_mebibyte() {
    const MIB: usize = 1 << 20;
    let f = Footprint::of(1_000_000, 3, true, 4);
    assert!(
        f.row() <= MIB,
        "row with health and load bits: {} B",
        f.row()
    );
    let f = Footprint::of(1_000_000, 3, false, 4);
    assert!(
        f.total() <= MIB,
        "versioned topology with health bits: {} B",
        f.total()
    );
    // And what is really allocated matches the formula.
    let shape = Shape {
        me: 0,
        n_pes: 1_000_000,
        n_transports: 3,
        load_hints: false,
    };
    let store = TopologyBox::new(shape, 4);
    let m = store.mem();
    let bytes = (m.slots[0].len() + m.slots[1].len() + m.links.len()) * 8
        + core::mem::size_of_val(m.readers);
    assert_eq!(bytes, f.total());
    assert!(bytes <= MIB);
}
