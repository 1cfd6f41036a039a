//! The `SWITCHYARD_LOG` subscriber, which the `switchyard` CLI and the C API
//! install (feature `subscriber`): the library's `tracing` events on stderr.
//!
//! `SWITCHYARD_LOG` is a filter like `RUST_LOG` (`warn`, `switchyard=debug`,
//! `info,switchyard::context=trace`), optionally followed by `,json` (or
//! `,text`, the default) for the output format: `SWITCHYARD_LOG=warn,json`
//! prints one JSON object per event. Unset or empty: warnings and errors, as
//! text. A malformed filter falls back to that default (and says so once).

use std::sync::OnceLock;

use tracing_subscriber::{EnvFilter, fmt};

/// The environment variable of the filter and format.
pub const LOG_ENV: &str = "SWITCHYARD_LOG";

/// The filter when `SWITCHYARD_LOG` is unset or empty.
pub const DEFAULT_FILTER: &str = "warn";

/// What `SWITCHYARD_LOG` asks for: the filter text and whether to print
/// JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSpec {
    /// A `tracing_subscriber::EnvFilter` directive list.
    pub filter: String,
    /// One JSON object per event instead of text lines.
    pub json: bool,
}

impl LogSpec {
    /// Parses a `SWITCHYARD_LOG` value: comma-separated directives, where
    /// the words `json` and `text` choose the format instead.
    pub fn parse(value: &str) -> LogSpec {
        let mut json = false;
        let mut parts = Vec::new();
        for p in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match p {
                "json" => json = true,
                "text" => json = false,
                _ => parts.push(p),
            }
        }
        let filter = if parts.is_empty() {
            DEFAULT_FILTER.to_string()
        } else {
            parts.join(",")
        };
        LogSpec { filter, json }
    }
}

/// Installs the `SWITCHYARD_LOG` subscriber as the global default, once per
/// process (later calls, or a subscriber someone else installed first,
/// leave things as they are). Returns whether this call installed it.
pub fn install() -> bool {
    static DONE: OnceLock<bool> = OnceLock::new();
    *DONE.get_or_init(|| {
        let spec = LogSpec::parse(&std::env::var(LOG_ENV).unwrap_or_default());
        let (filter, bad) = match EnvFilter::try_new(&spec.filter) {
            Ok(f) => (f, None),
            Err(e) => (EnvFilter::new(DEFAULT_FILTER), Some(e)),
        };
        let b = fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .with_ansi(false);
        let ok = if spec.json {
            b.json().try_init().is_ok()
        } else {
            b.try_init().is_ok()
        };
        if let Some(e) = bad {
            tracing::warn!(
                "{LOG_ENV}={:?} is not a filter ({e}); using {DEFAULT_FILTER}",
                spec.filter
            );
        }
        ok
    })
}

#[cfg(test)]
mod test {
    use super::LogSpec;

    #[test]
    fn the_spec_separates_filter_and_format() {
        assert_eq!(
            LogSpec::parse(""),
            LogSpec {
                filter: "warn".into(),
                json: false
            }
        );
        assert_eq!(
            LogSpec::parse("warn,json"),
            LogSpec {
                filter: "warn".into(),
                json: true
            }
        );
        assert_eq!(
            LogSpec::parse("info, switchyard=debug ,text"),
            LogSpec {
                filter: "info,switchyard=debug".into(),
                json: false
            }
        );
        assert_eq!(LogSpec::parse("json").filter, "warn");
    }
}
