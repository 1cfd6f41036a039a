//! Tests of the derivation: templates, clamping to the device, overrides
//! the device cannot honour, and properties over any limits.

use proptest::prelude::*;

use super::*;

fn cx4() -> DeviceLimits {
    DeviceLimits {
        max_qp_wr: 32768,
        max_cqe: 4_194_303,
        max_qp: 262_144,
        max_sge: 30,
        max_qp_init_rd_atom: 16,
        max_qp_rd_atom: 16,
        atomic_cap: AtomicCap::Hca,
        max_mr_size: u64::MAX,
        max_srq_wr: 32768,
        active_mtu: Mtu::M4096,
    }
}

/// A small device (soft-RoCE-like limits, 1024-byte MTU).
fn small() -> DeviceLimits {
    DeviceLimits {
        max_qp_wr: 512,
        max_cqe: 1024,
        max_qp_init_rd_atom: 128,
        max_qp_rd_atom: 128,
        active_mtu: Mtu::M1024,
        ..cx4()
    }
}

#[test]
fn templates_on_a_large_device() {
    let p = derive(&VerbsConfig::default(), &cx4()).unwrap();
    assert_eq!(
        (p.data_qps, p.sq_depth, p.cq_depth, p.max_inline),
        (1, 128, 256, 256)
    );
    assert_eq!(p.signal_every, 32);
    assert_eq!(p.path_mtu, Mtu::M4096);
    assert_eq!((p.max_rd_atomic, p.max_dest_rd_atomic), (16, 16));
    assert!(p.atomics);
    let s = derive(
        &VerbsConfig {
            template: Template::Storage,
            ..VerbsConfig::default()
        },
        &cx4(),
    )
    .unwrap();
    assert_eq!(
        (
            s.data_qps,
            s.sq_depth,
            s.cq_depth,
            s.max_inline,
            s.signal_every
        ),
        (8, 1024, 2048, 0, 64)
    );
    let a = derive(
        &VerbsConfig {
            template: Template::Ai,
            ..VerbsConfig::default()
        },
        &cx4(),
    )
    .unwrap();
    assert_eq!((a.data_qps, a.sq_depth, a.cq_depth), (4, 768, 1536));
}

#[test]
fn templates_are_clamped_to_the_device_but_overrides_are_not() {
    let cfg = VerbsConfig {
        template: Template::Storage,
        ..VerbsConfig::default()
    };
    let p = derive(&cfg, &small()).unwrap();
    assert_eq!((p.sq_depth, p.cq_depth), (512, 1024));
    assert_eq!(p.path_mtu, Mtu::M1024);
    assert_eq!((p.max_rd_atomic, p.max_dest_rd_atomic), (16, 16));
    let e = derive(
        &VerbsConfig {
            sq_depth: Some(1000),
            ..cfg.clone()
        },
        &small(),
    )
    .unwrap_err();
    assert_eq!(e.field, "sq_depth");
    assert_eq!(
        e.to_string(),
        "verbs config sq_depth = 1000: expected at most the device's max_qp_wr (512)"
    );
    let e = derive(
        &VerbsConfig {
            path_mtu: Some(Mtu::M4096),
            ..cfg.clone()
        },
        &small(),
    )
    .unwrap_err();
    assert_eq!(e.field, "path_mtu");
    assert!(e.expected.contains("1024"), "{e}");
    let e = derive(
        &VerbsConfig {
            cq_depth: Some(5000),
            ..cfg
        },
        &small(),
    )
    .unwrap_err();
    assert_eq!(e.field, "cq_depth");
}

#[test]
fn explicit_values_win() {
    let cfg = VerbsConfig {
        template: Template::Storage,
        data_qps: Some(2),
        sq_depth: Some(64),
        cq_depth: Some(100),
        max_inline: Some(128),
        signal_every: Some(8),
        path_mtu: Some(Mtu::M2048),
        ..VerbsConfig::default()
    };
    let p = derive(&cfg, &cx4()).unwrap();
    assert_eq!(
        (
            p.data_qps,
            p.sq_depth,
            p.cq_depth,
            p.max_inline,
            p.signal_every,
            p.path_mtu
        ),
        (2, 64, 100, 128, 8, Mtu::M2048)
    );
}

