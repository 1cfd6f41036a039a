use super::{
    args::parse,
    report::{msgs, ratio},
    *,
};

fn a(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn options() {
    let o = parse(&a(&["put-bw", "--sizes", "8..64", "-n", "3"])).unwrap();
    assert_eq!(o.test, Some(Test::PutBw));
    assert_eq!(o.sizes, Some(vec![8, 16, 32, 64]));
    assert_eq!(o.n, 3);
    assert!(
        parse(&a(&["frob"]))
            .unwrap_err()
            .contains("invalid value 'frob' for '[TEST]'")
    );
    assert!(parse(&a(&["-n", "1"])).is_err());
    assert!(
        parse(&a(&["--size", "abc"]))
            .unwrap_err()
            .contains("invalid value 'abc' for '--size <S>'")
    );
    assert!(parse(&a(&["--sizes", "64..8"])).is_err());
    assert_eq!(
        parse(&a(&["--sizes", "64,4K,1M"])).unwrap().sizes,
        Some(vec![64, 4096, 1 << 20])
    );
    assert!(parse(&a(&["--sizes", "64,,1M"])).is_err());
    assert!(parse(&a(&["--transport", "udp"])).is_err());
    assert!(
        parse(&a(&["--iters"]))
            .unwrap_err()
            .contains("a value is required for '--iters <N>'")
    );
    let suite = steps(&parse(&[]).unwrap());
    assert_eq!(suite.len(), 5);
    // The suite's put-rate: one size, a short run.
    assert_eq!(suite[4].test, Test::PutRate);
    assert_eq!(
        (suite[4].sizes.as_slice(), suite[4].iters),
        ([8].as_slice(), 500_000)
    );
    // The last of --size and --sizes counts.
    assert_eq!(
        parse(&a(&["--sizes", "8..16", "--size", "4K"]))
            .unwrap()
            .sizes,
        Some(vec![4096])
    );
    assert_eq!(
        parse(&a(&["--size", "4K", "--sizes", "8..16"]))
            .unwrap()
            .sizes,
        Some(vec![8, 16])
    );
    assert_eq!(parse(&a(&["--iters", "0"])).unwrap().iters, Some(1));
    assert_eq!(parse(&a(&["--window", "0"])).unwrap().window, 1);
}

#[test]
fn iterations_are_bounded() {
    let max = MAX_ITERS.to_string();
    assert_eq!(
        parse(&a(&["--iters", &max])).unwrap().iters,
        Some(MAX_ITERS)
    );
    for flag in ["--iters", "--warmup"] {
        for v in [
            "18446744073709551615",
            "4000000000",
            "100000001",
            "-1",
            "1e9",
        ] {
            let e = parse(&a(&[flag, v])).unwrap_err();
            assert!(
                e.contains(&format!("invalid value '{v}' for '{flag} <N>'")),
                "{e}"
            );
        }
    }
    let e = parse(&a(&[
        "--transport",
        "verbs",
        "--qd-sweep",
        "--iters",
        "2000000",
    ]))
    .unwrap_err();
    assert!(
        e.contains("--iters 2000000: at most 1562500 with --qd-sweep"),
        "{e}"
    );
    let ok = MAX_QD_SWEEP_ITERS.to_string();
    assert!(parse(&a(&["--transport", "verbs", "--qd-sweep", "--iters", &ok])).is_ok());
}

#[test]
fn rate_options() {
    let o = parse(&a(&["put-rate"])).unwrap();
    let s = steps(&o);
    assert_eq!(s.len(), 1);
    assert_eq!(
        (s[0].test, s[0].sizes.as_slice()),
        (Test::PutRate, [8, 64].as_slice())
    );
    assert_eq!(
        (s[0].iters, s[0].warmup, s[0].window),
        (2_000_000, 200_000, 64)
    );
    let s = steps(&parse(&a(&["get-rate", "--transport", "tcp", "--window", "16"])).unwrap());
    assert_eq!(
        (s[0].sizes.as_slice(), s[0].iters, s[0].window),
        ([64].as_slice(), 50_000, 16)
    );
    let s = steps(&parse(&a(&["put-rate", "--sim", "c1"])).unwrap());
    assert_eq!(s[0].sizes, vec![64]);
    // atomic-rate: one 8-byte word, blocking fetch-adds (window 1)
    // whatever --window says; another size is refused.
    let s = steps(&parse(&a(&["atomic-rate", "--size", "8", "--window", "32"])).unwrap());
    assert_eq!((s[0].sizes.as_slice(), s[0].window), ([8].as_slice(), 1));
    for bad in [&["--size", "4"][..], &["--sizes", "8..64"]] {
        let mut args = vec!["atomic-rate"];
        args.extend_from_slice(bad);
        let e = parse(&a(&args)).unwrap_err();
        assert!(e.contains("one 8-byte word"), "{e}");
    }
    // The rate tests' sizes: 1 to 64 bytes.
    let s = steps(&parse(&a(&["get-rate", "--sizes", "1..64"])).unwrap());
    assert_eq!(s[0].sizes, vec![1, 2, 4, 8, 16, 32, 64]);
    for (t, bad) in [
        ("put-rate", "65"),
        ("put-rate", "8,4K"),
        ("get-rate", "128"),
        ("get-rate", "0"),
    ] {
        let e = parse(&a(&[t, "--sizes", bad])).unwrap_err();
        assert!(
            e.contains(if bad == "0" {
                "expected A..B"
            } else {
                "1 to 64 bytes"
            }),
            "{t} {bad}: {e}"
        );
    }
    let e = parse(&a(&["put-rate", "--size", "1K", "--transport", "tcp"])).unwrap_err();
    assert!(e.contains("put-rate: size 1024 is out of range"), "{e}");
    // The other tests keep their ranges.
    assert!(parse(&a(&["put-bw", "--size", "1K"])).is_ok());
    let s = steps(&parse(&a(&["atomic-rate", "--transport", "tcp"])).unwrap());
    assert_eq!((s[0].iters, s[0].window), (20_000, 1));
    assert_eq!(
        s[0].rounds(),
        Rounds {
            window: 1,
            rounds: 20_000,
            warm: 2_000
        }
    );
    for t in ["put-rate", "get-rate", "atomic-rate"] {
        let e = parse(&a(&[t, "--transport", "verbs"])).unwrap_err();
        assert!(e.contains("no rate tests"), "{e}");
    }
    // Whole rounds: at least --iters measured operations.
    let r = Rounds::new(100, 10, 64);
    assert_eq!((r.rounds, r.warm, r.ops(), r.total_ops()), (2, 1, 128, 192));
    assert_eq!(
        Rounds::new(0, 0, 0),
        Rounds {
            window: 1,
            rounds: 1,
            warm: 0
        }
    );
}

#[test]
fn rate_rows_compare_message_rates() {
    let m = Measurement::throughput("put-rate", 8, 1000, 1e-3);
    let b = Measurement::throughput("raw-store", 8, 4000, 1e-3);
    assert_eq!(m.bandwidth.map(|w| w.msgs_per_s), Some(1e6));
    assert!((ratio(&m, Some(&b)).unwrap() - 0.25).abs() < 1e-9);
    let t = table(&[(m, Some(b))], "h");
    assert!(
        t.contains("1.00M") && t.contains("4.00M") && t.contains("0.25x"),
        "{t}"
    );
    assert_eq!(
        (msgs(812_345.0), msgs(950.0)),
        ("812.3K".into(), "950".into())
    );
}

/// The rate baselines at tiny sizes and counts: each checks its own
/// data (the second process its total or last value, the timing side
/// every fetch-add and the loads) and fails otherwise.
#[test]
fn rate_baselines_at_tiny_sizes() {
    use baseline::rate::{self, Rr};
    let ncpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cpus = (0, 1 % ncpus);
    let path = baseline::TcpPath::loopback();
    let check = |m: Measurement, name: &str, size: u64, r: Rounds| {
        assert_eq!((m.test.as_str(), m.size, m.iters), (name, size, r.ops()));
        assert!(m.latency.is_none());
        assert!(
            m.bandwidth
                .is_some_and(|b| b.msgs_per_s > 0.0 && b.gbps > 0.0),
            "{m:?}"
        );
    };
    for (size, r) in [
        (1, Rounds::new(5, 0, 1)),
        (8, Rounds::new(40, 8, 4)),
        (64, Rounds::new(9, 3, 7)),
    ] {
        check(
            rate::raw_store(size, r, cpus).unwrap(),
            "raw-store",
            size as u64,
            r,
        );
        check(
            rate::raw_load(size, r, cpus).unwrap(),
            "raw-load",
            size as u64,
            r,
        );
        check(
            rate::tcp_records(size, r, &path, cpus).unwrap(),
            "tcp-records",
            size as u64,
            r,
        );
        check(
            rate::tcp_rr(Rr::Get(size), r, &path, cpus).unwrap(),
            "tcp-rr",
            size as u64,
            r,
        );
    }
    // A block of 12 bytes: a word and a half.
    let r = Rounds::new(3, 1, 2);
    check(rate::raw_load(12, r, cpus).unwrap(), "raw-load", 12, r);
    for r in [Rounds::new(30, 3, 1), Rounds::new(12, 0, 5)] {
        check(rate::raw_atomic(r, cpus).unwrap(), "raw-atomic", 8, r);
        check(
            rate::tcp_rr(Rr::FetchAdd, r, &path, cpus).unwrap(),
            "tcp-rr",
            8,
            r,
        );
    }
    assert!(rate::pattern(300).iter().all(|&b| b != 0));
    assert_ne!(rate::pattern(8), rate::pattern(16)[..8]);
}

#[test]
fn tcp_options() {
    let o = parse(&a(&["tcp-pingpong", "--size", "64", "--iters", "100"])).unwrap();
    assert_eq!(o.standalone, Some(Standalone::TcpPingpong));
    assert_eq!(o.test, None);
    assert_eq!(o.sizes, Some(vec![64]));
    let o = parse(&a(&["tcp-stream", "--sizes", "64,4K"])).unwrap();
    assert_eq!(o.standalone, Some(Standalone::TcpStream));
    assert!(parse(&a(&["tcp-stream", "put-lat"])).is_err());
    assert!(
        parse(&a(&["--sim", "Bad Name"]))
            .unwrap_err()
            .contains("--sim")
    );
    assert_eq!(
        parse(&a(&["--sim", "c1"])).unwrap().sim.as_deref(),
        Some("c1")
    );
    // Default sizes over TCP: put-lat 64, put-bw 64, 4K, 1M.
    let o = parse(&a(&["atomic-lat", "--transport", "verbs", "--qd-sweep"])).unwrap();
    assert!(o.qd_sweep);
    assert_eq!(
        (o.test, o.transport.as_str()),
        (Some(Test::AtomicLat), "verbs")
    );
    for t in ["put-lat", "get-lat", "put-bw", "atomic-lat"] {
        assert!(parse(&a(&[t, "--transport", "verbs"])).is_ok(), "{t}");
    }
    assert!(
        parse(&a(&["--qd-sweep"]))
            .unwrap_err()
            .contains("--transport verbs")
    );
    if let Some(why) = verbs::unavailable() {
        // No device: the reason, before anything is launched.
        assert_eq!(drive(&o).unwrap_err(), why);
    }
    let o = parse(&a(&["--transport", "tcp"])).unwrap();
    assert!(o.over_tcp());
    let s = steps(&o);
    assert_eq!(s[0].sizes, vec![64]);
    assert_eq!(s[1].sizes, vec![8]);
    assert_eq!(s[3].sizes, vec![64, 4096, 1 << 20]);
    let o = parse(&a(&["put-bw", "--transport", "tcp"])).unwrap();
    assert_eq!(steps(&o)[0].sizes, vec![64, 4096, 1 << 20]);
    let o = parse(&a(&["put-lat", "--sim", "c1"])).unwrap();
    assert!(o.over_tcp());
    assert_eq!(steps(&o)[0].sizes, vec![64]);
    // shm and auto keep their defaults.
    let o = parse(&a(&["put-lat", "--transport", "shm"])).unwrap();
    assert!(!o.over_tcp());
    assert_eq!(steps(&o)[0].sizes, vec![8]);
}

#[test]
fn latency_baselines_match_their_tests() {
    let ncpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cpus = (0, 1 % ncpus);
    let names = |t: Test, sizes: &[u64]| -> Vec<(String, u64)> {
        baseline::for_latency(t, sizes, 50, 5, cpus)
            .into_iter()
            .inspect(|m| {
                assert_eq!(m.iters, 50, "{}", m.test);
                assert!(m.latency.is_some_and(|l| l.p50 > 0.0 && l.max >= l.p50));
            })
            .map(|m| (m.test, m.size))
            .collect()
    };
    assert_eq!(names(Test::PutLat, &[8]), [("cacheline".into(), 8)]);
    assert_eq!(
        names(Test::GetLat, &[8, 4096]),
        [("remote-read".into(), 8), ("remote-read".into(), 4096)]
    );
    assert_eq!(names(Test::AtomicLat, &[8]), [("remote-rmw".into(), 8)]);
}

#[test]
fn tcp_baselines_on_loopback() {
    let path = baseline::TcpPath::loopback();
    let ncpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cpus = (0, 1 % ncpus);
    let m = baseline::tcp_pingpong(64, 200, 20, &path, cpus).unwrap();
    assert_eq!(
        (m.test.as_str(), m.size, m.iters),
        ("tcp-pingpong", 64, 200)
    );
    assert!(m.latency.is_some_and(|l| l.p50 > 0.0 && l.max >= l.p50));
    for t in [Test::GetLat, Test::AtomicLat] {
        let m = baseline::tcp_latency(t, 8, 50, 5, &path, cpus).unwrap();
        assert_eq!((m.test.as_str(), m.size), ("tcp-rtt", 8));
    }
    let m = baseline::tcp_stream(4096, 100, 10, &path, cpus).unwrap();
    assert_eq!(
        (m.test.as_str(), m.size, m.iters),
        ("tcp-stream", 4096, 100)
    );
    assert!(
        m.bandwidth
            .is_some_and(|b| b.gbps > 0.0 && b.msgs_per_s > 0.0)
    );
    let bad = baseline::TcpPath {
        server_netns: Some("/nonexistent/netns".into()),
        ..path
    };
    assert!(
        baseline::tcp_pingpong(8, 1, 0, &bad, cpus)
            .unwrap_err()
            .contains("/nonexistent/netns")
    );
}

#[test]
fn thread_options_and_rows() {
    assert_eq!(parse(&a(&["put-rate"])).unwrap().threads, 1);
    assert_eq!(
        parse(&a(&["get-rate", "--threads", "4"])).unwrap().threads,
        4
    );
    for bad in [&["put-bw", "--threads", "2"][..], &["--threads", "2"]] {
        let e = parse(&a(bad)).unwrap_err();
        assert!(e.contains("only the rate tests"), "{e}");
    }
    assert!(parse(&a(&["put-rate", "--threads", "33"])).is_err());
    // One thread stays the plain row; with threads, each row says how many,
    // and the multi-thread row its ratio to one thread.
    let plain = Measurement::throughput("put-rate", 8, 1000, 1e-3);
    let mut one = plain.clone();
    one.threads = Some(1);
    let mut two = Measurement::throughput("put-rate", 8, 2000, 1.1e-3);
    two.threads = Some(2);
    two.thread_ratio = Some(1.82);
    let t = table(&[(plain.clone(), None)], "h");
    assert!(!t.contains("thread"), "{t}");
    let t = table(&[(one, None), (two, None)], "h");
    assert!(t.contains("  1 thread\n"), "{t}");
    assert!(t.contains("  2 threads: 1.82x 1 thread\n"), "{t}");
    // The JSON of a plain row has no thread fields.
    let j = serde_json::to_value(&plain).unwrap();
    assert!(j.get("threads").is_none() && j.get("thread_ratio").is_none());
}

#[test]
fn broadcast_options_and_rows() {
    let o = parse(&a(&["broadcast-bw", "--subscribers", "3"])).unwrap();
    assert_eq!(o.channel, Some(channel::Which::Broadcast));
    assert_eq!((o.subscribers, o.n), (3, 4));
    // Two by default; -n only adds bystanders.
    let o = parse(&a(&["broadcast-bw"])).unwrap();
    assert_eq!((o.subscribers, o.n), (2, 3));
    assert_eq!(parse(&a(&["broadcast-bw", "-n", "5"])).unwrap().n, 5);
    assert!(
        parse(&a(&["channel-bw", "--subscribers", "2"]))
            .unwrap_err()
            .contains("only broadcast-bw has subscribers")
    );
    assert!(parse(&a(&["broadcast-bw", "--subscribers", "0"])).is_err());
    assert!(parse(&a(&["broadcast-bw", "--subscribers", "65"])).is_err());
    // channel-bw is shown once: as its own row (against the raw ring) and
    // as the broadcast rows' baseline.
    let spsc = Measurement::throughput("channel-bw", 64, 1000, 1e-3);
    let raw = Measurement::throughput("raw-ring", 64, 1000, 0.5e-3);
    let bp = Measurement::throughput("broadcast-bw", 64, 1000, 1.25e-3);
    let rows = vec![
        (spsc.clone(), Some(raw)),
        (bp.clone(), Some(spsc.clone())),
        (
            Measurement::throughput("broadcast-bw-drop", 64, 1000, 0.8e-3),
            Some(spsc.clone()),
        ),
    ];
    let t = table(&rows, "h");
    assert_eq!(t.matches("\nchannel-bw ").count(), 1, "{t}");
    assert!((ratio(&bp, Some(&spsc)).unwrap() - 0.8).abs() < 1e-9);
}
