use PathClass::*;
use switchyard_core::class::{Locality, NO_SWITCH, PathClass};

use super::*;
use crate::{hostlist::MAX_HOSTS, raw::NODE_NAMES};

const SLURM_DOC: &str = "\
# From Slurm's topology.conf man page
SwitchName=s0 Nodes=dev[0-5]
SwitchName=s1 Nodes=dev[6-11]
SwitchName=s2 Switches=s[0-1]
";

fn err(text: &str, format: Format) -> TopoFileError {
    match parse_topology(text, format) {
        Ok(_) => panic!("parsed: {text:?}"),
        Err(e) => e,
    }
}

fn msg(text: &str) -> String {
    err(text, Format::Auto).to_string()
}

#[test]
fn slurm_doc_example() {
    let spec = parse_topology(SLURM_DOC, Format::Slurm).unwrap();
    assert_eq!(spec.format(), Format::Slurm);
    assert_eq!(spec.nodes().len(), 12);
    assert_eq!(spec.nodes()[6].name, "dev6");
    assert_eq!(spec.leaves(), [0, 1]);
    assert_eq!(spec.trees(), 1);
    assert_eq!(spec.switches()[2].children, [0, 1]);
    assert_eq!(spec.switches()[2].leaf, None);
    assert_eq!(spec.switches()[1].line, 3);
    let loc = spec.localities(1).unwrap();
    assert_eq!(loc[0], Locality { node: 0, switch: 0 });
    assert_eq!(
        loc[11],
        Locality {
            node: 11,
            switch: 1
        }
    );
    assert_eq!(spec.class_of(1, 0, 5), Near);
    assert_eq!(spec.class_of(1, 0, 6), Routed);
    assert_eq!(spec.class_of(1, 11, 11), Local);
}

#[test]
fn every_class() {
    let text = "\
SwitchName=a0 Nodes=n[1-2]
SwitchName=a1 Nodes=n3 LinkSpeed=100
SwitchName=top Switches=a[0-1]
SwitchName=island Nodes=m1   # a tree of its own
";
    let spec = parse_topology(text, Format::Auto).unwrap();
    assert_eq!(spec.trees(), 2);
    let ppn = 2;
    // PEs: n1: 0,1  n2: 2,3  n3: 4,5  m1: 6,7
    assert_eq!(spec.class_of(ppn, 0, 0), Local);
    assert_eq!(spec.class_of(ppn, 0, 1), Shm);
    assert_eq!(spec.class_of(ppn, 0, 2), Near);
    assert_eq!(spec.class_of(ppn, 0, 4), Routed);
    assert_eq!(spec.class_of(ppn, 5, 1), Routed);
    assert_eq!(spec.class_of(ppn, 0, 6), Unreachable);
    assert_eq!(spec.class_of(ppn, 7, 6), Shm);
    // Out of range and zero PEs per node never panic.
    assert_eq!(spec.class_of(ppn, 0, 8), Unreachable);
    assert_eq!(spec.class_of(ppn, u32::MAX, 0), Unreachable);
    assert_eq!(spec.class_of(0, 0, 0), Unreachable);
    assert_eq!(spec.node_class(0, 2), Routed);
    assert_eq!(spec.node_class(0, 0), Shm);
    assert_eq!(spec.node_class(0, 9), Unreachable);
    // localities agree with class_of through class_between.
    let loc = spec.localities(ppn).unwrap();
    assert_eq!(loc.len(), 8);
    assert_eq!(loc[6], Locality { node: 3, switch: 2 });
}

#[test]
fn node_under_no_switch_is_unreachable() {
    let text = r#"
nodes = ["n[1-2]", "orphan"]
[[switch]]
name = "leaf"
nodes = "n[1-3]"
"#;
    let spec = parse_topology(text, Format::Auto).unwrap();
    assert_eq!(spec.format(), Format::Toml);
    assert_eq!(spec.nodes().len(), 3, "n3 is not in the job");
    assert_eq!(spec.nodes()[2].switch, None);
    let loc = spec.localities(1).unwrap();
    assert_eq!(loc[2].switch, NO_SWITCH);
    assert_eq!(spec.class_of(1, 0, 1), Near);
    assert_eq!(spec.class_of(1, 0, 2), Unreachable);
    assert_eq!(spec.class_of(1, 2, 0), Unreachable);
    assert_eq!(spec.class_of(2, 4, 5), Shm, "same node still shares memory");
    assert_eq!(spec.switches()[0].nodes, [0, 1]);
}

#[test]
fn toml_form() {
    let text = r#"
pes_per_node = 4 # comment
[[switch]]
name = "leaf0"
nodes = "node[01-02]"
[[switch]]
name = "leaf1"
nodes = ["node03", "node[04-05]"]
link_speed = 100
[[switch]]
name = "spine"
switches = "leaf[0-1]"
"#;
    let spec = parse_topology(text, Format::Toml).unwrap();
    assert_eq!(spec.pes_per_node(), Some(4));
    assert_eq!(spec.nodes().len(), 5);
    assert_eq!(spec.nodes()[4].name, "node05");
    assert_eq!(spec.switches()[1].line, 7);
    assert_eq!(spec.class_of(4, 0, 19), Routed);
    assert_eq!(spec.n_pes(4).unwrap(), 20);
}

