//! `switchyard topo`: the class matrix of a topology, one PE's routes, and what
//! the topology costs in memory; with `--svg FILE.svg`, the matrix as a heat
//! map with those routes over the PE's row (`svg`).

use std::io::Read as _;

use switchyard_core::{
    class::TransportId,
    route::{PolicyConfig, SelectorError},
    topology::LayoutError,
};
use switchyard_topo::{ClusterSpec, Format, TopoFileError, parse_topology};

use crate::{Output, values};

mod json;
mod model;
mod svg;
mod text;

pub use model::cell;
use model::{View, routes};

/// Largest job printed as a PE × PE matrix; above it, one row per node (or a
/// summary when the nodes are too many as well).
pub const MATRIX_LIMIT: u32 = 64;

/// Largest topology file read, in bytes.
pub const MAX_FILE_BYTES: u64 = 64 << 20;

/// Reader slots counted in the footprint: an application thread and a progress
/// thread.
pub const FOOTPRINT_READERS: usize = 2;

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

    /// By name, any case; `rdma` and `ib` are verbs (`--down`).
    fn parse(s: &str) -> Result<Transport, String> {
        match s.to_ascii_lowercase().as_str() {
            "shm" => Ok(Transport::Shm),
            "verbs" | "rdma" | "ib" => Ok(Transport::Verbs),
            "tcp" => Ok(Transport::Tcp),
            _ => Err("expected shm, verbs or tcp".into()),
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
    /// `--svg`: the matrix is too large to draw, or the file cannot be
    /// written.
    #[error("--svg: {0}")]
    Svg(String),
}

/// What `switchyard topo --help` says before the options.
pub(crate) const ABOUT: &str = "\
Shows the path class of every pair of PEs (like `nvidia-smi topo -m`), and with
--as one PE's route for each peer and message size.

FILE is a Slurm topology.conf (SwitchName=... Nodes=... Switches=...) or a TOML
file ([[switch]] name/nodes/switches); `-` reads standard input. Without FILE, a
built-in example: 2 leaf switches x 2 nodes joined by a spine, 2 PEs per node.";

/// `switchyard topo` arguments.
#[derive(Debug, Clone, PartialEq, Eq, Default, clap::Args)]
pub struct TopoArgs {
    /// Topology file; `-` for standard input [default: the built-in example]
    #[arg(value_name = "FILE")]
    pub file: Option<String>,
    /// Its syntax: auto, slurm or toml
    #[arg(long, value_name = "FMT", default_value = "auto", value_parser = format)]
    pub format: Format,
    /// PEs on each node [default: the file's pes_per_node, else 1]
    #[arg(
        long = "pes-per-node",
        value_name = "K",
        allow_negative_numbers = true,
        value_parser = values::at_least_one
    )]
    pub pes_per_node: Option<u32>,
    /// Show PE's view: class and transport for each peer
    #[arg(
        long = "as",
        value_name = "PE",
        allow_negative_numbers = true,
        value_parser = pe
    )]
    pub as_pe: Option<u32>,
    /// Mark shm, verbs or tcp down for every peer (repeatable)
    #[arg(long, value_name = "TRANSPORT", value_parser = Transport::parse)]
    pub down: Vec<Transport>,
    /// Short/long message threshold in bytes (K and M suffixes) [default: 8192]
    #[arg(long, value_name = "BYTES", allow_negative_numbers = true, value_parser = bytes)]
    pub threshold: Option<u32>,
    /// Print JSON instead of text
    #[arg(long)]
    pub json: bool,
    /// Also draw the class matrix as a heat map into FILE (SVG), with
    /// --as PE's routes over its row
    #[arg(long, value_name = "FILE.svg")]
    pub svg: Option<std::path::PathBuf>,
}

/// `--as`: a PE number.
fn pe(v: &str) -> Result<u32, String> {
    v.parse()
        .map_err(|_| "expected a PE number, 0 or more".to_string())
}

/// `--format`: auto, slurm or toml, any case.
fn format(v: &str) -> Result<Format, String> {
    match v.to_ascii_lowercase().as_str() {
        "auto" => Ok(Format::Auto),
        "slurm" => Ok(Format::Slurm),
        "toml" => Ok(Format::Toml),
        _ => Err("expected auto, slurm or toml".into()),
    }
}

/// A byte count below 4G: `8192`, `8K`, `1M`.
fn bytes(value: &str) -> Result<u32, String> {
    let bad = || "expected a byte count such as 8192, 8K or 1M, below 4G".to_string();
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

/// Runs `switchyard topo`.
pub fn run(args: &TopoArgs) -> Output {
    match render(args) {
        Ok(text) => Output::ok(text),
        Err(e) => Output::usage_error(&e),
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

fn render(args: &TopoArgs) -> Result<String, TopoCliError> {
    let job = load(args)?;
    let mut down = Vec::with_capacity(args.down.len());
    for t in &args.down {
        if !down.contains(t) {
            down.push(*t);
        }
    }
    let down = &down[..];
    let threshold = args
        .threshold
        .unwrap_or(PolicyConfig::default().short_threshold);
    let as_view = match args.as_pe {
        Some(pe) => Some(routes(&job, pe, threshold, down)?),
        None => None,
    };
    let view = View::of(&job);
    if let Some(path) = &args.svg {
        let picture = svg::render_svg(&job, view, as_view.as_ref(), down)?;
        crate::plot::save(path, &picture).map_err(TopoCliError::Svg)?;
    }
    Ok(if args.json {
        json::render_json(&job, view, as_view.as_ref(), down)
    } else {
        text::render_text(&job, view, as_view.as_ref(), down)
    })
}

#[cfg(test)]
mod test;
