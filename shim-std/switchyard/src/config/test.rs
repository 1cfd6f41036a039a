//! Unit tests of the configuration loader.

use proptest::prelude::*;

use super::{env::edit_distance, file::parse_file, *};

fn lookup<'a>(vars: &'a [(&'a str, &'a str)]) -> impl FnMut(&str) -> Option<String> + 'a {
    move |k| {
        vars.iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
    }
}

#[test]
fn size_table() {
    let ok: &[(&str, u64)] = &[
        ("0", 0),
        ("65536", 65536),
        ("64K", 64 << 10),
        ("64k", 64 << 10),
        ("64KB", 64 << 10),
        ("64KiB", 64 << 10),
        ("64kib", 64 << 10),
        ("64M", 64 << 20),
        ("64 MiB", 64 << 20),
        (" 64mb ", 64 << 20),
        ("1G", 1 << 30),
        ("1GiB", 1 << 30),
        ("1T", 1 << 40),
        ("1.5G", 3 << 29),
        ("0.5K", 512),
        ("64.0", 64),
        ("100B", 100),
        ("16777215T", 16777215 << 40),
    ];
    for &(s, v) in ok {
        assert_eq!(parse_size(s), Some(v), "{s:?}");
    }
    let bad = [
        "",
        "abc",
        "K",
        "-1",
        "+1",
        "1.1K",
        "1.5",
        "1.",
        ".5K",
        "1e3",
        "64Q",
        "64 K B",
        "1..5K",
        "0x10",
        "16777216T",
        "99999999999999999999999",
        "1.0000000001K",
        "64_000",
    ];
    for s in bad {
        assert_eq!(parse_size(s), None, "{s:?}");
    }
    for v in [0, 1, 1000, 1024, 1536, 64 << 20, 3 << 29, 1 << 40, u64::MAX] {
        assert_eq!(parse_size(&format_size(v)), Some(v), "{v}");
    }
    assert_eq!(format_size(64 << 20), "64M");
    assert_eq!(format_size(1536), "1536");
    assert_eq!(format_size(1536 << 10), "1536K");
}

#[test]
fn duration_table() {
    let ok: &[(&str, Duration)] = &[
        ("500ms", Duration::from_millis(500)),
        ("5s", Duration::from_secs(5)),
        ("2m", Duration::from_secs(120)),
        ("2min", Duration::from_secs(120)),
        ("1h", Duration::from_secs(3600)),
        ("1.5s", Duration::from_millis(1500)),
        ("250us", Duration::from_micros(250)),
        ("7ns", Duration::from_nanos(7)),
        ("10 MS", Duration::from_millis(10)),
    ];
    for &(s, d) in ok {
        assert_eq!(parse_duration(s), Some(d), "{s:?}");
        assert_eq!(parse_duration(&format_duration(d)), Some(d), "{s:?}");
    }
    for s in [
        "",
        "5",
        "5 seconds",
        "ms",
        "-5s",
        "1.5ns",
        "5d",
        "99999999999h",
    ] {
        assert_eq!(parse_duration(s), None, "{s:?}");
    }
    assert_eq!(format_duration(Duration::from_millis(200)), "200ms");
    assert_eq!(format_duration(Duration::from_secs(30)), "30s");
    assert_eq!(format_duration(Duration::from_secs(120)), "2m");
}

#[test]
fn defaults_and_their_text_forms_agree() {
    let d = Config::default();
    let mut again = Config::default();
    for key in Key::ALL {
        assert_eq!(d.source(key), &Source::Default);
        again.set(key, &d.value(key), Source::Default).unwrap();
    }
    assert_eq!(d, again);
    d.check().unwrap();
    assert_eq!(d.heap_size, 64 << 20);
    assert_eq!(d.short_threshold, 8192);
    assert_eq!(d.policy().short_threshold, 8192);
    assert_eq!(d.policy().load_watermark.per_mille, 750);
    assert_eq!(Key::ALL.len(), Key::COUNT);
    for (i, k) in Key::ALL.into_iter().enumerate() {
        assert_eq!(k.index(), i);
        assert_eq!(k.env(), format!("SWITCHYARD_{}", k.name().to_uppercase()));
        assert_eq!(Key::from_name(k.name()), Some(k));
        assert_eq!(Key::from_env(k.env()), Some(k));
    }
}

