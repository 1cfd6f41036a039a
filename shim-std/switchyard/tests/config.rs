//! `switchyard::config` through its public API: precedence per key with real
//! files, file errors, and the environment given as a lookup (the process
//! environment is never changed).

use std::{net::IpAddr, path::PathBuf, time::Duration};

use switchyard::config::{
    Config, ConfigError, ENV_CONFIG, ENV_TEMPLATE, Key, PayloadCrc, RESERVED_ENV, Source, Template,
};

/// Writes `text` to a fresh file under the target's scratch folder.
fn scratch(name: &str, text: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("config_tests");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn load(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
    Config::load_from(|k| {
        vars.iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
    })
}

/// Two valid values per key, different from each other, from the default and
/// from every template's value: one for the file (TOML text), one for the
/// environment.
fn alternatives(key: Key) -> (&'static str, &'static str) {
    match key {
        Key::HeapSize => ("\"512M\"", "1G"),
        Key::Progress => ("\"caller\"", "CALLER"),
        Key::SpinBeforePark => ("10", "20"),
        Key::ShortThreshold => ("\"16K\"", "32K"),
        Key::LoadWatermark => ("50", "60%"),
        Key::QueueDepth => ("64", "32"),
        Key::HugePages => ("false", "off"),
        Key::BootstrapTimeout => ("\"45s\"", "1m"),
        Key::OpTimeout => ("\"20s\"", "5s"),
        Key::Heartbeat => ("\"300ms\"", "400ms"),
        Key::TraceRecords => ("1024", "2048"),
        Key::Trace => ("\"all\"", "off"),
        Key::InlineThreshold => ("128", "64"),
        Key::ProgressCpu => ("2", "none"),
        Key::TcpAddrs => ("[\"10.0.0.1\", \"10.0.1.1\"]", "fd00::1"),
        Key::TcpConnections => ("2", "3"),
        Key::TcpWindow => ("2097152", "8M"),
        Key::GiveUp => ("\"10s\"", "2s"),
        Key::ReconnectBase => ("\"1ms\"", "2ms"),
        Key::ReconnectCap => ("\"1s\"", "2s"),
        Key::PayloadCrc => ("\"sample:4\"", "sample:8"),
        Key::Transports => ("\"shm,tcp\"", "TCP"),
        Key::VerbsAtomics => ("\"nic\"", "CPU"),
        Key::VerbsRouted => ("false", "on"),
        Key::Stats => ("false", "on"),
        Key::VerbsDevice => ("\"mlx5_0\"", "rxe0"),
        Key::VerbsGidIndex => ("3", "1"),
        Key::Cards => ("\"lazy\"", "ALL"),
        Key::VerbsLazyPeers => ("8", "2"),
        Key::VerbsContextSets => ("true", "off"),
        _ => unreachable!("a key without test values"),
    }
}

#[test]
fn precedence_default_template_file_env_for_every_key() {
    for template in [
        None,
        Some(Template::Trading),
        Some(Template::Storage),
        Some(Template::Ai),
    ] {
        for key in Key::ALL {
            let (file_value, env_value) = alternatives(key);
            let mut base: Vec<(&str, &str)> = Vec::new();
            if let Some(t) = template {
                base.push((ENV_TEMPLATE, t.name()));
            }

            // Default, or the template when it sets the key.
            let cfg = load(&base).unwrap();
            let templated = template.and_then(|t| {
                t.settings()
                    .iter()
                    .find(|(k, _)| *k == key)
                    .map(|&(_, v)| (t, v))
            });
            match templated {
                Some((t, v)) => {
                    assert_eq!(cfg.source(key), &Source::Template(t.name()), "{key}");
                    assert_eq!(cfg.value(key), v, "{key}");
                }
                None => {
                    assert_eq!(cfg.source(key), &Source::Default, "{key}");
                    assert_eq!(cfg.value(key), Config::default().value(key), "{key}");
                }
            }
            let before = cfg.value(key);

            // The file wins over both.
            let file = scratch(
                &format!("prec-{}-{key}.toml", template.map_or("none", |t| t.name())),
                &format!("# precedence test\n{} = {file_value}\n", key.name()),
            );
            let path = file.to_str().unwrap();
            let mut with_file = base.clone();
            with_file.push((ENV_CONFIG, path));
            let cfg = load(&with_file).unwrap_or_else(|e| panic!("{key}: {e}"));
            assert_eq!(
                cfg.source(key),
                &Source::File {
                    path: file.clone(),
                    line: 2
                },
                "{key}"
            );
            assert_ne!(cfg.value(key), before, "{key}: file value not applied");
            let from_file = cfg.value(key);
            // Other keys keep their template or default source.
            for other in Key::ALL.into_iter().filter(|&k| k != key) {
                assert!(
                    matches!(cfg.source(other), Source::Default | Source::Template(_)),
                    "{key}: {other} is {}",
                    cfg.source(other)
                );
            }

            // The environment wins over all three.
            let mut with_env = with_file.clone();
            with_env.push((key.env(), env_value));
            let cfg = load(&with_env).unwrap_or_else(|e| panic!("{key}: {e}"));
            assert_eq!(cfg.source(key), &Source::Env(key.env()), "{key}");
            if key != Key::Progress && key != Key::HugePages {
                assert_ne!(cfg.value(key), from_file, "{key}: env value not applied");
            }
            let mut direct = Config::default();
            direct.set(key, env_value, Source::Default).unwrap();
            assert_eq!(cfg.value(key), direct.value(key), "{key}");
        }
    }
}

#[test]
fn template_from_file_and_env_override() {
    let file = scratch(
        "template.toml",
        "template = \"trading\"\nqueue_depth = 512\n",
    );
    let path = file.to_str().unwrap();
    let cfg = load(&[(ENV_CONFIG, path)]).unwrap();
    assert_eq!(cfg.template(), Some(Template::Trading));
    assert_eq!(
        cfg.template_source(),
        &Source::File {
            path: file.clone(),
            line: 1
        }
    );
    assert_eq!(cfg.queue_depth, 512);
    assert_eq!(cfg.file(), Some(file.as_path()));
    // The variable names another template: it wins over the file's.
    let cfg = load(&[(ENV_CONFIG, path), (ENV_TEMPLATE, "storage")]).unwrap();
    assert_eq!(cfg.template(), Some(Template::Storage));
    assert_eq!(cfg.inline_threshold, 0);
    assert_eq!(
        cfg.queue_depth, 512,
        "the file still wins over the template"
    );
    // entries() lists the template first, then every key.
    let entries: Vec<_> = cfg.entries().collect();
    assert_eq!(entries.len(), Key::COUNT + 1);
    assert_eq!(entries[0].key, "template");
    assert_eq!(entries[0].value, "storage");
    assert_eq!(entries[0].source, &Source::Env(ENV_TEMPLATE));
    let q = entries.iter().find(|e| e.key == "queue_depth").unwrap();
    assert_eq!(q.value, "512");
    assert_eq!(q.env, "SWITCHYARD_QUEUE_DEPTH");
    assert_eq!(q.source.to_string(), format!("file {}:2", file.display()));
}

#[test]
fn file_errors_name_file_line_and_key() {
    let missing = "/nonexistent/switchyard.toml";
    let err = load(&[(ENV_CONFIG, missing)]).unwrap_err();
    assert!(matches!(err, ConfigError::ReadFile { .. }));
    assert!(
        err.to_string()
            .starts_with("cannot read the configuration file /nonexistent/switchyard.toml: "),
        "{err}"
    );

    let bad = scratch("syntax.toml", "heap_size = \"1G\"\nqueue_depth = [\n");
    let err = load(&[(ENV_CONFIG, bad.to_str().unwrap())]).unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, ConfigError::Toml { line: Some(_), .. }),
        "{text}"
    );
    assert!(text.starts_with(&format!("{}:", bad.display())), "{text}");
    assert!(text.contains("not valid TOML"), "{text}");

    let unknown = scratch(
        "unknown.toml",
        "heap_size = \"1G\"\n\nqueue-depth = 64\nheap_size_mb = 3\n",
    );
    let err = load(&[(ENV_CONFIG, unknown.to_str().unwrap())]).unwrap_err();
    let msgs: Vec<String> = err.errors().iter().map(ToString::to_string).collect();
    assert_eq!(msgs.len(), 2, "{msgs:?}");
    assert!(
        msgs[0].starts_with(&format!(
            "{}:3: unknown key 'queue-depth' (did you mean 'queue_depth'?)",
            unknown.display()
        )),
        "{msgs:?}"
    );
    assert!(
        msgs[1].starts_with(&format!(
            "{}:4: unknown key 'heap_size_mb'",
            unknown.display()
        )),
        "{msgs:?}"
    );

    let values = scratch(
        "values.toml",
        "heap_size = \"abc\"\nqueue_depth = 100\nheartbeat = 5\ntemplate = \"hft\"\n",
    );
    let err = load(&[(ENV_CONFIG, values.to_str().unwrap())]).unwrap_err();
    let msgs: Vec<String> = err.errors().iter().map(ToString::to_string).collect();
    let p = values.display();
    assert_eq!(
        msgs,
        [
            format!("{p}:4: template = \"hft\": expected a template name: trading, storage or ai"),
            format!(
                "{p}:1: heap_size = \"abc\": expected a size such as 65536, 64M or 1G, from 4K to 1T"
            ),
            format!(
                "{p}:2: queue_depth = 100: expected a power of two from 16 to 65536, such as 256"
            ),
            format!(
                "{p}:3: heartbeat = 5: expected a duration such as 100ms, 200ms or 1s, from 1ms to 60s"
            ),
        ]
    );

    let binary = scratch("binary.toml", "");
    std::fs::write(&binary, [0xff, 0xfe, 0x00]).unwrap();
    let err = load(&[(ENV_CONFIG, binary.to_str().unwrap())]).unwrap_err();
    assert!(matches!(err, ConfigError::NotUtf8 { .. }), "{err}");
}

