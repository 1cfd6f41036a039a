//! What `switchyard info` shows: every value in the text form its parser
//! reads back, and where it came from.

use std::{fmt, path::PathBuf};

use super::{
    Config, ENV_TEMPLATE, Key, TEMPLATE_KEY, Template,
    parse::{format_addrs, format_duration, format_size},
};

/// Where a value came from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Source {
    /// The built-in default.
    Default,
    /// The named template.
    Template(&'static str),
    /// The TOML file, at this line.
    File {
        /// The file.
        path: PathBuf,
        /// 1-based line of the key.
        line: u32,
    },
    /// The environment variable.
    Env(&'static str),
}

impl Source {
    /// The kind of source: `default`, `template`, `file` or `env`.
    pub const fn kind(&self) -> &'static str {
        match self {
            Source::Default => "default",
            Source::Template(_) => "template",
            Source::File { .. } => "file",
            Source::Env(_) => "env",
        }
    }
}

impl fmt::Display for Source {
    /// `default`, `template trading`, `file /etc/switchyard.toml:3`,
    /// `env SWITCHYARD_HEAP_SIZE`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::Template(name) => write!(f, "template {name}"),
            Source::File { path, line } => write!(f, "file {}:{line}", path.display()),
            Source::Env(var) => write!(f, "env {var}"),
        }
    }
}

/// One line of [`Config::entries`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry<'a> {
    /// The key as written in the file (`heap_size`, or `template`).
    pub key: &'static str,
    /// Its environment variable.
    pub env: &'static str,
    /// The value in text form, as the parser reads it back (`64M`, `200ms`;
    /// `none` for no template).
    pub value: String,
    /// Where it came from.
    pub source: &'a Source,
}

impl Config {
    /// `key`'s value in text form, as the parser reads it back (`64M`, `busy`,
    /// `200ms`).
    pub fn value(&self, key: Key) -> String {
        match key {
            Key::HeapSize => format_size(self.heap_size),
            Key::Progress => self.progress.name().into(),
            Key::SpinBeforePark => self.spin_before_park.to_string(),
            Key::ShortThreshold => format_size(self.short_threshold.into()),
            Key::LoadWatermark => format!("{}%", self.load_watermark),
            Key::QueueDepth => self.queue_depth.to_string(),
            Key::HugePages => self.huge_pages.name().into(),
            Key::BootstrapTimeout => format_duration(self.bootstrap_timeout),
            Key::OpTimeout => format_duration(self.op_timeout),
            Key::Heartbeat => format_duration(self.heartbeat),
            Key::TraceRecords => self.trace_records.to_string(),
            Key::Trace => self.trace.to_string(),
            Key::Stats => if self.stats { "on" } else { "off" }.into(),
            Key::InlineThreshold => format_size(self.inline_threshold.into()),
            Key::ProgressCpu => self.progress_cpu.to_string(),
            Key::TcpAddrs => format_addrs(&self.tcp_addrs),
            Key::TcpConnections => self.tcp_connections.to_string(),
            Key::TcpWindow => format_size(self.tcp_window.into()),
            Key::GiveUp => format_duration(self.give_up),
            Key::ReconnectBase => format_duration(self.reconnect_base),
            Key::ReconnectCap => format_duration(self.reconnect_cap),
            Key::PayloadCrc => self.payload_crc.to_string(),
            Key::Transports => self.transports.to_string(),
            Key::VerbsAtomics => self.verbs_atomics.name().into(),
            Key::Cards => self.cards.name().into(),
            Key::VerbsLazyPeers => self.verbs_lazy_peers.to_string(),
            Key::VerbsRouted => if self.verbs_routed { "on" } else { "off" }.into(),
            Key::VerbsContextSets => if self.verbs_context_sets { "on" } else { "off" }.into(),
            Key::VerbsDevice => self.verbs_device.as_deref().unwrap_or("auto").into(),
            Key::VerbsGidIndex => self
                .verbs_gid_index
                .map_or_else(|| "auto".into(), |i| i.to_string()),
        }
    }

    /// Every setting with its value and source: first `template`, then each
    /// [`Key`] in [`Key::ALL`] order.
    pub fn entries(&self) -> impl Iterator<Item = Entry<'_>> {
        let template = Entry {
            key: TEMPLATE_KEY,
            env: ENV_TEMPLATE,
            value: self.template().map_or("none", Template::name).into(),
            source: self.template_source(),
        };
        std::iter::once(template).chain(Key::ALL.into_iter().map(|k| Entry {
            key: k.name(),
            env: k.env(),
            value: self.value(k),
            source: self.source(k),
        }))
    }
}
