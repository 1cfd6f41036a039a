//! `switchyard info`: what this machine offers switchyard, like `ucx_info`: the
//! transports that are available (and why the others are not), their devices,
//! machine facts (CPUs, NUMA nodes, huge pages), and the configuration in effect
//! with where each value came from.
//!
//! The transports are probed by their drivers (`switchyard_shm::probe`,
//! `switchyard_socket::probe`, `switchyard_verbs::probe`); the machine facts are
//! read here from `/sys` and `/proc` with `std::fs`. No other program is run and
//! nothing is changed (the shared-memory probe creates and removes one empty
//! file). A build without the `verbs` feature probes no RDMA device: verbs is
//! unavailable, with the reason that this build has no verbs support.

use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
};

use serde::Serialize;
use switchyard::config::{Config, ConfigError, ConfigWarning, ENV_CONFIG, Source, Template};
use switchyard_core::transport::ProbeReport;
use switchyard_shm::human_bytes;
use verbs::{AtomicCap, nic_atomics};

use crate::Output;

mod cores;

/// The verbs driver's probe and atomics rule.
#[cfg(feature = "verbs")]
mod verbs {
    pub(super) use switchyard::context::verbs::nic_atomics;
    use switchyard_core::transport::ProbeReport;
    pub(super) use switchyard_verbs::params::AtomicCap;

    /// The probe's report, and the `atomic_cap` of the device of the port a
    /// PE would use (the first usable one).
    pub(super) fn probe() -> (ProbeReport, Option<AtomicCap>) {
        let verbs = switchyard_verbs::probe::probe();
        let cap = verbs.best().and_then(|(port, _)| {
            verbs.attrs.iter().find_map(|(name, a)| {
                (name == &port.device)
                    .then(|| a.as_ref().ok().map(|a| a.atomic_cap))
                    .flatten()
            })
        });
        (verbs.report(), cap)
    }
}

/// Without the `verbs` feature: no device, no capability, and the reason.
#[cfg(not(feature = "verbs"))]
mod verbs {
    use switchyard::{config::VerbsAtomics, context::verbs::NO_VERBS};
    use switchyard_core::transport::ProbeReport;

    /// No device's capability: there is none.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(super) enum AtomicCap {}

    impl AtomicCap {
        pub(super) fn name(self) -> &'static str {
            match self {}
        }
    }

    pub(super) fn nic_atomics(_: VerbsAtomics, cap: AtomicCap) -> (bool, &'static str) {
        match cap {}
    }

    /// Verbs unavailable: this build has none.
    pub(super) fn probe() -> (ProbeReport, Option<AtomicCap>) {
        let report = ProbeReport {
            name: "verbs",
            available: false,
            why_not: Some(NO_VERBS.into()),
            devices: Vec::new(),
        };
        (report, None)
    }
}

/// Why `switchyard info` cannot run. Every variant exits with status 2.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InfoCliError {
    /// The configuration in effect is bad.
    #[error("{0}")]
    Config(#[from] ConfigError),
}

/// What `switchyard info --help` says before the options.
pub(crate) const ABOUT: &str = "\
Shows which transports this machine offers (and why the others are not
available), their devices, machine facts (CPUs, NUMA nodes, huge pages), and
the configuration in effect with where each value came from (default,
template, file or environment).

The configuration is read as a PE would read it: SWITCHYARD_CONFIG names a
TOML file, SWITCHYARD_TEMPLATE a template (trading, storage or ai), and
SWITCHYARD_<KEY> sets one key. A bad value exits with status 2.";

/// `switchyard info` arguments.
#[derive(Debug, Clone, PartialEq, Eq, Default, clap::Args)]
pub struct InfoArgs {
    /// Read this configuration file instead of $SWITCHYARD_CONFIG
    #[arg(long, value_name = "FILE")]
    pub config: Option<String>,
    /// Print JSON instead of text
    #[arg(long)]
    pub json: bool,
    /// PEs of a job on this machine, for the plan of cores (where `switchyard
    /// run` pins them and their progress threads go) [default:
    /// $SWITCHYARD_LOCAL_SIZE, else 1]
    #[arg(
        long = "np",
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..=i64::from(switchyard_launch::MAX_PES))
    )]
    pub np: Option<u32>,
}