#[test]
fn env_errors_name_variable_value_and_expectation() {
    let err = load(&[("SWITCHYARD_HEAP_SIZE", "abc")]).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("SWITCHYARD_HEAP_SIZE=abc: expected a size such as 65536, 64M or 1G"),
        "{err}"
    );
    // The environment is checked even when the file has errors, and all are
    // reported.
    let file = scratch("one-bad.toml", "progress = \"spin\"\n");
    let err = load(&[
        (ENV_CONFIG, file.to_str().unwrap()),
        ("SWITCHYARD_QUEUE_DEPTH", "1000"),
    ])
    .unwrap_err();
    assert_eq!(err.errors().len(), 2, "{err}");
    assert!(err.to_string().starts_with("2 configuration errors:\n"));
}

#[test]
fn warnings_for_unknown_variables() {
    let cfg = Config::load_from_vars([
        ("SWITCHYARD_HEAPSIZE", "1G"),
        ("SWITCHYARD_JOB_ID", "42"),
        ("SWITCHYARD_BOUND_CPU", "1"),
        ("SWITCHYARD_PROGRES", "busy"),
        ("LANG", "C"),
    ])
    .unwrap();
    let w: Vec<(&str, Option<&str>)> = cfg
        .warnings()
        .iter()
        .map(|w| (w.var.as_str(), w.suggestion))
        .collect();
    assert_eq!(
        w,
        [
            ("SWITCHYARD_HEAPSIZE", Some("SWITCHYARD_HEAP_SIZE")),
            ("SWITCHYARD_PROGRES", Some("SWITCHYARD_PROGRESS")),
        ]
    );
    assert_eq!(cfg.heap_size, Config::default().heap_size);
}

