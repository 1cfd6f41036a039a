//! The context's side of the RDMA verbs transport.
//!
//! Today the context does not drive a [`VerbsDriver`]: it never sets the
//! verbs health bits, so route selection treats verbs as unhealthy for every
//! peer and NEAR and ROUTED traffic falls back to TCP exactly as the route
//! policy says (`switchyard_core::route`): a downgrade that is allowed,
//! counted where the class's rule is `AllowAndCount` ([`super::Stats`]'s
//! `downgrades`), and refused with `DowngradeForbidden` where it is
//! `Forbid`. [`Context::verbs_status`](super::Context::verbs_status) says
//! why verbs is not in use (the probe's reason, or that the context does not
//! drive it yet).
//!
//! What wiring the driver in needs (kept here so the shared files stay
//! small): create it with the context's heap (`VerbsDriver::new`, settings
//! from [`verbs_config`]), put
//! [`pe_card_bytes`] in the bootstrap card's `verbs` field, exchange pair
//! cards (the QPNs are per pair: a second all-to-all after the card
//! allgather, or over the TCP control connections), `connect` every NEAR
//! peer, set the verbs health bit on [`Event::Link`] Up and clear it on
//! Error, replay [`VerbsDriver::drain_replays`] over TCP, relay
//! [`Event::RebuildNeeded`] / [`Event::Rebuilt`] through the link-state
//! records, and add a `Drv::Verbs` arm to the dispatch.

use switchyard_verbs::{
    Event, VerbsDriver,
    params::{Template, VerbsConfig},
    probe,
};

use crate::config::{Config, Key, Source, Template as ConfigTemplate};

/// Whether the verbs transport is in use by this context, and why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerbsStatus {
    /// The probe found a usable port.
    pub device_usable: bool,
    /// Whether this context routes over verbs.
    pub in_use: bool,
    /// Why not, when it does not.
    pub why_not: Option<String>,
}

/// The status for a context that does not drive the verbs driver: the
/// probe's reason without a device, else that the driver is not wired in.
pub fn status() -> VerbsStatus {
    let p = probe::probe();
    match p.unavailable {
        Some(u) => VerbsStatus {
            device_usable: false,
            in_use: false,
            why_not: Some(u.to_string()),
        },
        None => VerbsStatus {
            device_usable: true,
            in_use: false,
            why_not: Some(
                "an RDMA port is usable, but the context does not drive the verbs driver yet: NEAR and ROUTED use TCP"
                    .into(),
            ),
        },
    }
}

/// The verbs driver's settings from the job's configuration: the config's
/// template picks the driver's template (trading without one), and
/// `queue_depth` and `inline_threshold` become explicit overrides only when
/// the file or the environment set them (a template's value for them leaves
/// the driver's template, clamped to the device, in charge).
pub fn verbs_config(cfg: &Config) -> VerbsConfig {
    let explicit = |k: Key| matches!(cfg.source(k), Source::File { .. } | Source::Env(_));
    VerbsConfig {
        template: match cfg.template() {
            Some(ConfigTemplate::Storage) => Template::Storage,
            Some(ConfigTemplate::Ai) => Template::Ai,
            Some(ConfigTemplate::Trading) | None => Template::Trading,
        },
        sq_depth: explicit(Key::QueueDepth).then_some(cfg.queue_depth),
        max_inline: explicit(Key::InlineThreshold).then_some(cfg.inline_threshold),
        ..VerbsConfig::default()
    }
}

/// The bootstrap card's `verbs` field for a driver: its PE card (port
/// address, rkey, heap base and length); `None` without a driver.
pub fn pe_card_bytes(drv: Option<&VerbsDriver>) -> Option<Vec<u8>> {
    drv.and_then(|d| d.pe_card().to_vec().ok())
}

/// Whether a driver event means the verbs health bit of a peer changes:
/// `Some((peer, usable))`.
pub fn health_change(e: &Event) -> Option<(u32, bool)> {
    match *e {
        Event::Link { peer, state } => Some((peer, state.is_usable())),
        _ => None,
    }
}

impl super::Context {
    /// Whether this context routes over RDMA verbs, and why not (shown by
    /// `switchyard info` as the verbs probe).
    pub fn verbs_status(&self) -> VerbsStatus {
        status()
    }
}

#[cfg(test)]
mod test {
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
        let s = status();
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
}