/// Runs `switchyard info`.
pub fn run(args: &InfoArgs) -> Output {
    match render(args) {
        Ok(out) => out,
        Err(e) => Output::usage_error(&e),
    }
}

fn render(args: &InfoArgs) -> Result<Output, InfoCliError> {
    let config = load_config(args.config.as_deref())?;
    let mut transports = probes();
    for t in &mut transports {
        t.decide_use(&config);
    }
    let machine = Machine::read();
    let n = args.np.unwrap_or_else(|| {
        std::env::var("SWITCHYARD_LOCAL_SIZE")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .filter(|&n| n >= 1)
            .unwrap_or(1)
    });
    let cores = cores::Cores::read(&config, n);
    // Warnings about unknown variables are part of the report (a "Warnings"
    // section, or `config.warnings` in JSON), not stderr noise.
    Ok(Output::ok(if args.json {
        render_json(&transports, &machine, &cores, &config)
    } else {
        let mut text = render_text(&transports, &machine, &config);
        // After the machine, before the configuration.
        let at = text.find("\nConfiguration (").unwrap_or(text.len());
        text.insert_str(at, &cores.text());
        text
    }))
}

/// The configuration from the process environment, with `--config` in place of
/// `$SWITCHYARD_CONFIG`.
fn load_config(file: Option<&str>) -> Result<Config, ConfigError> {
    let vars = std::env::vars_os()
        .map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            )
        })
        .filter(|(k, _)| file.is_none() || k != ENV_CONFIG)
        .chain(file.map(|f| (ENV_CONFIG.to_string(), f.to_string())));
    Config::load_from_vars(vars)
}

// ---------------------------------------------------------------------------
// Transport probes

/// What one transport can do here: a driver's
/// [`ProbeReport`], serializable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
struct TransportInfo {
    name: &'static str,
    available: bool,
    why_not: Option<String>,
    /// Whether a job started here with this configuration routes over it
    /// (available, and allowed by `transports`; verbs also needs TCP, its
    /// control channel).
    in_use: bool,
    /// Why an available transport is not used.
    not_used: Option<String>,
    devices: Vec<DeviceInfo>,
    /// Verbs only: the device's atomic capability and the atomics policy
    /// in force (`verbs_atomics`), in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    atomics: Option<String>,
    /// Verbs only: the device's `atomic_cap` (`none`, `HCA`, `global`).
    #[serde(skip_serializing_if = "Option::is_none")]
    atomic_cap: Option<&'static str>,
    /// Verbs only: the `atomic_cap` of the device a PE would use.
    #[serde(skip)]
    cap: Option<AtomicCap>,
}

impl TransportInfo {
    /// Sets `in_use` and `not_used` from the configuration.
    fn decide_use(&mut self, config: &Config) {
        let t = config.transports;
        let why = match self.name {
            _ if !self.available => None,
            "shm" if !t.shm => Some("SWITCHYARD_TRANSPORTS leaves shm out"),
            "tcp" if !t.tcp => Some("SWITCHYARD_TRANSPORTS leaves tcp out"),
            "verbs" if !t.verbs => Some("SWITCHYARD_TRANSPORTS leaves verbs out"),
            "verbs" if !t.tcp => Some(
                "verbs needs tcp for its control records (pair addresses, rebuilds): add tcp to SWITCHYARD_TRANSPORTS",
            ),
            _ => None,
        };
        self.in_use = self.available && why.is_none();
        self.not_used = why.map(str::to_string);
        if self.name == "verbs" {
            self.atomics = Some(atomics_text(config, self.cap));
            self.atomic_cap = self.cap.map(AtomicCap::name);
        }
    }
}

/// What `switchyard info` says about atomics over verbs: the device's
/// capability and what `verbs_atomics` makes of it (the rule a PE applies
/// when it attaches verbs, [`nic_atomics`]).
fn atomics_text(config: &Config, cap: Option<AtomicCap>) -> String {
    let setting = config.verbs_atomics.name();
    match cap {
        Some(cap) => {
            let (_, why) = nic_atomics(config.verbs_atomics, cap);
            format!("device {}, verbs_atomics = {setting}: {why}", cap.name())
        }
        None => format!("verbs_atomics = {setting} (no device to apply it to)"),
    }
}

/// One device of a transport.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
struct DeviceInfo {
    name: String,
    detail: String,
}