#[test]
fn templates_are_consistent() {
    for t in Template::ALL {
        assert_eq!(Template::from_name(&t.name().to_uppercase()), Some(t));
        let mut seen = Vec::new();
        let mut cfg = Config::default();
        for &(key, value) in t.settings() {
            assert!(!seen.contains(&key), "{t}: {key} twice");
            seen.push(key);
            cfg.set(key, value, Source::Template(t.name()))
                .unwrap_or_else(|e| panic!("{e}"));
            // The text form is the canonical one.
            assert_eq!(cfg.value(key), value, "{t}: {key}");
        }
        cfg.check().unwrap_or_else(|e| panic!("{t}: {e}"));
        assert!(cfg.queue_depth.is_power_of_two());
        let loaded = Config::load_from(lookup(&[(ENV_TEMPLATE, t.name())])).unwrap();
        assert_eq!(loaded.template(), Some(t));
        for key in Key::ALL {
            assert_eq!(loaded.value(key), cfg.value(key));
        }
    }
    let trading = Config::load_from(lookup(&[(ENV_TEMPLATE, "trading")])).unwrap();
    assert_eq!(trading.progress, Progress::Busy);
    assert_eq!(trading.progress_cpu, ProgressCpu::Auto);
    assert_eq!(trading.queue_depth, 128);
    assert_eq!(trading.inline_threshold, 256);
    assert_eq!(trading.huge_pages, HugePages::On);
    assert!(trading.short_threshold < Config::default().short_threshold);
    let storage = Config::load_from(lookup(&[(ENV_TEMPLATE, "storage")])).unwrap();
    assert_eq!(storage.queue_depth, 1024);
    assert_eq!(storage.inline_threshold, 0);
    assert_eq!(storage.progress, Progress::Adaptive);
    assert!(storage.heap_size >= 1 << 30);
    let ai = Config::load_from(lookup(&[(ENV_TEMPLATE, "ai")])).unwrap();
    assert_eq!(ai.queue_depth, 1024);
    assert!(ai.heap_size >= 1 << 30);
    assert_eq!(ai.progress, Progress::Adaptive);
    assert_eq!(trading.tcp_connections, 1);
    assert_eq!(trading.tcp_window, 1 << 20);
    assert_eq!(trading.payload_crc, PayloadCrc::Always);
    assert_eq!(storage.tcp_connections, 4);
    assert_eq!(storage.tcp_window, 16 << 20);
    assert_eq!(storage.payload_crc, PayloadCrc::Always);
    assert_eq!(
        storage.source(Key::PayloadCrc),
        &Source::Template("storage")
    );
    assert_eq!(ai.tcp_connections, 4);
    assert_eq!(ai.tcp_window, 16 << 20);
    assert_eq!(ai.payload_crc, PayloadCrc::Sample { every: 16 });
    for t in [&trading, &storage, &ai] {
        assert!(t.tcp_addrs.is_empty());
        assert_eq!(t.source(Key::TcpAddrs), &Source::Default);
        assert!(t.give_up >= t.heartbeat);
    }
}

#[test]
fn every_key_names_key_value_and_expectation() {
    let bad: &[(Key, &[&str])] = &[
        (Key::HeapSize, &["abc", "2K", "2T", "-1", "1.1K"]),
        (Key::Progress, &["spin", "1"]),
        (Key::SpinBeforePark, &["-1", "lots", "2000000000", "1K"]),
        (Key::ShortThreshold, &["big", "2G", "-8K"]),
        (Key::LoadWatermark, &["0", "101", "75%%", "half"]),
        (Key::QueueDepth, &["100", "8", "131072", "256K"]),
        (Key::HugePages, &["maybe", "1"]),
        (Key::BootstrapTimeout, &["30", "0s", "2d", "25h"]),
        (Key::OpTimeout, &["10", "0ms", "forever"]),
        (Key::Heartbeat, &["200", "61s", "0s"]),
        (Key::TraceRecords, &["1000", "8", "2097152"]),
        (
            Key::Trace,
            &[
                "on",
                "none",
                "sample:0",
                "sample:",
                "sample:1000001",
                "1",
                "every:4",
            ],
        ),
        (Key::Stats, &["auto", "1", "maybe"]),
        (Key::InlineThreshold, &["5K", "on", "lots"]),
        (
            Key::ProgressCpu,
            &["socket", "yes", "cpu:3", "core", "-1", "65536", "1x", "+3"],
        ),
        (
            Key::TcpAddrs,
            &[
                "10.0.0.256",
                "host1",
                "10.0.0.1,",
                ",10.0.0.1",
                "10.0.0.1;10.0.0.2",
                "10.0.0.1,10.0.0.1",
                "fd00::1,FD00:0::1",
                "10.0.0.1,10.0.0.2,10.0.0.3,10.0.0.4,10.0.0.5",
                "10.0.0.1:5000",
                "[::1]",
                "fe80::1%eth0",
            ],
        ),
        (Key::TcpConnections, &["0", "9", "256", "-1", "two", "1.5"]),
        (Key::TcpWindow, &["32K", "65535", "2G", "4Q", "-4M"]),
        (Key::GiveUp, &["5", "9ms", "25h", "0s", "soon"]),
        (Key::ReconnectBase, &["5", "99us", "11s", "0ms"]),
        (Key::ReconnectCap, &["500", "999us", "61s", "2m"]),
        (
            Key::PayloadCrc,
            &[
                "sample:0",
                "sample:x",
                "sample:",
                "sample",
                "sample:1000001",
                "sample:-1",
                "never",
                "every:16",
                "16",
            ],
        ),
        (Key::Transports, &["udp", "tcp,tcp", "shm,,tcp", "none"]),
        (Key::VerbsAtomics, &["global", "hca", "1", "nic,cpu", "on"]),
        (Key::VerbsRouted, &["auto", "1", "yes", "routed"]),
        (
            Key::VerbsDevice,
            &["mlx5 0", "dev/rxe0", "rxe0;", &"x".repeat(64)],
        ),
        (Key::VerbsGidIndex, &["-1", "256", "1.5", "first", "0x1"]),
        (Key::Cards, &["some", "eager", "lazy,all", "1", "on"]),
        (
            Key::VerbsLazyPeers,
            &["0", "65537", "-1", "1.5", "32K", "many", "4294967297"],
        ),
        (
            Key::VerbsContextSets,
            &["auto", "1", "yes", "per-context", "of"],
        ),
    ];
    assert_eq!(bad.len(), Key::COUNT);
    for &(key, values) in bad {
        for &v in values {
            let err = Config::load_from(lookup(&[(key.env(), v)])).unwrap_err();
            let text = err.to_string();
            assert_eq!(
                text,
                format!("{}={v}: expected {}", key.env(), key.expected()),
                "{key} {v}"
            );
            assert!(matches!(err, ConfigError::BadValue { key: k, .. } if k == key.name()));
        }
    }
}

