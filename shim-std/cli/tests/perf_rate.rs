//! `switchyard perf put-rate|get-rate|atomic-rate` end to end, over shared
//! memory and over TCP: two real PEs, small counts, JSON out (and
//! `broadcast-bw`, three PEs, at the end). The workers
//! check after each run that the target saw every operation (the last put's
//! number on PE 1, the gets' bytes on PE 0, every fetch-add's old value and
//! the counter's total), and the baselines check their own data; either
//! failing makes the command exit 1, so a passing run is a correct one.

use std::{
    io::Read,
    process::{Command, Stdio},
    thread,
    time::{Duration, Instant},
};

const BIN: &str = env!("CARGO_BIN_EXE_switchyard");
/// Test-side limit on any one run: a hang guard, not a performance assertion.
const LIMIT: Duration = Duration::from_secs(180);

/// Runs `switchyard perf ARGS --json`, bounded by [`LIMIT`]; the exit code,
/// stdout and stderr.
fn perf(args: &[&str]) -> (Option<i32>, String, String) {
    let mut child = Command::new(BIN)
        .arg("perf")
        .args(args)
        .arg("--json")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start switchyard perf");
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
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("switchyard perf {args:?} still running after {LIMIT:?}");
        }
        thread::sleep(Duration::from_millis(20));
    };
    (status.code(), out.join().unwrap(), err.join().unwrap())
}

/// Runs rate test `test` at 300 operations (30 warm-up) with `extra`
/// options, which must succeed; its JSON, parsed and as printed.
fn perf_ok(test: &str, extra: &[&str]) -> (serde_json::Value, String) {
    let mut args = vec![test, "--iters", "300", "--warmup", "30"];
    args.extend_from_slice(extra);
    let (code, out, err) = perf(&args);
    assert_eq!(
        code,
        Some(0),
        "perf {args:?}\nstdout:\n{out}\nstderr:\n{err}"
    );
    (serde_json::from_str(&out).expect("JSON"), out)
}

/// Runs rate test `test` with `extra` options and checks the JSON: the run's
/// header, and in each result row the test's name, at least `min_ops`
/// operations at a positive rate, the named baseline at the same size and
/// count, and the ratio of the two rates.
fn rate_run(test: &str, extra: &[&str], baseline: &str, sizes: &[u64], min_ops: u64) {
    let (v, out) = perf_ok(test, extra);
    assert_eq!(v["pes"], 2, "{out}");
    let transport = extra
        .windows(2)
        .find(|w| w[0] == "--transport")
        .map_or("auto", |w| w[1]);
    assert_eq!(v["transport"], transport, "{out}");
    assert_eq!(v["tcp_path"].is_string(), transport == "tcp", "{out}");
    let rows = v["results"].as_array().expect("results");
    let got: Vec<u64> = rows
        .iter()
        .map(|r| r["result"]["size"].as_u64().unwrap())
        .collect();
    assert_eq!(got, sizes, "{out}");
    for row in rows {
        let (m, b) = (&row["result"], &row["baseline"]);
        assert_eq!(m["test"], test, "{out}");
        assert!(m["iters"].as_u64().unwrap() >= min_ops, "{out}");
        assert!(
            m["bandwidth"]["msgs_per_s"].as_f64().unwrap() > 0.0,
            "{out}"
        );
        assert!(m["latency"].is_null(), "{out}");
        assert_eq!(b["test"], baseline, "{out}");
        assert_eq!(b["size"], m["size"], "{out}");
        assert_eq!(b["iters"], m["iters"], "{out}");
        // The ratio is the two message rates' (the baseline's is the mean
        // of its runs before and after the test).
        let (rate, base) = (
            m["bandwidth"]["msgs_per_s"].as_f64().unwrap(),
            b["bandwidth"]["msgs_per_s"].as_f64().unwrap(),
        );
        assert!(base > 0.0 && b["latency"].is_null(), "{out}");
        let ratio = row["ratio"].as_f64().unwrap();
        assert!(ratio > 0.0, "{out}");
        assert!((ratio - rate / base).abs() <= 1e-9 * ratio, "{out}");
    }
}

#[test]
fn put_rate_over_shm_and_tcp() {
    // A window that does not divide --iters: whole rounds, 301 operations.
    rate_run(
        "put-rate",
        &["--transport", "shm", "--window", "7"],
        "raw-store",
        &[8, 64],
        301,
    );
    rate_run("put-rate", &["--sizes", "1,12"], "raw-store", &[1, 12], 300);
    rate_run(
        "put-rate",
        &["--transport", "tcp"],
        "tcp-records",
        &[64],
        300,
    );
}

#[test]
fn get_rate_over_shm_and_tcp() {
    rate_run(
        "get-rate",
        &["--transport", "shm"],
        "raw-load",
        &[8, 64],
        300,
    );
    rate_run(
        "get-rate",
        &["--transport", "tcp", "--window", "5", "--sizes", "8,64"],
        "tcp-rr",
        &[8, 64],
        300,
    );
}

