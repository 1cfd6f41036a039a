//! `switchyard topo`: the class matrix of a topology, one PE's routes, and what
//! the topology costs in memory.

use std::{fmt::Write as _, io::Read as _};

use serde::Serialize;
use switchyard_core::{
    class::{PathClass, TransportId},
    route::{
        Op, Policy, PolicyConfig, Route, SelectError, Selector, SelectorError, TransportRoles,
        UnreachableReason,
    },
    topology::{Footprint, LayoutError, Shape, Topology, TopologyBox},
};
use switchyard_topo::{ClusterSpec, Format, TopoFileError, parse_topology};

use crate::{EXIT_USAGE, Output};

/// Largest job printed as a PE × PE matrix; above it, one row per node (or a
/// summary when the nodes are too many as well).
pub const MATRIX_LIMIT: u32 = 64;

/// Largest topology file read, in bytes.
pub const MAX_FILE_BYTES: u64 = 64 << 20;

/// Reader slots counted in the footprint: an application thread and a progress
/// thread.
pub const FOOTPRINT_READERS: usize = 2;

/// Usage of `switchyard topo`.
pub const USAGE: &str = "\
Usage: switchyard topo [FILE] [OPTIONS]

Shows the path class of every pair of PEs (like `nvidia-smi topo -m`), and with
--as one PE's route for each peer and message size.

FILE is a Slurm topology.conf (SwitchName=... Nodes=... Switches=...) or a TOML
file ([[switch]] name/nodes/switches); `-` reads standard input. Without FILE, a
built-in example: 2 leaf switches x 2 nodes joined by a spine, 2 PEs per node.

Options:
  --pes-per-node K     PEs on each node (default: the file's pes_per_node, else 1)
  --as PE              show PE's view: class and transport for each peer
  --down TRANSPORT     mark shm, verbs or tcp down for every peer (repeatable)
  --threshold BYTES    short/long message threshold (default 8192; K and M suffixes)
  --format FMT         auto (default), slurm or toml
  --json               print JSON instead of text
  -h, --help           this text
";

/// The transports the `topo` command models, with their transport ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// Shared memory, id 0.
    Shm = 0,
    /// RDMA verbs, id 1.
    Verbs = 1,
    /// TCP, id 2.
    Tcp = 2,
}

impl Transport {
    /// All of them, by id.
    pub const ALL: [Transport; 3] = [Transport::Shm, Transport::Verbs, Transport::Tcp];

    /// Name as printed and as accepted by `--down`.
    pub fn name(self) -> &'static str {
        match self {
            Transport::Shm => "shm",
            Transport::Verbs => "verbs",
            Transport::Tcp => "tcp",
        }
    }

    /// The transport id.
    pub fn id(self) -> TransportId {
        match self {
            Transport::Shm => SHM,
            Transport::Verbs => VERBS,
            Transport::Tcp => TCP,
        }
    }

    fn parse(s: &str) -> Option<Transport> {
        match s.to_ascii_lowercase().as_str() {
            "shm" => Some(Transport::Shm),
            "verbs" | "rdma" | "ib" => Some(Transport::Verbs),
            "tcp" => Some(Transport::Tcp),
            _ => None,
        }
    }

    fn from_id(t: TransportId) -> Option<Transport> {
        Transport::ALL.into_iter().find(|x| x.id() == t)
    }
}

const SHM: TransportId = match TransportId::new(0) {
    Some(t) => t,
    None => unreachable!(),
};
const VERBS: TransportId = match TransportId::new(1) {
    Some(t) => t,
    None => unreachable!(),
};
const TCP: TransportId = match TransportId::new(2) {
    Some(t) => t,
    None => unreachable!(),
};

