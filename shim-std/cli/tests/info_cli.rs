//! `switchyard info` through `switchyard_cli::run`, with the process
//! environment as it is (never changed here): transports and why not, machine
//! facts, the configuration and where each value came from, JSON.

use std::{path::PathBuf, sync::OnceLock};

use switchyard_cli::{EXIT_USAGE, Output, run};
use switchyard_tests::skip::skip;

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

/// Whether the process environment itself holds a bad configuration (then the
/// command rightly fails, and the checks below that need success skip: a
/// failure where skips are not allowed, see [`skip`]).
fn env_config_ok() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| switchyard::config::Config::from_env().is_ok())
}

fn ok(a: &[&str]) -> Option<String> {
    let out = run(&args(a));
    if !env_config_ok() {
        assert_eq!(out.code, EXIT_USAGE, "{a:?}");
        skip(format!(
            "`switchyard {}` needs a good configuration, and the environment's SWITCHYARD_* \
             variables hold a bad one: {}",
            a.join(" "),
            out.stderr.trim()
        ));
        return None;
    }
    assert_eq!(out.code, 0, "{a:?}: {}", out.stderr);
    assert!(out.stderr.is_empty(), "{a:?}: {}", out.stderr);
    Some(out.stdout)
}

fn fails(a: &[&str]) -> Output {
    let out = run(&args(a));
    assert_eq!(out.code, EXIT_USAGE, "{a:?}: {}", out.stdout);
    assert!(out.stdout.is_empty());
    assert!(
        out.stderr.starts_with("switchyard: error: "),
        "{}",
        out.stderr
    );
    out
}