#[test]
fn atomic_rate_over_shm_and_tcp() {
    rate_run(
        "atomic-rate",
        &["--transport", "shm"],
        "raw-atomic",
        &[8],
        300,
    );
    rate_run(
        "atomic-rate",
        &["--transport", "tcp", "--size", "8"],
        "tcp-rr",
        &[8],
        300,
    );
}

/// `--threads 3`: per size a one-thread row and a three-thread row, each
/// stream on its own context; the workers check every thread's lane at the
/// target (the last put's number, every fetch-add, the gets' bytes), so a
/// passing run is a correct one. The three-thread row carries the ratio of
/// its aggregate rate to the one-thread row's.
#[test]
fn rate_tests_with_threads() {
    for (test, extra) in [
        ("put-rate", &["--transport", "shm", "--sizes", "1,64"][..]),
        ("get-rate", &["--transport", "shm", "--size", "8"]),
        ("atomic-rate", &["--transport", "shm"]),
        ("put-rate", &["--transport", "tcp", "--size", "8"]),
    ] {
        let mut args = vec!["--threads", "3"];
        args.extend_from_slice(extra);
        let (v, out) = perf_ok(test, &args);
        assert_eq!(
            (v["threads"].as_u64(), v["pinned"].as_bool()),
            (Some(3), Some(false)),
            "{out}"
        );
        let rows = v["results"].as_array().expect("results");
        assert_eq!(rows.len() % 2, 0, "{out}");
        for pair in rows.chunks(2) {
            let (one, all) = (&pair[0]["result"], &pair[1]["result"]);
            assert_eq!(
                (one["test"].as_str(), all["test"].as_str()),
                (Some(test), Some(test))
            );
            assert_eq!(one["size"], all["size"], "{out}");
            assert_eq!(
                (one["threads"].as_u64(), all["threads"].as_u64()),
                (Some(1), Some(3))
            );
            let ops = one["iters"].as_u64().unwrap();
            assert!(ops >= 300, "{out}");
            assert_eq!(all["iters"].as_u64(), Some(3 * ops), "{out}");
            let rate = |m: &serde_json::Value| m["bandwidth"]["msgs_per_s"].as_f64().unwrap();
            let ratio = all["thread_ratio"].as_f64().unwrap();
            assert!(
                (ratio - rate(all) / rate(one)).abs() <= 1e-9 * ratio,
                "{out}"
            );
            assert!(one["thread_ratio"].is_null(), "{out}");
        }
    }
}

/// Bad input is a usage error (exit 2) that says why, never a panic, and
/// nothing runs.
#[test]
fn rate_tests_refuse_bad_input() {
    for (args, says) in [
        (&["put-rate", "--transport", "verbs"][..], "no rate tests"),
        (&["get-rate", "--size", "65"], "1 to 64 bytes"),
        (&["put-rate", "--sizes", "8..4K"], "1 to 64 bytes"),
        (&["atomic-rate", "--size", "16"], "one 8-byte word"),
        (&["put-rate", "--size", "0"], "expected a size"),
        (&["atomic-rate", "--iters", "-1"], "expected a whole number"),
        (&["get-rate", "--iters", "100000001"], "at most 100000000"),
        (&["put-lat", "--threads", "2"], "only the rate tests"),
        (&["--threads", "2"], "only the rate tests"),
        (&["put-rate", "--threads", "0"], "--threads <N>"),
        (&["put-rate", "--threads", "33"], "--threads <N>"),
    ] {
        let (code, out, err) = perf(args);
        assert_eq!(code, Some(2), "{args:?}: {out}{err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(
            !err.contains("panicked") && out.is_empty(),
            "{args:?}: {out}{err}"
        );
    }
}

/// `perf broadcast-bw`: three PEs (the publisher and two subscribers, whose
/// workers check every stamp, and under the drop policy that what they
/// received and lost make what was sent), rows `channel-bw` against the raw
/// ring, then the two broadcast rows against that `channel-bw`.
#[test]
fn broadcast_bw_beside_channel_bw() {
    let (v, out) = perf_ok("broadcast-bw", &["--subscribers", "2"]);
    assert_eq!(v["pes"], 3, "the publisher and 2 subscribers: {out}");
    let rows = v["results"].as_array().expect("results");
    let names: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| {
            (
                r["result"]["test"].as_str().unwrap(),
                r["baseline"]["test"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            ("channel-bw", "raw-ring"),
            ("broadcast-bw", "channel-bw"),
            ("broadcast-bw-drop", "channel-bw"),
        ],
        "{out}"
    );
    for row in rows {
        let m = &row["result"];
        assert_eq!(
            (m["size"].as_u64(), m["iters"].as_u64()),
            (Some(64), Some(300)),
            "{out}"
        );
        let rate = m["bandwidth"]["msgs_per_s"].as_f64().unwrap();
        let base = row["baseline"]["bandwidth"]["msgs_per_s"].as_f64().unwrap();
        assert!(rate > 0.0 && base > 0.0, "{out}");
        let ratio = row["ratio"].as_f64().unwrap();
        assert!((ratio - rate / base).abs() <= 1e-9 * ratio, "{out}");
    }
    let (code, _, err) = perf(&["channel-bw", "--subscribers", "2"]);
    assert_eq!(code, Some(2), "{err}");
}