/// Why `switchyard topo` cannot run. Every variant exits with status 2.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TopoCliError {
    /// `--help` was asked for (not an error; prints the usage).
    #[error("help requested")]
    Help,
    /// An option this command does not know.
    #[error("unknown option '{0}' (see `switchyard topo --help`)")]
    UnknownOption(String),
    /// An option without its value.
    #[error("option '{0}' needs a value")]
    MissingValue(&'static str),
    /// An option value that does not parse.
    #[error("option '{flag}': bad value '{value}' (expected {expected})")]
    BadValue {
        /// The option.
        flag: &'static str,
        /// The value given.
        value: String,
        /// What it takes.
        expected: &'static str,
    },
    /// A second positional argument.
    #[error("unexpected argument '{0}' (only one topology file can be given)")]
    ExtraArgument(String),
    /// The file cannot be read.
    #[error("cannot read '{path}': {source}")]
    Read {
        /// The path.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is too large to be a topology.
    #[error("'{path}' is larger than {max} bytes; not a topology file")]
    TooLarge {
        /// The path.
        path: String,
        /// The limit.
        max: u64,
    },
    /// The file is not text.
    #[error("'{path}' is not UTF-8 text")]
    NotUtf8 {
        /// The path.
        path: String,
    },
    /// The file does not parse.
    #[error("{}", .error.in_file(.path))]
    File {
        /// The path (or `<stdin>`, `<built-in>`).
        path: String,
        /// The error.
        error: TopoFileError,
    },
    /// The job does not fit (zero or too many PEs).
    #[error("{0}")]
    Job(TopoFileError),
    /// `--as` names a PE outside the job.
    #[error("--as {pe}: no such PE (the job has {n_pes} PEs, 0 to {last})", last = .n_pes.saturating_sub(1))]
    NoSuchPe {
        /// The PE asked for.
        pe: u32,
        /// PEs in the job.
        n_pes: u32,
    },
    /// The core refused the topology layout (a bug if it happens).
    #[error("cannot lay out the topology: {0}")]
    Layout(#[from] LayoutError),
    /// The route selector could not be made (a bug if it happens).
    #[error("route selector: {0}")]
    Selector(#[from] SelectorError),
}

/// Parsed `switchyard topo` arguments.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopoArgs {
    /// Topology file; `None` for the built-in example, `-` for stdin.
    pub file: Option<String>,
    /// Its syntax.
    pub format: Format,
    /// PEs per node, if given.
    pub pes_per_node: Option<u32>,
    /// The PE whose view to show.
    pub as_pe: Option<u32>,
    /// Transports marked down for every peer.
    pub down: Vec<Transport>,
    /// Short/long threshold, if given.
    pub threshold: Option<u32>,
    /// JSON output.
    pub json: bool,
}

fn parse_u32(flag: &'static str, value: &str, expected: &'static str) -> Result<u32, TopoCliError> {
    value.parse::<u32>().map_err(|_| TopoCliError::BadValue {
        flag,
        value: value.into(),
        expected,
    })
}

fn parse_bytes(flag: &'static str, value: &str) -> Result<u32, TopoCliError> {
    let bad = || TopoCliError::BadValue {
        flag,
        value: value.into(),
        expected: "a byte count such as 8192, 8K or 1M, below 4G",
    };
    let v = value.trim();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (num, suffix) = v.split_at(split);
    let mult: u64 = match suffix.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        _ => return Err(bad()),
    };
    let n: u64 = num.parse().map_err(|_| bad())?;
    n.checked_mul(mult)
        .and_then(|b| u32::try_from(b).ok())
        .ok_or_else(bad)
}

/// Parses the arguments after `topo`.
///
/// # Errors
/// [`TopoCliError`] for an unknown option, a missing or bad value, or a second
/// file; [`TopoCliError::Help`] for `-h`/`--help`.
pub fn parse_args(args: &[String]) -> Result<TopoArgs, TopoCliError> {
    let mut out = TopoArgs::default();
    let mut it = args.iter();
    let mut only_files = false;
    while let Some(arg) = it.next() {
        if only_files || arg == "-" || !arg.starts_with('-') {
            if let Some(_first) = &out.file {
                return Err(TopoCliError::ExtraArgument(arg.clone()));
            }
            out.file = Some(arg.clone());
            continue;
        }
        if arg == "--" {
            only_files = true;
            continue;
        }
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (arg.as_str(), None),
        };
        const FLAGS: [&str; 5] = [
            "--pes-per-node",
            "--as",
            "--down",
            "--threshold",
            "--format",
        ];
        let Some(&flag) = FLAGS.iter().find(|f| **f == name) else {
            return match name {
                "-h" | "--help" if inline.is_none() => Err(TopoCliError::Help),
                "--json" if inline.is_none() => {
                    out.json = true;
                    continue;
                }
                _ => Err(TopoCliError::UnknownOption(arg.clone())),
            };
        };
        let value = match inline {
            Some(v) => v,
            None => it
                .next()
                .map(String::as_str)
                .ok_or(TopoCliError::MissingValue(flag))?,
        };
        match flag {
            "--pes-per-node" => {
                let k = parse_u32(flag, value, "a whole number of at least 1")?;
                if k == 0 {
                    return Err(TopoCliError::BadValue {
                        flag,
                        value: value.into(),
                        expected: "a whole number of at least 1",
                    });
                }
                out.pes_per_node = Some(k);
            }
            "--as" => out.as_pe = Some(parse_u32(flag, value, "a PE number")?),
            "--down" => {
                let t = Transport::parse(value).ok_or_else(|| TopoCliError::BadValue {
                    flag,
                    value: value.into(),
                    expected: "shm, verbs or tcp",
                })?;
                if !out.down.contains(&t) {
                    out.down.push(t);
                }
            }
            "--threshold" => out.threshold = Some(parse_bytes(flag, value)?),
            _ => {
                out.format = match value.to_ascii_lowercase().as_str() {
                    "auto" => Format::Auto,
                    "slurm" => Format::Slurm,
                    "toml" => Format::Toml,
                    _ => {
                        return Err(TopoCliError::BadValue {
                            flag,
                            value: value.into(),
                            expected: "auto, slurm or toml",
                        });
                    }
                }
            }
        }
    }
    Ok(out)
}

/// Runs `switchyard topo` with the arguments after `topo`.
pub fn run(args: &[String]) -> Output {
    match parse_args(args).and_then(|a| render(&a)) {
        Ok(text) => Output::ok(text),
        Err(TopoCliError::Help) => Output::ok(USAGE.into()),
        Err(e) => {
            let mut out = Output::usage_error(&e);
            if matches!(
                e,
                TopoCliError::UnknownOption(_)
                    | TopoCliError::MissingValue(_)
                    | TopoCliError::BadValue { .. }
                    | TopoCliError::ExtraArgument(_)
            ) {
                out.stderr
                    .push_str("Run `switchyard topo --help` for usage.\n");
            }
            debug_assert_eq!(out.code, EXIT_USAGE);
            out
        }
    }
}

fn read_file(path: &str) -> Result<String, TopoCliError> {
    let read_err = |source| TopoCliError::Read {
        path: path.into(),
        source,
    };
    let mut bytes = Vec::new();
    if path == "-" {
        std::io::stdin()
            .take(MAX_FILE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(read_err)?;
    } else {
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes))
            .map_err(read_err)?;
    }
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(TopoCliError::TooLarge {
            path: path.into(),
            max: MAX_FILE_BYTES,
        });
    }
    String::from_utf8(bytes).map_err(|_| TopoCliError::NotUtf8 { path: path.into() })
}

/// A loaded job: the spec, where it came from, PEs per node.
struct Job {
    spec: ClusterSpec,
    source: String,
    ppn: u32,
    n_pes: u32,
}

