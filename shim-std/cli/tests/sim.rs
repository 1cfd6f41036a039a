//! Simulated clusters: `switchyard sim` and `switchyard run --sim`, end to end.
//!
//! Tests that build namespaces need root and a working `ip netns`. Without
//! root they print why and skip; as root (CI), or with `CI` or
//! `SWITCHYARD_NO_SKIP` set, a sim that cannot come up is a failure with the
//! reason ([`switchyard_tests::skip`]). Each test uses its own sim name, so
//! they run in parallel, and tears its sim down through a guard.

use std::{
    io::Read,
    net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream},
    path::PathBuf,
    process::{Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use switchyard_launch::sim::{self, Sim, SimError, SimGuard, SimSpec};
use switchyard_tests::skip::{cargo_build, skip};
use switchyard_topo::{ClusterSpec, Format, parse_topology};

const EXE: &str = env!("CARGO_BIN_EXE_switchyard");

/// Brings `spec` up, or says why this machine cannot and returns `None`
/// (where skips are allowed: see [`skip`]).
fn up_or_skip(spec: &SimSpec) -> Option<SimGuard> {
    // Leftovers of an earlier, killed run of this test.
    let _ = sim::down(&spec.name);
    match SimGuard::up(spec) {
        Ok(g) => Some(g),
        Err(e @ (SimError::NotRoot(_) | SimError::NoIp)) => {
            skip(e);
            None
        }
        Err(e @ SimError::Command { .. }) if !can_netns() => {
            skip(format!("`ip netns` does not work here: {e}"));
            None
        }
        Err(e) => panic!("sim up failed: {e:?}"),
    }
}

fn can_netns() -> bool {
    Command::new("ip")
        .args(["netns", "list"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn example(name: &str, rails: u32) -> SimSpec {
    let mut spec = SimSpec::new(name, ClusterSpec::example());
    spec.rails = rails;
    spec
}

/// A listener on `addr` inside `node`'s namespace.
fn listen(sim: &Sim, node: u32, addr: Ipv4Addr) -> (TcpListener, SocketAddr) {
    let ns = sim.node_netns(node).unwrap().to_string();
    let l = sim::in_netns(&ns, move || TcpListener::bind((addr, 0)))
        .unwrap()
        .unwrap();
    let a = l.local_addr().unwrap();
    (l, a)
}

/// Connects from `node`'s namespace to `to`, waiting at most `timeout`.
fn connect(sim: &Sim, node: u32, to: SocketAddr, timeout: Duration) -> std::io::Result<()> {
    let ns = sim.node_netns(node).unwrap().to_string();
    sim::in_netns(&ns, move || {
        TcpStream::connect_timeout(&to, timeout).map(drop)
    })
    .unwrap()
}

/// Connects, retrying for up to 5 s (a link that just came back).
fn connect_eventually(sim: &Sim, node: u32, to: SocketAddr) -> std::io::Result<()> {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        match connect(sim, node, to, Duration::from_millis(500)) {
            Err(_) if Instant::now() < until => thread::sleep(Duration::from_millis(100)),
            r => return r,
        }
    }
}

fn namespaces_of(name: &str) -> Vec<String> {
    sim::sim_namespaces(name).unwrap()
}

/// A `switchyard` command running in the background, its output collected.
struct Running {
    child: std::process::Child,
    out: thread::JoinHandle<String>,
    err: thread::JoinHandle<String>,
    args: Vec<String>,
}

/// Starts the `switchyard` binary with `args`.
fn start(args: &[&str]) -> Running {
    let mut child = Command::new(EXE)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out = thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err = thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let args = args.iter().map(|a| a.to_string()).collect();
    Running {
        child,
        out,
        err,
        args,
    }
}

impl Running {
    /// Waits at most 120 s for it to end: (status, stdout, stderr).
    fn finish(mut self) -> (i32, String, String) {
        let args = &self.args;
        let until = Instant::now() + Duration::from_secs(120);
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > until {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("switchyard {args:?} did not finish in 120 s");
            }
            thread::sleep(Duration::from_millis(10));
        };
        let (o, e) = (self.out.join().unwrap(), self.err.join().unwrap());
        assert!(!e.contains("panicked"), "switchyard {args:?} panicked: {e}");
        (status.code().unwrap_or(-1), o, e)
    }
}

/// Runs the `switchyard` binary with a bounded wait: (status, stdout, stderr).
fn cli(args: &[&str]) -> (i32, String, String) {
    start(args).finish()
}

fn temp_file(name: &str, text: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("switchyard-sim-{}-{name}", std::process::id()));
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn example_with_two_rails_connects_same_leaf_cross_leaf_and_per_rail() {
    let Some(g) = up_or_skip(&example("t1", 2)) else {
        return;
    };
    let mut ns = namespaces_of("t1");
    ns.sort();
    assert_eq!(ns, ["t1-fab", "t1-n0", "t1-n1", "t1-n2", "t1-n3", "t1-rt"]);
    assert!(sim::state_path("t1").exists());
    let st = g.state().clone();
    assert_eq!(st.nodes[1].addrs[0], Ipv4Addr::new(10, 100, 0, 2));
    assert_eq!(st.nodes[3].addrs[1], Ipv4Addr::new(10, 101, 1, 2));
    let t = Duration::from_secs(2);
    // Same leaf, rail 0 and 1.
    let (_l1, a1) = listen(&g, 1, st.nodes[1].addrs[0]);
    connect(&g, 0, a1, t).expect("same leaf, rail 0");
    let (_l1b, a1b) = listen(&g, 1, st.nodes[1].addrs[1]);
    connect(&g, 0, a1b, t).expect("same leaf, rail 1");
    // Cross leaf through the router, on each rail.
    for r in 0..2 {
        let (_l, a) = listen(&g, 3, st.nodes[3].addrs[r]);
        connect(&g, 0, a, t).unwrap_or_else(|e| panic!("cross leaf, rail {r}: {e}"));
    }
    // The management bridge is reachable from every node.
    let fab = st.fabric_netns.clone();
    let mg = sim::in_netns(&fab, || TcpListener::bind((sim::MGMT_ADDR, 0)))
        .unwrap()
        .unwrap();
    for n in 0..4 {
        connect(&g, n, mg.local_addr().unwrap(), t).expect("management network");
    }
    // A second `up` of the same name fails clearly and leaves the first alone.
    let e = Sim::up(&example("t1", 2)).unwrap_err();
    assert!(matches!(e, SimError::Exists { .. }), "{e}");
    assert_eq!(namespaces_of("t1").len(), 6);
    // Status from the kernel.
    let status = g.status().unwrap();
    assert!(
        status
            .nodes
            .iter()
            .all(|n| n.rails.iter().all(|r| r.word() == "up"))
    );
    assert!(
        status.nodes[2].rails[1]
            .kernel_addrs
            .contains(&"10.101.1.1/24".to_string())
    );
    g.down().unwrap();
    assert!(namespaces_of("t1").is_empty());
    assert!(!sim::state_path("t1").exists());
}

#[test]
fn separate_trees_are_unreachable() {
    let cluster = parse_topology(
        "SwitchName=a Nodes=x[1-2]\nSwitchName=b Nodes=y[1-2]\n",
        Format::Slurm,
    )
    .unwrap();
    let Some(g) = up_or_skip(&SimSpec::new("t2", cluster)) else {
        return;
    };
    let st = g.state().clone();
    assert_ne!(st.nodes[0].tree, st.nodes[2].tree);
    let (_l, same) = listen(&g, 1, st.nodes[1].addrs[0]);
    connect(&g, 0, same, Duration::from_secs(2)).expect("same tree");
    let (_l2, other) = listen(&g, 2, st.nodes[2].addrs[0]);
    let e = connect(&g, 0, other, Duration::from_secs(2)).unwrap_err();
    eprintln!("cross-tree connect: {e}");
}

#[test]
fn link_down_cuts_exactly_that_rail() {
    let Some(g) = up_or_skip(&example("t3", 2)) else {
        return;
    };
    let st = g.state().clone();
    let (_l0, r0) = listen(&g, 3, st.nodes[3].addrs[0]);
    let (_l1, r1) = listen(&g, 3, st.nodes[3].addrs[1]);
    let short = Duration::from_millis(500);
    connect(&g, 0, r1, Duration::from_secs(2)).expect("rail 1 before the cut");
    g.link("3", Some(1), false).unwrap();
    assert!(connect(&g, 0, r1, short).is_err(), "rail 1 still works");
    connect(&g, 0, r0, Duration::from_secs(2)).expect("rail 0 after cutting rail 1");
    let status = g.status().unwrap();
    assert_eq!(status.nodes[3].rails[1].word(), "cut");
    assert_eq!(status.nodes[3].rails[0].word(), "up");
    assert!(!status.nodes[3].rails[1].carrier);
    g.link("node04", Some(1), true).unwrap();
    connect_eventually(&g, 0, r1).expect("rail 1 after link up");
    // Every rail at once, by host name.
    g.link("node04", None, false).unwrap();
    assert!(connect(&g, 0, r0, short).is_err());
    assert!(connect(&g, 0, r1, short).is_err());
    g.link("3", None, true).unwrap();
    connect_eventually(&g, 0, r0).expect("rail 0 back");
    // Unknown node and rail: typed errors.
    assert!(matches!(
        g.link("9", None, false),
        Err(SimError::UnknownNode { .. })
    ));
    assert!(matches!(
        g.link("nope", None, false),
        Err(SimError::UnknownNode { .. })
    ));
    assert!(matches!(
        g.link("0", Some(2), false),
        Err(SimError::UnknownRail {
            rail: 2,
            rails: 2,
            ..
        })
    ));
}

#[test]
fn down_cleans_up_after_a_crash_and_is_idempotent() {
    let Some(g) = up_or_skip(&example("t4", 1)) else {
        return;
    };
    assert_eq!(namespaces_of("t4").len(), 6);
    // A crash: the namespaces stay, the state file is lost.
    std::mem::forget(g);
    std::fs::remove_file(sim::state_path("t4")).unwrap();
    assert!(matches!(Sim::open("t4"), Err(SimError::NotUp(_))));
    // `up` refuses to build over the leftovers.
    assert!(matches!(
        Sim::up(&example("t4", 1)),
        Err(SimError::Exists { .. })
    ));
    let report = sim::down("t4").unwrap();
    assert_eq!(report.namespaces.len(), 6);
    assert!(namespaces_of("t4").is_empty());
    assert!(sim::down("t4").unwrap().nothing());
    // The CLI says so and exits 0.
    let (code, out, _) = cli(&["sim", "down", "--name", "t4"]);
    assert_eq!(code, 0);
    assert!(out.contains("nothing"), "{out}");
    // Dropping a guard tears down too.
    let Some(g) = up_or_skip(&example("t4", 1)) else {
        return;
    };
    drop(g);
    assert!(namespaces_of("t4").is_empty());
    assert!(!sim::state_path("t4").exists());
}

#[test]
fn run_sim_puts_each_pe_in_its_node() {
    if up_or_skip(&example("t5", 1)).is_none() {
        return;
    }
    let file = temp_file(
        "run.toml",
        "pes_per_node = 2\nrails = 2\n[[switch]]\nname = \"l0\"\nnodes = \"a[1-2]\"\n\
         [[switch]]\nname = \"l1\"\nnodes = \"b[1-2]\"\n[[switch]]\nname = \"sp\"\nswitches = \"l[0-1]\"\n",
    );
    let script = "echo ENV $SWITCHYARD_RANK $SWITCHYARD_NODE_ID $SWITCHYARD_SWITCH_ID \
                  $SWITCHYARD_TREE_ID $SWITCHYARD_TCP_ADDRS $SWITCHYARD_LOCAL_RANK \
                  $SWITCHYARD_LOCAL_SIZE $SWITCHYARD_SIM $SWITCHYARD_ROOT; \
                  ip -o -4 addr show | awk '{print \"ADDR\", $2, $4}'";
    let (code, out, err) = cli(&[
        "run",
        "--sim",
        file.to_str().unwrap(),
        "--name",
        "t5",
        "-n",
        "4",
        "--timeout",
        "60",
        "--",
        "sh",
        "-c",
        script,
    ]);
    let _ = std::fs::remove_file(&file);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    // a1, a2 (nodes 0, 1) are under l0, b1, b2 under l1; 2 PEs per node.
    for rank in 0..4u32 {
        let node = rank / 2;
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("[{rank}] ENV ")))
            .unwrap_or_else(|| panic!("no ENV line of rank {rank}:\n{out}"));
        let f: Vec<&str> = line.split_whitespace().collect();
        // [r] ENV rank node switch tree addrs local_rank local_size sim root
        assert_eq!(f[2], rank.to_string(), "{line}");
        assert_eq!(f[3], node.to_string(), "{line}");
        let leaf = node / 2;
        let k = node % 2;
        assert_eq!(f[4], leaf.to_string(), "{line}");
        assert_eq!(f[5], "0", "{line}");
        let addrs = format!("10.100.{leaf}.{},10.101.{leaf}.{}", k + 1, k + 1);
        assert_eq!(f[6], addrs, "{line}");
        assert_eq!(f[7], (rank % 2).to_string(), "{line}");
        assert_eq!(f[8], "2", "{line}");
        assert_eq!(f[9], "t5", "{line}");
        assert!(f[10].starts_with("10.99.255.254:"), "{line}");
        // It lives in its node's namespace: exactly its node's interfaces.
        let mine: Vec<&str> = out
            .lines()
            .filter(|l| l.starts_with(&format!("[{rank}] ADDR ")))
            .collect();
        let has = |iface: &str, addr: String| {
            mine.iter().any(|l| l.ends_with(&format!("{iface} {addr}")))
        };
        assert!(has("r0", format!("10.100.{leaf}.{}/24", k + 1)), "{mine:?}");
        assert!(has("r1", format!("10.101.{leaf}.{}/24", k + 1)), "{mine:?}");
        assert!(has("mg", format!("10.99.0.{}/16", node + 1)), "{mine:?}");
        assert_eq!(mine.len(), 4, "lo, r0, r1, mg: {mine:?}");
    }
    assert!(err.contains("tore down sim t5"), "{err}");
    assert!(namespaces_of("t5").is_empty());
    // Too many PEs for the sim: a usage error, and nothing is left behind.
    let file = temp_file(
        "run2.toml",
        "[[switch]]\nname = \"l0\"\nnodes = \"a[1-2]\"\n",
    );
    let (code, _, err) = cli(&[
        "run",
        "--sim",
        file.to_str().unwrap(),
        "--name",
        "t5",
        "-n",
        "3",
        "--",
        "true",
    ]);
    let _ = std::fs::remove_file(&file);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("do not fit"), "{err}");
    assert!(namespaces_of("t5").is_empty());
}