#[test]
fn policy_carries_the_routing_knobs() {
    let cfg = load(&[
        ("SWITCHYARD_SHORT_THRESHOLD", "4K"),
        ("SWITCHYARD_LOAD_WATERMARK", "90%"),
    ])
    .unwrap();
    let p = cfg.policy();
    assert_eq!(p.short_threshold, 4096);
    assert_eq!(p.load_watermark.per_mille, 900);
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn tcp_keys_defaults_env_file_and_templates() {
    let d = load(&[]).unwrap();
    assert!(d.tcp_addrs.is_empty());
    assert_eq!(d.value(Key::TcpAddrs), "auto");
    assert_eq!(d.tcp_connections, 1);
    assert_eq!(d.tcp_window, 4 << 20);
    assert_eq!(d.give_up, Duration::from_secs(5));
    assert_eq!(d.reconnect_base, Duration::from_millis(5));
    assert_eq!(d.reconnect_cap, Duration::from_millis(500));
    assert_eq!(d.payload_crc, PayloadCrc::Always);
    assert_eq!(d.heartbeat, Duration::from_millis(200));
    for key in [
        Key::TcpAddrs,
        Key::TcpConnections,
        Key::TcpWindow,
        Key::GiveUp,
        Key::ReconnectBase,
        Key::ReconnectCap,
        Key::PayloadCrc,
    ] {
        assert_eq!(d.source(key), &Source::Default, "{key}");
    }

    // The environment.
    let cfg = load(&[
        ("SWITCHYARD_TCP_ADDRS", "10.0.0.1, 10.0.1.1,fd00::2"),
        ("SWITCHYARD_TCP_CONNECTIONS", "8"),
        ("SWITCHYARD_TCP_WINDOW", "64K"),
        ("SWITCHYARD_GIVE_UP", "30s"),
        ("SWITCHYARD_RECONNECT_BASE", "100us"),
        ("SWITCHYARD_RECONNECT_CAP", "1m"),
        ("SWITCHYARD_PAYLOAD_CRC", "sample:1000000"),
    ])
    .unwrap();
    assert_eq!(
        cfg.tcp_addrs,
        [ip("10.0.0.1"), ip("10.0.1.1"), ip("fd00::2")]
    );
    assert_eq!(
        cfg.source(Key::TcpAddrs),
        &Source::Env("SWITCHYARD_TCP_ADDRS")
    );
    assert_eq!(cfg.tcp_connections, 8);
    assert_eq!(cfg.tcp_window, 64 << 10);
    assert_eq!(cfg.give_up, Duration::from_secs(30));
    assert_eq!(cfg.reconnect_base, Duration::from_micros(100));
    assert_eq!(cfg.reconnect_cap, Duration::from_secs(60));
    assert_eq!(cfg.payload_crc, PayloadCrc::Sample { every: 1_000_000 });
    assert_eq!(
        cfg.source(Key::PayloadCrc),
        &Source::Env("SWITCHYARD_PAYLOAD_CRC")
    );

    // The file: strings, integers, an array.
    let file = scratch(
        "tcp.toml",
        "tcp_addrs = [\"192.168.1.10\", \"::1\"]\ntcp_connections = 4\ntcp_window = 16777216\ngive_up = \"2m\"\nreconnect_base = \"10ms\"\nreconnect_cap = \"5s\"\npayload_crc = \"SAMPLE:32\"\n",
    );
    let cfg = load(&[(ENV_CONFIG, file.to_str().unwrap())]).unwrap();
    assert_eq!(cfg.tcp_addrs, [ip("192.168.1.10"), ip("::1")]);
    assert_eq!(cfg.tcp_connections, 4);
    assert_eq!(cfg.tcp_window, 16 << 20);
    assert_eq!(cfg.give_up, Duration::from_secs(120));
    assert_eq!(cfg.reconnect_base, Duration::from_millis(10));
    assert_eq!(cfg.reconnect_cap, Duration::from_secs(5));
    assert_eq!(cfg.payload_crc, PayloadCrc::Sample { every: 32 });
    assert_eq!(
        cfg.source(Key::PayloadCrc),
        &Source::File {
            path: file.clone(),
            line: 7
        }
    );
    let e = cfg.entries().find(|e| e.key == "tcp_addrs").unwrap();
    assert_eq!(e.value, "192.168.1.10,::1");
    assert_eq!(e.env, "SWITCHYARD_TCP_ADDRS");
    let e = cfg.entries().find(|e| e.key == "payload_crc").unwrap();
    assert_eq!(e.value, "sample:32");
    let e = cfg.entries().find(|e| e.key == "tcp_window").unwrap();
    assert_eq!(e.value, "16M");

    // String forms in the file too; `[]` and "auto" are the automatic choice.
    let file = scratch(
        "tcp-strings.toml",
        "tcp_addrs = \"10.0.0.1,10.0.0.2\"\ntcp_connections = \"2\"\ntcp_window = \"1G\"\n",
    );
    let cfg = load(&[(ENV_CONFIG, file.to_str().unwrap())]).unwrap();
    assert_eq!(cfg.tcp_addrs, [ip("10.0.0.1"), ip("10.0.0.2")]);
    assert_eq!(cfg.tcp_connections, 2);
    assert_eq!(cfg.tcp_window, 1 << 30);
    let file = scratch("tcp-empty.toml", "tcp_addrs = []\n");
    let path = file.to_str().unwrap();
    let cfg = load(&[(ENV_CONFIG, path)]).unwrap();
    assert!(cfg.tcp_addrs.is_empty());
    assert_eq!(
        cfg.source(Key::TcpAddrs),
        &Source::File {
            path: file.clone(),
            line: 1
        }
    );
    // The environment wins over the file's empty list.
    let cfg = load(&[(ENV_CONFIG, path), ("SWITCHYARD_TCP_ADDRS", "10.9.8.7")]).unwrap();
    assert_eq!(cfg.tcp_addrs, [ip("10.9.8.7")]);

    // Templates.
    let want: [(Template, u8, u32, PayloadCrc); 3] = [
        (Template::Trading, 1, 1 << 20, PayloadCrc::Always),
        (Template::Storage, 4, 16 << 20, PayloadCrc::Always),
        (Template::Ai, 4, 16 << 20, PayloadCrc::Sample { every: 16 }),
    ];
    for (t, conns, window, crc) in want {
        let cfg = load(&[(ENV_TEMPLATE, t.name())]).unwrap();
        assert_eq!(cfg.tcp_connections, conns, "{t}");
        assert_eq!(cfg.tcp_window, window, "{t}");
        assert_eq!(cfg.payload_crc, crc, "{t}");
        assert_eq!(cfg.source(Key::TcpWindow), &Source::Template(t.name()));
        assert_eq!(cfg.source(Key::GiveUp), &Source::Default);
        // The environment overrides the template's value.
        let cfg = load(&[
            (ENV_TEMPLATE, t.name()),
            ("SWITCHYARD_TCP_WINDOW", "2M"),
            ("SWITCHYARD_PAYLOAD_CRC", "sample:2"),
        ])
        .unwrap();
        assert_eq!(cfg.tcp_window, 2 << 20);
        assert_eq!(cfg.payload_crc, PayloadCrc::Sample { every: 2 });
        assert_eq!(cfg.tcp_connections, conns);
    }
}

#[test]
fn tcp_keys_bad_values_name_variable_and_value() {
    let cases: &[(&str, &str)] = &[
        ("SWITCHYARD_TCP_ADDRS", "10.0.0.300"),
        ("SWITCHYARD_TCP_ADDRS", "not-an-ip"),
        ("SWITCHYARD_TCP_ADDRS", "10.0.0.1,10.0.0.1"),
        (
            "SWITCHYARD_TCP_ADDRS",
            "10.0.0.1,10.0.0.2,10.0.0.3,10.0.0.4,10.0.0.5",
        ),
        ("SWITCHYARD_TCP_CONNECTIONS", "0"),
        ("SWITCHYARD_TCP_CONNECTIONS", "9"),
        ("SWITCHYARD_TCP_WINDOW", "32K"),
        ("SWITCHYARD_TCP_WINDOW", "2G"),
        ("SWITCHYARD_GIVE_UP", "5ms"),
        ("SWITCHYARD_GIVE_UP", "2d"),
        ("SWITCHYARD_GIVE_UP", "5"),
        ("SWITCHYARD_RECONNECT_BASE", "50us"),
        ("SWITCHYARD_RECONNECT_BASE", "20s"),
        ("SWITCHYARD_RECONNECT_CAP", "500us"),
        ("SWITCHYARD_RECONNECT_CAP", "2m"),
        ("SWITCHYARD_PAYLOAD_CRC", "sample:0"),
        ("SWITCHYARD_PAYLOAD_CRC", "sample:x"),
        ("SWITCHYARD_PAYLOAD_CRC", "sample:1000001"),
        ("SWITCHYARD_PAYLOAD_CRC", "sometimes"),
    ];
    for &(var, value) in cases {
        let err = load(&[(var, value)]).unwrap_err();
        let key = Key::from_env(var).unwrap();
        assert!(
            matches!(&err, ConfigError::BadValue { key: k, value: v, .. } if *k == key.name() && v == value),
            "{var}={value}: {err:?}"
        );
        assert_eq!(
            err.to_string(),
            format!("{var}={value}: expected {}", key.expected())
        );
    }
    let err = load(&[("SWITCHYARD_TCP_ADDRS", "10.0.0.1,10.0.0.1")]).unwrap_err();
    assert!(err.to_string().contains("distinct IP addresses"), "{err}");
    let err = load(&[("SWITCHYARD_PAYLOAD_CRC", "sample:0")]).unwrap_err();
    assert!(
        err.to_string().starts_with(
            "SWITCHYARD_PAYLOAD_CRC=sample:0: expected always or sample:N with N from 1 to 1000000"
        ),
        "{err}"
    );

    // In the file: the key, the file and line, the value as written.
    let file = scratch(
        "tcp-bad.toml",
        "tcp_addrs = [\"10.0.0.1\", \"10.0.0.1\"]\ntcp_connections = 16\ntcp_window = 1024\npayload_crc = \"sample:0\"\ntcp_addrs_x = 1\n",
    );
    let err = load(&[(ENV_CONFIG, file.to_str().unwrap())]).unwrap_err();
    let msgs: Vec<String> = err.errors().iter().map(ToString::to_string).collect();
    let p = file.display();
    assert_eq!(msgs.len(), 5, "{msgs:?}");
    assert!(
        msgs[0].starts_with(&format!(
            "{p}:5: unknown key 'tcp_addrs_x' (did you mean 'tcp_addrs'?)"
        )),
        "{msgs:?}"
    );
    assert_eq!(
        msgs[1],
        format!(
            "{p}:1: tcp_addrs = [\"10.0.0.1\", \"10.0.0.1\"]: expected {}",
            Key::TcpAddrs.expected()
        )
    );
    assert_eq!(
        msgs[2],
        format!("{p}:2: tcp_connections = 16: expected a whole number from 1 to 8, such as 1 or 4")
    );
    assert_eq!(
        msgs[3],
        format!(
            "{p}:3: tcp_window = 1024: expected {}",
            Key::TcpWindow.expected()
        )
    );
    assert_eq!(
        msgs[4],
        format!(
            "{p}:4: payload_crc = \"sample:0\": expected {}",
            Key::PayloadCrc.expected()
        )
    );
    let file = scratch(
        "tcp-five.toml",
        "tcp_addrs = [\"10.0.0.1\", \"10.0.0.2\", \"10.0.0.3\", \"10.0.0.4\", \"10.0.0.5\"]\n",
    );
    let err = load(&[(ENV_CONFIG, file.to_str().unwrap())]).unwrap_err();
    assert!(
        matches!(
            err,
            ConfigError::BadValue {
                key: "tcp_addrs",
                ..
            }
        ),
        "{err}"
    );
    let file = scratch("tcp-num.toml", "tcp_addrs = [1]\n");
    let err = load(&[(ENV_CONFIG, file.to_str().unwrap())]).unwrap_err();
    assert!(
        err.to_string().ends_with(&format!(
            ":1: tcp_addrs = [1]: expected {}",
            Key::TcpAddrs.expected()
        )),
        "{err}"
    );
}

#[test]
fn tcp_cross_key_rules() {
    // give_up may not be shorter than heartbeat.
    let err = load(&[("SWITCHYARD_GIVE_UP", "150ms")]).unwrap_err();
    assert!(matches!(err, ConfigError::Conflict(_)), "{err}");
    assert_eq!(
        err.to_string(),
        "give_up = 150ms (env SWITCHYARD_GIVE_UP) must be no shorter than heartbeat = 200ms (default)"
    );
    // The template's heartbeat counts.
    let err = load(&[(ENV_TEMPLATE, "trading"), ("SWITCHYARD_GIVE_UP", "50ms")]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "give_up = 50ms (env SWITCHYARD_GIVE_UP) must be no shorter than heartbeat = 100ms (template trading)"
    );
    assert!(load(&[(ENV_TEMPLATE, "trading"), ("SWITCHYARD_GIVE_UP", "100ms")]).is_ok());
    // A longer heartbeat from the file against the default give_up.
    let file = scratch("tcp-hb.toml", "heartbeat = \"6s\"\n");
    let err = load(&[(ENV_CONFIG, file.to_str().unwrap())]).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "give_up = 5s (default) must be no shorter than heartbeat = 6s (file {}:1)",
            file.display()
        )
    );

    // reconnect_cap may not be below reconnect_base.
    let err = load(&[("SWITCHYARD_RECONNECT_CAP", "2ms")]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "reconnect_cap = 2ms (env SWITCHYARD_RECONNECT_CAP) must be no shorter than reconnect_base = 5ms (default)"
    );
    let err = load(&[("SWITCHYARD_RECONNECT_BASE", "1s")]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "reconnect_cap = 500ms (default) must be no shorter than reconnect_base = 1s (env SWITCHYARD_RECONNECT_BASE)"
    );
    let cfg = load(&[
        ("SWITCHYARD_RECONNECT_BASE", "1s"),
        ("SWITCHYARD_RECONNECT_CAP", "1s"),
    ])
    .unwrap();
    assert_eq!(cfg.reconnect_base, cfg.reconnect_cap);
}