fn load(args: &TopoArgs) -> Result<Job, TopoCliError> {
    let (spec, source) = match &args.file {
        None => (ClusterSpec::example(), "built-in example".to_string()),
        Some(path) => {
            let text = read_file(path)?;
            let format = match args.format {
                Format::Auto => Format::from_path(path),
                f => f,
            };
            let shown = if path == "-" { "<stdin>" } else { path };
            let spec = parse_topology(&text, format).map_err(|error| TopoCliError::File {
                path: shown.into(),
                error,
            })?;
            (spec, shown.to_string())
        }
    };
    let ppn = args.pes_per_node.or(spec.pes_per_node()).unwrap_or(1);
    let n_pes = spec.n_pes(ppn).map_err(TopoCliError::Job)?;
    if let Some(pe) = args.as_pe
        && pe >= n_pes
    {
        return Err(TopoCliError::NoSuchPe { pe, n_pes });
    }
    Ok(Job {
        spec,
        source,
        ppn,
        n_pes,
    })
}

// ---------------------------------------------------------------------------
// The model both renderings share

/// Short matrix cell for a class.
pub fn cell(class: PathClass) -> &'static str {
    match class {
        PathClass::Local => "X",
        PathClass::Shm => "SHM",
        PathClass::Near => "NEAR",
        PathClass::Routed => "RTD",
        PathClass::Unreachable => "--",
    }
}

const LEGEND: [(PathClass, &str); 5] = [
    (PathClass::Local, "the same PE"),
    (PathClass::Shm, "another PE on the same node: shared memory"),
    (
        PathClass::Near,
        "another node behind the same leaf switch: RDMA (verbs)",
    ),
    (
        PathClass::Routed,
        "another leaf switch, joined through a spine/router switch",
    ),
    (
        PathClass::Unreachable,
        "no link: switches in disconnected trees, or a node under no switch",
    ),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum View {
    Pe,
    Node,
    Summary,
}

impl View {
    fn of(job: &Job) -> View {
        if job.n_pes <= MATRIX_LIMIT {
            View::Pe
        } else if job.spec.nodes().len() <= MATRIX_LIMIT as usize {
            View::Node
        } else {
            View::Summary
        }
    }

    fn name(self) -> &'static str {
        match self {
            View::Pe => "pe",
            View::Node => "node",
            View::Summary => "summary",
        }
    }
}

/// The outcome of one select, for display.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
struct Choice {
    #[serde(skip_serializing_if = "Option::is_none")]
    transport: Option<&'static str>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    fallback: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    #[serde(skip)]
    short_error: &'static str,
}

impl Choice {
    fn of(r: Result<Route, SelectError>) -> Choice {
        match r {
            Ok(route) => Choice {
                transport: Some(Transport::from_id(route.transport).map_or("?", Transport::name)),
                fallback: route.downgraded,
                error: None,
                short_error: "",
            },
            Err(e) => Choice {
                transport: None,
                fallback: false,
                short_error: match e {
                    SelectError::Unreachable {
                        reason: UnreachableReason::NoLink,
                        ..
                    } => "no link",
                    SelectError::Unreachable {
                        reason: UnreachableReason::NoHealthyTransport,
                        ..
                    } => "none healthy",
                    SelectError::Unreachable { .. } => "none configured",
                    SelectError::DowngradeForbidden { .. } => "fallback forbidden",
                    SelectError::InvalidPe { .. } => "no such PE",
                },
                error: Some(e.to_string()),
            },
        }
    }

    fn text(&self) -> String {
        match self.transport {
            Some(t) if self.fallback => format!("{t}*"),
            Some(t) => t.into(),
            None => format!("! {}", self.short_error),
        }
    }
}

/// Consecutive peers with the same class and choices.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
struct RouteRow {
    first: u32,
    last: u32,
    class: &'static str,
    short: Choice,
    long: Choice,
}

struct AsView {
    pe: u32,
    threshold: u32,
    rows: Vec<RouteRow>,
    merged: bool,
}

fn routes(job: &Job, me: u32, threshold: u32, down: &[Transport]) -> Result<AsView, TopoCliError> {
    let shape = Shape {
        me,
        n_pes: job.n_pes,
        n_transports: 3,
        load_hints: true,
    };
    let store = TopologyBox::new(shape, 1);
    let topo = Topology::new(store.mem(), shape, |peer| {
        job.spec.class_of(job.ppn, me, peer)
    })?;
    for t in Transport::ALL.into_iter().filter(|t| !down.contains(t)) {
        for peer in 0..job.n_pes {
            topo.set_health(t.id(), peer, true);
        }
    }
    let roles = TransportRoles {
        shm: Some(SHM),
        rdma: Some(VERBS),
        stream: [Some(TCP), None, None, None],
    };
    let policy = Policy::new(PolicyConfig {
        roles,
        short_threshold: threshold,
        ..PolicyConfig::default()
    });
    let mut selector = Selector::new(&topo, policy)?;
    let mut sel = selector.pin();
    let merged = job.n_pes > MATRIX_LIMIT;
    let mut rows: Vec<RouteRow> = Vec::new();
    for peer in 0..job.n_pes {
        let class = sel.class(peer).unwrap_or(PathClass::Unreachable);
        let short = if threshold == 0 {
            Choice {
                transport: None,
                fallback: false,
                error: Some("no message is shorter than a threshold of 0".into()),
                short_error: "n/a",
            }
        } else {
            Choice::of(sel.select(peer, threshold - 1, Op::Put))
        };
        let long = Choice::of(sel.select(peer, threshold, Op::Put));
        let row = RouteRow {
            first: peer,
            last: peer,
            class: class.name(),
            short,
            long,
        };
        match rows.last_mut() {
            Some(prev)
                if merged
                    && prev.last + 1 == peer
                    && prev.class == row.class
                    && prev.short == row.short
                    && prev.long == row.long =>
            {
                prev.last = peer;
            }
            _ => rows.push(row),
        }
    }
    Ok(AsView {
        pe: me,
        threshold,
        rows,
        merged,
    })
}