#[test]
fn precedence_per_key_default_template_env() {
    let cfg = Config::load_from(lookup(&[
        (ENV_TEMPLATE, "trading"),
        ("SWITCHYARD_QUEUE_DEPTH", "4096"),
        ("SWITCHYARD_TRACE_RECORDS", "64"),
    ]))
    .unwrap();
    assert_eq!(cfg.queue_depth, 4096);
    assert_eq!(
        cfg.source(Key::QueueDepth),
        &Source::Env("SWITCHYARD_QUEUE_DEPTH")
    );
    assert_eq!(cfg.trace_records, 64);
    assert_eq!(cfg.progress, Progress::Busy);
    assert_eq!(cfg.source(Key::Progress), &Source::Template("trading"));
    assert_eq!(cfg.source(Key::SpinBeforePark), &Source::Default);
    assert_eq!(cfg.template_source(), &Source::Env(ENV_TEMPLATE));
}

#[test]
fn empty_env_values_are_unset() {
    let cfg = Config::load_from(lookup(&[
        ("SWITCHYARD_HEAP_SIZE", ""),
        (ENV_TEMPLATE, "  "),
        (ENV_CONFIG, ""),
    ]))
    .unwrap();
    assert_eq!(cfg, Config::default());
}

#[test]
fn bad_template_and_several_errors() {
    let err = Config::load_from(lookup(&[(ENV_TEMPLATE, "hft")])).unwrap_err();
    assert_eq!(
        err.to_string(),
        "SWITCHYARD_TEMPLATE=hft: expected a template name: trading, storage or ai"
    );
    let err = Config::load_from(lookup(&[
        ("SWITCHYARD_HEAP_SIZE", "abc"),
        ("SWITCHYARD_PROGRESS", "spin"),
    ]))
    .unwrap_err();
    assert_eq!(err.errors().len(), 2);
    let text = err.to_string();
    assert!(
        text.starts_with("2 configuration errors:\n  SWITCHYARD_HEAP_SIZE=abc"),
        "{text}"
    );
    assert!(
        text.contains("\n  SWITCHYARD_PROGRESS=spin: expected busy, adaptive, caller or dedicated")
    );
}

#[test]
fn progress_cpu_takes_auto_a_cpu_pe_or_none() {
    let mut cfg = Config::default();
    assert_eq!(cfg.progress_cpu, ProgressCpu::Auto);
    for (v, want, back) in [
        ("auto", ProgressCpu::Auto, "auto"),
        ("PE", ProgressCpu::Pe, "pe"),
        ("NONE", ProgressCpu::None, "none"),
        ("0", ProgressCpu::Cpu(0), "0"),
        (" 17 ", ProgressCpu::Cpu(17), "17"),
        ("65535", ProgressCpu::Cpu(65535), "65535"),
    ] {
        cfg.set(Key::ProgressCpu, v, Source::Default).unwrap();
        assert_eq!(cfg.progress_cpu, want, "{v}");
        assert_eq!(cfg.value(Key::ProgressCpu), back);
    }
    cfg.set(Key::Progress, "Dedicated", Source::Default)
        .unwrap();
    assert_eq!(cfg.progress, Progress::Dedicated);
    assert_eq!(cfg.value(Key::Progress), "dedicated");
}