#[test]
fn launcher_variables_are_reserved_and_tcp_addrs_is_a_key() {
    for var in [
        "SWITCHYARD_NODE_ID",
        "SWITCHYARD_SWITCH_ID",
        "SWITCHYARD_TREE_ID",
        "SWITCHYARD_SIM",
        "SWITCHYARD_PE_CPUS",
        "SWITCHYARD_PMIX",
    ] {
        assert!(RESERVED_ENV.contains(&var), "{var}");
    }
    assert!(!RESERVED_ENV.contains(&"SWITCHYARD_TCP_ADDRS"));
    assert_eq!(Key::from_env("SWITCHYARD_TCP_ADDRS"), Some(Key::TcpAddrs));
    let cfg = Config::load_from_vars([
        ("SWITCHYARD_NODE_ID", "3"),
        ("SWITCHYARD_SWITCH_ID", "1"),
        ("SWITCHYARD_TREE_ID", "0"),
        ("SWITCHYARD_SIM", "1"),
        ("SWITCHYARD_TCP_ADDRS", "127.0.0.1"),
        ("SWITCHYARD_TCP_WINDOWS", "8M"),
    ])
    .unwrap();
    assert_eq!(cfg.tcp_addrs, [ip("127.0.0.1")]);
    let w: Vec<(&str, Option<&str>)> = cfg
        .warnings()
        .iter()
        .map(|w| (w.var.as_str(), w.suggestion))
        .collect();
    assert_eq!(
        w,
        [("SWITCHYARD_TCP_WINDOWS", Some("SWITCHYARD_TCP_WINDOW"))]
    );
}

