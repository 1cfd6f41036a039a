//! `switchyard info`: what this machine offers switchyard, like `ucx_info`: the
//! transports that are available (and why the others are not), their devices,
//! machine facts (CPUs, NUMA nodes, huge pages), and the configuration in effect
//! with where each value came from.
//!
//! Everything is read from `/sys`, `/proc` and `/dev/shm` with `std::fs`; no
//! other program is run and nothing is changed (the shared-memory probe creates
//! and removes one empty file).

use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
};

use serde::Serialize;

use super::{EXIT_USAGE, Output};
use crate::config::{Config, ConfigError, ConfigWarning, ENV_CONFIG, Source, Template};

/// Usage of `switchyard info`.
pub const USAGE: &str = "\
Usage: switchyard info [OPTIONS]

Shows which transports this machine offers (and why the others are not
available), their devices, machine facts (CPUs, NUMA nodes, huge pages), and
the configuration in effect with where each value came from (default,
template, file or environment).

The configuration is read as a PE would read it: SWITCHYARD_CONFIG names a
TOML file, SWITCHYARD_TEMPLATE a template (trading, storage or ai), and
SWITCHYARD_<KEY> sets one key. A bad value exits with status 2.

Options:
  --config FILE   read this configuration file instead of $SWITCHYARD_CONFIG
  --json          print JSON instead of text
  -h, --help      this text
";

/// Why `switchyard info` cannot run. Every variant exits with status 2.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InfoCliError {
    /// `--help` was asked for (not an error; prints the usage).
    #[error("help requested")]
    Help,
    /// An option this command does not know.
    #[error("unknown option '{0}' (see `switchyard info --help`)")]
    UnknownOption(String),
    /// An option without its value.
    #[error("option '{0}' needs a value")]
    MissingValue(&'static str),
    /// A positional argument (the command takes none).
    #[error("unexpected argument '{0}' (`switchyard info` takes no arguments)")]
    ExtraArgument(String),
    /// The configuration in effect is bad.
    #[error("{0}")]
    Config(#[from] ConfigError),
}

/// Parsed `switchyard info` arguments.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InfoArgs {
    /// Configuration file to read instead of `$SWITCHYARD_CONFIG`.
    pub config: Option<String>,
    /// JSON output.
    pub json: bool,
}

/// Parses the arguments after `info`.
///
/// # Errors
///
/// [`InfoCliError::Help`] for `-h`/`--help`; [`InfoCliError::UnknownOption`],
/// [`InfoCliError::MissingValue`] or [`InfoCliError::ExtraArgument`] for bad
/// usage.
pub fn parse_args(args: &[String]) -> Result<InfoArgs, InfoCliError> {
    let mut out = InfoArgs::default();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v)),
            _ => (arg.as_str(), None),
        };
        match name {
            "-h" | "--help" if inline.is_none() => return Err(InfoCliError::Help),
            "--json" if inline.is_none() => out.json = true,
            "--config" => {
                let v = match inline {
                    Some(v) => v,
                    None => it
                        .next()
                        .map(String::as_str)
                        .ok_or(InfoCliError::MissingValue("--config"))?,
                };
                out.config = Some(v.into());
            }
            _ if arg.starts_with('-') && arg != "-" => {
                return Err(InfoCliError::UnknownOption(arg.clone()));
            }
            _ => return Err(InfoCliError::ExtraArgument(arg.clone())),
        }
    }
    Ok(out)
}

/// Runs `switchyard info` with the arguments after `info`.
pub fn run(args: &[String]) -> Output {
    match parse_args(args).and_then(|a| render(&a)) {
        Ok(out) => out,
        Err(InfoCliError::Help) => Output::ok(USAGE.into()),
        Err(e) => {
            let mut out = Output::usage_error(&e);
            if matches!(
                e,
                InfoCliError::UnknownOption(_)
                    | InfoCliError::MissingValue(_)
                    | InfoCliError::ExtraArgument(_)
            ) {
                out.stderr
                    .push_str("Run `switchyard info --help` for usage.\n");
            }
            debug_assert_eq!(out.code, EXIT_USAGE);
            out
        }
    }
}