#[test]
fn bind_to_is_read_as_progress_cpu_with_a_warning() {
    // The environment: each old value in the new terms.
    for (old, want) in [
        ("core", ProgressCpu::Pe),
        ("none", ProgressCpu::None),
        ("cpu:3", ProgressCpu::Cpu(3)),
    ] {
        let cfg = Config::load_from(lookup(&[("SWITCHYARD_BIND_TO", old)])).unwrap();
        assert_eq!(cfg.progress_cpu, want, "{old}");
        assert_eq!(
            cfg.source(Key::ProgressCpu),
            &Source::Env("SWITCHYARD_BIND_TO")
        );
        let w: Vec<String> = cfg.warnings().iter().map(ToString::to_string).collect();
        assert_eq!(
            w,
            [
                "SWITCHYARD_BIND_TO is deprecated: it is read as SWITCHYARD_PROGRESS_CPU; use SWITCHYARD_PROGRESS_CPU"
            ]
        );
    }
    // The new name wins; the old one is still warned about.
    let cfg = Config::load_from(lookup(&[
        ("SWITCHYARD_BIND_TO", "core"),
        ("SWITCHYARD_PROGRESS_CPU", "none"),
    ]))
    .unwrap();
    assert_eq!(cfg.progress_cpu, ProgressCpu::None);
    assert_eq!(cfg.warnings().len(), 1);
    // A bad old value names the old key and what it took.
    let e = Config::load_from(lookup(&[("SWITCHYARD_BIND_TO", "7")])).unwrap_err();
    assert_eq!(
        e.to_string(),
        "SWITCHYARD_BIND_TO=7: expected core, none, or cpu:N for CPU N (0 to 65535)"
    );
    // The old variable is not "unknown" to the name check.
    assert!(check_env_names(["SWITCHYARD_BIND_TO"]).is_empty());
    // The file: read as the new key, from its line.
    let path = std::path::Path::new("/x/sy.toml");
    let mut errors = Vec::new();
    let f = parse_file(
        "heap_size = \"1M\"\nbind_to = \"cpu:5\"\n",
        path,
        &mut errors,
    )
    .unwrap();
    assert!(errors.is_empty());
    assert_eq!(f.deprecated.len(), 1);
    assert_eq!(f.deprecated[0].0.key, Key::ProgressCpu);
    assert_eq!(
        f.deprecated[0].1.from,
        Source::File {
            path: path.into(),
            line: 2
        }
    );
}

#[test]
fn tcp_keys_parse_and_read_back() {
    let d = Config::default();
    assert!(d.tcp_addrs.is_empty());
    assert_eq!(d.value(Key::TcpAddrs), "auto");
    assert_eq!(d.tcp_connections, 1);
    assert_eq!(d.tcp_window, 4 << 20);
    assert_eq!(d.value(Key::TcpWindow), "4M");
    assert_eq!(d.give_up, Duration::from_secs(5));
    assert_eq!(d.reconnect_base, Duration::from_millis(5));
    assert_eq!(d.reconnect_cap, Duration::from_millis(500));
    assert_eq!(d.payload_crc, PayloadCrc::Always);

    let mut cfg = Config::default();
    let env = |k: Key| Source::Env(k.env());
    cfg.set(Key::TcpAddrs, " 10.0.0.1 , fd00::1 ", env(Key::TcpAddrs))
        .unwrap();
    assert_eq!(
        cfg.tcp_addrs,
        [
            "10.0.0.1".parse::<IpAddr>().unwrap(),
            "fd00::1".parse().unwrap()
        ]
    );
    assert_eq!(cfg.value(Key::TcpAddrs), "10.0.0.1,fd00::1");
    cfg.set(
        Key::TcpAddrs,
        "10.0.0.1,10.0.0.2,10.0.0.3,10.0.0.4",
        env(Key::TcpAddrs),
    )
    .unwrap();
    assert_eq!(cfg.tcp_addrs.len(), MAX_TCP_ADDRS);
    cfg.set(Key::TcpAddrs, "AUTO", env(Key::TcpAddrs)).unwrap();
    assert!(cfg.tcp_addrs.is_empty());
    for (v, want) in [("1", 1), ("8", 8), (" 4 ", 4)] {
        cfg.set(Key::TcpConnections, v, Source::Default).unwrap();
        assert_eq!(cfg.tcp_connections, want);
    }
    for (v, want) in [("64K", 64 << 10), ("1G", 1 << 30), ("65536", 65536)] {
        cfg.set(Key::TcpWindow, v, Source::Default).unwrap();
        assert_eq!(cfg.tcp_window, want);
    }
    for (key, lo, hi) in [
        (Key::GiveUp, "10ms", "24h"),
        (Key::ReconnectBase, "100us", "10s"),
        (Key::ReconnectCap, "1ms", "60s"),
    ] {
        for v in [lo, hi] {
            cfg.set(key, v, Source::Default).unwrap();
            assert_eq!(parse_duration(&cfg.value(key)), parse_duration(v));
        }
    }
    for (v, want) in [
        ("always", PayloadCrc::Always),
        ("ALWAYS", PayloadCrc::Always),
        ("sample:16", PayloadCrc::Sample { every: 16 }),
        ("Sample: 1", PayloadCrc::Sample { every: 1 }),
        ("sample:1000000", PayloadCrc::Sample { every: 1_000_000 }),
    ] {
        cfg.set(Key::PayloadCrc, v, Source::Default).unwrap();
        assert_eq!(cfg.payload_crc, want, "{v}");
        // Display round-trips.
        assert_eq!(PayloadCrc::parse(&want.to_string()), Some(want));
    }
    assert_eq!(PayloadCrc::Always.every(), 1);
    assert_eq!(PayloadCrc::Sample { every: 16 }.to_string(), "sample:16");
    assert_eq!(PayloadCrc::Sample { every: 16 }.every(), 16);
}