impl From<ProbeReport> for TransportInfo {
    fn from(r: ProbeReport) -> TransportInfo {
        TransportInfo {
            name: r.name,
            available: r.available,
            why_not: r.why_not,
            in_use: false,
            not_used: None,
            devices: r
                .devices
                .into_iter()
                .map(|d| DeviceInfo {
                    name: d.name,
                    detail: d.detail,
                })
                .collect(),
            atomics: None,
            atomic_cap: None,
            cap: None,
        }
    }
}

/// Every transport's report, shm, tcp, verbs, as each driver probes it.
fn probes() -> Vec<TransportInfo> {
    let (verbs, cap) = verbs::probe();
    let mut out: Vec<TransportInfo> = [switchyard_shm::probe(), switchyard_socket::probe(), verbs]
        .into_iter()
        .map(TransportInfo::from)
        .collect();
    out[2].cap = cap;
    out
}

// ---------------------------------------------------------------------------
// Machine facts

/// Reads a small sysfs/procfs file, trimmed.
fn read_trim(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Names in `dir`, sorted; `None` when it cannot be listed.
fn list_dir(dir: &Path) -> Option<Vec<String>> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    Some(names)
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
struct NumaNode {
    id: u32,
    cpus: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
struct HugePageInfo {
    total: u64,
    free: u64,
    page_size_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
struct Machine {
    hostname: Option<String>,
    kernel: Option<String>,
    /// `/sys/devices/system/cpu/online`, as written (`0-1`).
    cpus_online: Option<String>,
    cpus_online_count: Option<u32>,
    /// CPUs this process may run on.
    cpus_usable: Option<usize>,
    numa_nodes: Vec<NumaNode>,
    memory_bytes: Option<u64>,
    huge_pages: Option<HugePageInfo>,
}

impl Machine {
    fn read() -> Machine {
        let online = read_trim(Path::new("/sys/devices/system/cpu/online"));
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        Machine {
            hostname: read_trim(Path::new("/proc/sys/kernel/hostname")),
            kernel: read_trim(Path::new("/proc/sys/kernel/osrelease")),
            cpus_online_count: online.as_deref().and_then(count_cpulist),
            cpus_online: online,
            cpus_usable: std::thread::available_parallelism().ok().map(|n| n.get()),
            numa_nodes: numa_nodes(Path::new("/sys/devices/system/node")),
            memory_bytes: meminfo_kib(&meminfo, "MemTotal").and_then(|k| k.checked_mul(1024)),
            huge_pages: huge_pages(&meminfo),
        }
    }
}

/// NUMA nodes under `root` (`/sys/devices/system/node`), by id.
fn numa_nodes(root: &Path) -> Vec<NumaNode> {
    let mut nodes: Vec<NumaNode> = list_dir(root)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|n| {
            let id = n.strip_prefix("node")?.parse::<u32>().ok()?;
            let cpus = read_trim(&root.join(&n).join("cpulist")).unwrap_or_default();
            Some(NumaNode { id, cpus })
        })
        .collect();
    nodes.sort_by_key(|n| n.id);
    nodes
}

/// Number of CPUs in a kernel cpulist (`0-3,8,10-11`); `None` when malformed.
fn count_cpulist(s: &str) -> Option<u32> {
    let s = s.trim();
    if s.is_empty() {
        return Some(0);
    }
    let mut n: u32 = 0;
    for part in s.split(',') {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.trim().parse::<u32>().ok()?, b.trim().parse::<u32>().ok()?),
            None => {
                let a = part.trim().parse::<u32>().ok()?;
                (a, a)
            }
        };
        n = n.checked_add(b.checked_sub(a)?.checked_add(1)?)?;
    }
    Some(n)
}

/// A `Name: N kB` (or `Name: N`) field of `/proc/meminfo`.
fn meminfo_kib(meminfo: &str, field: &str) -> Option<u64> {
    meminfo.lines().find_map(|l| {
        let (name, rest) = l.split_once(':')?;
        if name.trim() != field {
            return None;
        }
        rest.split_whitespace().next()?.parse().ok()
    })
}

fn huge_pages(meminfo: &str) -> Option<HugePageInfo> {
    Some(HugePageInfo {
        total: meminfo_kib(meminfo, "HugePages_Total")?,
        free: meminfo_kib(meminfo, "HugePages_Free")?,
        page_size_bytes: meminfo_kib(meminfo, "Hugepagesize")?.checked_mul(1024)?,
    })
}

