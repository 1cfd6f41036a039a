//! `switchyard::config` through its public API: precedence per key with real
//! files, file errors, and the environment given as a lookup (the process
//! environment is never changed).

use std::path::PathBuf;

use switchyard::config::{Config, ConfigError, ENV_CONFIG, ENV_TEMPLATE, Key, Source, Template};

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
        Key::InlineThreshold => ("128", "64"),
        Key::BindTo => ("\"core\"", "core"),
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
            // (`bind_to` has two values: the file's may equal the template's.)
            if key != Key::BindTo {
                assert_ne!(cfg.value(key), before, "{key}: file value not applied");
            }
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
            if key != Key::BindTo && key != Key::Progress && key != Key::HugePages {
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