#[test]
fn tcp_conflicts_name_both_keys() {
    let err = Config::load_from(lookup(&[("SWITCHYARD_GIVE_UP", "100ms")])).unwrap_err();
    assert_eq!(
        err.to_string(),
        "give_up = 100ms (env SWITCHYARD_GIVE_UP) must be no shorter than heartbeat = 200ms (default)"
    );
    // Equal is fine.
    let cfg = Config::load_from(lookup(&[
        ("SWITCHYARD_GIVE_UP", "1s"),
        ("SWITCHYARD_HEARTBEAT", "1000ms"),
    ]))
    .unwrap();
    assert_eq!(cfg.give_up, cfg.heartbeat);
    let err = Config::load_from(lookup(&[
        ("SWITCHYARD_RECONNECT_BASE", "1s"),
        ("SWITCHYARD_RECONNECT_CAP", "100ms"),
    ]))
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "reconnect_cap = 100ms (env SWITCHYARD_RECONNECT_CAP) must be no shorter than reconnect_base = 1s (env SWITCHYARD_RECONNECT_BASE)"
    );
    // Both broken rules are reported.
    let err = Config::load_from(lookup(&[
        ("SWITCHYARD_GIVE_UP", "10ms"),
        ("SWITCHYARD_RECONNECT_BASE", "2s"),
    ]))
    .unwrap_err();
    assert_eq!(err.errors().len(), 2, "{err}");
    assert!(matches!(err.errors()[0], ConfigError::Conflict(ref c) if c.key == "give_up"));
    assert!(matches!(err.errors()[1], ConfigError::Conflict(ref c) if c.key == "reconnect_cap"));
}

#[test]
fn reserved_variables_are_not_keys_and_not_warned() {
    for var in RESERVED_ENV {
        assert_eq!(Key::from_env(var), None, "{var} is a key");
    }
    assert!(!RESERVED_ENV.contains(&"SWITCHYARD_TCP_ADDRS"));
    let w = check_env_names([
        "SWITCHYARD_NODE_ID",
        "SWITCHYARD_SWITCH_ID",
        "SWITCHYARD_TREE_ID",
        "SWITCHYARD_SIM",
        "SWITCHYARD_TCP_ADDRS",
        "SWITCHYARD_TCP_ADDR",
        "SWITCHYARD_GIVEUP",
    ]);
    let got: Vec<(&str, Option<&str>)> = w.iter().map(|w| (w.var.as_str(), w.suggestion)).collect();
    assert_eq!(
        got,
        [
            ("SWITCHYARD_TCP_ADDR", Some("SWITCHYARD_TCP_ADDRS")),
            ("SWITCHYARD_GIVEUP", Some("SWITCHYARD_GIVE_UP")),
        ]
    );
}

#[test]
fn conflict_names_both_keys() {
    let err = Config::load_from(lookup(&[
        ("SWITCHYARD_HEARTBEAT", "20s"),
        ("SWITCHYARD_OP_TIMEOUT", "5s"),
        // (give_up must not be shorter than heartbeat either.)
        ("SWITCHYARD_GIVE_UP", "30s"),
    ]))
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "heartbeat = 20s (env SWITCHYARD_HEARTBEAT) must be shorter than op_timeout = 5s (env SWITCHYARD_OP_TIMEOUT)"
    );
}