/// Writes `text` to a fresh file under the target's scratch folder.
fn scratch(name: &str, text: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("info_cli");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// The verbs probe's reason when RDMA is unusable here (as on a machine
/// whose kernel has no InfiniBand support: ENOSYS), which `info` must print.
#[cfg(feature = "verbs")]
fn verbs_reason() -> Option<String> {
    switchyard_verbs::probe::probe()
        .unavailable
        .map(|u| u.to_string())
}

/// Without the `verbs` feature: that this build has no verbs support.
#[cfg(not(feature = "verbs"))]
fn verbs_reason() -> Option<String> {
    Some(switchyard::context::verbs::NO_VERBS.into())
}

#[test]
fn text_lists_all_three_transports_and_the_machine() {
    let Some(out) = ok(&["info"]) else { return };
    let transports: Vec<&str> = out
        .lines()
        .skip_while(|l| *l != "Transports:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect();
    assert_eq!(transports.len(), 3, "{out}");
    assert!(transports[0].trim_start().starts_with("shm "), "{out}");
    assert!(
        transports[1].trim_start().starts_with("tcp ")
            || transports[1].trim_start().starts_with("socket "),
        "{out}"
    );
    assert!(transports[2].trim_start().starts_with("verbs "), "{out}");
    for l in &transports {
        assert!(
            l.contains(" available ") || l.contains(" unavailable "),
            "{l}"
        );
    }
    if let Some(why) = verbs_reason() {
        assert!(
            transports[2].contains(&format!("unavailable  {why}")),
            "{out}"
        );
    }
    for section in ["Devices:", "Machine:", "Configuration ("] {
        assert!(out.contains(section), "{section} missing:\n{out}");
    }
    assert!(out.contains("  CPUs "), "{out}");
    assert!(out.contains("  NUMA nodes "), "{out}");
    assert!(out.contains("  Huge pages "), "{out}");
    // Every key is listed with a source.
    for key in switchyard::config::Key::ALL {
        let line = out
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{} ", key.name())))
            .unwrap_or_else(|| panic!("{key} missing:\n{out}"));
        assert!(
            ["default", "template ", "file ", "env "]
                .iter()
                .any(|s| line.contains(s)),
            "{line}"
        );
    }
}

#[test]
fn json_parses_with_transports_machine_and_config_sources() {
    let Some(out) = ok(&["info", "--json"]) else {
        return;
    };
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let transports = v["transports"].as_array().unwrap();
    assert_eq!(transports.len(), 3);
    assert_eq!(transports[0]["name"], "shm");
    assert_eq!(transports[2]["name"], "verbs");
    for t in transports {
        let available = t["available"].as_bool().unwrap();
        assert_eq!(available, t["why_not"].is_null(), "{t}");
        assert!(t["devices"].is_array());
    }
    if let Some(why) = verbs_reason() {
        assert_eq!(transports[2]["available"], false);
        assert_eq!(transports[2]["why_not"], why.as_str());
        assert_eq!(transports[2]["in_use"], false);
    }
    // The drivers probe: tcp is not written yet but lists the interfaces.
    if !switchyard_socket::IMPLEMENTED {
        assert_eq!(transports[1]["available"], false);
        assert_eq!(
            transports[1]["why_not"],
            switchyard_socket::UNAVAILABLE_REASON
        );
    }
    if std::path::Path::new("/sys/class/net/lo").exists() {
        let lo = transports[1]["devices"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["name"] == "lo")
            .unwrap_or_else(|| panic!("{}", transports[1]));
        assert!(
            lo["detail"].as_str().unwrap().starts_with("loopback, "),
            "{lo}"
        );
    }
    assert!(v["machine"]["numa_nodes"].is_array());
    let settings = v["config"]["settings"].as_array().unwrap();
    assert_eq!(settings.len(), switchyard::config::Key::COUNT + 1);
    assert_eq!(settings[0]["key"], "template");
    for s in settings {
        let kind = s["source"]["kind"].as_str().unwrap();
        assert!(
            ["default", "template", "file", "env"].contains(&kind),
            "{s}"
        );
        assert!(s["value"].is_string() && s["from"].is_string(), "{s}");
    }
    assert!(v["config"]["warnings"].is_array());
}

#[test]
fn cores_show_each_pe_and_its_progress_thread() {
    let Some(out) = ok(&["info", "--np", "2"]) else {
        return;
    };
    assert!(
        out.contains("Cores (switchyard run -n 2 on this machine):"),
        "{out}"
    );
    assert!(out.contains("\n  rank 1 "), "{out}");
    let Some(out) = ok(&["info", "--json", "--np", "3"]) else {
        return;
    };
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["cores"]["pes"], 3);
    let plan = v["cores"]["plan"].as_array().unwrap();
    if v["cores"]["error"].is_null() {
        assert_eq!(plan.len(), 3);
        assert!(plan.iter().all(|r| r["why"].is_string()), "{out}");
    }
}

#[test]
fn config_file_values_show_their_file_and_line() {
    let file = scratch(
        "ok.toml",
        "# info test\ntemplate = \"ai\"\nheartbeat = \"150ms\"\n",
    );
    let path = file.to_str().unwrap();
    let Some(out) = ok(&["info", "--json", "--config", path]) else {
        return;
    };
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let settings = v["config"]["settings"].as_array().unwrap();
    let get = |key: &str| settings.iter().find(|s| s["key"] == key).unwrap();
    let hb = get("heartbeat");
    // The environment may override; when it does not, the file is the source.
    if std::env::var_os("SWITCHYARD_HEARTBEAT").is_none() {
        assert_eq!(hb["value"], "150ms");
        assert_eq!(hb["source"]["kind"], "file");
        assert_eq!(hb["source"]["path"], path);
        assert_eq!(hb["source"]["line"], 3);
    }
    if std::env::var_os("SWITCHYARD_TEMPLATE").is_none() {
        assert_eq!(v["config"]["template"], "ai");
        assert_eq!(get("template")["source"]["line"], 2);
        if std::env::var_os("SWITCHYARD_QUEUE_DEPTH").is_none() {
            assert_eq!(get("queue_depth")["source"]["kind"], "template");
            assert_eq!(get("queue_depth")["source"]["name"], "ai");
        }
    }
}

#[test]
fn bad_configuration_exits_2_with_the_message() {
    let file = scratch("bad.toml", "heap_size = \"lots\"\nqueue_depht = 64\n");
    let out = fails(&["info", "--config", file.to_str().unwrap()]);
    assert!(
        out.stderr.contains(&format!(
            "{}:1: heap_size = \"lots\": expected a size such as 65536, 64M or 1G",
            file.display()
        )),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr
            .contains("unknown key 'queue_depht' (did you mean 'queue_depth'?)"),
        "{}",
        out.stderr
    );
    let out = fails(&["info", "--config=/nonexistent/switchyard.toml"]);
    assert!(
        out.stderr
            .contains("cannot read the configuration file /nonexistent/switchyard.toml")
    );
}

#[test]
fn usage() {
    let out = run(&args(&["info", "--help"]));
    assert_eq!(out.code, 0);
    assert!(out.stdout.starts_with("Usage: switchyard info"));
    assert!(run(&args(&["--help"])).stdout.contains("switchyard info"));
    let out = fails(&["info", "--frobnicate"]);
    assert!(out.stderr.contains("unexpected argument '--frobnicate'"));
    assert!(out.stderr.contains("switchyard info --help"));
    fails(&["info", "--config"]);
    fails(&["info", "extra"]);
}
