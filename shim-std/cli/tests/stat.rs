//! `switchyard stat` and `run --metrics-addr` end to end, on a real 2-PE
//! job (the `stats_hold` example of the `switchyard` crate) that holds
//! still between its phases: the counts `stat --json` shows grow by exactly
//! what the job did (its operations and its channel's messages), the
//! Prometheus text parses, and `/metrics` is served
//! while the job runs and gone after. Every run is bounded by `--timeout`
//! and by a test-side limit that kills the launcher.

use std::{
    collections::BTreeMap,
    io::{BufRead, BufReader, Read, Write},
    net::TcpStream,
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::{OnceLock, mpsc},
    thread,
    time::{Duration, Instant},
};

use switchyard_tests::skip::cargo_build;

const BIN: &str = env!("CARGO_BIN_EXE_switchyard");
/// Test-side limit on any one run: a hang guard, not a performance assertion.
const LIMIT: Duration = Duration::from_secs(90);

fn example() -> &'static str {
    static EX: OnceLock<String> = OnceLock::new();
    EX.get_or_init(|| {
        let bin = cargo_build(&["-p", "switchyard", "--example", "stats_hold"]);
        let ex = bin.join("examples").join("stats_hold");
        assert!(ex.is_file(), "{} was not built", ex.display());
        ex.to_string_lossy().into_owned()
    })
}

/// A running `stats_hold` job and the files that release its phases.
struct Job {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
    go: PathBuf,
    end: PathBuf,
    start: Instant,
}

impl Job {
    fn start(tag: &str, extra: &[&str], k: usize, g: usize, c: usize) -> Job {
        let dir = std::env::temp_dir().join(format!("sy-stat-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (go, end) = (dir.join("go"), dir.join("end"));
        let mut child = Command::new(BIN)
            .arg("run")
            .args(["-n", "2", "--timeout", "80"])
            .args(extra)
            .args([
                "--",
                example(),
                &k.to_string(),
                &g.to_string(),
                &c.to_string(),
            ])
            .env("SY_GO", &go)
            .env("SY_END", &end)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start switchyard run");
        let out = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Job {
            child,
            lines,
            seen: Vec::new(),
            go,
            end,
            start: Instant::now(),
        }
    }

    /// Waits, bounded, until `n` stdout lines contain `what`.
    fn wait_for(&mut self, what: &str, n: usize) {
        while self.seen.iter().filter(|l| l.contains(what)).count() < n {
            let left = (self.start + LIMIT).saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(_) => {
                    let _ = self.child.kill();
                    panic!("no {n} lines with {what:?}; got {:?}", self.seen);
                }
            }
        }
    }

    /// The job id the PEs printed.
    fn id(&self) -> String {
        let l = self
            .seen
            .iter()
            .find(|l| l.contains("phase1 job "))
            .unwrap();
        l.rsplit(' ').next().unwrap().to_string()
    }

    /// Releases the last phase and waits, bounded, for the launcher's exit.
    fn finish(mut self) {
        std::fs::write(&self.end, b"").unwrap();
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if self.start.elapsed() > LIMIT {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("switchyard run still running after {LIMIT:?}");
            }
            thread::sleep(Duration::from_millis(10));
        };
        assert!(status.success(), "{status:?}; stdout {:?}", self.seen);
    }
}

fn stat(args: &[&str]) -> (i32, String) {
    let out = Command::new(BIN).arg("stat").args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap() + &stderr,
    )
}

