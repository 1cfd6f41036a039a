//! The Slurm `topology.conf` reader (topology/tree plugin syntax): logical
//! lines, `Key=Value` tokens, into the raw form.

use crate::{
    TopoErrorKind, TopoFileError,
    raw::{Expander, NODE_NAMES, RawSpec, RawSwitch, SWITCH_NAMES, check_switch_name},
};

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum SlurmKey {
    SwitchName,
    Nodes,
    Switches,
    LinkSpeed,
}

impl SlurmKey {
    pub(crate) fn parse(key: &str) -> Option<SlurmKey> {
        [
            ("switchname", SlurmKey::SwitchName),
            ("nodes", SlurmKey::Nodes),
            ("switches", SlurmKey::Switches),
            ("linkspeed", SlurmKey::LinkSpeed),
        ]
        .into_iter()
        .find(|(k, _)| key.eq_ignore_ascii_case(k))
        .map(|(_, v)| v)
    }

    fn expected(self) -> &'static str {
        match self {
            SlurmKey::SwitchName => "a switch name",
            SlurmKey::Nodes => "a hostlist of nodes",
            SlurmKey::Switches => "a hostlist of switch names",
            SlurmKey::LinkSpeed => "a number",
        }
    }
}

/// Logical lines: comments stripped, `\` continuations joined, with the number
/// of the line each starts on.
fn logical_lines(text: &str) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    let mut pending: Option<(u32, String)> = None;
    for (i, raw) in text.lines().enumerate() {
        let no = u32::try_from(i + 1).unwrap_or(u32::MAX);
        let content = raw.split('#').next().unwrap_or("");
        let (content, continued) = match content.trim_end().strip_suffix('\\') {
            Some(c) => (c, true),
            None => (content, false),
        };
        let (start, mut acc) = pending.take().unwrap_or((no, String::new()));
        acc.push(' ');
        acc.push_str(content);
        if continued {
            pending = Some((start, acc));
        } else {
            out.push((start, acc));
        }
    }
    out.extend(pending);
    out
}

pub(crate) fn parse_slurm(text: &str) -> Result<RawSpec, TopoFileError> {
    let mut spec = RawSpec::default();
    let mut node_names = Expander::new(NODE_NAMES);
    let mut switch_names = Expander::new(SWITCH_NAMES);
    for (line, content) in logical_lines(text) {
        let mut seen: [Option<&str>; 4] = [None; 4];
        for token in content.split_whitespace() {
            let err = |kind| TopoFileError::at(line, kind);
            let Some((k, v)) = token.split_once('=') else {
                return Err(err(TopoErrorKind::NotKeyValue {
                    token: token.into(),
                }));
            };
            let key = SlurmKey::parse(k)
                .ok_or_else(|| err(TopoErrorKind::UnknownKey { key: k.into() }))?;
            if seen[key as usize].is_some() {
                return Err(err(TopoErrorKind::DuplicateKey { key: k.into() }));
            }
            if v.is_empty() {
                return Err(err(TopoErrorKind::EmptyValue {
                    key: k.into(),
                    expected: key.expected(),
                }));
            }
            seen[key as usize] = Some(v);
        }
        if seen.iter().all(Option::is_none) {
            continue; // blank or comment
        }
        let [name, nodes, switches, _link_speed] = seen;
        let Some(name) = name else {
            return Err(TopoFileError::at(line, TopoErrorKind::MissingSwitchName));
        };
        check_switch_name(name, line)?;
        spec.switches.push(RawSwitch {
            name: name.into(),
            line,
            nodes: nodes
                .map(|n| node_names.expand(n, line))
                .transpose()?
                .unwrap_or_default(),
            children: switches
                .map(|s| switch_names.expand(s, line))
                .transpose()?
                .unwrap_or_default(),
        });
    }
    Ok(spec)
}