#[test]
fn builtin_example() {
    let spec = parse_topology(EXAMPLE_TOML, Format::Auto).unwrap();
    assert_eq!(spec, ClusterSpec::example());
    assert_eq!(spec.pes_per_node(), Some(2));
    assert_eq!(spec.n_pes(2).unwrap(), 8);
    assert_eq!(spec.leaves().len(), 2);
    assert_eq!(spec.class_of(2, 0, 7), Routed);
}

#[test]
fn sniffing_and_extensions() {
    assert_eq!(Format::sniff(SLURM_DOC), Format::Slurm);
    assert_eq!(Format::sniff(EXAMPLE_TOML), Format::Toml);
    assert_eq!(Format::sniff("[[switch]]\nname='a'"), Format::Toml);
    assert_eq!(Format::sniff("nodes = \"a\""), Format::Toml);
    assert_eq!(Format::sniff("SwitchNam=s0 Nodes=a"), Format::Slurm);
    assert_eq!(Format::sniff("switchname=0 nodes=a"), Format::Slurm);
    assert_eq!(Format::sniff(""), Format::Slurm);
    assert_eq!(Format::from_path("x/cluster.TOML"), Format::Toml);
    assert_eq!(Format::from_path("topology.conf"), Format::Auto);
    assert_eq!(Format::sniff("nodes=\"n[1-2]\""), Format::Toml);
    assert_eq!(Format::sniff("Nodes=n[1-2]"), Format::Slurm);
    assert_eq!(Format::from_path("topo"), Format::Auto);
}

#[test]
fn slurm_details() {
    // Case-insensitive keys, continuation lines, comments, repeated nodes.
    let text = "switchname=s0 \\\n  NODES=a[1-2],a1 # c\n\n#x\nSwitchName=s1 Nodes=b\n";
    let spec = parse_topology(text, Format::Slurm).unwrap();
    assert_eq!(spec.nodes().len(), 3);
    assert_eq!(spec.switches()[1].line, 5);
    assert_eq!(spec.trees(), 2);
    assert_eq!(spec.class_of(1, 0, 2), Unreachable);
}

#[test]
fn slurm_errors_name_line_token_and_expectation() {
    assert_eq!(
        msg("SwitchName=s0 Nodes=a\n\nSwitchName=s1 Nodez=b\n"),
        "line 3: unknown key 'Nodez' (expected SwitchName, Nodes, Switches or LinkSpeed)"
    );
    assert_eq!(
        msg("SwitchName=s0 Nodes=a\nSwitchName=s1 Nodes=node[04-01]"),
        "line 2: bad hostlist range 'node[04-01]': start after end"
    );
    assert_eq!(
        msg("SwitchName=s0 Nodes=a extra"),
        "line 1: expected Key=Value, found 'extra'"
    );
    assert_eq!(
        msg("SwitchName=s0 Nodes="),
        "line 1: empty value for 'Nodes' (expected a hostlist of nodes)"
    );
    assert_eq!(
        msg("SwitchName=s0 Nodes=a nodes=b"),
        "line 1: key 'nodes' given twice"
    );
    assert!(msg("Nodes=a").starts_with("line 1: line has no SwitchName="));
    assert!(msg("SwitchName=s[0-1] Nodes=a").starts_with("line 1: bad switch name 's[0-1]'"));
    assert_eq!(
        msg("SwitchName=s0 Nodes=a\nSwitchName=s0 Nodes=b"),
        "line 2: duplicate switch 's0' (first defined on line 1)"
    );
    assert_eq!(
        msg("SwitchName=s0 Nodes=a\nSwitchName=top Switches=s[0-1]"),
        "line 2: switch 'top' lists unknown switch 's1' in its switches"
    );
    assert_eq!(
        msg("SwitchName=a Nodes=n1 Switches=b\nSwitchName=b Switches=c\nSwitchName=c Switches=a"),
        "line 1: switch cycle: a -> b -> c -> a"
    );
    assert_eq!(
        msg("SwitchName=a Switches=a Nodes=n"),
        "line 1: switch cycle: a -> a"
    );
    assert_eq!(
        msg("SwitchName=a Nodes=n[1-2]\nSwitchName=b Nodes=n2"),
        "line 2: node 'n2' is under two leaf switches, 'a' and 'b'"
    );
    assert_eq!(
        msg("SwitchName=a Nodes=n[0-99999999999]"),
        "line 1: hostlist 'n[0-99999999999]' takes the file past 1048576 node names"
    );
    // The cap holds across lines too.
    let many = "SwitchName=a Nodes=n[1-600000]\nSwitchName=b Nodes=m[1-600000]";
    assert_eq!(
        err(many, Format::Slurm).kind,
        TopoErrorKind::TooManyNames {
            expr: "m[1-600000]".into(),
            what: NODE_NAMES,
            max: MAX_HOSTS
        }
    );
}

