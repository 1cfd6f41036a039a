//! `switchyard topo` end to end: runs the built binary.

use std::{
    io::Write,
    path::PathBuf,
    process::{Command, Output, Stdio},
};

const BIN: &str = env!("CARGO_BIN_EXE_switchyard");

fn example(name: &str) -> String {
    format!("{}/../../docs/examples/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// Writes `text` to a fresh file under the target's scratch folder.
fn scratch(name: &str, text: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("topo_cli");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .output()
        .expect("run switchyard")
}

fn text(b: &[u8]) -> String {
    String::from_utf8(b.to_vec()).expect("UTF-8 output")
}

/// Runs and expects success; returns stdout.
fn ok(args: &[&str]) -> String {
    let out = run(args);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{args:?}\nstderr: {stderr}");
    assert!(stderr.is_empty(), "{args:?}: {stderr}");
    stdout
}

/// Runs and expects exit status 2 with a message; returns stderr.
fn fails(args: &[&str]) -> String {
    let out = run(args);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(
        out.status.code(),
        Some(2),
        "{args:?}\nstdout: {stdout}\nstderr: {stderr}"
    );
    assert!(!stderr.trim().is_empty(), "{args:?}: no message");
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    assert!(stdout.is_empty(), "{args:?}: {stdout}");
    stderr
}

/// The whitespace-separated cells of the line starting with `first `.
fn row(out: &str, first: &str) -> Vec<String> {
    out.lines()
        .find(|l| l.starts_with(&format!("{first} ")))
        .unwrap_or_else(|| panic!("no row {first} in\n{out}"))
        .split_whitespace()
        .map(String::from)
        .collect()
}

#[test]
fn builtin_example_matrix_and_legend() {
    let out = ok(&["topo"]);
    assert!(out.contains("built-in example"));
    assert!(out.contains("8 PEs"));
    assert_eq!(
        row(&out, "PE0"),
        [
            "PE0", "X", "SHM", "NEAR", "NEAR", "RTD", "RTD", "RTD", "RTD", "node01", "leaf0"
        ]
    );
    assert_eq!(
        row(&out, "PE7"),
        [
            "PE7", "RTD", "RTD", "RTD", "RTD", "NEAR", "NEAR", "SHM", "X", "node04", "leaf1"
        ]
    );
    assert!(out.contains("Legend:"));
    for class in ["LOCAL", "SHM", "NEAR", "ROUTED", "UNREACHABLE"] {
        assert!(out.contains(class), "legend lacks {class}");
    }
    assert!(out.contains("1,000,000 PEs"));
    assert!(out.contains("row total"));
}

#[test]
fn as_view_uses_the_route_policy() {
    let out = ok(&["topo", "--as", "0"]);
    assert_eq!(row(&out, "PE1"), ["PE1", "node01", "SHM", "shm", "shm"]);
    assert_eq!(
        row(&out, "PE2"),
        ["PE2", "node02", "NEAR", "verbs", "verbs"]
    );
    assert_eq!(
        row(&out, "PE3"),
        ["PE3", "node02", "NEAR", "verbs", "verbs"]
    );
    assert_eq!(
        row(&out, "PE4"),
        ["PE4", "node03", "ROUTED", "tcp", "verbs"]
    );
    assert!(out.contains("Short (<8192 B)"));
}

#[test]
fn down_verbs_moves_near_peers_to_tcp() {
    let out = ok(&["topo", "--as", "0", "--down", "verbs"]);
    assert_eq!(row(&out, "PE2"), ["PE2", "node02", "NEAR", "tcp*", "tcp*"]);
    assert_eq!(row(&out, "PE4"), ["PE4", "node03", "ROUTED", "tcp", "tcp*"]);
    assert_eq!(row(&out, "PE1"), ["PE1", "node01", "SHM", "shm", "shm"]);
    // Everything but shm down: remote peers fail, as text in the cell.
    let out = ok(&["topo", "--as=0", "--down=verbs", "--down=tcp"]);
    assert_eq!(row(&out, "PE2")[3..5], ["!", "none"]);
    // A lower threshold moves 4 KiB messages to the long band.
    let out = ok(&["topo", "--as", "0", "--threshold", "4K"]);
    assert!(out.contains("Short (<4096 B)"));
}

#[test]
fn json_has_the_expected_fields() {
    let out = ok(&["topo", "--json", "--as", "0", "--down", "verbs"]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("valid JSON");
    assert_eq!(v["n_pes"], 8);
    assert_eq!(v["pes_per_node"], 2);
    assert_eq!(v["view"], "pe");
    let pes = v["pes"].as_array().unwrap();
    assert_eq!(pes.len(), 8);
    assert_eq!(pes[5]["node"], "node03");
    assert_eq!(pes[5]["node_id"], 2);
    assert_eq!(pes[5]["switch"], "leaf1");
    assert_eq!(v["matrix"].as_array().unwrap().len(), 8);
    assert_eq!(v["matrix"][0][0], "LOCAL");
    assert_eq!(v["matrix"][0][1], "SHM");
    assert_eq!(v["matrix"][0][2], "NEAR");
    assert_eq!(v["matrix"][0][4], "ROUTED");
    let routes = v["as"]["routes"].as_array().unwrap();
    assert_eq!(routes.len(), 8);
    assert_eq!(routes[2]["class"], "NEAR");
    assert_eq!(routes[2]["short"]["transport"], "tcp");
    assert_eq!(routes[2]["short"]["fallback"], true);
    assert_eq!(routes[4]["long"]["transport"], "tcp");
    assert_eq!(v["as"]["down"][0], "verbs");
    assert_eq!(v["footprint"]["job"]["class_row"], 8);
    assert_eq!(v["footprint"]["million_pes"]["row"], 1_000_000);
}

#[test]
fn example_files_agree() {
    let conf = example("topology.conf");
    let toml = example("cluster.toml");
    let a = ok(&["topo", &conf, "--pes-per-node", "2", "--json"]);
    let b = ok(&["topo", &toml, "--json"]);
    let (a, b): (serde_json::Value, serde_json::Value) = (
        serde_json::from_str(&a).unwrap(),
        serde_json::from_str(&b).unwrap(),
    );
    assert_eq!(a["format"], "slurm");
    assert_eq!(b["format"], "toml");
    assert_eq!(a["matrix"], b["matrix"]);
    assert_eq!(a["pes"], b["pes"]);
    assert_eq!(a["n_pes"], 20);
    // The lab nodes are unreachable from the others, and get a textual error.
    let out = ok(&["topo", &toml, "--as", "0"]);
    assert_eq!(
        row(&out, "PE16"),
        [
            "PE16",
            "lab1",
            "UNREACHABLE",
            "!",
            "no",
            "link",
            "!",
            "no",
            "link"
        ]
    );
    let out = ok(&["topo", &conf]);
    assert_eq!(row(&out, "PE8")[1..5], ["--", "--", "--", "--"]);
}

#[test]
fn standard_input_and_explicit_format() {
    let mut child = Command::new(BIN)
        .args(["topo", "-", "--format", "slurm", "--pes-per-node", "3"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"SwitchName=s0 Nodes=dev[0-5]\nSwitchName=s1 Nodes=dev[6-11]\nSwitchName=s2 Switches=s[0-1]\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("<stdin> (slurm): 12 nodes x 3 PEs per node = 36 PEs"),
        "{stdout}"
    );
}

#[test]
fn large_jobs_print_a_node_view() {
    let out = ok(&["topo", &example("topology.conf"), "--pes-per-node", "8"]);
    assert!(
        out.contains("80 PEs are more than 64: one row per node"),
        "{out}"
    );
    assert_eq!(row(&out, "lab1")[1..3], ["--", "--"]);
    assert!(!out.contains("PE79"));
    let out = ok(&[
        "topo",
        &example("topology.conf"),
        "--pes-per-node",
        "8",
        "--as",
        "0",
    ]);
    assert_eq!(
        row(&out, "PE8-PE31"),
        ["PE8-PE31", "node02..node04", "NEAR", "verbs", "verbs"]
    );
}

#[test]
fn bad_files_exit_2_naming_the_line() {
    let p = scratch(
        "bad.conf",
        "SwitchName=s0 Nodes=a\n# comment\nSwitchName=s1 Nodez=b\n",
    );
    let err = fails(&["topo", p.to_str().unwrap()]);
    assert!(
        err.contains(
            "bad.conf:3: unknown key 'Nodez' (expected SwitchName, Nodes, Switches or LinkSpeed)"
        ),
        "{err}"
    );
    let cases: [(&str, &str, &str); 9] = [
        (
            "range.conf",
            "SwitchName=s0 Nodes=a\nSwitchName=s1 Nodes=node[04-01]\n",
            "range.conf:2: bad hostlist range 'node[04-01]': start after end",
        ),
        (
            "unknown.conf",
            "SwitchName=s0 Nodes=a\nSwitchName=t Switches=s[0-1]\n",
            "unknown.conf:2: switch 't' lists unknown switch 's1'",
        ),
        (
            "dup.conf",
            "SwitchName=s0 Nodes=a\nSwitchName=s0 Nodes=b\n",
            "dup.conf:2: duplicate switch 's0' (first defined on line 1)",
        ),
        (
            "cycle.conf",
            "SwitchName=a Nodes=n Switches=b\nSwitchName=b Switches=a\n",
            "cycle.conf:1: switch cycle: a -> b -> a",
        ),
        (
            "empty.conf",
            "# nothing here\n",
            "empty.conf: the topology defines no nodes",
        ),
        (
            "two.conf",
            "SwitchName=a Nodes=n[1-2]\nSwitchName=b Nodes=n2\n",
            "two.conf:2: node 'n2' is under two leaf switches, 'a' and 'b'",
        ),
        (
            "huge.conf",
            "SwitchName=a Nodes=n[0-99999999999]\n",
            "huge.conf:1: hostlist 'n[0-99999999999]' takes the file past 1048576",
        ),
        (
            "bad.toml",
            "[[switch]]\nname = \"a\"\nnodes = 7\n",
            "bad.toml:3: 'nodes' must be a hostlist string or an array of hostlist strings",
        ),
        (
            "syntax.toml",
            "pes_per_node = 2\n[[switch]\n",
            "syntax.toml:2: ",
        ),
    ];
    for (name, content, want) in cases {
        let p = scratch(name, content);
        let err = fails(&["topo", p.to_str().unwrap()]);
        assert!(err.contains(want), "{name}: {err}");
    }
    let p = scratch("binary.conf", "");
    std::fs::write(&p, [0xff, 0xfe, 0x00]).unwrap();
    assert!(fails(&["topo", p.to_str().unwrap()]).contains("is not UTF-8 text"));
}

#[test]
fn bad_arguments_exit_2() {
    let cases: [(&[&str], &str); 10] = [
        (
            &["topo", "/no/such/topology.conf"],
            "cannot read '/no/such/topology.conf'",
        ),
        (
            &["topo", "--pes-per-node", "0"],
            "invalid value '0' for '--pes-per-node <K>': expected a whole number of at least 1",
        ),
        (
            &["topo", "--pes-per-node", "two"],
            "invalid value 'two' for '--pes-per-node <K>'",
        ),
        (
            &["topo", "--as", "8"],
            "--as 8: no such PE (the job has 8 PEs, 0 to 7)",
        ),
        (&["topo", "--as", "x"], "invalid value 'x' for '--as <PE>'"),
        (&["topo", "--as"], "a value is required for '--as <PE>'"),
        (
            &["topo", "--down", "smoke-signals"],
            "expected shm, verbs or tcp",
        ),
        (
            &["topo", "--threshold", "-5"],
            "invalid value '-5' for '--threshold <BYTES>'",
        ),
        (
            &["topo", "--frobnicate"],
            "unexpected argument '--frobnicate'",
        ),
        (&["frobnicate"], "unrecognized subcommand 'frobnicate'"),
    ];
    for (args, want) in cases {
        let err = fails(args);
        assert!(err.contains(want), "{args:?}: {err}");
    }
    let err = fails(&[
        "topo",
        &example("topology.conf"),
        "--pes-per-node",
        "4294967295",
    ]);
    assert!(err.contains("is more than 4194304 PEs"), "{err}");
    assert!(fails(&[]).contains("Usage:"));
}

#[test]
fn help_and_version() {
    assert!(ok(&["--help"]).contains("switchyard topo"));
    assert!(ok(&["topo", "--help"]).contains("--pes-per-node"));
    assert_eq!(
        ok(&["--version"]),
        format!("switchyard {}\n", env!("CARGO_PKG_VERSION"))
    );
}
