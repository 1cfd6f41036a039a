//! Errors and warnings: every bad value names its key, the value and what was
//! expected, and where it was given.

use std::{
    fmt,
    path::{Path, PathBuf},
};

use super::{Key, Source};

/// Why the configuration cannot be loaded. Every variant names what is wrong
/// and where; a CLI exits with status 2 on any of them.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A value that does not parse or is out of range.
    #[error("{}", bad_value_text(.key, .value, .from, .expected))]
    BadValue {
        /// The key (`heap_size`, or `template`).
        key: &'static str,
        /// The value as given (for the file, as written there).
        value: String,
        /// Where it was given.
        from: Source,
        /// What the key takes.
        expected: &'static str,
    },
    /// Two values that cannot go together.
    #[error("{0}")]
    Conflict(Box<Conflict>),
    /// The file named by `SWITCHYARD_CONFIG` cannot be read.
    #[error("cannot read the configuration file {}: {error}", .path.display())]
    ReadFile {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        error: std::io::Error,
    },
    /// The path names something other than a regular file (a FIFO, a
    /// device, a directory, a socket): reading it could block or never end.
    #[error("the configuration file {} is not a regular file (it is a {kind})", .path.display())]
    NotAFile {
        /// The path.
        path: PathBuf,
        /// What it is instead: `directory`, `FIFO`, `character device`, ...
        kind: &'static str,
    },
    /// The file is too large to be a configuration file.
    #[error("the configuration file {} is larger than {max} bytes", .path.display())]
    FileTooLarge {
        /// The file.
        path: PathBuf,
        /// The limit ([`MAX_FILE_BYTES`](super::MAX_FILE_BYTES)).
        max: u64,
    },
    /// The file is not UTF-8 text.
    #[error("the configuration file {} is not UTF-8 text", .path.display())]
    NotUtf8 {
        /// The file.
        path: PathBuf,
    },
    /// The file is not valid TOML.
    #[error("{}: not valid TOML: {message}", at(.path, .line))]
    Toml {
        /// The file.
        path: PathBuf,
        /// 1-based line, when the parser says.
        line: Option<u32>,
        /// The parser's message.
        message: String,
    },
    /// The file has a key switchyard does not know.
    #[error(
        "{}:{line}: unknown key '{key}'{}; the keys are template, {}",
        .path.display(),
        did_you_mean(.suggestion, "'"),
        key_list()
    )]
    UnknownKey {
        /// The file.
        path: PathBuf,
        /// 1-based line of the key.
        line: u32,
        /// The key as written.
        key: String,
        /// A known key it looks like.
        suggestion: Option<&'static str>,
    },
    /// `progress_cpu` names a CPU this process may not run on (checked at
    /// init, against the machine: [`crate::cpus`]).
    #[error(
        "progress_cpu = {cpu} ({from}): not a CPU this process may run on (those are {allowed})"
    )]
    ProgressCpu {
        /// The CPU asked for.
        cpu: u32,
        /// Where it was given.
        from: Source,
        /// The CPUs this process may run on, as a CPU list (`0-3,8`).
        allowed: String,
    },
    /// More than one of the above, in the order found.
    #[error("{} configuration errors:{}", .0.len(), list_text(.0))]
    Several(Vec<ConfigError>),
}

/// Two values that cannot go together (boxed in [`ConfigError::Conflict`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key} = {value} ({from}) must be {relation} {other} = {other_value} ({other_from})")]
pub struct Conflict {
    /// The key at fault.
    pub key: &'static str,
    /// Its value.
    pub value: String,
    /// Where it was given.
    pub from: Source,
    /// How it must relate to the other (`shorter than`).
    pub relation: &'static str,
    /// The other key.
    pub other: &'static str,
    /// Its value.
    pub other_value: String,
    /// Where that was given.
    pub other_from: Source,
}

impl ConfigError {
    /// The single errors: itself, or the members of [`ConfigError::Several`].
    pub fn errors(&self) -> &[ConfigError] {
        match self {
            ConfigError::Several(v) => v,
            other => std::slice::from_ref(other),
        }
    }

    pub(super) fn from_list(mut errors: Vec<ConfigError>) -> Option<ConfigError> {
        match errors.len() {
            0 => None,
            1 => errors.pop(),
            _ => Some(ConfigError::Several(errors)),
        }
    }
}

fn at(path: &Path, line: &Option<u32>) -> String {
    match *line {
        Some(l) => format!("{}:{l}", path.display()),
        None => path.display().to_string(),
    }
}

fn did_you_mean(suggestion: &Option<&str>, quote: &str) -> String {
    (*suggestion).map_or_else(String::new, |s| {
        format!(" (did you mean {quote}{s}{quote}?)")
    })
}

fn key_list() -> String {
    Key::ALL.map(Key::name).join(", ")
}

fn list_text(errors: &[ConfigError]) -> String {
    let mut s = String::new();
    for e in errors {
        s.push_str("\n  ");
        s.push_str(&e.to_string());
    }
    s
}

fn bad_value_text(key: &str, value: &str, from: &Source, expected: &str) -> String {
    match from {
        Source::Env(var) => format!("{var}={}: expected {expected}", shown(value)),
        Source::File { path, line } => format!(
            "{}: {key} = {}: expected {expected}",
            at(path, &Some(*line)),
            shown(value)
        ),
        Source::Template(name) => {
            format!(
                "template {name}: {key} = {}: expected {expected}",
                shown(value)
            )
        }
        Source::Default => format!("{key} = {}: expected {expected}", shown(value)),
    }
}

/// Longest value quoted in a message, in characters.
const SHOWN_MAX: usize = 64;

/// A value for a message: as is when it is short and plain, else quoted with
/// escapes and cut.
fn shown(value: &str) -> String {
    let plain = !value.is_empty()
        && value.chars().count() <= SHOWN_MAX
        && value.chars().all(|c| c.is_ascii_graphic() || c == ' ')
        && !value.starts_with(' ')
        && !value.ends_with(' ');
    if plain {
        return value.into();
    }
    let cut: String = value.chars().take(SHOWN_MAX).collect();
    let mut s = format!("{cut:?}");
    if cut.len() < value.len() {
        s.push_str("...");
    }
    s
}

/// A `SWITCHYARD_*` variable that is not a key and not reserved: ignored, and
/// reported; or a renamed key's old name, still read (`renamed_to`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigWarning {
    /// The variable (for a renamed key in the file: its name and where,
    /// `bind_to in /etc/sy.toml:3`).
    pub var: String,
    /// The known variable it looks like, if any.
    pub suggestion: Option<&'static str>,
    /// Set when `var` is a renamed key's old name: the new name (variable
    /// or key), which the value was read as.
    pub renamed_to: Option<&'static str>,
}

impl ConfigWarning {
    /// The warning for a renamed key's old name `var`, read as `new`.
    pub(super) fn renamed(var: String, new: &'static str) -> ConfigWarning {
        ConfigWarning {
            var,
            suggestion: None,
            renamed_to: Some(new),
        }
    }
}

impl fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.renamed_to {
            Some(new) => write!(
                f,
                "{} is deprecated: it is read as {new}; use {new}",
                self.var
            ),
            None => write!(
                f,
                "{} is not a switchyard setting{}; it is ignored",
                shown(&self.var),
                did_you_mean(&self.suggestion, "")
            ),
        }
    }
}