#[test]
fn empty_inputs() {
    for text in ["", "   \n# only a comment\n", "SwitchName=spine"] {
        let e = err(text, Format::Auto);
        assert_eq!(e.kind, TopoErrorKind::NoNodes, "{text:?}");
        assert_eq!(e.line, None);
    }
    assert_eq!(err("", Format::Toml).kind, TopoErrorKind::NoNodes);
    assert_eq!(
        msg(""),
        "the topology defines no nodes (expected at least one switch with Nodes=)"
    );
}

#[test]
fn toml_errors() {
    let e = err(
        "pes_per_node = 2\n[[switch]]\nname = \"a\"\nnodez = \"x\"\n",
        Format::Toml,
    );
    assert_eq!(e.line, Some(4));
    assert!(e.to_string().contains("unknown field `nodez`"), "{e}");
    let e = err("[[switch]]\nname = \"a\"\nnodes = 3\n", Format::Toml);
    assert_eq!(
        e.to_string(),
        "line 3: 'nodes' must be a hostlist string or an array of hostlist strings"
    );
    let e = err("[[switch]]\nname = \"a\"\nnodes = []\n", Format::Toml);
    assert_eq!(e.line, Some(3));
    let e = err(
        "[[switch]]\nname = \"a\"\nnodes = [\"n[2-1]\"]\n",
        Format::Toml,
    );
    assert_eq!(
        e.to_string(),
        "line 3: bad hostlist range 'n[2-1]': start after end"
    );
    assert_eq!(
        msg("pes_per_node = 0\n[[switch]]\nname='a'\nnodes='n'"),
        "line 1: pes_per_node must be at least 1"
    );
    assert!(msg("pes_per_node = -3\n").starts_with("line 1: bad pes_per_node -3"));
    assert!(msg("pes_per_node = \"x\"\n").starts_with("line 1: bad pes_per_node \"x\""));
    let e = err("[[switch]]\nnodes = \"n\"\n", Format::Toml);
    assert!(e.to_string().contains("missing field `name`"), "{e}");
    let e = err("[[switch]\n", Format::Toml);
    assert_eq!(e.line, Some(1));
    assert!(matches!(e.kind, TopoErrorKind::Toml { .. }));
    assert_eq!(
        msg("nodes = [\"a\", \"a\"]\n[[switch]]\nname='s'\nnodes='a'"),
        "line 1: node 'a' is listed twice in nodes"
    );
    assert_eq!(
        msg("[[switch]]\nname = 'a b'\nnodes = 'n'"),
        "line 2: bad switch name 'a b' (expected letters, digits, '-', '_' or '.')"
    );
}

#[test]
fn pes_per_node_limits() {
    let spec = parse_topology(SLURM_DOC, Format::Slurm).unwrap();
    assert_eq!(
        spec.localities(0).unwrap_err().to_string(),
        "pes_per_node must be at least 1"
    );
    assert_eq!(
        spec.n_pes(u32::MAX).unwrap_err().kind,
        TopoErrorKind::TooManyPes {
            nodes: 12,
            pes_per_node: u32::MAX,
            max: MAX_PES
        }
    );
    assert_eq!(spec.class_of(u32::MAX, 0, 1), Shm);
}

#[test]
fn error_in_file_display() {
    let e = err("SwitchName=s0 Nodez=a", Format::Slurm);
    assert_eq!(
        e.in_file("topology.conf").to_string(),
        "topology.conf:1: unknown key 'Nodez' (expected SwitchName, Nodes, Switches or LinkSpeed)"
    );
    let e = err("", Format::Slurm);
    assert!(
        e.in_file("t.conf")
            .to_string()
            .starts_with("t.conf: the topology")
    );
}

#[test]
fn long_switch_chain_does_not_overflow_the_stack() {
    use std::fmt::Write as _;
    let mut text = String::from("SwitchName=s0 Nodes=n0\n");
    for i in 1..100_000 {
        let _ = writeln!(text, "SwitchName=s{i} Switches=s{}", i - 1);
    }
    let spec = parse_topology(&text, Format::Slurm).unwrap();
    assert_eq!(spec.switches().len(), 100_000);
    let _ = writeln!(
        text,
        "SwitchName=x Nodes=n1 Switches=s99999\nSwitchName=s0b Switches=x"
    );
    assert!(parse_topology(&text, Format::Slurm).is_ok());
}

#[test]
fn toml_rails() {
    let base = "[[switch]]\nname = \"s0\"\nnodes = \"n[1-2]\"\n";
    assert_eq!(parse_topology(base, Format::Toml).unwrap().rails(), None);
    let two = format!("rails = 2\n{base}");
    assert_eq!(parse_topology(&two, Format::Toml).unwrap().rails(), Some(2));
    for bad in ["0", "5", "-1", "\"2\"", "1.5"] {
        let e = err(&format!("rails = {bad}\n{base}"), Format::Toml);
        assert_eq!(e.line, Some(1), "{bad}");
        assert!(
            matches!(e.kind, TopoErrorKind::BadRails { .. }),
            "{bad}: {e:?}"
        );
    }
}
