//! The route trace end to end: real PE processes (`sy_pe`) over TCP (forced,
//! so the receiving side records too), their traces read live through
//! `switchyard trace JOB` and from their dumps, both ends of each operation
//! joined by context id; the dumps a killed peer leaves; and no output of
//! the library on stderr without a subscriber.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use serde_json::Value;
use switchyard_launch::{self as launch, Bind, JobEnd, LaunchOptions};

const PE: &str = env!("CARGO_BIN_EXE_sy_pe");
/// Puts in the known sequence.
const K: u64 = 24;

/// A fresh directory for one test, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("sy-trace-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("temp dir");
        TempDir(d)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn options(n: u32, args: &[&str], job_dir: &Path) -> LaunchOptions {
    let mut o = LaunchOptions::new(n, PE);
    o.args = args.iter().map(Into::into).collect();
    o.bind = Bind::None;
    o.timeout = Some(Duration::from_secs(90));
    o.grace = Duration::from_millis(500);
    for (k, v) in [
        ("SWITCHYARD_HEAP_SIZE", "4M"),
        ("SWITCHYARD_OP_TIMEOUT", "20s"),
        ("SWITCHYARD_TRANSPORTS", "tcp"),
        ("SWITCHYARD_TRACE", "all"),
    ] {
        o.env.push((k.into(), v.into()));
    }
    o.env.push((
        "SWITCHYARD_JOB_DIR".into(),
        job_dir.to_string_lossy().into_owned(),
    ));
    o
}

