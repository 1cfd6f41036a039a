//! Topology files through the public `switchyard_topo` API: the shipped
//! examples, the class rules checked against `class_between`, and property tests
//! that no input makes the parser or the queries panic.

use proptest::prelude::*;
use switchyard_core::class::{InterSwitch, PathClass, class_between};
use switchyard_topo::{ClusterSpec, Format, hostlist, parse_topology};

fn example(name: &str) -> String {
    let path = format!("{}/../docs/examples/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every invariant a spec must satisfy for `ppn` PEs per node.
fn check_invariants(spec: &ClusterSpec, ppn: u32) {
    let Ok(loc) = spec.localities(ppn) else {
        return;
    };
    let n = loc.len() as u32;
    assert_eq!(n, spec.nodes().len() as u32 * ppn);
    let n_check = n.min(40);
    for a in 0..n_check {
        for b in 0..n_check {
            let c = spec.class_of(ppn, a, b);
            assert_eq!(c, spec.class_of(ppn, b, a), "symmetric ({a}, {b})");
            assert_eq!(c == PathClass::Local, a == b);
            if a != b {
                assert_eq!(
                    c == PathClass::Shm,
                    loc[a as usize].node == loc[b as usize].node
                );
            }
            // The rule is core's, with the tree deciding Routed vs None.
            let inter = spec.inter_switch(loc[a as usize].switch, loc[b as usize].switch);
            assert_eq!(
                c,
                class_between(a, loc[a as usize], b, loc[b as usize], inter)
            );
        }
    }
    assert_eq!(spec.class_of(ppn, n, 0), PathClass::Unreachable);
    assert_eq!(spec.class_of(ppn, 0, u32::MAX), PathClass::Unreachable);
}

#[test]
fn shipped_examples_describe_the_same_cluster() {
    let conf = parse_topology(&example("topology.conf"), Format::Auto).unwrap();
    let toml = parse_topology(&example("cluster.toml"), Format::Auto).unwrap();
    assert_eq!(conf.format(), Format::Slurm);
    assert_eq!(toml.format(), Format::Toml);
    assert_eq!(toml.pes_per_node(), Some(2));
    assert_eq!(conf.nodes(), toml.nodes());
    assert_eq!(conf.leaves().len(), 3);
    assert_eq!(conf.trees(), 2);
    let (lc, lt) = (conf.localities(2).unwrap(), toml.localities(2).unwrap());
    assert_eq!(lc, lt);
    for a in 0..lc.len() as u32 {
        for b in 0..lc.len() as u32 {
            assert_eq!(conf.class_of(2, a, b), toml.class_of(2, a, b));
        }
    }
    // node01 (PE0) vs node05 (PE8): routed through the spine; lab1 (PE16): no link.
    assert_eq!(conf.class_of(2, 0, 8), PathClass::Routed);
    assert_eq!(conf.class_of(2, 0, 16), PathClass::Unreachable);
    assert_eq!(conf.class_of(2, 16, 18), PathClass::Near);
    check_invariants(&conf, 2);
    check_invariants(&ClusterSpec::example(), 2);
}

#[test]
fn inter_switch_follows_the_trees() {
    let spec = parse_topology(&example("topology.conf"), Format::Slurm).unwrap();
    assert_eq!(spec.inter_switch(0, 1), InterSwitch::Routed);
    assert_eq!(spec.inter_switch(0, 2), InterSwitch::None);
    assert_eq!(spec.inter_switch(0, 99), InterSwitch::None);
}

/// Slurm-ish lines built from fragments, so that generated input reaches the
/// checks past tokenising (duplicates, cycles, unknown switches, ranges).
fn slurm_line() -> impl Strategy<Value = String> {
    let name = prop::sample::select(vec!["s0", "s1", "s2", "spine", "s[0-1]", "s[0-2]"]);
    let nodes = prop::sample::select(vec![
        "n[1-3]",
        "n[2-4]",
        "n1",
        "m[01-02]",
        "n[3-1]",
        "n[1,3,5-6]",
        "n[",
        "x y",
        "",
        "n[0-99999999999]",
    ]);
    let key = prop::sample::select(vec![
        "SwitchName",
        "Nodes",
        "Switches",
        "LinkSpeed",
        "Nodez",
        "switchname",
    ]);
    (
        name.clone(),
        prop::option::of(nodes),
        prop::option::of(name),
        prop::option::of((key, "[a-z0-9\\[\\]-]{0,6}")),
    )
        .prop_map(|(n, nodes, kids, extra)| {
            let mut l = format!("SwitchName={}", n.trim_end_matches(['[', ']']));
            if let Some(v) = nodes {
                l += &format!(" Nodes={v}");
            }
            if let Some(k) = kids {
                l += &format!(" Switches={k}");
            }
            if let Some((k, v)) = extra {
                l += &format!(" {k}={v}");
            }
            l
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,200}", ppn in 0u32..5) {
        for format in [Format::Auto, Format::Slurm, Format::Toml] {
            if let Ok(spec) = parse_topology(&text, format) {
                check_invariants(&spec, ppn.max(1));
                let _ = spec.class_of(ppn, 0, 1);
            }
        }
    }

    #[test]
    fn generated_slurm_files_parse_or_fail_cleanly(
        lines in prop::collection::vec(slurm_line(), 0..6),
        ppn in 1u32..4,
    ) {
        let text = lines.join("\n");
        match parse_topology(&text, Format::Slurm) {
            Ok(spec) => check_invariants(&spec, ppn),
            Err(e) => {
                let msg = e.to_string();
                prop_assert!(!msg.is_empty());
                if let Some(line) = e.line {
                    prop_assert!(line as usize <= lines.len().max(1), "{msg}");
                    prop_assert!(msg.starts_with(&format!("line {line}: ")), "{msg}");
                }
            }
        }
    }

    #[test]
    fn generated_toml_files_parse_or_fail_cleanly(
        switches in prop::collection::vec(
            ("[a-c][0-2]", prop::option::of("n\\[[0-3]-[0-3]\\]|n[0-9]"), prop::option::of("[a-c]\\[0-2\\]|[a-c][0-2]")),
            0..5,
        ),
        ppn in prop::option::of(-1i64..4),
    ) {
        let mut text = String::new();
        if let Some(p) = ppn {
            text += &format!("pes_per_node = {p}\n");
        }
        for (name, nodes, kids) in &switches {
            text += &format!("[[switch]]\nname = \"{name}\"\n");
            if let Some(n) = nodes {
                text += &format!("nodes = [\"{n}\"]\n");
            }
            if let Some(k) = kids {
                text += &format!("switches = \"{k}\"\n");
            }
        }
        if let Ok(spec) = parse_topology(&text, Format::Auto) {
            prop_assert_eq!(spec.format(), Format::Toml);
            check_invariants(&spec, spec.pes_per_node().unwrap_or(1));
        }
    }

    #[test]
    fn hostlist_ranges_expand_to_their_length(
        prefix in "[a-z]{1,4}",
        lo in 0u64..1000,
        len in 1u64..50,
        pad in 0usize..4,
    ) {
        let hi = lo + len - 1;
        let lo_s = format!("{lo:0pad$}");
        let list = format!("{prefix}[{lo_s}-{hi}]");
        let names = hostlist::expand(&list).unwrap();
        prop_assert_eq!(names.len() as u64, len);
        prop_assert_eq!(&names[0], &format!("{prefix}{lo_s}"));
        let width = lo_s.len();
        prop_assert_eq!(names.last().unwrap(), &format!("{prefix}{hi:0width$}"));
    }
}