#[test]
fn cli_up_status_link_down() {
    if up_or_skip(&example("t6", 1)).is_none() {
        return;
    }
    let (code, out, err) = cli(&["sim", "up", "--name", "t6", "--rails", "2"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("10.101.1.2"), "{out}");
    let (code, out, _) = cli(&["sim", "status", "--name", "t6", "--json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["nodes"].as_array().unwrap().len(), 4);
    let (code, _, err) = cli(&["sim", "link", "down", "node02", "0", "--name", "t6"]);
    assert_eq!(code, 0, "{err}");
    let (_, out, _) = cli(&["sim", "status", "--name", "t6"]);
    assert!(out.contains("10.100.0.2 cut"), "{out}");
    let (code, _, err) = cli(&["sim", "link", "down", "nope", "--name", "t6"]);
    assert_eq!(code, 2);
    assert!(err.contains("no node 'nope'"), "{err}");
    let (code, _, err) = cli(&["sim", "link", "up", "1", "7", "--name", "t6"]);
    assert_eq!(code, 2);
    assert!(err.contains("no rail 7"), "{err}");
    let (code, _, err) = cli(&["sim", "up", "--name", "t6"]);
    assert_eq!(code, 1);
    assert!(err.contains("already exists"), "{err}");
    let (code, out, _) = cli(&["sim", "down", "--name", "t6"]);
    assert_eq!(code, 0);
    assert!(out.contains("removed 6 namespace(s)"), "{out}");
    assert!(namespaces_of("t6").is_empty());
}

/// Bad input needs neither root nor `ip`: it is refused before anything is
/// built.
#[test]
fn bad_input_is_a_typed_error_with_exit_2() {
    let bad_topo = temp_file("bad.conf", "SwitchName=s0 Nodez=n[1-2]\n");
    let bad = bad_topo.to_str().unwrap();
    for (args, needle) in [
        (
            &["sim", "up", "/nonexistent/topo.conf"][..],
            "cannot read topology file '/nonexistent/topo.conf'",
        ),
        (&["sim", "up", bad], ":1:"),
        (
            &["sim", "up", "--name", "toolong"],
            "bad sim name 'toolong'",
        ),
        (&["sim", "up", "--name", "Bad"], "bad sim name 'Bad'"),
        (&["sim", "up", "--rails", "0"], "bad number of rails 0"),
        (&["sim", "up", "--rails", "5"], "bad number of rails 5"),
        (
            &["sim", "up", "--rails", "x"],
            "invalid value 'x' for '--rails <R>'",
        ),
        (&["sim", "frob"], "unrecognized subcommand 'frob'"),
        (
            &["sim", "link", "sideways", "0"],
            "[possible values: down, up]",
        ),
        (
            &["sim", "status", "--rails", "2"],
            "unexpected argument '--rails'",
        ),
        (
            &["run", "--sim", "/nonexistent/x.toml", "-n", "1", "true"],
            "neither a topology file nor a sim name",
        ),
        (
            &["run", "--rails", "2", "-n", "1", "true"],
            "required arguments were not provided:\n  --sim",
        ),
    ] {
        let (code, _, err) = cli(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    let _ = std::fs::remove_file(&bad_topo);
    // The library's errors.
    let e = SimSpec::from_file("ok", std::path::Path::new("/nonexistent")).unwrap_err();
    assert!(matches!(e, SimError::ReadTopology { .. }) && e.is_usage());
    for rails in [0, 5] {
        let e = Sim::up(&example("ok", rails)).unwrap_err();
        assert!(matches!(e, SimError::BadRails(r) if r == rails), "{e}");
    }
    assert!(matches!(
        Sim::up(&example("sevenchr", 1)),
        Err(SimError::BadName(_))
    ));
}

/// An example of the `switchyard` crate, built once in this test's profile
/// (`cargo test -p switchyard-cli` does not build another package's
/// examples).
fn example_bin(name: &str) -> String {
    let bin = cargo_build(&["-p", "switchyard", "--example", name]);
    let ex = bin.join("examples").join(name);
    assert!(ex.is_file(), "{} was not built", ex.display());
    ex.to_string_lossy().into_owned()
}

/// Waits at most `limit` for `path` to exist; false if it did not.
fn appears(path: &std::path::Path, limit: Duration) -> bool {
    let t0 = Instant::now();
    while !path.exists() {
        if t0.elapsed() > limit {
            return false;
        }
        thread::sleep(Duration::from_millis(10));
    }
    true
}

/// Records each stream of the soak carries: ~15 s on a loaded 2-core
/// machine in a debug build (three streams of them over TCP).
const SOAK_RECORDS: u64 = 60_000;

/// Issue 16: a channel stream across nodes survives a rail cut. Three PEs on
/// three nodes (two of one leaf, one behind the router), two rails each; PE
/// 0 streams sequence-stamped, checksummed records to PE 1 over an SPSC
/// channel and to PEs 1 and 2 over a broadcast with backpressure
/// (`examples/channel_soak.rs`). A quarter of the way in, rail 0 of PE 0's
/// node is cut (every cross-node pair of the job loses it), and brought
/// back a second later; PE 0 holds at half the stream until then, so the
/// stream spans the cut, the failover and the return. Each receiver checks
/// that every record arrives exactly once, in order and whole.
#[test]
fn channel_stream_survives_a_rail_cut() {
    let Some(g) = up_or_skip(&example("t7", 2)) else {
        return;
    };
    let soak = example_bin("channel_soak");
    let dir = std::env::temp_dir().join(format!("switchyard-sim-{}-t7", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (mark, cut) = (dir.join("mark"), dir.join("cut"));
    let n = SOAK_RECORDS.to_string();
    let (mark_var, cut_var) = (
        format!("SOAK_MARK={}", mark.display()),
        format!("SOAK_CUT={}", cut.display()),
    );
    let t0 = Instant::now();
    let job = start(&[
        "run",
        "--sim",
        "t7",
        "--pes-per-node",
        "1",
        "-n",
        "3",
        "--timeout",
        "100",
        // A peer is given up on after 5 s down on every rail by default;
        // this machine's load makes rails flap (missed heartbeats) besides
        // the cut, which must not end the job.
        "-x",
        "SWITCHYARD_GIVE_UP=30s",
        "-x",
        &mark_var,
        "-x",
        &cut_var,
        "--",
        &soak,
        &n,
    ]);
    let marked = appears(&mark, Duration::from_secs(60));
    if marked {
        g.link("0", Some(0), false).expect("cut rail 0 of node 0");
        // Several heartbeat windows (200 ms): the cut is seen and the
        // stream moves to rail 1.
        thread::sleep(Duration::from_millis(1200));
        std::fs::write(&cut, b"cut").unwrap();
        g.link("0", Some(0), true).expect("rail 0 of node 0 back");
    }
    let (code, out, err) = job.finish();
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("{out}");
    eprintln!("soak of {n} records with a rail cut: {:?}", t0.elapsed());
    assert!(marked, "PE 0 never got a quarter of the way:\n{out}\n{err}");
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    for (pe, spsc) in [(1, &n[..]), (2, "0")] {
        let want = format!("[{pe}] soak PE {pe}: spsc {spsc}/{spsc} ok, broadcast {n}/{n} ok");
        assert!(out.contains(&want), "no '{want}' in:\n{out}\n{err}");
    }
    // The cut was seen: PE 0 lost a link (rail 0 toward PEs 1 and 2).
    let lost: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("[0] soak PE 0: links_lost "))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no counters of PE 0 in:\n{out}"));
    assert!(lost >= 1, "PE 0 saw no link go down:\n{out}");
}

/// Issue 16: a broadcast stream reaches two subscribers of another node
/// with one put and signal per record. `examples/channel_soak.rs` on 4 PEs,
/// 2 per node: PE 0 publishes to PE 1 (its node, reading its ring) and PEs
/// 2 and 3 (node 1: PE 2 leads it, PE 3 reads PE 2's ring through its
/// mapping); every record arrives at each once, in order, whole, and PE 0
/// issued exactly one TCP operation per record (two without the relay).
#[test]
fn broadcast_sends_once_per_remote_node() {
    let Some(_g) = up_or_skip(&example("t9", 1)) else {
        return;
    };
    let soak = example_bin("channel_soak");
    let n = "20000";
    let (code, out, err) = cli(&[
        "run",
        "--sim",
        "t9",
        "--pes-per-node",
        "2",
        "-n",
        "4",
        "--timeout",
        "100",
        "-x",
        "SWITCHYARD_GIVE_UP=30s",
        "--",
        &soak,
        n,
    ]);
    eprintln!("{out}");
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    for (pe, spsc) in [(1, n), (2, "0"), (3, "0")] {
        let want = format!("[{pe}] soak PE {pe}: spsc {spsc}/{spsc} ok, broadcast {n}/{n} ok");
        assert!(out.contains(&want), "no '{want}' in:\n{out}\n{err}");
    }
    let want = format!(
        "[0] soak PE 0: broadcast to 1 remote nodes (2 remote subscribers), {n} tcp operations"
    );
    assert!(out.contains(&want), "no '{want}' in:\n{out}\n{err}");
}

/// Issue 16: `examples/fanout.rs` across nodes, a publisher and two
/// subscribers on three nodes of a sim, each subscriber printing its
/// latency percentiles.
#[test]
fn fanout_example_runs_across_nodes() {
    let Some(_g) = up_or_skip(&example("t8", 2)) else {
        return;
    };
    let fanout = example_bin("fanout");
    let (code, out, err) = cli(&[
        "run",
        "--sim",
        "t8",
        "--pes-per-node",
        "1",
        "-n",
        "3",
        "--timeout",
        "60",
        "--",
        &fanout,
        "20000",
        "20000",
    ]);
    eprintln!("{out}");
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(
        out.contains("[0] publisher: 20000 quotes to 2 subscribers (2 on other nodes)"),
        "{out}"
    );
    for pe in [1, 2] {
        let want = format!("[{pe}] subscriber PE {pe}: 20000 quotes in order; latency p50 ");
        assert!(out.contains(&want), "no '{want}' in:\n{out}\n{err}");
        assert!(out.contains("p99.9"), "{out}");
    }
}