#[test]
fn odd_values_are_shown_quoted_and_cut() {
    let long = "x".repeat(500);
    let err = Config::load_from(lookup(&[("SWITCHYARD_PROGRESS", &long)])).unwrap_err();
    let text = err.to_string();
    assert!(text.len() < 300, "{text}");
    assert!(text.contains("...: expected"));
    let err = Config::load_from(lookup(&[("SWITCHYARD_PROGRESS", "a\nb")])).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("SWITCHYARD_PROGRESS=\"a\\nb\": ")
    );
}

#[test]
fn typo_warnings() {
    let w = check_env_names([
        "SWITCHYARD_HEAPSIZE",
        "SWITCHYARD_HEAP_SIZE",
        "SWITCHYARD_RANK",
        "SWITCHYARD_LOCAL_SIZE",
        "SWITCHYARD_QUEUE_DEPHT",
        "switchyard_progress",
        "SWITCHYARD_WHATEVER",
        "PATH",
        "SWITCHYARD",
        "SWITCHYARD_",
    ]);
    let got: Vec<(&str, Option<&str>)> = w.iter().map(|w| (w.var.as_str(), w.suggestion)).collect();
    assert_eq!(
        got,
        [
            ("SWITCHYARD_HEAPSIZE", Some("SWITCHYARD_HEAP_SIZE")),
            ("SWITCHYARD_QUEUE_DEPHT", Some("SWITCHYARD_QUEUE_DEPTH")),
            ("switchyard_progress", Some("SWITCHYARD_PROGRESS")),
            ("SWITCHYARD_WHATEVER", None),
            ("SWITCHYARD_", None),
        ]
    );
    assert_eq!(
        w[0].to_string(),
        "SWITCHYARD_HEAPSIZE is not a switchyard setting (did you mean SWITCHYARD_HEAP_SIZE?); it is ignored"
    );
    let cfg = Config::load_from_vars([
        ("SWITCHYARD_HEAPSIZE", "1G"),
        ("SWITCHYARD_RANK", "3"),
        ("HOME", "/root"),
    ])
    .unwrap();
    assert_eq!(cfg.heap_size, 64 << 20);
    assert_eq!(cfg.warnings().len(), 1);
}

#[test]
fn file_parsing() {
    let path = Path::new("/etc/sy.toml");
    let mut errors = Vec::new();
    let text = "# comment\ntemplate = \"ai\"\nheap_size = 1073741824\nqueue_depth = 0x200\nhuge_pages = true\nheapsize = 1\n[verbs]\nx = 1\n";
    let f = parse_file(text, path, &mut errors).unwrap();
    assert_eq!(f.template.as_ref().unwrap().raw.as_deref(), Ok("ai"));
    let got: Vec<(Key, &str, u32)> = f
        .values
        .iter()
        .map(|(k, v)| {
            let Source::File { line, .. } = v.from else {
                unreachable!()
            };
            (*k, v.raw.as_deref().unwrap(), line)
        })
        .collect();
    assert_eq!(
        got,
        [
            (Key::HeapSize, "1073741824", 3),
            (Key::QueueDepth, "512", 4),
            (Key::HugePages, "true", 5)
        ]
    );
    let msgs: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert_eq!(msgs.len(), 2, "{msgs:?}");
    assert!(
        msgs[0].starts_with("/etc/sy.toml:6: unknown key 'heapsize' (did you mean 'heap_size'?); the keys are template, heap_size, progress"),
        "{msgs:?}"
    );
    assert!(
        msgs[1].starts_with("/etc/sy.toml:7: unknown key 'verbs'"),
        "{msgs:?}"
    );

    let err = parse_file("a = 1\nb = = 2\n", path, &mut Vec::new())
        .err()
        .unwrap();
    let text = err.to_string();
    assert!(
        text.starts_with("/etc/sy.toml:2: not valid TOML: "),
        "{text}"
    );
    let mut errors = Vec::new();
    let f = parse_file("heap_size = [1]\n", path, &mut errors).unwrap();
    assert!(errors.is_empty());
    assert_eq!(f.values[0].1.raw, Err(()));
    assert_eq!(f.values[0].1.written, "[1]");

    // Arrays of strings only for tcp_addrs.
    let text = "tcp_addrs = [\"10.0.0.1\", \"fd00::1\"]\n";
    let f = parse_file(text, path, &mut errors).unwrap();
    assert_eq!(f.values[0].1.raw.as_deref(), Ok("10.0.0.1,fd00::1"));
    let f = parse_file("tcp_addrs = []\n", path, &mut errors).unwrap();
    assert_eq!(f.values[0].1.raw.as_deref(), Ok("auto"));
    for bad in [
        "tcp_addrs = [1]\n",
        "tcp_addrs = [\"10.0.0.1,10.0.0.2\"]\n",
        "tcp_addrs = [\"\"]\n",
        "tcp_addrs = [[\"10.0.0.1\"]]\n",
        "tcp_connections = [4]\n",
    ] {
        let f = parse_file(bad, path, &mut errors).unwrap();
        assert_eq!(f.values[0].1.raw, Err(()), "{bad}");
    }
    assert!(errors.is_empty());
}