// ---------------------------------------------------------------------------
// Rendering

fn render_text(transports: &[TransportInfo], m: &Machine, config: &Config) -> String {
    let mut s = String::new();
    let _ = write!(s, "switchyard {}", env!("CARGO_PKG_VERSION"));
    if let Some(h) = &m.hostname {
        let _ = write!(s, " on {h}");
    }
    if let Some(k) = &m.kernel {
        let _ = write!(s, " (Linux {k})");
    }
    s.push_str("\n\nTransports:\n");
    for t in transports {
        let status = if t.available {
            let n = t.devices.len();
            let used = match &t.not_used {
                Some(why) => format!(", not used: {why}"),
                None if t.name == "verbs" => {
                    let peers = if config.verbs_routed {
                        ", used for NEAR peers and long messages to ROUTED peers"
                    } else {
                        ", used for NEAR peers (verbs_routed = off)"
                    };
                    let sets = if config.verbs_context_sets {
                        "; each context on QP sets of its own (verbs_context_sets = on)"
                    } else {
                        ""
                    };
                    format!("{peers}{sets}")
                }
                None => String::new(),
            };
            format!(
                "available    {n} device{}{used}",
                if n == 1 { "" } else { "s" }
            )
        } else {
            format!(
                "unavailable  {}",
                t.why_not.as_deref().unwrap_or("no reason given")
            )
        };
        let _ = writeln!(s, "  {:<7} {status}", t.name);
        if let Some(a) = t.atomics.as_ref().filter(|_| t.available) {
            let _ = writeln!(s, "  {:<7} atomics: {a}", "");
        }
    }

    s.push_str("\nDevices:\n");
    let width = transports
        .iter()
        .flat_map(|t| &t.devices)
        .map(|d| d.name.len())
        .max()
        .unwrap_or(0);
    for t in transports {
        if t.devices.is_empty() {
            let _ = writeln!(s, "  {:<7} (none)", t.name);
        }
        for d in &t.devices {
            let _ = writeln!(s, "  {:<7} {:<width$}  {}", t.name, d.name, d.detail);
        }
    }

    s.push_str("\nMachine:\n");
    let cpus = match (&m.cpus_online, m.cpus_online_count) {
        (Some(list), Some(n)) => format!("{n} online ({list})"),
        (Some(list), None) => format!("online {list}"),
        _ => "online: unknown (/sys/devices/system/cpu/online unreadable)".into(),
    };
    let usable = m
        .cpus_usable
        .map_or_else(String::new, |n| format!(", {n} usable by this process"));
    let _ = writeln!(s, "  {:<12} {cpus}{usable}", "CPUs");
    let numa = if m.numa_nodes.is_empty() {
        "unknown (/sys/devices/system/node is absent)".to_string()
    } else {
        let list: Vec<String> = m
            .numa_nodes
            .iter()
            .map(|n| format!("node{} CPUs {}", n.id, n.cpus))
            .collect();
        format!("{}: {}", m.numa_nodes.len(), list.join("; "))
    };
    let _ = writeln!(s, "  {:<12} {numa}", "NUMA nodes");
    if let Some(b) = m.memory_bytes {
        let _ = writeln!(s, "  {:<12} {}", "Memory", human_bytes(b));
    }
    let huge = m.huge_pages.as_ref().map_or_else(
        || "unknown (/proc/meminfo unreadable)".to_string(),
        |h| {
            format!(
                "{} free of {}, {} each",
                h.free,
                h.total,
                human_bytes(h.page_size_bytes)
            )
        },
    );
    let _ = writeln!(s, "  {:<12} {huge}", "Huge pages");

    let file = config
        .file()
        .map_or_else(|| "none".to_string(), |p| p.display().to_string());
    let template = config.template().map_or("none", Template::name);
    let _ = writeln!(s, "\nConfiguration (file: {file}; template: {template}):");
    let entries: Vec<_> = config.entries().collect();
    let kw = entries.iter().map(|e| e.key.len()).max().unwrap_or(0);
    let vw = entries.iter().map(|e| e.value.len()).max().unwrap_or(0);
    for e in &entries {
        let _ = writeln!(s, "  {:<kw$}  {:<vw$}  {}", e.key, e.value, e.source);
    }
    if !config.warnings().is_empty() {
        s.push_str("\nWarnings:\n");
        for w in config.warnings() {
            let _ = writeln!(s, "  {w}");
        }
    }
    s
}