#[test]
fn bad_values_are_named() {
    let d = cx4();
    let field = |cfg: VerbsConfig| derive(&cfg, &d).unwrap_err().field;
    let base = VerbsConfig::default;
    assert_eq!(
        field(VerbsConfig {
            data_qps: Some(0),
            ..base()
        }),
        "data_qps"
    );
    assert_eq!(
        field(VerbsConfig {
            data_qps: Some(9),
            ..base()
        }),
        "data_qps"
    );
    assert_eq!(
        field(VerbsConfig {
            sq_depth: Some(1),
            ..base()
        }),
        "sq_depth"
    );
    assert_eq!(
        field(VerbsConfig {
            cq_depth: Some(0),
            ..base()
        }),
        "cq_depth"
    );
    assert_eq!(
        field(VerbsConfig {
            max_inline: Some(4096),
            ..base()
        }),
        "max_inline"
    );
    assert_eq!(
        field(VerbsConfig {
            signal_every: Some(0),
            ..base()
        }),
        "signal_every"
    );
    assert_eq!(
        field(VerbsConfig {
            signal_every: Some(65),
            ..base()
        }),
        "signal_every"
    );
    assert_eq!(
        field(VerbsConfig {
            timeout: 0,
            ..base()
        }),
        "timeout"
    );
    assert_eq!(
        field(VerbsConfig {
            timeout: 32,
            ..base()
        }),
        "timeout"
    );
    assert_eq!(
        field(VerbsConfig {
            retry_cnt: 8,
            ..base()
        }),
        "retry_cnt"
    );
    assert_eq!(
        field(VerbsConfig {
            rnr_retry: 8,
            ..base()
        }),
        "rnr_retry"
    );
    assert_eq!(
        field(VerbsConfig {
            rnr_retry: 3,
            ..base()
        }),
        "rnr_retry",
        "receipts need infinite RNR retry"
    );
    assert_eq!(
        field(VerbsConfig {
            srq_depth: Some(8),
            ..base()
        }),
        "srq_depth"
    );
    assert_eq!(
        field(VerbsConfig {
            srq_depth: Some(1 << 20),
            ..base()
        }),
        "srq_depth"
    );
    assert_eq!(
        derive(&base(), &DeviceLimits { max_srq_wr: 0, ..d })
            .unwrap_err()
            .field,
        "device limits"
    );
    assert_eq!(
        derive(
            &base(),
            &DeviceLimits {
                max_srq_wr: 100,
                ..d
            }
        )
        .unwrap()
        .srq_depth,
        100,
        "the template's depth is clamped to the device"
    );
    assert_eq!(
        field(VerbsConfig {
            min_rnr_timer: 32,
            ..base()
        }),
        "min_rnr_timer"
    );
    assert_eq!(field(VerbsConfig { port: 0, ..base() }), "port");
    assert_eq!(
        field(VerbsConfig {
            collect_timeout_ms: 0,
            ..base()
        }),
        "collect_timeout_ms"
    );
    assert_eq!(
        field(VerbsConfig {
            get_slots: 0,
            ..base()
        }),
        "get_slots"
    );
    assert_eq!(
        field(VerbsConfig {
            get_slot_bytes: 12,
            ..base()
        }),
        "get_slot_bytes"
    );
    assert_eq!(
        field(VerbsConfig {
            staging_bytes: 100,
            ..base()
        }),
        "staging_bytes"
    );
    let no_read = DeviceLimits {
        max_qp_init_rd_atom: 0,
        ..d
    };
    assert_eq!(
        derive(&base(), &no_read).unwrap_err().field,
        "device limits"
    );
    let no_atomics = DeviceLimits {
        atomic_cap: AtomicCap::None,
        ..d
    };
    assert!(!derive(&base(), &no_atomics).unwrap().atomics);
}

#[test]
fn mtu_encodings() {
    for (v, b) in [(1, 256), (2, 512), (3, 1024), (4, 2048), (5, 4096)] {
        let m = Mtu::from_ibv(v).unwrap();
        assert_eq!(m.bytes(), b);
        assert_eq!(Mtu::from_bytes(b), Some(m));
        assert_eq!(m.to_ibv(), v);
    }
    assert_eq!(Mtu::from_ibv(0), None);
    assert_eq!(Mtu::from_ibv(6), None);
    assert_eq!(Mtu::from_bytes(1500), None);
    assert_eq!(Template::parse("ai"), Some(Template::Ai));
    assert_eq!(Template::parse("hpc"), None);
}

proptest! {
    /// Whatever the device and the overrides, a derivation that succeeds
    /// stays within the device's limits and keeps k within half the SQ.
    #[test]
    fn derived_values_fit_the_device(
        max_qp_wr in 2u32..70_000,
        max_cqe in 2u32..70_000,
        sq in proptest::option::of(0u32..70_000),
        cq in proptest::option::of(0u32..70_000),
        k in proptest::option::of(0u32..1000),
        t in 0usize..3,
    ) {
        let limits = DeviceLimits { max_qp_wr, max_cqe, ..cx4() };
        let cfg = VerbsConfig {
            template: [Template::Trading, Template::Storage, Template::Ai][t],
            sq_depth: sq,
            cq_depth: cq,
            signal_every: k,
            ..VerbsConfig::default()
        };
        if let Ok(p) = derive(&cfg, &limits) {
            prop_assert!(p.sq_depth >= 2 && p.sq_depth <= max_qp_wr);
            prop_assert!(p.cq_depth >= 2 && p.cq_depth <= max_cqe);
            prop_assert!(p.signal_every >= 1 && p.signal_every <= p.sq_depth / 2);
            if let Some(sq) = sq { prop_assert_eq!(p.sq_depth, sq); }
            if let Some(cq) = cq { prop_assert_eq!(p.cq_depth, cq); }
        }
    }
}