fn render(args: &InfoArgs) -> Result<Output, InfoCliError> {
    let config = load_config(args.config.as_deref())?;
    let transports = probes();
    let machine = Machine::read();
    // Warnings about unknown variables are part of the report (a "Warnings"
    // section, or `config.warnings` in JSON), not stderr noise.
    Ok(Output::ok(if args.json {
        render_json(&transports, &machine, &config)
    } else {
        render_text(&transports, &machine, &config)
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

// TODO(probe): replace these two with `switchyard_core::transport::{ProbeReport,
// DeviceInfo}` (core feature `alloc`), which have the same shape.

/// What one transport can do here (the shape of the drivers' `probe()`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
struct ProbeReport {
    name: &'static str,
    available: bool,
    why_not: Option<String>,
    devices: Vec<DeviceInfo>,
}

/// One device of a transport.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
struct DeviceInfo {
    name: String,
    detail: String,
}

/// Every transport's report, shm, tcp, verbs.
fn probes() -> Vec<ProbeReport> {
    // TODO(probe): vec![switchyard_shm::probe(), switchyard_socket::probe(), switchyard_verbs::probe()]
    fallback_probes()
}

/// Probes done here until the drivers export theirs: `/dev/shm`,
/// `/sys/class/net`, `/sys/class/infiniband`.
fn fallback_probes() -> Vec<ProbeReport> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    vec![
        probe_shm(Path::new("/dev/shm"), &mounts),
        probe_socket(Path::new("/sys/class/net")),
        probe_verbs(Path::new("/sys/class/infiniband")),
    ]
}

fn unavailable(name: &'static str, why: String, devices: Vec<DeviceInfo>) -> ProbeReport {
    ProbeReport {
        name,
        available: false,
        why_not: Some(why),
        devices,
    }
}

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

/// Shared memory: `dir` must be a writable tmpfs (per `mounts`, the text of
/// `/proc/self/mounts`).
fn probe_shm(dir: &Path, mounts: &str) -> ProbeReport {
    const NAME: &str = "shm";
    let shown = dir.display();
    if !dir.is_dir() {
        return unavailable(
            NAME,
            format!("{shown} does not exist (POSIX shared memory needs a tmpfs there)"),
            Vec::new(),
        );
    }
    // The last mount on the path is the one in effect.
    let mount = mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_dev, at, fstype, opts) = (f.next()?, f.next()?, f.next()?, f.next()?);
            (Path::new(at) == dir).then_some((fstype, opts))
        })
        .next_back();
    let Some((fstype, opts)) = mount else {
        return unavailable(
            NAME,
            format!("{shown} is not a mount point (it should be a tmpfs)"),
            Vec::new(),
        );
    };
    let device = |detail: String| {
        vec![DeviceInfo {
            name: shown.to_string(),
            detail,
        }]
    };
    if fstype != "tmpfs" {
        return unavailable(
            NAME,
            format!("{shown} is a {fstype} file system, not a tmpfs"),
            device(fstype.into()),
        );
    }
    if opts.split(',').any(|o| o == "ro") {
        return unavailable(
            NAME,
            format!("{shown} is mounted read-only"),
            device(format!("tmpfs, read-only ({opts})")),
        );
    }
    if let Err(e) = try_write(dir) {
        return unavailable(
            NAME,
            format!("{shown} is not writable: {e}"),
            device(format!("tmpfs, not writable ({opts})")),
        );
    }
    let size = opts
        .split(',')
        .find_map(|o| o.strip_prefix("size="))
        .and_then(tmpfs_size)
        .map_or_else(
            || "size: the tmpfs default (half the memory)".to_string(),
            |b| format!("size {}", human_bytes(b)),
        );
    ProbeReport {
        name: NAME,
        available: true,
        why_not: None,
        devices: device(format!("tmpfs, writable, {size}")),
    }
}

/// A tmpfs `size=` option: bytes with an optional k, m or g suffix (a `%` size
/// is not resolved).
fn tmpfs_size(s: &str) -> Option<u64> {
    let (num, mult) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 1u64 << 10),
        b'm' | b'M' => (&s[..s.len() - 1], 1 << 20),
        b'g' | b'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>().ok()?.checked_mul(mult)
}

/// Creates and removes one empty file in `dir`.
fn try_write(dir: &Path) -> std::io::Result<()> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mut last = None;
    for i in 0..8 {
        let path = dir.join(format!(
            ".switchyard-probe-{}-{stamp}-{i}",
            std::process::id()
        ));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(_) => return std::fs::remove_file(&path),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no free probe name")))
}

