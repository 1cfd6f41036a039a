use switchyard_shm::trace_object::own_pid;

use super::*;

fn meta(pe: u32) -> TraceMeta {
    TraceMeta {
        pe,
        n_pes: 2,
        job_id: 0x7e57,
        pid: own_pid(),
        capacity: 16,
        flags: 0,
        ticks_per_second: 1_000_000_000,
        anchor_ticks: 0,
        anchor_unix_ns: 1_000_000,
    }
}

fn rec(src: u32, dst: u32, seq: u64, len: u32, t: u64, flags: u8) -> TraceRecord {
    TraceRecord {
        seq,
        src,
        dst,
        len,
        class: PathClass::Shm.to_wire(),
        transport: 2,
        op: FrameOp::Put as u8,
        flags,
        timestamp: t,
    }
}

/// A directory with the dumps of a two-PE exchange: PE 0 put 3 and 5 bytes
/// to PE 1 (context ids 0:7, 0:8), PE 1 applied both, the second a replay.
fn dumps(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sy-cli-trace-{tag}-{}", own_pid()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let init = TraceObject::in_memory(&meta(0)).unwrap();
    {
        let mut w = init.writer(INITIATOR).unwrap();
        w.record(&rec(0, 1, 7, 3, 100, 0));
        w.record(&rec(0, 1, 8, 5, 300, TraceRecord::DOWNGRADED));
    }
    init.dump(&dir.join("trace-pe0.sytrace"), 16).unwrap();
    let target = TraceObject::in_memory(&meta(1)).unwrap();
    {
        let mut w = target.writer(TARGET).unwrap();
        let mut a = rec(0, 1, 7, 3, 250, 0);
        a.class = TraceRecord::NO_CLASS;
        w.record(&a);
        let mut b = rec(0, 1, 8, 5, 420, TraceRecord::RETRIED);
        b.class = TraceRecord::NO_CLASS;
        w.record(&b);
    }
    target.dump(&dir.join("trace-pe1.sytrace"), 16).unwrap();
    dir
}

fn run_args(a: &[&str]) -> Output {
    crate::run(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>())
}

#[test]
fn records_decode_to_text_and_json_lines() {
    let dir = dumps("plain");
    let out = run_args(&["trace", dir.to_str().unwrap()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 5, "{}", out.stdout);
    assert!(
        lines[1].contains("pe0   init   put      0->1   SHM    tcp0"),
        "{}",
        lines[1]
    );
    assert!(
        lines[2].contains("target put") && lines[2].contains(" -  "),
        "{}",
        lines[2]
    );
    assert!(lines[3].ends_with("downgraded"), "{}", lines[3]);
    assert!(lines[4].ends_with("retried"), "{}", lines[4]);
    let out = run_args(&["trace", "--json", dir.to_str().unwrap()]);
    let v: Vec<serde_json::Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(v.len(), 4);
    assert_eq!(v[0]["time_ns"], 1_000_100);
    assert_eq!(v[0]["op"], "put");
    assert_eq!(v[0]["peer"], 1);
    assert_eq!(v[1]["side"], "target");
    assert_eq!(v[1]["peer"], 0);
    assert_eq!(v[1]["class"], "-");
    assert_eq!(v[1]["context"], json!({"pe": 0, "seq": 7}));
    assert_eq!(v[3]["flags"], json!(["retried"]));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn join_pairs_both_ends_by_context_id() {
    let dir = dumps("join");
    let out = run_args(&["trace", "--join", "--json", dir.to_str().unwrap()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v: Vec<serde_json::Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(v.len(), 2, "{}", out.stdout);
    for (op, (seq, len)) in v.iter().zip([(7, 3), (8, 5)]) {
        assert_eq!(op["context"], json!({"pe": 0, "seq": seq}));
        assert_eq!(op["len"], len);
        assert_eq!(op["initiator"]["pe"], 0);
        assert_eq!(op["target"][0]["pe"], 1);
    }
    let text = run_args(&["trace", "--join", dir.to_str().unwrap()]);
    let lines: Vec<&str> = text.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", text.stdout);
    assert!(
        lines[1].starts_with("0:7 ") && lines[1].contains("+150"),
        "{}",
        lines[1]
    );
    assert!(lines[2].ends_with("downgraded,retried"), "{}", lines[2]);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn bad_sources_are_errors() {
    let out = run_args(&["trace", "not-a-job-zz"]);
    assert_eq!(out.code, 1);
    assert!(out.stderr.contains("not a job id"), "{}", out.stderr);
    let out = run_args(&["trace", "ffffffffffff0001"]);
    assert_eq!(out.code, 1);
    assert!(out.stderr.contains("is it running?"), "{}", out.stderr);
    let out = run_args(&["trace", "/proc/self/status"]);
    assert!(
        out.stderr.contains("not a switchyard route trace"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_failover_record_says_so() {
    let dir = std::env::temp_dir().join(format!("sy-cli-trace-failover-{}", own_pid()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let init = TraceObject::in_memory(&meta(0)).unwrap();
    {
        let mut w = init.writer(INITIATOR).unwrap();
        // A verbs replay over TCP, as the library records it.
        w.record(&rec(
            0,
            1,
            9,
            8,
            100,
            TraceRecord::FAILOVER | TraceRecord::RETRIED,
        ));
    }
    init.dump(&dir.join("trace-pe0.sytrace"), 16).unwrap();
    let out = run_args(&["trace", dir.to_str().unwrap()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let last = out.stdout.lines().last().unwrap_or_default();
    assert!(last.ends_with("retried,failover"), "{}", out.stdout);
    let out = run_args(&["trace", "--json", dir.to_str().unwrap()]);
    assert!(
        out.stdout.contains(r#""flags":["retried","failover"]"#),
        "{}",
        out.stdout
    );
    let _ = std::fs::remove_dir_all(dir);
}