/// Ordered PE pairs per class, computed from group sizes (no N² walk).
fn pair_counts(job: &Job) -> [u64; 5] {
    let spec = &job.spec;
    let ppn = job.ppn as u64;
    let n = job.n_pes as u64;
    let mut per_leaf = vec![0u64; spec.leaves().len()];
    let mut per_tree = vec![0u64; spec.switches().len()];
    for i in 0..spec.nodes().len() as u32 {
        let leaf = spec.node_locality(i).switch;
        if let Some(sw) = spec.leaf_switch(leaf) {
            per_leaf[leaf as usize] += ppn;
            per_tree[sw.tree as usize] += ppn;
        }
    }
    let local = n;
    let shm = spec.nodes().len() as u64 * ppn * ppn.saturating_sub(1);
    let sq = |x: &u64| x * x;
    let same_leaf: u64 = per_leaf.iter().map(sq).sum();
    let same_tree: u64 = per_tree.iter().map(sq).sum();
    let on_leaf_nodes = per_leaf.iter().sum::<u64>() / ppn.max(1);
    let near = same_leaf - on_leaf_nodes * ppn * ppn;
    let routed = same_tree - same_leaf;
    let unreachable = n * n - local - shm - near - routed;
    [local, shm, near, routed, unreachable]
}

