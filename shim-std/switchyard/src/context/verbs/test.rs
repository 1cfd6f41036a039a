//! The verbs glue without a device: routing falls back to TCP as the
//! policy says, configuration maps to the driver, link events to health.

use switchyard_core::{
    class::{PathClass, TransportId},
    route::{Downgrade, Op, Policy, PolicyConfig, SelectError, Selector, TransportRoles},
    topology::{LinkState, Shape, Topology, TopologyBox},
};

use super::*;

const fn tid(i: u8) -> TransportId {
    match TransportId::new(i) {
        Some(t) => t,
        None => panic!("transport id"),
    }
}

/// As the context runs without verbs: PE 1 is NEAR, PE 2 ROUTED, the
/// verbs bits are never set, TCP's are. NEAR and ROUTED go over TCP;
/// with `AllowAndCount` the fallbacks are counted, with `Forbid` NEAR is
/// refused.
#[test]
fn without_verbs_near_and_routed_fall_back_to_tcp_as_the_policy_says() {
    let (shm, verbs, tcp) = (tid(0), tid(1), tid(2));
    let shape = Shape {
        me: 0,
        n_pes: 3,
        n_transports: 3,
        load_hints: false,
    };
    let store = TopologyBox::new(shape, 2);
    let classes = [PathClass::Local, PathClass::Near, PathClass::Routed];
    let topo = Topology::new(store.mem(), shape, |p| classes[p as usize]).unwrap();
    for pe in 1..3 {
        topo.apply_link_state(tcp, pe, LinkState::Up);
    }
    let roles = TransportRoles {
        shm: Some(shm),
        rdma: Some(verbs),
        stream: [Some(tcp), None, None, None],
    };
    let mut downgrade = [Downgrade::AllowAndCount; 5];
    let counted = Policy::new(PolicyConfig {
        roles,
        downgrade,
        ..PolicyConfig::default()
    });
    let mut sel = Selector::new(&topo, counted).unwrap();
    for pe in 1..3 {
        let r = sel.select(pe, 64, Op::Put).unwrap();
        assert_eq!(r.transport, tcp, "PE {pe}");
    }
    let d = sel.downgrades();
    assert_eq!(d[PathClass::Near.index()], 1, "{d:?}");

    downgrade[PathClass::Near.index()] = Downgrade::Forbid;
    let forbid = Policy::new(PolicyConfig {
        roles,
        downgrade,
        ..PolicyConfig::default()
    });
    let mut sel = Selector::new(&topo, forbid).unwrap();
    assert!(matches!(
        sel.select(1, 64, Op::Put),
        Err(SelectError::DowngradeForbidden { .. })
    ));
    // The reason the context gives for not using verbs.
    let s = status_without_driver("not attached");
    assert!(!s.in_use);
    assert!(s.why_not.is_some_and(|w| !w.is_empty()));
}

#[test]
fn config_maps_to_the_driver_template_and_explicit_overrides() {
    let load = |vars: &[(&str, &str)]| {
        crate::config::Config::load_from_vars(
            vars.iter().map(|(k, v)| (k.to_string(), v.to_string())),
        )
        .unwrap()
    };
    let v = verbs_config(&load(&[]));
    assert_eq!(
        (v.template, v.sq_depth, v.max_inline),
        (Template::Trading, None, None)
    );
    let v = verbs_config(&load(&[("SWITCHYARD_TEMPLATE", "storage")]));
    assert_eq!(
        (v.template, v.sq_depth, v.max_inline),
        (Template::Storage, None, None),
        "template values stay the driver's"
    );
    let v = verbs_config(&load(&[
        ("SWITCHYARD_TEMPLATE", "ai"),
        ("SWITCHYARD_QUEUE_DEPTH", "512"),
        ("SWITCHYARD_INLINE_THRESHOLD", "64"),
    ]));
    assert_eq!(
        (v.template, v.sq_depth, v.max_inline),
        (Template::Ai, Some(512), Some(64))
    );
    assert_eq!((v.device, v.gid_index), (None, None), "auto by default");
    let v = verbs_config(&load(&[
        ("SWITCHYARD_VERBS_DEVICE", "rxe0"),
        ("SWITCHYARD_VERBS_GID_INDEX", "3"),
    ]));
    assert_eq!((v.device.as_deref(), v.gid_index), (Some("rxe0"), Some(3)));
}

#[test]
fn link_events_map_to_health() {
    assert_eq!(
        health_change(&Event::Link {
            peer: 3,
            state: LinkState::Error
        }),
        Some((3, false))
    );
    assert_eq!(
        health_change(&Event::Link {
            peer: 3,
            state: LinkState::Up
        }),
        Some((3, true))
    );
    assert_eq!(health_change(&Event::DeviceFatal), None);
    assert_eq!(pe_card_bytes(None), None);
}
