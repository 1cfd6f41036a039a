//! [`Format`]: which syntax a topology file uses, from its name or its
//! content.

use crate::slurm::SlurmKey;

/// Which syntax a topology file uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// Decide from the content ([`Format::sniff`]).
    #[default]
    Auto,
    /// Slurm `topology.conf`.
    Slurm,
    /// TOML.
    Toml,
}

impl Format {
    /// The format implied by a file name: `.toml` is TOML, anything else
    /// (Slurm's `topology.conf` included) [`Format::Auto`], decided by content.
    pub fn from_path(path: &str) -> Format {
        if path.to_ascii_lowercase().ends_with(".toml") {
            Format::Toml
        } else {
            Format::Auto
        }
    }

    /// Guesses the syntax of `text` from its first line that is not blank or a
    /// comment. TOML: a line starting with `[`; a `key = value` whose value
    /// starts with a quote, bracket or brace; or one whose key is not a Slurm key
    /// (`SwitchName=`, `Nodes=`, ...) and whose value starts like a number or a
    /// boolean. Anything else is Slurm (whose errors then name the bad key).
    pub fn sniff(text: &str) -> Format {
        let Some(line) = text
            .lines()
            .map(|l| l.split('#').next().unwrap_or("").trim())
            .find(|l| !l.is_empty())
        else {
            return Format::Slurm;
        };
        if line.starts_with('[') {
            return Format::Toml;
        }
        let Some((key, value)) = line.split_once('=') else {
            return Format::Slurm;
        };
        let v = value.trim_start();
        if v.starts_with(['"', '\'', '[', '{']) {
            return Format::Toml;
        }
        if SlurmKey::parse(key.trim()).is_some() && !key.ends_with(' ') {
            return Format::Slurm;
        }
        let tomlish = v.starts_with(['+', '-'])
            || v.starts_with(|c: char| c.is_ascii_digit())
            || v.starts_with("true")
            || v.starts_with("false");
        if tomlish { Format::Toml } else { Format::Slurm }
    }

    /// Lower-case name: `auto`, `slurm` or `toml`.
    pub fn name(self) -> &'static str {
        match self {
            Format::Auto => "auto",
            Format::Slurm => "slurm",
            Format::Toml => "toml",
        }
    }
}
