//! Unit tests of `switchyard topo`: arguments, matrices, routes, JSON.

use std::ffi::OsString;

use super::{
    json::render_json,
    model::{group, pair_counts},
    text::render_text,
    *,
};
use crate::EXIT_USAGE;

/// `switchyard topo ARGS` through the whole command line.
fn topo(a: &[&str]) -> Output {
    crate::run_os(std::iter::once(OsString::from("topo")).chain(a.iter().map(OsString::from)))
}

fn parse_args(a: &[&str]) -> Result<TopoArgs, Output> {
    let mut all = vec!["topo"];
    all.extend_from_slice(a);
    match crate::cli::parse_strs(&all)? {
        crate::cli::Command::Topo(t) => Ok(t),
        other => panic!("{other:?}"),
    }
}

fn ok(a: &[&str]) -> String {
    let out = topo(a);
    assert_eq!(out.code, 0, "{a:?}: {}", out.stderr);
    out.stdout
}

fn fail(a: &[&str]) -> String {
    let out = topo(a);
    assert_eq!(out.code, EXIT_USAGE, "{a:?}: {}", out.stdout);
    assert!(out.stdout.is_empty());
    out.stderr
}

#[test]
fn argument_parsing() {
    let a = parse_args(&[
        "t.conf",
        "--pes-per-node=4",
        "--as",
        "3",
        "--down",
        "verbs",
        "--down=TCP",
        "--threshold",
        "4K",
        "--json",
        "--format",
        "slurm",
    ])
    .unwrap();
    assert_eq!(
        a,
        TopoArgs {
            file: Some("t.conf".into()),
            format: Format::Slurm,
            pes_per_node: Some(4),
            as_pe: Some(3),
            down: vec![Transport::Verbs, Transport::Tcp],
            threshold: Some(4096),
            json: true,
            svg: None,
        }
    );
    assert_eq!(parse_args(&[]).unwrap(), TopoArgs::default());
    assert_eq!(
        parse_args(&["--", "-odd"]).unwrap().file.as_deref(),
        Some("-odd")
    );
    assert_eq!(parse_args(&["-"]).unwrap().file.as_deref(), Some("-"));
    assert_eq!(
        parse_args(&["--down", "rdma"]).unwrap().down,
        [Transport::Verbs]
    );
    assert_eq!(bytes("1M").unwrap(), 1 << 20);
    assert_eq!(bytes("100").unwrap(), 100);
    assert!(bytes("4096M").is_err());
    assert!(bytes("12Q").is_err());
}

#[test]
fn argument_errors() {
    let bad = |flag: &str, value: &str| format!("invalid value '{value}' for '{flag}");
    assert!(fail(&["--pes-per-node", "0"]).contains(&bad("--pes-per-node", "0")));
    assert!(fail(&["--pes-per-node", "0"]).contains("expected a whole number of at least 1"));
    assert!(fail(&["--pes-per-node", "two"]).contains(&bad("--pes-per-node", "two")));
    assert!(fail(&["--as", "-1"]).contains(&bad("--as", "-1")));
    assert!(fail(&["--as", "8"]).contains("--as 8: no such PE (the job has 8 PEs, 0 to 7)"));
    assert!(fail(&["--as"]).contains("a value is required for '--as <PE>'"));
    assert!(fail(&["--down", "carrier-pigeon"]).contains("expected shm, verbs or tcp"));
    assert!(fail(&["--threshold", "lots"]).contains(&bad("--threshold", "lots")));
    assert!(fail(&["--threshold", "-5"]).contains(&bad("--threshold", "-5")));
    assert!(fail(&["--format", "xml"]).contains("expected auto, slurm or toml"));
    assert!(fail(&["--bogus"]).contains("unexpected argument '--bogus'"));
    assert!(fail(&["--json=yes"]).contains("unexpected value 'yes' for '--json'"));
    assert!(fail(&["a", "b"]).contains("unexpected argument 'b'"));
    assert!(fail(&["--bogus"]).contains("switchyard topo --help"));
    let e = fail(&["/nonexistent/topology.conf"]);
    assert!(
        e.contains("cannot read '/nonexistent/topology.conf'"),
        "{e}"
    );
    assert!(ok(&["--help"]).starts_with("Usage: switchyard topo"));
}

#[test]
fn builtin_matrix() {
    let out = ok(&[]);
    assert!(out.contains(
        "built-in example (toml): 4 nodes x 2 PEs per node = 8 PEs; 2 leaf switches in 1 tree"
    ));
    let row0 = out.lines().find(|l| l.starts_with("PE0 ")).unwrap();
    let cells: Vec<&str> = row0.split_whitespace().collect();
    assert_eq!(
        cells,
        [
            "PE0", "X", "SHM", "NEAR", "NEAR", "RTD", "RTD", "RTD", "RTD", "node01", "leaf0"
        ]
    );
    assert!(out.contains("Legend:"));
    assert!(out.contains("--    UNREACHABLE"));
    assert!(out.contains("1,000,000 B"), "{out}");
}