/// TCP: the network interfaces under `root` (`/sys/class/net`), usable when
/// administratively up and not link-down.
fn probe_socket(root: &Path) -> ProbeReport {
    const NAME: &str = "tcp";
    const IFF_UP: u32 = 0x1;
    const ARPHRD_LOOPBACK: &str = "772";
    let Some(names) = list_dir(root) else {
        return unavailable(
            NAME,
            format!("no network interfaces ({} is absent)", root.display()),
            Vec::new(),
        );
    };
    let mut devices = Vec::new();
    let mut usable = 0;
    let mut states = Vec::new();
    for name in names {
        let dir = root.join(&name);
        let oper = read_trim(&dir.join("operstate")).unwrap_or_else(|| "unknown".into());
        let admin_up = read_trim(&dir.join("flags"))
            .and_then(|f| u32::from_str_radix(f.trim_start_matches("0x"), 16).ok())
            .is_some_and(|f| f & IFF_UP != 0);
        let loopback = read_trim(&dir.join("type")).as_deref() == Some(ARPHRD_LOOPBACK);
        let up = admin_up && (oper == "up" || oper == "unknown");
        let mut detail = String::new();
        if loopback {
            detail.push_str("loopback, ");
        }
        detail.push_str(if up { "up" } else { "down" });
        if oper != "up" && oper != "down" {
            let _ = write!(detail, " (operstate {oper})");
        }
        if let Some(mtu) = read_trim(&dir.join("mtu")) {
            let _ = write!(detail, ", mtu {mtu}");
        }
        if !loopback
            && let Some(mac) = read_trim(&dir.join("address"))
            && !mac.is_empty()
        {
            let _ = write!(detail, ", mac {mac}");
        }
        usable += usize::from(up);
        states.push(format!("{name} {}", if up { "up" } else { "down" }));
        devices.push(DeviceInfo { name, detail });
    }
    if usable == 0 {
        let why = if states.is_empty() {
            format!("no network interfaces ({} is empty)", root.display())
        } else {
            format!("no network interface is up ({})", states.join(", "))
        };
        return unavailable(NAME, why, devices);
    }
    ProbeReport {
        name: NAME,
        available: true,
        why_not: None,
        devices,
    }
}

/// RDMA verbs: the devices under `root` (`/sys/class/infiniband`) and their
/// ports; usable when a port is ACTIVE.
fn probe_verbs(root: &Path) -> ProbeReport {
    const NAME: &str = "verbs";
    if !root.exists() {
        return unavailable(
            NAME,
            format!(
                "the kernel has no InfiniBand support ({} is absent)",
                root.display()
            ),
            Vec::new(),
        );
    }
    let Some(names) = list_dir(root) else {
        return unavailable(
            NAME,
            format!("{} cannot be read", root.display()),
            Vec::new(),
        );
    };
    if names.is_empty() {
        return unavailable(
            NAME,
            format!("no RDMA device ({} is empty)", root.display()),
            Vec::new(),
        );
    }
    let mut devices = Vec::new();
    let mut active = 0;
    let mut states = Vec::new();
    for dev in names {
        let ports_dir = root.join(&dev).join("ports");
        let ports = list_dir(&ports_dir).unwrap_or_default();
        if ports.is_empty() {
            states.push(format!("{dev}: no ports"));
            devices.push(DeviceInfo {
                name: dev,
                detail: "no ports".into(),
            });
            continue;
        }
        for port in ports {
            let p = ports_dir.join(&port);
            // `state` reads like "4: ACTIVE".
            let state = read_trim(&p.join("state")).unwrap_or_else(|| "unknown".into());
            let state = state
                .split_once(':')
                .map_or(state.as_str(), |(_, s)| s.trim())
                .to_string();
            let mut detail = state.clone();
            for file in ["link_layer", "rate"] {
                if let Some(v) = read_trim(&p.join(file))
                    && !v.is_empty()
                {
                    let _ = write!(detail, ", {v}");
                }
            }
            let name = format!("{dev}:{port}");
            if state == "ACTIVE" {
                active += 1;
            } else {
                states.push(format!("{name} {state}"));
            }
            devices.push(DeviceInfo { name, detail });
        }
    }
    if active == 0 {
        return unavailable(
            NAME,
            format!("no active RDMA port ({})", states.join(", ")),
            devices,
        );
    }
    ProbeReport {
        name: NAME,
        available: true,
        why_not: None,
        devices,
    }
}

// ---------------------------------------------------------------------------
// Machine facts

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

/// `23.5 GiB`, `512 KiB`, `100 B`.
fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if b < 1024 {
        return format!("{b} B");
    }
    let mut v = b as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[unit])
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

// ---------------------------------------------------------------------------
// Rendering

fn render_text(transports: &[ProbeReport], m: &Machine, config: &Config) -> String {
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
            format!("available    {n} device{}", if n == 1 { "" } else { "s" })
        } else {
            format!(
                "unavailable  {}",
                t.why_not.as_deref().unwrap_or("no reason given")
            )
        };
        let _ = writeln!(s, "  {:<7} {status}", t.name);
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
    transports: &'a [ProbeReport],
    machine: &'a Machine,
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

