//! The TOML reader: the file deserialized with spans, each value checked and
//! located by line, into the raw form.

use serde::Deserialize;

use crate::{
    MAX_RAILS, TopoErrorKind, TopoFileError,
    raw::{Expander, NODE_NAMES, RawSpec, RawSwitch, SWITCH_NAMES, check_switch_name},
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlFile {
    pes_per_node: Option<toml::Spanned<toml::Value>>,
    rails: Option<toml::Spanned<toml::Value>>,
    nodes: Option<toml::Spanned<toml::Value>>,
    #[serde(default)]
    switch: Vec<TomlSwitch>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlSwitch {
    name: toml::Spanned<String>,
    nodes: Option<toml::Spanned<toml::Value>>,
    switches: Option<toml::Spanned<toml::Value>>,
    #[allow(dead_code)] // accepted and ignored, like Slurm's LinkSpeed
    link_speed: Option<toml::Value>,
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

fn toml_hostlists(
    text: &str,
    v: &toml::Spanned<toml::Value>,
    key: &'static str,
    names: &mut Expander,
) -> Result<Vec<String>, TopoFileError> {
    const EXPECTED: &str = "a hostlist string or an array of hostlist strings";
    let line = line_of(text, v.span().start);
    let type_err = || {
        TopoFileError::at(
            line,
            TopoErrorKind::TomlType {
                key,
                expected: EXPECTED,
            },
        )
    };
    match v.get_ref() {
        toml::Value::String(s) => names.expand(s, line),
        toml::Value::Array(items) if !items.is_empty() => {
            let mut out = Vec::new();
            for item in items {
                let s = item.as_str().ok_or_else(type_err)?;
                out.extend(names.expand(s, line)?);
            }
            Ok(out)
        }
        _ => Err(type_err()),
    }
}

pub(crate) fn parse_toml(text: &str) -> Result<RawSpec, TopoFileError> {
    let file: TomlFile = toml::from_str(text).map_err(|e| TopoFileError {
        line: e.span().map(|s| line_of(text, s.start)),
        kind: TopoErrorKind::Toml {
            message: e.message().trim_end().to_string(),
        },
    })?;
    let mut node_names = Expander::new(NODE_NAMES);
    let mut switch_names = Expander::new(SWITCH_NAMES);
    let mut job_names = Expander::new(NODE_NAMES);
    let mut spec = RawSpec::default();
    if let Some(p) = &file.pes_per_node {
        let line = line_of(text, p.span().start);
        let value = p.get_ref();
        spec.pes_per_node = Some(match value.as_integer() {
            Some(0) => return Err(TopoFileError::at(line, TopoErrorKind::ZeroPesPerNode)),
            Some(n) => u32::try_from(n).map_err(|_| {
                TopoFileError::at(
                    line,
                    TopoErrorKind::BadPesPerNode {
                        value: n.to_string(),
                    },
                )
            })?,
            None => {
                let value = match value {
                    toml::Value::String(s) => format!("{s:?}"),
                    toml::Value::Float(f) => f.to_string(),
                    toml::Value::Boolean(b) => b.to_string(),
                    other => format!("({})", other.type_str()),
                };
                return Err(TopoFileError::at(
                    line,
                    TopoErrorKind::BadPesPerNode { value },
                ));
            }
        });
    }
    if let Some(r) = &file.rails {
        let line = line_of(text, r.span().start);
        let rails = r.get_ref().as_integer();
        match rails.and_then(|n| u32::try_from(n).ok()) {
            Some(n @ 1..=MAX_RAILS) => spec.rails = Some(n),
            _ => {
                let value = match r.get_ref() {
                    toml::Value::Integer(n) => n.to_string(),
                    toml::Value::String(s) => format!("{s:?}"),
                    toml::Value::Float(f) => f.to_string(),
                    toml::Value::Boolean(b) => b.to_string(),
                    other => format!("({})", other.type_str()),
                };
                return Err(TopoFileError::at(line, TopoErrorKind::BadRails { value }));
            }
        }
    }
    if let Some(n) = &file.nodes {
        let line = line_of(text, n.span().start);
        spec.job_nodes = Some((toml_hostlists(text, n, "nodes", &mut job_names)?, line));
    }
    for s in &file.switch {
        let line = line_of(text, s.name.span().start);
        let name = s.name.get_ref().trim();
        check_switch_name(name, line)?;
        spec.switches.push(RawSwitch {
            name: name.into(),
            line,
            nodes: s
                .nodes
                .as_ref()
                .map(|v| toml_hostlists(text, v, "nodes", &mut node_names))
                .transpose()?
                .unwrap_or_default(),
            children: s
                .switches
                .as_ref()
                .map(|v| toml_hostlists(text, v, "switches", &mut switch_names))
                .transpose()?
                .unwrap_or_default(),
        });
    }
    Ok(spec)
}