#[test]
fn transports_parse_and_reject() {
    use switchyard::config::Transports;
    let t = load(&[("SWITCHYARD_TRANSPORTS", " tcp ")]).unwrap();
    assert_eq!(
        t.transports,
        Transports {
            shm: false,
            tcp: true,
            verbs: false
        }
    );
    assert_eq!(t.value(Key::Transports), "tcp");
    assert_eq!(Config::default().value(Key::Transports), "all");
    assert_eq!(Transports::parse("verbs,shm,tcp"), Some(Transports::ALL));
    for bad in ["udp", "tcp,tcp", "shm,,tcp"] {
        let e = load(&[("SWITCHYARD_TRANSPORTS", bad)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("SWITCHYARD_TRANSPORTS"), "{bad}: {e}");
    }
}

#[test]
fn verbs_atomics_and_verbs_routed() {
    use switchyard::config::VerbsAtomics;
    let d = Config::default();
    assert_eq!(
        (d.verbs_atomics, d.verbs_routed),
        (VerbsAtomics::Auto, true)
    );
    assert_eq!(d.value(Key::VerbsAtomics), "auto");
    assert_eq!(d.value(Key::VerbsRouted), "on");
    for (v, want) in [
        ("auto", VerbsAtomics::Auto),
        ("NIC", VerbsAtomics::Nic),
        (" cpu ", VerbsAtomics::Cpu),
    ] {
        let cfg = load(&[("SWITCHYARD_VERBS_ATOMICS", v)]).unwrap();
        assert_eq!(cfg.verbs_atomics, want, "{v}");
    }
    for (v, want) in [
        ("off", false),
        ("FALSE", false),
        ("on", true),
        ("true", true),
    ] {
        let cfg = load(&[("SWITCHYARD_VERBS_ROUTED", v)]).unwrap();
        assert_eq!(cfg.verbs_routed, want, "{v}");
    }
    let e = load(&[("SWITCHYARD_VERBS_ATOMICS", "hca")]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "SWITCHYARD_VERBS_ATOMICS=hca: expected auto, nic or cpu"
    );
    // The file form: a string, or a boolean for verbs_routed.
    let file = scratch(
        "verbs-keys.toml",
        "verbs_atomics = \"cpu\"\nverbs_routed = false\n",
    );
    let cfg = load(&[(ENV_CONFIG, file.to_str().unwrap())]).unwrap();
    assert_eq!(
        (cfg.verbs_atomics, cfg.verbs_routed),
        (VerbsAtomics::Cpu, false)
    );
    assert_eq!(
        cfg.source(Key::VerbsRouted),
        &Source::File {
            path: file.clone(),
            line: 2
        }
    );
    let file = scratch("verbs-keys-bad.toml", "verbs_routed = 3\n");
    let e = load(&[(ENV_CONFIG, file.to_str().unwrap())]).unwrap_err();
    assert!(
        e.to_string()
            .contains("verbs_routed = 3: expected on or off"),
        "{e}"
    );
}

/// `SWITCHYARD_CONFIG` naming a FIFO, a directory or a device is refused at
/// once with the kind named (a FIFO used to block the reader forever); the
/// path is opened without blocking, so this test needs no writer and no timer.
#[test]
fn a_config_path_that_is_not_a_regular_file_is_refused_at_once() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("config_tests");
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join(format!("fifo-{}", std::process::id()));
    let _ = std::fs::remove_file(&fifo);
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    assert!(status.success());
    let cases = [
        (fifo.display().to_string(), "FIFO"),
        (dir.display().to_string(), "directory"),
        ("/dev/null".to_string(), "character device"),
    ];
    for (path, kind) in cases {
        let err = load(&[(ENV_CONFIG, &path)]).expect_err(&path);
        assert!(
            matches!(&err, ConfigError::NotAFile { kind: k, .. } if *k == kind),
            "{path}: {err:?}"
        );
        let msg = err.to_string();
        assert!(msg.contains(&path) && msg.contains(kind), "{msg}");
    }
    let _ = std::fs::remove_file(&fifo);
}

