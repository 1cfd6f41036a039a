//! Unit tests of the sim's layout and names (no root needed).

use std::{net::Ipv4Addr, path::Path};

use switchyard_topo::{ClusterSpec, Format, parse_topology};

use super::{spec::belongs_to, *};

#[test]
fn names() {
    for good in ["sy", "t1", "abcdef", "0"] {
        assert!(check_name(good).is_ok(), "{good}");
    }
    for bad in ["", "abcdefg", "A", "a-b", "a b", "é"] {
        assert!(
            matches!(check_name(bad), Err(SimError::BadName(_))),
            "{bad}"
        );
    }
    assert!(belongs_to("sy-fab", "sy"));
    assert!(belongs_to("sy-rt", "sy"));
    assert!(belongs_to("sy-n12", "sy"));
    assert!(!belongs_to("sy-n", "sy"));
    assert!(!belongs_to("sy-nx", "sy"));
    assert!(!belongs_to("syx-n0", "sy"));
    assert!(!belongs_to("s-n0", "sy"));
    assert!(!belongs_to("sy-other", "sy"));
}

#[test]
fn plan_of_the_example() {
    let mut spec = SimSpec::new("ex", ClusterSpec::example());
    assert_eq!(spec.pes_per_node, 2);
    assert_eq!(spec.rails, 1);
    spec.rails = 2;
    let st = spec.plan().unwrap();
    assert_eq!(st.nodes.len(), 4);
    assert_eq!(st.leaves.len(), 2);
    assert_eq!(st.fabric_netns, "ex-fab");
    assert_eq!(st.router_netns, "ex-rt");
    let n3 = &st.nodes[3];
    assert_eq!(n3.netns, "ex-n3");
    assert_eq!(n3.leaf, 1);
    assert_eq!(
        n3.addrs,
        vec![Ipv4Addr::new(10, 100, 1, 2), Ipv4Addr::new(10, 101, 1, 2)]
    );
    assert_eq!(n3.gateways[1], Ipv4Addr::new(10, 101, 1, 254));
    assert_eq!(n3.mgmt, Ipv4Addr::new(10, 99, 0, 4));
    assert_eq!(st.nodes[0].tree, st.nodes[3].tree);
    assert_eq!(st.find_node("3").unwrap().index, 3);
    assert_eq!(st.find_node("node01").unwrap().index, 0);
    assert!(matches!(
        st.find_node("9"),
        Err(SimError::UnknownNode { .. })
    ));
    // Round trip through the state file format.
    let json = serde_json::to_string(&st).unwrap();
    assert_eq!(serde_json::from_str::<SimState>(&json).unwrap(), st);
}

#[test]
fn plan_rejects_bad_input() {
    let mut spec = SimSpec::new("toolong1", ClusterSpec::example());
    assert!(matches!(spec.plan(), Err(SimError::BadName(_))));
    spec.name = "ok".into();
    for rails in [0, 5] {
        spec.rails = rails;
        let e = spec.plan().unwrap_err();
        assert!(matches!(e, SimError::BadRails(r) if r == rails));
        assert!(e.is_usage());
    }
    spec.rails = 1;
    spec.pes_per_node = 0;
    assert!(matches!(spec.plan(), Err(SimError::BadPesPerNode)));

    let big = parse_topology("SwitchName=s0 Nodes=n[1-251]\n", Format::Slurm).unwrap();
    let e = SimSpec::new("ok", big).plan().unwrap_err();
    assert!(
        matches!(e, SimError::TooManyNodes { nodes: 251, .. }),
        "{e}"
    );

    let stray = parse_topology(
        "nodes = \"a,b\"\n[[switch]]\nname = \"s0\"\nnodes = \"a\"\n",
        Format::Toml,
    )
    .unwrap();
    let e = SimSpec::new("ok", stray).plan().unwrap_err();
    assert!(
        matches!(e, SimError::NodeWithoutLeaf { ref node } if node == "b"),
        "{e}"
    );
}

#[test]
fn missing_topology_file() {
    let e = SimSpec::from_file("ok", Path::new("/nonexistent/topo.conf")).unwrap_err();
    assert!(matches!(e, SimError::ReadTopology { .. }));
    assert!(e.to_string().contains("/nonexistent/topo.conf"), "{e}");
}