/// Thousands separators: 1234567 → "1,234,567".
fn group(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn pe_range(first: u32, last: u32) -> String {
    if first == last {
        format!("PE{first}")
    } else {
        format!("PE{first}-PE{last}")
    }
}

fn switch_name(spec: &ClusterSpec, node: u32) -> &str {
    spec.leaf_switch(spec.node_locality(node).switch)
        .map_or("(none)", |s| s.name.as_str())
}

// ---------------------------------------------------------------------------
// Rendering

fn render(args: &TopoArgs) -> Result<String, TopoCliError> {
    let job = load(args)?;
    let threshold = args
        .threshold
        .unwrap_or(PolicyConfig::default().short_threshold);
    let as_view = match args.as_pe {
        Some(pe) => Some(routes(&job, pe, threshold, &args.down)?),
        None => None,
    };
    let view = View::of(&job);
    Ok(if args.json {
        render_json(&job, view, as_view.as_ref(), &args.down)
    } else {
        render_text(&job, view, as_view.as_ref(), &args.down)
    })
}

fn render_text(job: &Job, view: View, as_view: Option<&AsView>, down: &[Transport]) -> String {
    let spec = &job.spec;
    let mut o = String::new();
    let n_nodes = spec.nodes().len();
    let orphans = spec.nodes().iter().filter(|n| n.switch.is_none()).count();
    let _ = writeln!(
        o,
        "switchyard topo: {} ({}): {} nodes x {} PE{} per node = {} PEs; {} leaf switches in {} {}{}",
        job.source,
        spec.format().name(),
        group(n_nodes),
        job.ppn,
        if job.ppn == 1 { "" } else { "s" },
        group(job.n_pes as usize),
        spec.leaves().len(),
        spec.trees(),
        if spec.trees() == 1 { "tree" } else { "trees" },
        if orphans > 0 {
            format!("; {orphans} nodes under no switch")
        } else {
            String::new()
        }
    );
    o.push('\n');
    match as_view {
        Some(v) => text_as(&mut o, job, v, down),
        None => {
            match view {
                View::Pe => text_pe_matrix(&mut o, job),
                View::Node => text_node_matrix(&mut o, job),
                View::Summary => text_summary(&mut o, job),
            }
            o.push_str("\nLegend:\n");
            for (class, what) in LEGEND {
                let _ = writeln!(o, "  {:<5} {:<12} {what}", cell(class), class.name());
            }
        }
    }
    o.push('\n');
    text_footprint(&mut o, job);
    o
}

fn text_pe_matrix(o: &mut String, job: &Job) {
    let spec = &job.spec;
    let w = format!("PE{}", job.n_pes.saturating_sub(1)).len().max(4) + 2;
    let _ = write!(o, "{:w$}", "");
    for pe in 0..job.n_pes {
        let _ = write!(o, "{:<w$}", format!("PE{pe}"));
    }
    let nw = spec
        .nodes()
        .iter()
        .map(|n| n.name.len())
        .max()
        .unwrap_or(4)
        .max(4)
        + 2;
    let _ = writeln!(o, "{:<nw$}Switch", "Node");
    for a in 0..job.n_pes {
        let _ = write!(o, "{:<w$}", format!("PE{a}"));
        for b in 0..job.n_pes {
            let _ = write!(o, "{:<w$}", cell(spec.class_of(job.ppn, a, b)));
        }
        let node = a / job.ppn;
        let name = spec
            .nodes()
            .get(node as usize)
            .map_or("?", |n| n.name.as_str());
        let _ = writeln!(o, "{name:<nw$}{}", switch_name(spec, node));
    }
}

fn text_node_matrix(o: &mut String, job: &Job) {
    let spec = &job.spec;
    let _ = writeln!(
        o,
        "{} PEs are more than {MATRIX_LIMIT}: one row per node (all {} PEs of a node share memory; X in the PE matrix would be SHM here).\n",
        group(job.n_pes as usize),
        job.ppn
    );
    let nodes = spec.nodes();
    let w = nodes.iter().map(|n| n.name.len()).max().unwrap_or(4).max(4) + 2;
    let _ = write!(o, "{:w$}", "");
    for n in nodes {
        let _ = write!(o, "{:<w$}", n.name);
    }
    let pw = format!("{}-{}", job.n_pes, job.n_pes).len() + 2;
    let _ = writeln!(o, "{:<pw$}Switch", "PEs");
    for a in 0..nodes.len() as u32 {
        let _ = write!(o, "{:<w$}", nodes[a as usize].name);
        for b in 0..nodes.len() as u32 {
            let _ = write!(o, "{:<w$}", cell(spec.node_class(a, b)));
        }
        let first = a * job.ppn;
        let _ = writeln!(
            o,
            "{:<pw$}{}",
            format!("{first}-{}", first + job.ppn - 1),
            switch_name(spec, a)
        );
    }
}

fn text_summary(o: &mut String, job: &Job) {
    let spec = &job.spec;
    let _ = writeln!(
        o,
        "{} PEs on {} nodes are too many for a matrix: summary by leaf switch.\n",
        group(job.n_pes as usize),
        group(spec.nodes().len())
    );
    let nw = spec
        .leaves()
        .iter()
        .take(MATRIX_LIMIT as usize)
        .filter_map(|&s| spec.switches().get(s as usize))
        .map(|s| s.name.len())
        .max()
        .unwrap_or(0)
        .max(11)
        + 2;
    let _ = writeln!(o, "{:<nw$}{:<8}{:<10}PEs", "Leaf switch", "Tree", "Nodes");
    for &s in spec.leaves().iter().take(MATRIX_LIMIT as usize) {
        let Some(sw) = spec.switches().get(s as usize) else {
            continue;
        };
        let _ = writeln!(
            o,
            "{:<nw$}{:<8}{:<10}{}",
            sw.name,
            sw.tree,
            group(sw.nodes.len()),
            group(sw.nodes.len() * job.ppn as usize)
        );
    }
    if spec.leaves().len() > MATRIX_LIMIT as usize {
        let _ = writeln!(
            o,
            "... and {} more leaf switches",
            group(spec.leaves().len() - MATRIX_LIMIT as usize)
        );
    }
    let _ = writeln!(o, "\nOrdered PE pairs by class:");
    for (class, count) in PathClass::ALL.into_iter().zip(pair_counts(job)) {
        let _ = writeln!(
            o,
            "  {:<5} {:<12} {:>20}",
            cell(class),
            class.name(),
            group(count as usize)
        );
    }
}

fn text_as(o: &mut String, job: &Job, v: &AsView, down: &[Transport]) {
    let spec = &job.spec;
    let node = v.pe / job.ppn;
    let node_name = |n: u32| {
        spec.nodes()
            .get(n as usize)
            .map_or("?", |n| n.name.as_str())
    };
    let downs: Vec<&str> = down.iter().map(|t| t.name()).collect();
    let _ = writeln!(
        o,
        "PE{}'s view (on {}, switch {}): transport per peer under the current health (down: {}).",
        v.pe,
        node_name(node),
        switch_name(spec, node),
        if downs.is_empty() {
            "none".into()
        } else {
            downs.join(", ")
        }
    );
    if v.merged {
        let _ = writeln!(
            o,
            "{} PEs are more than {MATRIX_LIMIT}: consecutive peers with the same routes share a row.",
            group(job.n_pes as usize)
        );
    }
    o.push('\n');
    let short_h = format!("Short (<{} B)", v.threshold);
    let long_h = format!("Long (>={} B)", v.threshold);
    let cells: Vec<[String; 5]> = v
        .rows
        .iter()
        .map(|r| {
            let (na, nb) = (r.first / job.ppn, r.last / job.ppn);
            let nodes = if na == nb {
                node_name(na).to_string()
            } else {
                format!("{}..{}", node_name(na), node_name(nb))
            };
            [
                pe_range(r.first, r.last),
                nodes,
                r.class.to_string(),
                r.short.text(),
                r.long.text(),
            ]
        })
        .collect();
    let head = [
        "Peer".to_string(),
        "Node".into(),
        "Class".into(),
        short_h,
        long_h,
    ];
    let mut widths = head.clone().map(|h| h.len());
    for row in &cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.len());
        }
    }
    for row in std::iter::once(&head).chain(&cells) {
        let mut line = String::new();
        for (c, w) in row.iter().zip(widths) {
            let _ = write!(line, "{c:<w$}  ", w = w);
        }
        let _ = writeln!(o, "{}", line.trim_end());
    }
    o.push_str(
        "\nTransports: shm = shared memory (t0), verbs = RDMA verbs (t1), tcp = TCP (t2).\n\
         * = fallback: not the class's first choice. ! = select failed: no link (UNREACHABLE),\n\
         none healthy (every candidate is down).\n",
    );
    if let Some(e) = v
        .rows
        .iter()
        .flat_map(|r| [&r.short.error, &r.long.error])
        .flatten()
        .next()
    {
        let _ = writeln!(o, "First select error: {e}.");
    }
}

