//! The TOML file as a source: read (bounded, UTF-8), parsed for its top-level
//! keys, each value kept with its line for messages.

use std::{io::Read as _, path::Path};

use super::{
    ConfigError, Key, MAX_FILE_BYTES, Source, TEMPLATE_KEY, env::closest, keys::Deprecated,
};

/// One value read from the file: raw text for the parser, text as written for
/// messages, where.
pub(super) struct FileValue {
    pub(super) raw: Result<String, ()>,
    pub(super) written: String,
    pub(super) from: Source,
}

/// What the file holds.
#[derive(Default)]
pub(super) struct FileSettings {
    pub(super) template: Option<FileValue>,
    pub(super) values: Vec<(Key, FileValue)>,
    /// Values under a renamed key's old name.
    pub(super) deprecated: Vec<(Deprecated, FileValue)>,
}

/// Reads the configuration file: a regular file of at most
/// [`MAX_FILE_BYTES`] UTF-8 bytes. It is opened with `O_NONBLOCK` and checked
/// with `fstat` on the open descriptor (no window between the check and the
/// read), so a FIFO, a device or a directory is refused at once instead of
/// blocking `switchyard info` or a PE's init forever.
pub(super) fn read_file(path: &Path) -> Result<String, ConfigError> {
    use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _};
    let read_err = |error| ConfigError::ReadFile {
        path: path.into(),
        error,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(read_err)?;
    let ft = file.metadata().map_err(read_err)?.file_type();
    if !ft.is_file() {
        let kind = if ft.is_dir() {
            "directory"
        } else if ft.is_fifo() {
            "FIFO"
        } else if ft.is_char_device() {
            "character device"
        } else if ft.is_block_device() {
            "block device"
        } else if ft.is_socket() {
            "socket"
        } else {
            "special file"
        };
        return Err(ConfigError::NotAFile {
            path: path.into(),
            kind,
        });
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_err)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(ConfigError::FileTooLarge {
            path: path.into(),
            max: MAX_FILE_BYTES,
        });
    }
    String::from_utf8(bytes).map_err(|_| ConfigError::NotUtf8 { path: path.into() })
}

/// 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> u32 {
    let end = offset.min(text.len());
    let nl = text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count();
    u32::try_from(nl + 1).unwrap_or(u32::MAX)
}

/// An array of strings as the comma-separated text form of a list: `[]` is
/// `auto`; an item that is not a string, is empty or holds a comma is an error.
fn string_list(items: &[toml::Spanned<toml::de::DeValue<'_>>]) -> Result<String, ()> {
    if items.is_empty() {
        return Ok("auto".into());
    }
    let mut parts = Vec::with_capacity(items.len());
    for item in items {
        match item.get_ref() {
            toml::de::DeValue::String(s) if !s.trim().is_empty() && !s.contains(',') => {
                parts.push(s.to_string());
            }
            _ => return Err(()),
        }
    }
    Ok(parts.join(","))
}

/// Reads the top-level keys of `text`. A syntax error is returned at once;
/// unknown keys go to `errors` and the rest is still read.
pub(super) fn parse_file(
    text: &str,
    path: &Path,
    errors: &mut Vec<ConfigError>,
) -> Result<FileSettings, ConfigError> {
    use toml::de::{DeTable, DeValue};

    let doc = DeTable::parse(text).map_err(|e| ConfigError::Toml {
        path: path.into(),
        line: e.span().map(|s| line_of(text, s.start)),
        message: e.message().trim_end().replace('\n', " "),
    })?;
    let mut entries: Vec<_> = doc.get_ref().iter().collect();
    entries.sort_by_key(|(k, _)| k.span().start);
    let mut out = FileSettings::default();
    for (k, v) in entries {
        let name: &str = k.get_ref().as_ref();
        let line = line_of(text, k.span().start);
        let from = Source::File {
            path: path.into(),
            line,
        };
        let raw = match v.get_ref() {
            DeValue::String(s) => Ok(s.to_string()),
            DeValue::Integer(i) if i.radix() == 10 => Ok(i.as_str().to_string()),
            DeValue::Integer(i) => u64::from_str_radix(i.as_str(), i.radix())
                .map(|n| n.to_string())
                .map_err(|_| ()),
            DeValue::Float(f) => Ok(f.as_str().to_string()),
            DeValue::Boolean(b) => Ok(b.to_string()),
            DeValue::Array(items) if Key::from_name(name) == Some(Key::TcpAddrs) => {
                string_list(items)
            }
            _ => Err(()),
        };
        let written = text
            .get(v.span())
            .map_or_else(|| v.get_ref().type_str().to_string(), str::to_string);
        let fv = FileValue { raw, written, from };
        if name == TEMPLATE_KEY {
            out.template = Some(fv);
        } else if let Some(key) = Key::from_name(name) {
            out.values.push((key, fv));
        } else if let Some(d) = Deprecated::from_name(name) {
            out.deprecated.push((d, fv));
        } else {
            let candidates = std::iter::once((TEMPLATE_KEY, TEMPLATE_KEY))
                .chain(Key::ALL.into_iter().map(|k| (k.name(), k.name())));
            errors.push(ConfigError::UnknownKey {
                path: path.into(),
                line,
                key: name.into(),
                suggestion: closest(name, candidates),
            });
        }
    }
    Ok(out)
}