/// `(pe, peer, transport) -> (ops, bytes)` of a `stat --json` snapshot of
/// `job`.
fn counts(job: &str) -> BTreeMap<(u64, u64, String), (u64, u64)> {
    let (code, out) = stat(&[job, "--json"]);
    assert_eq!(code, 0, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let jobs = v["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 1, "{out}");
    assert_eq!(jobs[0]["job"], job);
    let pes = jobs[0]["pes"].as_array().unwrap();
    assert_eq!(pes.len(), 2, "both PEs: {out}");
    let mut m = BTreeMap::new();
    for pe in pes {
        assert_eq!(pe["alive"], true);
        let rank = pe["header"]["rank"].as_u64().unwrap();
        for p in pe["peers"].as_array().unwrap() {
            m.insert(
                (
                    rank,
                    p["peer"].as_u64().unwrap(),
                    p["transport"].as_str().unwrap().to_string(),
                ),
                (
                    p["counters"]["ops"].as_u64().unwrap(),
                    p["counters"]["bytes"].as_u64().unwrap(),
                ),
            );
        }
    }
    m
}

/// `(pe, role) -> [sent, received, full, lost]` of channel 0's ends in a
/// `stat --json` snapshot of `job` (every end shown is channel 0's).
fn channels(job: &str) -> BTreeMap<(u64, String), [u64; 4]> {
    let (code, out) = stat(&[job, "--json"]);
    assert_eq!(code, 0, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let mut m = BTreeMap::new();
    for pe in v["jobs"][0]["pes"].as_array().unwrap() {
        let rank = pe["header"]["rank"].as_u64().unwrap();
        for c in pe["channels"].as_array().unwrap() {
            assert_eq!(c["channel"], 0, "{out}");
            assert_eq!((&c["kind"], &c["direct"]), (&"spsc".into(), &true.into()));
            assert_eq!(c["peer"], 1 - rank, "{out}");
            let n = |k: &str| c[k].as_u64().unwrap();
            m.insert(
                (rank, c["role"].as_str().unwrap().to_string()),
                [n("sent"), n("received"), n("full"), n("lost")],
            );
        }
    }
    m
}

#[test]
fn stat_json_shows_the_counts_the_job_made_exactly() {
    let (k, g, c) = (1000u64, 10u64, 300u64);
    let mut job = Job::start("json", &[], k as usize, g as usize, c as usize);
    job.wait_for("phase1 job ", 2);
    let id = job.id();
    let before = counts(&id);
    // Published at the end of the barrier before `phase1`: each PE's
    // barriers and PE 0's shm route to PE 1 are current while the PEs sit
    // outside the library (no progress step has run since).
    let (code, out) = stat(&[&id, "--json"]);
    assert_eq!(code, 0, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    for pe in v["jobs"][0]["pes"].as_array().unwrap() {
        assert!(pe["pe"]["barriers"].as_u64().unwrap() >= 1, "{out}");
        // The whole PE block, by name: every `Stats` counter it mirrors
        // (the QP sets' `verbs_set_ops` and `verbs_sets_refused` too).
        let block = pe["pe"].as_object().unwrap();
        assert_eq!(block.len(), switchyard::statseg::PE_COUNTERS, "{out}");
        for w in switchyard::statseg::PeWord::ALL {
            assert!(block[w.name()].is_u64(), "{} in {out}", w.name());
        }
        if pe["header"]["rank"] == 0 {
            let shm1 = pe["peers"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["peer"] == 1 && p["transport"] == "shm")
                .expect("PE 0's (peer 1, shm) row");
            assert_eq!(shm1["healthy"], true, "{out}");
            assert_eq!(shm1["route"], true, "{out}");
        }
    }
    assert_eq!(
        channels(&id),
        BTreeMap::from([
            ((0, "producer".into()), [0, 0, 0, 0]),
            ((1, "consumer".into()), [0, 0, 0, 0])
        ])
    );
    std::fs::write(&job.go, b"").unwrap();
    job.wait_for("phase2", 2);
    let after = counts(&id);
    // The channel's ends: exactly what they did (the producer may have
    // found the 64 slots full).
    let ch = channels(&id);
    let full = ch[&(0, "producer".into())][2];
    assert_eq!(
        ch,
        BTreeMap::from([
            ((0, "producer".into()), [c, 0, full, 0]),
            ((1, "consumer".into()), [0, c, 0, 0])
        ])
    );
    let mut grew = BTreeMap::new();
    for (key, (ops, bytes)) in &after {
        let (o0, b0) = before.get(key).copied().unwrap_or((0, 0));
        if (*ops, *bytes) != (o0, b0) {
            grew.insert(key.clone(), (ops - o0, bytes - b0));
        }
    }
    let want = BTreeMap::from([((0, 1, "shm".to_string()), (k + g, 8 * k + 16 * g))]);
    assert_eq!(grew, want, "before {before:?} after {after:?}");
    // The table and the Prometheus text of the same job.
    let (code, screen) = stat(&[&id, "--once"]);
    assert_eq!(code, 0, "{screen}");
    assert!(
        screen.contains(&format!("job {id}: 2 of 2 PEs")),
        "{screen}"
    );
    let (code, text) = stat(&[&id, "--prometheus"]);
    assert_eq!(code, 0, "{text}");
    let samples = check_exposition(&text);
    let key = format!(
        "switchyard_peer_ops_total{{job_id=\"{id}\",pe=\"0\",peer=\"1\",transport=\"shm\"}}"
    );
    assert_eq!(
        samples.get(&key).copied(),
        Some((after[&(0, 1, "shm".into())].0) as f64)
    );
    for (pe, role, peer, name) in [(0, "producer", 1, "sent"), (1, "consumer", 0, "received")] {
        let key = format!(
            "switchyard_channel_{name}_total{{job_id=\"{id}\",pe=\"{pe}\",channel=\"0\",kind=\"spsc\",role=\"{role}\",peer=\"{peer}\"}}"
        );
        assert_eq!(
            samples.get(&key).copied(),
            Some(c as f64),
            "{key} in {text}"
        );
    }
    assert!(screen.contains("producer"), "the channel table: {screen}");
    job.finish();
    // Gone with the job: its objects, and so the job.
    let (code, out) = stat(&[&id, "--once"]);
    assert_eq!(code, 1, "{out}");
    let left: Vec<_> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(&id))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// `GET /metrics` from `addr`: `Some((status line, body))`, `None` when
/// nothing listens.
fn get_metrics(addr: &str) -> Option<(String, String)> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut resp = String::new();
    s.read_to_string(&mut resp).ok()?;
    let (head, body) = resp.split_once("\r\n\r\n")?;
    Some((head.lines().next()?.to_string(), body.to_string()))
}

#[test]
fn metrics_are_served_while_the_job_runs_and_gone_after() {
    // A free port: bound, then let go for the launcher.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let mut job = Job::start("metrics", &["--metrics-addr", &addr], 100, 1, 5);
    job.wait_for("phase1 job ", 2);
    std::fs::write(&job.go, b"").unwrap();
    job.wait_for("phase2", 2);
    let id = job.id();
    let (status, body) = get_metrics(&addr).expect("/metrics served");
    assert!(status.contains(" 200 "), "{status}");
    let samples = check_exposition(&body);
    for pe in ["0", "1"] {
        let up = format!("switchyard_up{{job_id=\"{id}\",pe=\"{pe}\"}}");
        assert_eq!(samples.get(&up).copied(), Some(1.0), "{body}");
    }
    let ops = format!(
        "switchyard_peer_ops_total{{job_id=\"{id}\",pe=\"0\",peer=\"1\",transport=\"shm\"}}"
    );
    assert!(samples.get(&ops).copied().unwrap_or(0.0) >= 101.0, "{body}");
    let sent = format!(
        "switchyard_channel_sent_total{{job_id=\"{id}\",pe=\"0\",channel=\"0\",kind=\"spsc\",role=\"producer\",peer=\"1\"}}"
    );
    assert_eq!(samples.get(&sent).copied(), Some(5.0), "{body}");
    job.finish();
    assert!(
        get_metrics(&addr).is_none(),
        "/metrics still served after the job"
    );
}

/// Checks `text` against the Prometheus text exposition format 0.0.4 (the
/// parts the exporter uses): `# HELP` and `# TYPE` once per family, before
/// its samples, the type one of the known ones; each sample `name{labels}
/// value` with a valid name, well-formed and escaped labels, a float value,
/// and the family's name (plus `_bucket`, `_sum`, `_count` for a
/// histogram); a histogram's buckets cumulative, with `le="+Inf"` equal to
/// its `_count`. Returns every sample, `name{labels}` to value.
fn check_exposition(text: &str) -> BTreeMap<String, f64> {
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    let mut helps = std::collections::BTreeSet::new();
    let mut samples = BTreeMap::new();
    let mut last_bucket: BTreeMap<String, f64> = BTreeMap::new();
    let valid_name = |n: &str| {
        !n.is_empty()
            && !n.starts_with(|c: char| c.is_ascii_digit())
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    };
    assert!(text.ends_with('\n'), "ends with a newline");
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, _) = rest.split_once(' ').unwrap_or((rest, ""));
            assert!(valid_name(name), "{line}");
            assert!(helps.insert(name.to_string()), "HELP twice: {line}");
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect(line);
            assert!(valid_name(name), "{line}");
            assert!(
                ["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind),
                "{line}"
            );
            assert!(
                types.insert(name.to_string(), kind.to_string()).is_none(),
                "TYPE twice: {line}"
            );
            continue;
        }
        assert!(!line.starts_with('#') && !line.is_empty(), "{line:?}");
        let (series, value) = line.rsplit_once(' ').expect(line);
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("bad value: {line}")),
        };
        let (name, labels) = match series.split_once('{') {
            Some((n, l)) => (n, l.strip_suffix('}').expect(line)),
            None => (series, ""),
        };
        assert!(valid_name(name), "{line}");
        let mut label_map = BTreeMap::new();
        let mut rest = labels;
        while !rest.is_empty() {
            let (k, after) = rest.split_once("=\"").expect(line);
            assert!(valid_name(k), "{line}");
            // The value runs to the first quote not escaped.
            let mut end = None;
            let mut esc = false;
            for (i, c) in after.char_indices() {
                match (esc, c) {
                    (true, '\\' | '"' | 'n') => esc = false,
                    (true, _) => panic!("bad escape: {line}"),
                    (false, '\\') => esc = true,
                    (false, '"') => {
                        end = Some(i);
                        break;
                    }
                    _ => {}
                }
            }
            let end = end.expect(line);
            label_map.insert(k.to_string(), after[..end].to_string());
            rest = after[end + 1..]
                .strip_prefix(',')
                .unwrap_or(&after[end + 1..]);
        }
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| {
                name.strip_suffix(s)
                    .filter(|f| types.get(*f).is_some_and(|t| t == "histogram"))
            })
            .unwrap_or(name);
        assert!(types.contains_key(family), "sample before its TYPE: {line}");
        if types[family] == "histogram" {
            let mut key = label_map.clone();
            key.remove("le");
            let key = format!("{family}{key:?}");
            if name.ends_with("_bucket") {
                assert!(label_map.contains_key("le"), "{line}");
                let prev = last_bucket.insert(key, value).unwrap_or(0.0);
                assert!(value >= prev, "buckets not cumulative: {line}");
            } else if name.ends_with("_count") {
                assert_eq!(
                    last_bucket.get(&key).copied(),
                    Some(value),
                    "+Inf != count: {line}"
                );
            }
        }
        assert!(
            samples.insert(series.to_string(), value).is_none(),
            "twice: {line}"
        );
    }
    samples
}