fn render_json(transports: &[ProbeReport], machine: &Machine, config: &Config) -> String {
    let doc = JsonDoc {
        version: env!("CARGO_PKG_VERSION"),
        transports,
        machine,
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

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

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
        assert_eq!(parse_args(&[]).unwrap(), InfoArgs::default());
        assert_eq!(
            parse_args(&args(&["--json", "--config", "a.toml"])).unwrap(),
            InfoArgs {
                config: Some("a.toml".into()),
                json: true
            }
        );
        assert_eq!(
            parse_args(&args(&["--config=b.toml"]))
                .unwrap()
                .config
                .as_deref(),
            Some("b.toml")
        );
        assert!(matches!(
            parse_args(&args(&["-h"])),
            Err(InfoCliError::Help)
        ));
        assert!(matches!(
            parse_args(&args(&["--config"])),
            Err(InfoCliError::MissingValue("--config"))
        ));
        assert!(matches!(
            parse_args(&args(&["--bogus"])),
            Err(InfoCliError::UnknownOption(_))
        ));
        assert!(matches!(
            parse_args(&args(&["--json=1"])),
            Err(InfoCliError::UnknownOption(_))
        ));
        assert!(matches!(
            parse_args(&args(&["extra"])),
            Err(InfoCliError::ExtraArgument(_))
        ));
    }

    #[test]
    fn verbs_reasons() {
        let root = scratch("verbs");
        let ib = root.join("infiniband");
        let r = probe_verbs(&ib);
        assert!(!r.available);
        assert_eq!(
            r.why_not.unwrap(),
            format!(
                "the kernel has no InfiniBand support ({} is absent)",
                ib.display()
            )
        );
        std::fs::create_dir_all(&ib).unwrap();
        let r = probe_verbs(&ib);
        assert!(r.why_not.unwrap().starts_with("no RDMA device"));
        write(&ib.join("mlx5_0/ports/1/state"), "1: DOWN\n");
        write(&ib.join("mlx5_0/ports/1/link_layer"), "InfiniBand\n");
        let r = probe_verbs(&ib);
        assert!(!r.available);
        assert_eq!(r.why_not.unwrap(), "no active RDMA port (mlx5_0:1 DOWN)");
        write(&ib.join("rxe0/ports/1/state"), "4: ACTIVE\n");
        write(&ib.join("rxe0/ports/1/link_layer"), "Ethernet\n");
        write(&ib.join("rxe0/ports/1/rate"), "10 Gb/sec (1X QDR)\n");
        let r = probe_verbs(&ib);
        assert!(r.available);
        assert_eq!(r.devices.len(), 2);
        assert_eq!(r.devices[1].name, "rxe0:1");
        assert_eq!(r.devices[1].detail, "ACTIVE, Ethernet, 10 Gb/sec (1X QDR)");
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn socket_interfaces() {
        let root = scratch("net");
        let net = root.join("net");
        assert!(!probe_socket(&net).available);
        write(&net.join("eth0/operstate"), "down\n");
        write(&net.join("eth0/flags"), "0x1002\n");
        let r = probe_socket(&net);
        assert!(!r.available);
        assert_eq!(r.why_not.unwrap(), "no network interface is up (eth0 down)");
        write(&net.join("lo/operstate"), "unknown\n");
        write(&net.join("lo/flags"), "0x9\n");
        write(&net.join("lo/type"), "772\n");
        write(&net.join("lo/mtu"), "65536\n");
        let r = probe_socket(&net);
        assert!(r.available);
        assert_eq!(r.devices[1].name, "lo");
        assert_eq!(
            r.devices[1].detail,
            "loopback, up (operstate unknown), mtu 65536"
        );
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn shm_checks() {
        let root = scratch("shm");
        let dir = root.join("shm");
        let r = probe_shm(&dir, "");
        assert!(r.why_not.unwrap().contains("does not exist"));
        std::fs::create_dir_all(&dir).unwrap();
        let r = probe_shm(&dir, "");
        assert!(r.why_not.unwrap().contains("is not a mount point"));
        let line = |fs: &str, opts: &str| format!("x {} {fs} {opts} 0 0\n", dir.display());
        let r = probe_shm(&dir, &line("ext4", "rw"));
        assert!(
            r.why_not
                .unwrap()
                .contains("is a ext4 file system, not a tmpfs")
        );
        let r = probe_shm(&dir, &line("tmpfs", "ro,relatime"));
        assert!(r.why_not.unwrap().contains("read-only"));
        let r = probe_shm(&dir, &line("tmpfs", "rw,size=1048576k"));
        assert!(r.available, "{r:?}");
        assert_eq!(r.devices[0].detail, "tmpfs, writable, size 1 GiB");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
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
        assert_eq!(tmpfs_size("24683656k"), Some(24683656 << 10));
        assert_eq!(tmpfs_size("50%"), None);
        assert_eq!(tmpfs_size(""), None);
        assert_eq!(human_bytes(100), "100 B");
        assert_eq!(human_bytes(2 << 20), "2 MiB");
        assert_eq!(human_bytes(24683656 << 10), "23.5 GiB");
    }
}