#[test]
fn edit_distance_basics() {
    assert_eq!(edit_distance(b"", b"abc"), 3);
    assert_eq!(edit_distance(b"abc", b"abc"), 0);
    assert_eq!(edit_distance(b"abc", b"acb"), 1);
    assert_eq!(edit_distance(b"kitten", b"sitting"), 3);
}

proptest! {
    #[test]
    fn parsers_never_panic(s in any::<String>()) {
        let _ = parse_size(&s);
        let _ = parse_duration(&s);
        let _ = Template::from_name(&s);
        let mut cfg = Config::default();
        for key in Key::ALL {
            let before = cfg.clone();
            if cfg.set(key, &s, Source::Env(key.env())).is_err() {
                prop_assert_eq!(&cfg, &before);
            }
        }
        let _ = cfg.check();
        let _ = check_env_names([s.as_str(), &format!("SWITCHYARD_{s}")]);
        let _ = parse_file(&s, Path::new("f.toml"), &mut Vec::new());
    }

    #[test]
    fn number_like_strings_never_panic(s in "[0-9. ]{0,30}[kKmMgGtTiIbBsSunh]{0,3}") {
        let _ = parse_size(&s);
        let _ = parse_duration(&s);
        let mut cfg = Config::default();
        for key in Key::ALL {
            let _ = cfg.set(key, &s, Source::Default);
        }
    }

    #[test]
    fn toml_like_files_never_panic(s in "([a-z_]{1,12} = (\"[0-9a-zA-Z.]{0,6}\"|[0-9]{1,12}|true|\\[1\\]|\\{\\})\n){0,6}") {
        let _ = parse_file(&s, Path::new("f.toml"), &mut Vec::new());
    }

    #[test]
    fn sizes_round_trip(v in any::<u64>()) {
        prop_assert_eq!(parse_size(&format_size(v)), Some(v));
    }

    #[test]
    fn durations_round_trip(ns in any::<u64>()) {
        let d = Duration::from_nanos(ns);
        prop_assert_eq!(parse_duration(&format_duration(d)), Some(d));
    }
}

#[test]
fn trace_records_takes_powers_of_two_from_16_to_2_pow_20() {
    let mut cfg = Config::default();
    assert_eq!(cfg.trace_records as usize, crate::context::TRACE_RECORDS);
    for ok in ["16", "64", "4096", "1048576"] {
        cfg.set(Key::TraceRecords, ok, Source::Default).unwrap();
        assert_eq!(cfg.value(Key::TraceRecords), ok);
    }
    for bad in ["0", "8", "15", "48", "1000", "2097152", "64K"] {
        let err = cfg
            .set(Key::TraceRecords, bad, Source::Default)
            .unwrap_err();
        assert!(err.to_string().starts_with("trace_records = "), "{err}");
        assert_eq!(cfg.trace_records, 1 << 20, "unchanged by {bad}");
    }
    assert_eq!(
        Key::TraceRecords.expected(),
        "a power of two from 16 to 1048576, such as 4096"
    );
}

#[test]
fn trace_takes_off_all_and_sample_n() {
    let mut cfg = Config::default();
    assert_eq!(cfg.trace, TraceMode::Sample { every: 64 }, "the default");
    assert_eq!(cfg.value(Key::Trace), "sample:64");
    for (v, want) in [
        ("off", TraceMode::Off),
        ("OFF", TraceMode::Off),
        ("all", TraceMode::All),
        (" All ", TraceMode::All),
        ("sample:1", TraceMode::Sample { every: 1 }),
        ("Sample: 16", TraceMode::Sample { every: 16 }),
        ("sample:1000000", TraceMode::Sample { every: 1_000_000 }),
    ] {
        cfg.set(Key::Trace, v, Source::Default).unwrap();
        assert_eq!(cfg.trace, want, "{v}");
        // What info shows reads back the same.
        assert_eq!(TraceMode::parse(&cfg.value(Key::Trace)), Some(want));
    }
    assert_eq!(
        [
            TraceMode::Off,
            TraceMode::Sample { every: 16 },
            TraceMode::All
        ]
        .map(TraceMode::every),
        [0, 16, 1]
    );
    let err = cfg
        .set(Key::Trace, "sample:0", Source::Default)
        .unwrap_err();
    assert!(
        matches!(err, ConfigError::BadValue { key: "trace", .. }),
        "{err}"
    );
    assert_eq!(
        cfg.trace,
        TraceMode::Sample { every: 1_000_000 },
        "unchanged"
    );
    let cfg = Config::load_from(lookup(&[("SWITCHYARD_TRACE", "all")])).unwrap();
    assert_eq!(cfg.trace, TraceMode::All);
    assert_eq!(cfg.source(Key::Trace), &Source::Env("SWITCHYARD_TRACE"));
}

