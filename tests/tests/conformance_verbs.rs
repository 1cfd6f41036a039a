//! The driver conformance suite, run against the RDMA verbs driver: PE 0 and
//! PE 1 are two drivers in this process on the same device, connected over
//! it (loopback through the NIC, or soft-RoCE). PE 1 needs no progress: the
//! operations are one-sided (each put also consumes a receive WQE of PE 1's
//! shared receive queue, its receipt, and the SRQ of either configuration
//! holds more than the suite's puts between PE 1's progress steps).
//!
//! The suite runs twice: on the in-process fake HCA
//! (`switchyard_verbs::fake`, always: the whole driver without hardware),
//! and on a real device (`SWITCHYARD_VERBS_DEVICE` picks the device,
//! `SWITCHYARD_VERBS_GID_INDEX` the GID). The device tests are `#[ignore]`d,
//! so a machine without RDMA reports them as ignored rather than passing
//! them unrun: run them with `cargo test -p switchyard-tests --test
//! conformance_verbs -- --ignored`, where one without a usable port fails
//! with the probe's reason. Two configurations:
//! the trading template (one data QP, inline puts) and the storage template
//! cut down (three data QPs, no inline, a shallow SQ so signaling and
//! back-pressure paths run).

use switchyard_tests::conformance::{self as c, Harness};
use switchyard_verbs::{
    VerbsDriver,
    params::{Template, VerbsConfig},
};

/// A configuration of both PEs.
trait Variant {
    fn config() -> VerbsConfig;
}

struct Trading;
impl Variant for Trading {
    fn config() -> VerbsConfig {
        VerbsConfig::default()
    }
}

struct Storage;
impl Variant for Storage {
    fn config() -> VerbsConfig {
        VerbsConfig {
            template: Template::Storage,
            data_qps: Some(3),
            sq_depth: Some(16),
            signal_every: Some(4),
            ..VerbsConfig::default()
        }
    }
}

/// The suite's harness for configuration `V`.
struct Verbs<V>(core::marker::PhantomData<V>);

fn config<V: Variant>() -> VerbsConfig {
    let mut cfg = V::config();
    cfg.device = std::env::var("SWITCHYARD_VERBS_DEVICE").ok();
    cfg.gid_index = std::env::var("SWITCHYARD_VERBS_GID_INDEX")
        .ok()
        .and_then(|v| v.parse().ok());
    cfg
}

impl<V: Variant> Harness for Verbs<V> {
    type T = VerbsDriver;
    /// PE 1's driver (its heap and QPs must live as long as PE 0 uses them).
    type Guard = VerbsDriver;

    fn pair(heap: u64) -> (VerbsDriver, VerbsDriver) {
        use switchyard_core::transport::Transport;
        let seed = 0x5EED;
        let mut a =
            VerbsDriver::with_owned_heap(config::<V>(), 0, 2, seed, heap).expect("driver 0");
        let mut b =
            VerbsDriver::with_owned_heap(config::<V>(), 1, 2, seed, heap).expect("driver 1");
        a.set_peer_card(1, b.card_for(0).expect("card 1"))
            .expect("peer 1");
        b.set_peer_card(0, a.card_for(1).expect("card 0"))
            .expect("peer 0");
        b.connect(0).expect("PE 1 connects");
        a.connect(1).expect("PE 0 connects");
        (a, b)
    }
}

/// The same pair on the fake HCA (one fabric per pair).
struct Fake<V>(core::marker::PhantomData<V>);

impl<V: Variant> Harness for Fake<V> {
    type T = VerbsDriver;
    type Guard = VerbsDriver;

    fn pair(heap: u64) -> (VerbsDriver, VerbsDriver) {
        use switchyard_core::transport::Transport;
        let f = switchyard_verbs::fake::Fabric::new();
        let mut a = VerbsDriver::fake_with_owned_heap(V::config(), 0, 2, 0x5EED, heap, &f)
            .expect("driver 0");
        let mut b = VerbsDriver::fake_with_owned_heap(V::config(), 1, 2, 0x5EED, heap, &f)
            .expect("driver 1");
        a.set_peer_card(1, b.card_for(0).expect("card 1"))
            .expect("peer 1");
        b.set_peer_card(0, a.card_for(1).expect("card 0"))
            .expect("peer 0");
        b.connect(0).expect("PE 1 connects");
        a.connect(1).expect("PE 0 connects");
        (a, b)
    }
}

/// The whole suite on the fake HCA, for configuration `$v`.
macro_rules! fake_suite {
    ($m:ident, $v:ty, $($check:ident),+) => {
        mod $m {
            use super::*;
            $(
                #[test]
                fn $check() {
                    c::$check::<Fake<$v>>();
                }
            )+
        }
    };
}

fake_suite!(
    fake_trading,
    Trading,
    random_put_get,
    bounds_are_enforced,
    atomics_match_reference,
    heap_to_heap,
    fence_orders_puts,
    close_is_final
);
fake_suite!(
    fake_storage,
    Storage,
    random_put_get,
    bounds_are_enforced,
    atomics_match_reference,
    heap_to_heap,
    fence_orders_puts,
    close_is_final
);

/// `Some(reason)` when there is no usable RDMA port here.
fn unavailable() -> Option<String> {
    switchyard_verbs::probe::probe()
        .unavailable
        .map(|u| u.to_string())
}

/// The whole suite, one test per check, for configuration `$v`.
macro_rules! suite {
    ($m:ident, $v:ty, $($check:ident),+) => {
        mod $m {
            use super::*;
            $(
                #[test]
                #[ignore = "needs an RDMA port (SWITCHYARD_VERBS_DEVICE): run with --ignored"]
                fn $check() {
                    if let Some(why) = unavailable() {
                        panic!("conformance_verbs::{}::{}: no usable RDMA port: {why}", stringify!($m), stringify!($check));
                    }
                    c::$check::<Verbs<$v>>();
                }
            )+
        }
    };
}

suite!(
    trading,
    Trading,
    random_put_get,
    bounds_are_enforced,
    atomics_match_reference,
    heap_to_heap,
    fence_orders_puts,
    close_is_final
);
suite!(
    storage,
    Storage,
    random_put_get,
    bounds_are_enforced,
    atomics_match_reference,
    heap_to_heap,
    fence_orders_puts,
    close_is_final
);

/// Without a device the device tests fail with the probe's reason; the
/// reason is never empty, and creating a driver fails with the same reason,
/// no panic. (With a device there is no such reason: the device tests cover
/// creating drivers.)
#[test]
fn skip_reason_is_the_probes() {
    let Some(why) = unavailable() else { return };
    assert!(!why.is_empty());
    match VerbsDriver::with_owned_heap(VerbsConfig::default(), 0, 2, 1, 4096) {
        Err(e) => assert!(e.to_string().contains(&why), "{e}"),
        Ok(_) => panic!("a verbs driver without a usable port"),
    }
}