#[test]
fn a_file_s_bind_to_is_read_as_progress_cpu_with_a_warning() {
    let file = scratch("bind_to.toml", "bind_to = \"cpu:3\"\n");
    let path = file.to_str().unwrap();
    let cfg = load(&[(ENV_CONFIG, path)]).unwrap();
    assert_eq!(cfg.progress_cpu, switchyard::config::ProgressCpu::Cpu(3));
    assert_eq!(
        cfg.source(Key::ProgressCpu),
        &Source::File {
            path: file.clone(),
            line: 1
        }
    );
    let w: Vec<String> = cfg.warnings().iter().map(ToString::to_string).collect();
    assert_eq!(
        w,
        [format!(
            "bind_to in {path}:1 is deprecated: it is read as progress_cpu; use progress_cpu"
        )]
    );
    // With the new name in the same file, the new name wins.
    let both = scratch(
        "bind_to_both.toml",
        "bind_to = \"core\"\nprogress_cpu = \"none\"\n",
    );
    let cfg = load(&[(ENV_CONFIG, both.to_str().unwrap())]).unwrap();
    assert_eq!(cfg.progress_cpu, switchyard::config::ProgressCpu::None);
    // A bad old value is an error naming the old key.
    let bad = scratch("bind_to_bad.toml", "bind_to = \"socket\"\n");
    let e = load(&[(ENV_CONFIG, bad.to_str().unwrap())]).unwrap_err();
    assert!(
        e.to_string()
            .contains(": bind_to = \"socket\": expected core, none, or cpu:N"),
        "{e}"
    );
}

#[test]
fn verbs_context_sets_from_the_file_a_boolean_or_a_string() {
    assert!(!Config::default().verbs_context_sets);
    for (text, want) in [
        ("verbs_context_sets = true\n", true),
        ("verbs_context_sets = \"on\"\n", true),
        ("verbs_context_sets = false\n", false),
    ] {
        let file = scratch("verbs-context-sets.toml", text);
        let cfg = load(&[(ENV_CONFIG, file.to_str().unwrap())]).unwrap();
        assert_eq!(cfg.verbs_context_sets, want, "{text}");
        assert_eq!(
            cfg.source(Key::VerbsContextSets),
            &Source::File {
                path: file.clone(),
                line: 1
            }
        );
    }
    let file = scratch("verbs-context-sets-bad.toml", "verbs_context_sets = 2\n");
    let e = load(&[(ENV_CONFIG, file.to_str().unwrap())]).unwrap_err();
    assert!(
        e.to_string()
            .contains("verbs_context_sets = 2: expected on or off"),
        "{e}"
    );
}