#[test]
fn cards_is_all_by_default_and_lazy_from_the_environment() {
    let cfg = Config::load_from(lookup(&[])).unwrap();
    assert_eq!(cfg.cards, CardsMode::All);
    let cfg = Config::load_from(lookup(&[("SWITCHYARD_CARDS", "LAZY")])).unwrap();
    assert_eq!(cfg.cards, CardsMode::Lazy);
    assert_eq!(Key::from_env("SWITCHYARD_CARDS"), Some(Key::Cards));
    assert_eq!(Key::from_name("cards"), Some(Key::Cards));
    let cfg = Config::load_from(lookup(&[("SWITCHYARD_CARDS", "all")])).unwrap();
    assert_eq!(cfg.cards, CardsMode::All);
}

#[test]
fn verbs_lazy_peers_is_32_by_default_and_1_to_65536_from_the_file_or_the_environment() {
    let cfg = Config::load_from(lookup(&[])).unwrap();
    assert_eq!(cfg.verbs_lazy_peers, DEFAULT_VERBS_LAZY_PEERS);
    assert_eq!(cfg.verbs_lazy_peers, 32);
    assert_eq!(cfg.value(Key::VerbsLazyPeers), "32");
    assert_eq!(
        Key::from_env("SWITCHYARD_VERBS_LAZY_PEERS"),
        Some(Key::VerbsLazyPeers)
    );
    assert_eq!(
        Key::from_name("verbs_lazy_peers"),
        Some(Key::VerbsLazyPeers)
    );
    for (raw, want) in [("1", 1), (" 7 ", 7), ("65536", 65_536)] {
        let cfg = Config::load_from(lookup(&[("SWITCHYARD_VERBS_LAZY_PEERS", raw)])).unwrap();
        assert_eq!(cfg.verbs_lazy_peers, want, "{raw}");
        assert_eq!(
            cfg.source(Key::VerbsLazyPeers),
            &Source::Env("SWITCHYARD_VERBS_LAZY_PEERS")
        );
    }
    let err = Config::load_from(lookup(&[("SWITCHYARD_VERBS_LAZY_PEERS", "0")])).unwrap_err();
    assert_eq!(
        err.to_string(),
        "SWITCHYARD_VERBS_LAZY_PEERS=0: expected a whole number of peers from 1 to 65536, such as 32"
    );
    assert!(matches!(
        err,
        ConfigError::BadValue {
            key: "verbs_lazy_peers",
            ..
        }
    ));
    // Listed among the settings (`switchyard info`), not an unknown key.
    assert!(
        Config::default()
            .entries()
            .any(|e| e.key == "verbs_lazy_peers" && e.value == "32")
    );
}

#[test]
fn verbs_context_sets_is_off_by_default_and_on_or_off_from_the_file_or_the_environment() {
    let cfg = Config::load_from(lookup(&[])).unwrap();
    assert!(!cfg.verbs_context_sets);
    assert_eq!(cfg.value(Key::VerbsContextSets), "off");
    assert_eq!(
        Key::from_env("SWITCHYARD_VERBS_CONTEXT_SETS"),
        Some(Key::VerbsContextSets)
    );
    assert_eq!(
        Key::from_name("verbs_context_sets"),
        Some(Key::VerbsContextSets)
    );
    for (raw, want) in [("on", true), (" ON ", true), ("true", true), ("off", false)] {
        let cfg = Config::load_from(lookup(&[("SWITCHYARD_VERBS_CONTEXT_SETS", raw)])).unwrap();
        assert_eq!(cfg.verbs_context_sets, want, "{raw}");
        assert_eq!(
            cfg.value(Key::VerbsContextSets),
            if want { "on" } else { "off" }
        );
        assert_eq!(
            cfg.source(Key::VerbsContextSets),
            &Source::Env("SWITCHYARD_VERBS_CONTEXT_SETS")
        );
    }
    let err = Config::load_from(lookup(&[("SWITCHYARD_VERBS_CONTEXT_SETS", "auto")])).unwrap_err();
    assert_eq!(
        err.to_string(),
        "SWITCHYARD_VERBS_CONTEXT_SETS=auto: expected on or off"
    );
    assert!(matches!(
        err,
        ConfigError::BadValue {
            key: "verbs_context_sets",
            ..
        }
    ));
    // Listed among the settings (`switchyard info`).
    assert!(
        Config::default()
            .entries()
            .any(|e| e.key == "verbs_context_sets" && e.value == "off")
    );
}