fn text_footprint(o: &mut String, job: &Job) {
    let f = Footprint::of(job.n_pes, 3, true, FOOTPRINT_READERS);
    let m = Footprint::of(1_000_000, 3, true, FOOTPRINT_READERS);
    let mib = |b: usize| b as f64 / (1u64 << 20) as f64;
    let _ = writeln!(
        o,
        "Topology memory per PE (3 transports, health and load bits, {FOOTPRINT_READERS} reader slots):"
    );
    let rows = [
        (
            "class row",
            f.class_row,
            m.class_row,
            "2 bits per peer".to_string(),
        ),
        (
            "health bits",
            f.health,
            m.health,
            "1 bit per transport and peer".into(),
        ),
        (
            "load bits",
            f.load,
            m.load,
            "1 bit per transport and peer".into(),
        ),
        (
            "row total",
            f.row(),
            m.row(),
            format!("{:.2} MiB at 1,000,000 PEs", mib(m.row())),
        ),
        (
            "versioned topology",
            f.total(),
            m.total(),
            format!("2 class rows, bits, readers; {:.2} MiB", mib(m.total())),
        ),
    ];
    let job_h = format!("this job ({} PEs)", group(job.n_pes as usize));
    let million_h = "1,000,000 PEs";
    let jw = rows
        .iter()
        .map(|r| group(r.1).len() + 2)
        .chain([job_h.len()])
        .max()
        .unwrap_or(0);
    let mw = rows
        .iter()
        .map(|r| group(r.2).len() + 2)
        .chain([million_h.len()])
        .max()
        .unwrap_or(0);
    let _ = writeln!(o, "  {:<20}{job_h:>jw$}  {million_h:>mw$}", "");
    for (what, a, b, note) in rows {
        let (a, b) = (format!("{} B", group(a)), format!("{} B", group(b)));
        let _ = writeln!(o, "  {what:<20}{a:>jw$}  {b:>mw$}  {note}");
    }
}

#[derive(Serialize)]
struct JsonPe<'a> {
    pe: u32,
    node: &'a str,
    node_id: u32,
    switch: Option<&'a str>,
    switch_id: Option<u32>,
}

#[derive(Serialize)]
struct JsonNode<'a> {
    id: u32,
    name: &'a str,
    switch: Option<&'a str>,
    switch_id: Option<u32>,
    tree: Option<u32>,
    first_pe: u32,
    last_pe: u32,
}

#[derive(Serialize)]
struct JsonSwitch<'a> {
    name: &'a str,
    line: u32,
    leaf_id: Option<u32>,
    tree: u32,
    switches: Vec<&'a str>,
    nodes: usize,
}

#[derive(Serialize)]
struct JsonClass {
    name: &'static str,
    cell: &'static str,
    meaning: &'static str,
}

#[derive(Serialize)]
struct JsonTransport {
    id: usize,
    name: &'static str,
    healthy: bool,
}

#[derive(Serialize)]
struct JsonAs<'a> {
    pe: u32,
    short_threshold: u32,
    down: Vec<&'static str>,
    transports: Vec<JsonTransport>,
    /// Whether consecutive peers with equal routes share an entry.
    merged: bool,
    routes: &'a [RouteRow],
}

#[derive(Serialize)]
struct JsonFootprint {
    class_row: usize,
    health: usize,
    load: usize,
    readers: usize,
    row: usize,
    total: usize,
}

impl From<Footprint> for JsonFootprint {
    fn from(f: Footprint) -> Self {
        JsonFootprint {
            class_row: f.class_row,
            health: f.health,
            load: f.load,
            readers: f.readers,
            row: f.row(),
            total: f.total(),
        }
    }
}

#[derive(Serialize)]
struct JsonFootprints {
    transports: u8,
    load_hints: bool,
    readers: usize,
    job: JsonFootprint,
    million_pes: JsonFootprint,
}

/// The `--json` document. Keys appear in this order.
#[derive(Serialize)]
struct JsonDoc<'a> {
    source: &'a str,
    format: &'static str,
    pes_per_node: u32,
    n_nodes: usize,
    n_pes: u32,
    leaf_switches: usize,
    trees: u32,
    /// `pe` (matrix of PEs), `node` (matrix of nodes) or `summary`.
    view: &'static str,
    classes: Vec<JsonClass>,
    nodes: Vec<JsonNode<'a>>,
    switches: Vec<JsonSwitch<'a>>,
    pair_counts: std::collections::BTreeMap<&'static str, u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pes: Option<Vec<JsonPe<'a>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    matrix: Option<Vec<Vec<&'static str>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    node_matrix: Option<Vec<Vec<&'static str>>>,
    #[serde(rename = "as", skip_serializing_if = "Option::is_none")]
    as_pe: Option<JsonAs<'a>>,
    footprint: JsonFootprints,
}