#[test]
fn builtin_as_view_and_fallbacks() {
    let out = ok(&["--as", "0"]);
    let row = |out: &str, peer: &str| -> Vec<String> {
        out.lines()
            .find(|l| l.starts_with(&format!("{peer} ")))
            .unwrap()
            .split_whitespace()
            .map(String::from)
            .collect()
    };
    assert_eq!(row(&out, "PE0"), ["PE0", "node01", "LOCAL", "shm", "shm"]);
    assert_eq!(row(&out, "PE1"), ["PE1", "node01", "SHM", "shm", "shm"]);
    assert_eq!(
        row(&out, "PE2"),
        ["PE2", "node02", "NEAR", "verbs", "verbs"]
    );
    assert_eq!(
        row(&out, "PE4"),
        ["PE4", "node03", "ROUTED", "tcp", "verbs"]
    );
    let out = ok(&["--as", "0", "--down", "verbs"]);
    assert_eq!(row(&out, "PE2"), ["PE2", "node02", "NEAR", "tcp*", "tcp*"]);
    assert_eq!(row(&out, "PE4"), ["PE4", "node03", "ROUTED", "tcp", "tcp*"]);
    let out = ok(&["--as", "0", "--down", "verbs", "--down", "tcp"]);
    assert_eq!(
        row(&out, "PE2"),
        [
            "PE2", "node02", "NEAR", "!", "none", "healthy", "!", "none", "healthy"
        ]
    );
    assert!(out.contains("First select error: PE 2 (NEAR) is unreachable: no healthy transport."));
    let out = ok(&["--as", "0", "--down", "shm"]);
    assert_eq!(row(&out, "PE1"), ["PE1", "node01", "SHM", "tcp*", "verbs*"]);
    let out = ok(&["--as", "0", "--threshold", "0"]);
    assert_eq!(
        row(&out, "PE4"),
        ["PE4", "node03", "ROUTED", "!", "n/a", "verbs"]
    );
}

#[test]
fn json_output() {
    let out = ok(&["--json", "--as", "2", "--down", "verbs"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["n_pes"], 8);
    assert_eq!(v["view"], "pe");
    assert_eq!(v["pes"][3]["node"], "node02");
    assert_eq!(v["pes"][3]["switch"], "leaf0");
    assert_eq!(v["matrix"][0][2], "NEAR");
    assert_eq!(v["matrix"][0][7], "ROUTED");
    assert_eq!(v["as"]["pe"], 2);
    assert_eq!(v["as"]["routes"][0]["class"], "NEAR");
    assert_eq!(v["as"]["routes"][0]["short"]["transport"], "tcp");
    assert_eq!(v["as"]["routes"][0]["short"]["fallback"], true);
    assert_eq!(v["as"]["routes"][2]["class"], "LOCAL");
    assert_eq!(v["footprint"]["million_pes"]["row"], 1_000_000);
    assert_eq!(v["pair_counts"]["LOCAL"], 8);
}

fn spec_job(text: &str, ppn: u32) -> Job {
    job_of(parse_topology(text, Format::Auto).unwrap(), ppn)
}

/// The job of `spec` with `ppn` PEs per node, its source "test".
pub(super) fn job_of(spec: ClusterSpec, ppn: u32) -> Job {
    let n_pes = spec.n_pes(ppn).unwrap();
    Job {
        spec,
        source: "test".into(),
        ppn,
        n_pes,
    }
}

#[test]
fn pair_counts_match_a_brute_force_walk() {
    let text = "SwitchName=a Nodes=n[1-3]\nSwitchName=b Nodes=n[4-5]\nSwitchName=t Switches=a,b\nSwitchName=c Nodes=m[1-2]\n";
    for ppn in [1, 3] {
        let job = spec_job(text, ppn);
        let mut brute = [0u64; 5];
        for a in 0..job.n_pes {
            for b in 0..job.n_pes {
                brute[job.spec.class_of(ppn, a, b).index()] += 1;
            }
        }
        assert_eq!(pair_counts(&job), brute, "ppn {ppn}");
    }
}

#[test]
fn large_jobs_get_node_and_summary_views() {
    let text = "SwitchName=a Nodes=n[1-4]\nSwitchName=b Nodes=n[5-8]\nSwitchName=t Switches=a,b\n";
    let job = spec_job(text, 16);
    assert_eq!(View::of(&job), View::Node);
    let out = render_text(&job, View::Node, None, &[]);
    assert!(
        out.contains("128 PEs are more than 64: one row per node"),
        "{out}"
    );
    let row = out.lines().find(|l| l.starts_with("n1 ")).unwrap();
    assert_eq!(
        row.split_whitespace().collect::<Vec<_>>(),
        [
            "n1", "SHM", "NEAR", "NEAR", "NEAR", "RTD", "RTD", "RTD", "RTD", "0-15", "a"
        ]
    );
    let v = routes(&job, 0, 8192, &[]).unwrap();
    assert!(v.merged);
    let ranges: Vec<(u32, u32, &str)> = v.rows.iter().map(|r| (r.first, r.last, r.class)).collect();
    assert_eq!(
        ranges,
        [
            (0, 0, "LOCAL"),
            (1, 15, "SHM"),
            (16, 63, "NEAR"),
            (64, 127, "ROUTED")
        ]
    );
    let text = "SwitchName=a Nodes=n[1-100]\nSwitchName=b Nodes=n[101-200]\n";
    let job = spec_job(text, 1);
    assert_eq!(View::of(&job), View::Summary);
    let out = render_text(&job, View::Summary, None, &[]);
    assert!(
        out.contains("200 PEs on 200 nodes are too many for a matrix"),
        "{out}"
    );
    assert!(out.contains("UNREACHABLE"));
    let json: serde_json::Value =
        serde_json::from_str(&render_json(&job, View::Summary, None, &[])).unwrap();
    assert_eq!(json["view"], "summary");
    assert!(json.get("matrix").is_none());
    assert_eq!(json["pair_counts"]["UNREACHABLE"], 2 * 100 * 100);
}

#[test]
fn groups_thousands() {
    assert_eq!(group(0), "0");
    assert_eq!(group(999), "999");
    assert_eq!(group(1000), "1,000");
    assert_eq!(group(1_250_256), "1,250,256");
}