#[derive(Serialize)]
struct JsonDoc<'a> {
    version: &'static str,
    transports: &'a [TransportInfo],
    machine: &'a Machine,
    cores: &'a cores::Cores,
    config: JsonConfig,
}

#[derive(Serialize)]
struct JsonConfig {
    file: Option<PathBuf>,
    template: Option<&'static str>,
    settings: Vec<JsonSetting>,
    warnings: Vec<JsonWarning>,
}

#[derive(Serialize)]
struct JsonSetting {
    key: &'static str,
    env: &'static str,
    value: String,
    /// Display form of the source (`env SWITCHYARD_HEAP_SIZE`).
    from: String,
    source: JsonSource,
}

#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
enum JsonSource {
    Default,
    Template { name: &'static str },
    File { path: PathBuf, line: u32 },
    Env { var: &'static str },
}

impl From<&Source> for JsonSource {
    fn from(s: &Source) -> JsonSource {
        match s {
            Source::Default => JsonSource::Default,
            Source::Template(name) => JsonSource::Template { name },
            Source::File { path, line } => JsonSource::File {
                path: path.clone(),
                line: *line,
            },
            Source::Env(var) => JsonSource::Env { var },
        }
    }
}

#[derive(Serialize)]
struct JsonWarning {
    var: String,
    suggestion: Option<&'static str>,
    message: String,
}

impl From<&ConfigWarning> for JsonWarning {
    fn from(w: &ConfigWarning) -> JsonWarning {
        JsonWarning {
            var: w.var.clone(),
            suggestion: w.suggestion,
            message: w.to_string(),
        }
    }
}

fn render_json(
    transports: &[TransportInfo],
    machine: &Machine,
    cores: &cores::Cores,
    config: &Config,
) -> String {
    let doc = JsonDoc {
        version: env!("CARGO_PKG_VERSION"),
        transports,
        machine,
        cores,
        config: JsonConfig {
            file: config.file().map(Path::to_path_buf),
            template: config.template().map(Template::name),
            settings: config
                .entries()
                .map(|e| JsonSetting {
                    key: e.key,
                    env: e.env,
                    value: e.value,
                    from: e.source.to_string(),
                    source: e.source.into(),
                })
                .collect(),
            warnings: config.warnings().iter().map(JsonWarning::from).collect(),
        },
    };
    // Serializing plain structs and strings cannot fail.
    let mut s = serde_json::to_string_pretty(&doc).unwrap_or_default();
    s.push('\n');
    s
}

#[cfg(test)]
mod test {
    use super::*;

    /// A fresh scratch folder under the system temp dir.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "switchyard-info-test-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn argument_parsing() {
        let parse = |a: &[&str]| match crate::cli::parse_strs(a) {
            Ok(crate::cli::Command::Info(i)) => Ok(i),
            Ok(other) => panic!("{other:?}"),
            Err(out) => Err(out),
        };
        assert_eq!(parse(&["info"]).unwrap(), InfoArgs::default());
        assert_eq!(
            parse(&["info", "--json", "--config", "a.toml"]).unwrap(),
            InfoArgs {
                config: Some("a.toml".into()),
                json: true,
                np: None,
            }
        );
        assert_eq!(
            parse(&["info", "--config=b.toml"])
                .unwrap()
                .config
                .as_deref(),
            Some("b.toml")
        );
        assert_eq!(parse(&["info", "-h"]).unwrap_err().code, 0);
        for bad in [
            &["info", "--config"][..],
            &["info", "--bogus"],
            &["info", "--json=1"],
            &["info", "extra"],
        ] {
            let out = parse(bad).unwrap_err();
            assert_eq!(out.code, crate::EXIT_USAGE, "{bad:?}");
            assert!(
                out.stderr.contains("switchyard info --help"),
                "{}",
                out.stderr
            );
        }
    }

    #[test]
    fn transports_come_from_the_drivers() {
        let t = probes();
        let names: Vec<&str> = t.iter().map(|t| t.name).collect();
        assert_eq!(names, ["shm", "tcp", "verbs"]);
        for t in &t {
            assert_eq!(t.available, t.why_not.is_none(), "{t:?}");
        }
        // The drivers not written yet say so (or why not sooner, for verbs).
        if !switchyard_socket::IMPLEMENTED {
            assert!(!t[1].available);
            assert_eq!(
                t[1].why_not.as_deref(),
                Some(switchyard_socket::UNAVAILABLE_REASON)
            );
        }
        #[cfg(feature = "verbs")]
        if !switchyard_verbs::IMPLEMENTED {
            assert!(!t[2].available);
        }
    }

    /// Without the `verbs` feature, verbs is unavailable because this build
    /// has none, whatever the machine offers.
    #[cfg(not(feature = "verbs"))]
    #[test]
    fn a_build_without_verbs_says_so() {
        use switchyard::context::verbs::NO_VERBS;
        let config = Config::default();
        let mut t = probes();
        for t in &mut t {
            t.decide_use(&config);
        }
        assert!(!t[2].available && !t[2].in_use && t[2].devices.is_empty());
        assert_eq!(t[2].why_not.as_deref(), Some(NO_VERBS));
        let text = render_text(&t, &Machine::read(), &config);
        assert!(
            text.contains(&format!("  verbs   unavailable  {NO_VERBS}\n")),
            "{text}"
        );
        assert!(!text.contains("atomics:"), "{text}");
    }

    #[test]
    fn probe_report_conversion() {
        let r = ProbeReport {
            name: "verbs",
            available: false,
            why_not: Some("no RDMA port is active (mlx5_0:1 DOWN)".into()),
            devices: vec![switchyard_core::transport::DeviceInfo {
                name: "mlx5_0:1".into(),
                detail: "DOWN, InfiniBand".into(),
            }],
        };
        let t = TransportInfo::from(r);
        assert_eq!(
            t,
            TransportInfo {
                name: "verbs",
                available: false,
                why_not: Some("no RDMA port is active (mlx5_0:1 DOWN)".into()),
                in_use: false,
                not_used: None,
                devices: vec![DeviceInfo {
                    name: "mlx5_0:1".into(),
                    detail: "DOWN, InfiniBand".into(),
                }],
                atomics: None,
                atomic_cap: None,
                cap: None,
            }
        );
        let json = serde_json::to_value(&t).unwrap();
        assert_eq!(json["why_not"], "no RDMA port is active (mlx5_0:1 DOWN)");
        assert_eq!(json["devices"][0]["name"], "mlx5_0:1");
        assert_eq!(json["devices"][0]["detail"], "DOWN, InfiniBand");
    }

    /// `in_use` is what a job here would do: an available transport the
    /// configuration allows (verbs also needs tcp, its control channel).
    #[test]
    fn in_use_follows_availability_and_transports() {
        let load = |v: &str| {
            Config::load_from_vars([("SWITCHYARD_TRANSPORTS".to_string(), v.to_string())]).unwrap()
        };
        let mut t = TransportInfo {
            name: "verbs",
            available: true,
            why_not: None,
            in_use: false,
            not_used: None,
            devices: Vec::new(),
            atomics: None,
            atomic_cap: None,
            cap: None,
        };
        t.decide_use(&load("all"));
        assert!(t.in_use && t.not_used.is_none(), "{t:?}");
        t.decide_use(&load("shm,verbs"));
        assert!(
            !t.in_use
                && t.not_used
                    .as_deref()
                    .is_some_and(|w| w.contains("needs tcp"))
        );
        t.decide_use(&load("tcp"));
        assert!(
            !t.in_use
                && t.not_used
                    .as_deref()
                    .is_some_and(|w| w.contains("leaves verbs out"))
        );
        t.available = false;
        t.decide_use(&load("all"));
        assert!(
            !t.in_use && t.not_used.is_none(),
            "the probe's reason says why"
        );
    }

    /// The atomics line: the device's capability and the policy in force.
    #[cfg(feature = "verbs")]
    #[test]
    fn atomics_show_the_capability_and_the_policy() {
        let load = |v: &str| {
            Config::load_from_vars([("SWITCHYARD_VERBS_ATOMICS".to_string(), v.to_string())])
                .unwrap()
        };
        let mut t = TransportInfo {
            name: "verbs",
            available: true,
            why_not: None,
            in_use: false,
            not_used: None,
            devices: Vec::new(),
            atomics: None,
            atomic_cap: None,
            cap: Some(AtomicCap::Hca),
        };
        t.decide_use(&load("auto"));
        let a = t.atomics.clone().unwrap();
        assert!(
            a.starts_with("device HCA, verbs_atomics = auto:") && a.contains("over TCP"),
            "{a}"
        );
        let json = serde_json::to_value(&t).unwrap();
        assert_eq!(json["atomic_cap"], "HCA");
        assert!(json.get("cap").is_none());
        t.decide_use(&load("nic"));
        assert!(t.atomics.as_deref().unwrap().contains("use the NIC"));
        t.cap = Some(AtomicCap::Global);
        t.decide_use(&load("auto"));
        assert!(t.atomics.as_deref().unwrap().contains("use the NIC"));
        t.decide_use(&load("cpu"));
        assert!(t.atomics.as_deref().unwrap().contains("over TCP"));
        let text = render_text(&[t.clone()], &Machine::read(), &load("cpu"));
        assert!(
            text.contains("atomics: device global, verbs_atomics = cpu"),
            "{text}"
        );
        t.cap = None;
        t.decide_use(&load("auto"));
        assert!(t.atomics.as_deref().unwrap().contains("no device"));
        // Other transports have no atomics line.
        let mut shm = TransportInfo { name: "shm", ..t };
        shm.atomics = None;
        shm.decide_use(&load("auto"));
        assert!(shm.atomics.is_none());
    }

    /// `verbs_context_sets`: listed among the settings, and said on the
    /// verbs line when verbs is used.
    #[test]
    fn verbs_context_sets_is_shown() {
        let load = |v: &str| {
            Config::load_from_vars([("SWITCHYARD_VERBS_CONTEXT_SETS".to_string(), v.to_string())])
                .unwrap()
        };
        let t = TransportInfo {
            name: "verbs",
            available: true,
            why_not: None,
            in_use: true,
            not_used: None,
            devices: Vec::new(),
            atomics: None,
            atomic_cap: None,
            cap: None,
        };
        let on = render_text(std::slice::from_ref(&t), &Machine::read(), &load("on"));
        assert!(
            on.lines()
                .any(|l| l.trim_start().starts_with("verbs_context_sets") && l.contains(" on ")),
            "{on}"
        );
        assert!(
            on.contains("QP sets of its own (verbs_context_sets = on)"),
            "{on}"
        );
        let off = render_text(&[t], &Machine::read(), &load("off"));
        assert!(
            off.lines()
                .any(|l| l.trim_start().starts_with("verbs_context_sets") && l.contains(" off ")),
            "{off}"
        );
        assert!(!off.contains("QP sets of its own"), "{off}");
    }

    #[test]
    fn numa_nodes_by_id() {
        let root = scratch("node");
        assert!(numa_nodes(&root.join("absent")).is_empty());
        write(&root.join("node10/cpulist"), "20-21\n");
        write(&root.join("node2/cpulist"), "4-5\n");
        std::fs::create_dir_all(root.join("power")).unwrap();
        std::fs::create_dir_all(root.join("node0")).unwrap();
        let nodes = numa_nodes(&root);
        let shown: Vec<(u32, &str)> = nodes.iter().map(|n| (n.id, n.cpus.as_str())).collect();
        assert_eq!(shown, [(0, ""), (2, "4-5"), (10, "20-21")]);
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn small_parsers() {
        assert_eq!(count_cpulist("0-1"), Some(2));
        assert_eq!(count_cpulist("0-3,8,10-11"), Some(7));
        assert_eq!(count_cpulist(""), Some(0));
        assert_eq!(count_cpulist("3-1"), None);
        assert_eq!(count_cpulist("x"), None);
        assert_eq!(count_cpulist("0-4294967295"), None);
        let mi = "MemTotal:       49367312 kB\nHugePages_Total:       4\nHugePages_Free:        3\nHugepagesize:       2048 kB\n";
        assert_eq!(meminfo_kib(mi, "MemTotal"), Some(49367312));
        assert_eq!(
            huge_pages(mi),
            Some(HugePageInfo {
                total: 4,
                free: 3,
                page_size_bytes: 2 << 20
            })
        );
        assert_eq!(huge_pages(""), None);
        assert_eq!(human_bytes(100), "100 B");
        assert_eq!(human_bytes(2 << 20), "2 MiB");
        assert_eq!(human_bytes(24683656 << 10), "23.5 GiB");
    }
}