fn render_json(job: &Job, view: View, as_view: Option<&AsView>, down: &[Transport]) -> String {
    let spec = &job.spec;
    let leaf_of = |node: u32| {
        let l = spec.node_locality(node).switch;
        spec.leaf_switch(l).map(|s| (s, l))
    };
    let nodes = spec
        .nodes()
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let leaf = leaf_of(i as u32);
            JsonNode {
                id: i as u32,
                name: &n.name,
                switch: leaf.map(|(s, _)| s.name.as_str()),
                switch_id: leaf.map(|(_, l)| l),
                tree: leaf.map(|(s, _)| s.tree),
                first_pe: i as u32 * job.ppn,
                last_pe: (i as u32 + 1) * job.ppn - 1,
            }
        })
        .collect();
    let switches = spec
        .switches()
        .iter()
        .map(|s| JsonSwitch {
            name: &s.name,
            line: s.line,
            leaf_id: s.leaf,
            tree: s.tree,
            switches: s
                .children
                .iter()
                .filter_map(|&c| spec.switches().get(c as usize))
                .map(|c| c.name.as_str())
                .collect(),
            nodes: s.nodes.len(),
        })
        .collect();
    let pes = (view == View::Pe).then(|| {
        (0..job.n_pes)
            .map(|pe| {
                let node = pe / job.ppn;
                let leaf = leaf_of(node);
                JsonPe {
                    pe,
                    node: spec.nodes().get(node as usize).map_or("?", |n| &n.name),
                    node_id: node,
                    switch: leaf.map(|(s, _)| s.name.as_str()),
                    switch_id: leaf.map(|(_, l)| l),
                }
            })
            .collect()
    });
    let matrix = (view == View::Pe).then(|| {
        (0..job.n_pes)
            .map(|a| {
                (0..job.n_pes)
                    .map(|b| spec.class_of(job.ppn, a, b).name())
                    .collect()
            })
            .collect()
    });
    let node_matrix = (view == View::Node).then(|| {
        let n = spec.nodes().len() as u32;
        (0..n)
            .map(|a| (0..n).map(|b| spec.node_class(a, b).name()).collect())
            .collect()
    });
    let doc = JsonDoc {
        source: &job.source,
        format: spec.format().name(),
        pes_per_node: job.ppn,
        n_nodes: spec.nodes().len(),
        n_pes: job.n_pes,
        leaf_switches: spec.leaves().len(),
        trees: spec.trees(),
        view: view.name(),
        classes: LEGEND
            .iter()
            .map(|&(c, meaning)| JsonClass {
                name: c.name(),
                cell: cell(c),
                meaning,
            })
            .collect(),
        nodes,
        switches,
        pair_counts: PathClass::ALL
            .into_iter()
            .map(PathClass::name)
            .zip(pair_counts(job))
            .collect(),
        pes,
        matrix,
        node_matrix,
        as_pe: as_view.map(|v| JsonAs {
            pe: v.pe,
            short_threshold: v.threshold,
            down: down.iter().map(|t| t.name()).collect(),
            transports: Transport::ALL
                .iter()
                .map(|t| JsonTransport {
                    id: t.id().index(),
                    name: t.name(),
                    healthy: !down.contains(t),
                })
                .collect(),
            merged: v.merged,
            routes: &v.rows,
        }),
        footprint: JsonFootprints {
            transports: 3,
            load_hints: true,
            readers: FOOTPRINT_READERS,
            job: Footprint::of(job.n_pes, 3, true, FOOTPRINT_READERS).into(),
            million_pes: Footprint::of(1_000_000, 3, true, FOOTPRINT_READERS).into(),
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

    fn ok(a: &[&str]) -> String {
        let out = run(&args(a));
        assert_eq!(out.code, 0, "{a:?}: {}", out.stderr);
        out.stdout
    }

    fn fail(a: &[&str]) -> String {
        let out = run(&args(a));
        assert_eq!(out.code, EXIT_USAGE, "{a:?}: {}", out.stdout);
        assert!(out.stdout.is_empty());
        out.stderr
    }

    #[test]
    fn argument_parsing() {
        let a = parse_args(&args(&[
            "t.conf",
            "--pes-per-node=4",
            "--as",
            "3",
            "--down",
            "verbs",
            "--down=TCP",
            "--threshold",
            "4K",
            "--json",
            "--format",
            "slurm",
        ]))
        .unwrap();
        assert_eq!(
            a,
            TopoArgs {
                file: Some("t.conf".into()),
                format: Format::Slurm,
                pes_per_node: Some(4),
                as_pe: Some(3),
                down: vec![Transport::Verbs, Transport::Tcp],
                threshold: Some(4096),
                json: true,
            }
        );
        assert_eq!(
            parse_args(&args(&["--", "-odd"])).unwrap().file.as_deref(),
            Some("-odd")
        );
        assert_eq!(parse_bytes("x", "1M").unwrap(), 1 << 20);
        assert_eq!(parse_bytes("x", "100").unwrap(), 100);
        assert!(parse_bytes("x", "4096M").is_err());
        assert!(parse_bytes("x", "12Q").is_err());
    }

    #[test]
    fn argument_errors() {
        assert!(fail(&["--pes-per-node", "0"]).contains(
            "option '--pes-per-node': bad value '0' (expected a whole number of at least 1)"
        ));
        assert!(fail(&["--pes-per-node", "two"]).contains("bad value 'two'"));
        assert!(fail(&["--as", "-1"]).contains("option '--as': bad value '-1'"));
        assert!(fail(&["--as", "8"]).contains("--as 8: no such PE (the job has 8 PEs, 0 to 7)"));
        assert!(fail(&["--as"]).contains("option '--as' needs a value"));
        assert!(fail(&["--down", "carrier-pigeon"]).contains("expected shm, verbs or tcp"));
        assert!(fail(&["--threshold", "lots"]).contains("option '--threshold'"));
        assert!(fail(&["--format", "xml"]).contains("expected auto, slurm or toml"));
        assert!(fail(&["--bogus"]).contains("unknown option '--bogus'"));
        assert!(fail(&["--json=yes"]).contains("unknown option '--json=yes'"));
        assert!(fail(&["a", "b"]).contains("unexpected argument 'b'"));
        let e = fail(&["/nonexistent/topology.conf"]);
        assert!(
            e.contains("cannot read '/nonexistent/topology.conf'"),
            "{e}"
        );
        assert!(ok(&["--help"]).starts_with("Usage: switchyard topo"));
    }

    #[test]
    fn builtin_matrix() {
        let out = ok(&[]);
        assert!(out.contains(
            "built-in example (toml): 4 nodes x 2 PEs per node = 8 PEs; 2 leaf switches in 1 tree"
        ));
        let row0 = out.lines().find(|l| l.starts_with("PE0 ")).unwrap();
        let cells: Vec<&str> = row0.split_whitespace().collect();
        assert_eq!(
            cells,
            [
                "PE0", "X", "SHM", "NEAR", "NEAR", "RTD", "RTD", "RTD", "RTD", "node01", "leaf0"
            ]
        );
        assert!(out.contains("Legend:"));
        assert!(out.contains("--    UNREACHABLE"));
        assert!(out.contains("1,000,000 B"), "{out}");
    }

    #[test]
    fn builtin_as_view_and_fallbacks() {
        let out = ok(&["--as", "0"]);
        let row = |out: &str, peer: &str| -> Vec<String> {
            out.lines()
                .find(|l| l.starts_with(&format!("{peer} ")))
                .unwrap()
                .split_whitespace()
                .map(String::from)
                .collect()
        };
        assert_eq!(row(&out, "PE0"), ["PE0", "node01", "LOCAL", "shm", "shm"]);
        assert_eq!(row(&out, "PE1"), ["PE1", "node01", "SHM", "shm", "shm"]);
        assert_eq!(
            row(&out, "PE2"),
            ["PE2", "node02", "NEAR", "verbs", "verbs"]
        );
        assert_eq!(
            row(&out, "PE4"),
            ["PE4", "node03", "ROUTED", "tcp", "verbs"]
        );
        let out = ok(&["--as", "0", "--down", "verbs"]);
        assert_eq!(row(&out, "PE2"), ["PE2", "node02", "NEAR", "tcp*", "tcp*"]);
        assert_eq!(row(&out, "PE4"), ["PE4", "node03", "ROUTED", "tcp", "tcp*"]);
        let out = ok(&["--as", "0", "--down", "verbs", "--down", "tcp"]);
        assert_eq!(
            row(&out, "PE2"),
            [
                "PE2", "node02", "NEAR", "!", "none", "healthy", "!", "none", "healthy"
            ]
        );
        assert!(
            out.contains("First select error: PE 2 (NEAR) is unreachable: no healthy transport.")
        );
        let out = ok(&["--as", "0", "--down", "shm"]);
        assert_eq!(row(&out, "PE1"), ["PE1", "node01", "SHM", "tcp*", "verbs*"]);
        let out = ok(&["--as", "0", "--threshold", "0"]);
        assert_eq!(
            row(&out, "PE4"),
            ["PE4", "node03", "ROUTED", "!", "n/a", "verbs"]
        );
    }

    #[test]
    fn json_output() {
        let out = ok(&["--json", "--as", "2", "--down", "verbs"]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["n_pes"], 8);
        assert_eq!(v["view"], "pe");
        assert_eq!(v["pes"][3]["node"], "node02");
        assert_eq!(v["pes"][3]["switch"], "leaf0");
        assert_eq!(v["matrix"][0][2], "NEAR");
        assert_eq!(v["matrix"][0][7], "ROUTED");
        assert_eq!(v["as"]["pe"], 2);
        assert_eq!(v["as"]["routes"][0]["class"], "NEAR");
        assert_eq!(v["as"]["routes"][0]["short"]["transport"], "tcp");
        assert_eq!(v["as"]["routes"][0]["short"]["fallback"], true);
        assert_eq!(v["as"]["routes"][2]["class"], "LOCAL");
        assert_eq!(v["footprint"]["million_pes"]["row"], 1_000_000);
        assert_eq!(v["pair_counts"]["LOCAL"], 8);
    }

    fn spec_job(text: &str, ppn: u32) -> Job {
        let spec = parse_topology(text, Format::Auto).unwrap();
        let n_pes = spec.n_pes(ppn).unwrap();
        Job {
            spec,
            source: "test".into(),
            ppn,
            n_pes,
        }
    }

    #[test]
    fn pair_counts_match_a_brute_force_walk() {
        let text = "SwitchName=a Nodes=n[1-3]\nSwitchName=b Nodes=n[4-5]\nSwitchName=t Switches=a,b\nSwitchName=c Nodes=m[1-2]\n";
        for ppn in [1, 3] {
            let job = spec_job(text, ppn);
            let mut brute = [0u64; 5];
            for a in 0..job.n_pes {
                for b in 0..job.n_pes {
                    brute[job.spec.class_of(ppn, a, b).index()] += 1;
                }
            }
            assert_eq!(pair_counts(&job), brute, "ppn {ppn}");
        }
    }

    #[test]
    fn large_jobs_get_node_and_summary_views() {
        let text =
            "SwitchName=a Nodes=n[1-4]\nSwitchName=b Nodes=n[5-8]\nSwitchName=t Switches=a,b\n";
        let job = spec_job(text, 16);
        assert_eq!(View::of(&job), View::Node);
        let out = render_text(&job, View::Node, None, &[]);
        assert!(
            out.contains("128 PEs are more than 64: one row per node"),
            "{out}"
        );
        let row = out.lines().find(|l| l.starts_with("n1 ")).unwrap();
        assert_eq!(
            row.split_whitespace().collect::<Vec<_>>(),
            [
                "n1", "SHM", "NEAR", "NEAR", "NEAR", "RTD", "RTD", "RTD", "RTD", "0-15", "a"
            ]
        );
        let v = routes(&job, 0, 8192, &[]).unwrap();
        assert!(v.merged);
        let ranges: Vec<(u32, u32, &str)> =
            v.rows.iter().map(|r| (r.first, r.last, r.class)).collect();
        assert_eq!(
            ranges,
            [
                (0, 0, "LOCAL"),
                (1, 15, "SHM"),
                (16, 63, "NEAR"),
                (64, 127, "ROUTED")
            ]
        );
        let text = "SwitchName=a Nodes=n[1-100]\nSwitchName=b Nodes=n[101-200]\n";
        let job = spec_job(text, 1);
        assert_eq!(View::of(&job), View::Summary);
        let out = render_text(&job, View::Summary, None, &[]);
        assert!(
            out.contains("200 PEs on 200 nodes are too many for a matrix"),
            "{out}"
        );
        assert!(out.contains("UNREACHABLE"));
        let json: serde_json::Value =
            serde_json::from_str(&render_json(&job, View::Summary, None, &[])).unwrap();
        assert_eq!(json["view"], "summary");
        assert!(json.get("matrix").is_none());
        assert_eq!(json["pair_counts"]["UNREACHABLE"], 2 * 100 * 100);
    }

    #[test]
    fn groups_thousands() {
        assert_eq!(group(0), "0");
        assert_eq!(group(999), "999");
        assert_eq!(group(1000), "1,000");
        assert_eq!(group(1_250_256), "1,250,256");
    }
}