fn cli(args: &[&str]) -> switchyard_cli::Output {
    switchyard_cli::run(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
}

/// The joined operations of `switchyard trace --join --json SOURCE`.
fn joined(source: &str) -> Vec<Value> {
    let out = cli(&["trace", "--join", "--json", source]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    out.stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// The K puts of `trace-puts`, exactly: PE 0 to PE 1, 1001 to 1000 + K
/// bytes, consecutive context ids, each recorded at both ends (TCP), the two
/// ends' times on one clock. Not in order: PE 0's record is stamped when its
/// call ends, after the frame left, so PE 1 may apply the frame first (a
/// preempted initiator stamped 59 µs after the target once in CI).
fn assert_the_puts(ops: &[Value]) {
    let puts: Vec<&Value> = ops
        .iter()
        .filter(|o| o["op"] == "put" && o["len"].as_u64().is_some_and(|l| l > 1000))
        .collect();
    assert_eq!(puts.len() as u64, K, "{ops:#?}");
    let seq0 = puts[0]["context"]["seq"].as_u64().unwrap();
    // The PE's first context owns lane 0 of the context ids (the lane is
    // the top 8 bits): the progress thread's reader slot comes after it.
    assert!(seq0 < 1 << 56, "first context's ids on lane 0: {seq0}");
    for (i, p) in puts.iter().enumerate() {
        let i = i as u64;
        assert_eq!(p["len"], 1001 + i, "{p}");
        assert_eq!((&p["src"], &p["dst"]), (&Value::from(0), &Value::from(1)));
        assert_eq!(p["context"]["seq"], seq0 + i, "{p}");
        let init = &p["initiator"];
        let target = p["target"].as_array().expect("targets");
        assert_eq!(init["pe"], 0, "{p}");
        assert_eq!(init["transport"], "tcp0", "{p}");
        assert_eq!(target.len(), 1, "one application: {p}");
        assert_eq!(target[0]["pe"], 1, "{p}");
        assert_eq!(target[0]["side"], "target", "{p}");
        assert_eq!(target[0]["len"], 1001 + i, "{p}");
        // Both ends' ticks become wall-clock nanoseconds through their own
        // object's anchor: the same operation lands within a second.
        let (t, i) = (
            target[0]["time_ns"].as_i64().expect("target time"),
            init["time_ns"].as_i64().expect("initiator time"),
        );
        assert!((t - i).abs() < 1_000_000_000, "{p}");
    }
}

#[test]
fn a_known_put_sequence_decodes_at_both_ends_live_and_from_dumps() {
    let dir = TempDir::new("puts");
    let hold = dir.0.join("hold");
    let mut o = options(2, &["trace-puts", &K.to_string()], &dir.0);
    o.env
        .push(("SY_HOLD".into(), hold.to_string_lossy().into_owned()));
    let job = std::thread::spawn(move || launch::launch(&o).expect("launch"));
    // The live rings, while both PEs wait for `hold`.
    let ready = |pe: u32| dir.0.join(format!("hold.{pe}"));
    let t0 = Instant::now();
    while !(ready(0).exists() && ready(1).exists()) {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the PEs never got ready"
        );
        assert!(!job.is_finished(), "the job ended early");
        std::thread::sleep(Duration::from_millis(10));
    }
    let object = std::fs::read_to_string(ready(0)).expect("PE 0's object");
    let name = Path::new(&object)
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    // switchyard-<JOB>-trace-<PE>
    let job_id = name
        .strip_prefix("switchyard-")
        .and_then(|r| r.split_once("-trace-"))
        .map(|(j, _)| j.to_string())
        .expect("a trace object's name");
    let live = joined(&job_id);
    std::fs::write(&hold, b"").expect("release the PEs");
    let out = job.join().expect("the launch thread");
    assert!(out.success(), "job failed: {:?}", out.end);
    assert_the_puts(&live);
    // The dumps they wrote before: the same operations.
    let dumped = joined(dir.0.to_str().unwrap());
    assert_the_puts(&dumped);
    // Their objects went with the job.
    assert!(
        switchyard_shm::trace_object::trace_objects(Some(out.job_id)).is_empty(),
        "trace objects left behind"
    );
    // And the text form of one joined put.
    let text = cli(&["trace", "--join", dir.0.to_str().unwrap()]);
    assert!(
        text.stdout
            .lines()
            .any(|l| l.contains(" put ") && l.contains("1001")),
        "{}",
        text.stdout
    );
}

#[test]
fn a_killed_peer_leaves_a_dump_file() {
    let dir = TempDir::new("kill");
    let out = launch::launch(&options(2, &["fail", "1", "kill"], &dir.0)).expect("launch");
    assert!(
        matches!(out.end, JobEnd::RankFailed { rank: 1, .. }),
        "{:?}",
        out.end
    );
    let dumps = switchyard_shm::trace_object::dumps_in(&dir.0);
    let names: Vec<String> = dumps
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    // The killed PE's rings, kept by the launcher.
    assert!(
        names.iter().any(|n| n == "trace-pe1-at-exit.sytrace"),
        "{names:?}"
    );
    // Every dump decodes; the killed PE's holds its barrier's operations.
    for d in &dumps {
        let out = cli(&["trace", "--json", d.to_str().unwrap()]);
        assert_eq!(out.code, 0, "{}: {}", d.display(), out.stderr);
    }
    let killed = cli(&[
        "trace",
        "--json",
        dir.0.join("trace-pe1-at-exit.sytrace").to_str().unwrap(),
    ]);
    assert!(
        killed.stdout.lines().count() > 0,
        "empty: {}",
        killed.stderr
    );
    // PE 0 saw its peer die or its link go down (unless the launcher
    // stopped it first): then its own dump is there too.
    if let Some(own) = names
        .iter()
        .find(|n| n.starts_with("trace-pe0-") && !n.ends_with("-at-exit.sytrace"))
    {
        assert!(
            own.contains("peer-dead-1") || own.contains("link-down-1"),
            "{own}"
        );
    }
}

#[test]
fn the_library_writes_nothing_to_stderr_without_a_subscriber() {
    // Huge pages asked for where there are none to be had (or too few) is a
    // fallback with a warning: an event, not a line on stderr.
    let mut c = Command::new(PE);
    c.arg("init");
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("SWITCHYARD_")) {
        c.env_remove(k);
    }
    c.env("SWITCHYARD_HEAP_SIZE", "64M")
        .env("SWITCHYARD_HUGE_PAGES", "on");
    let out = c.output().expect("run sy_pe");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "",
        "stderr of the library"
    );
}
