//! The raw form both parsers produce (switches with names not yet resolved),
//! and what they share: hostlist expansion against a per-file budget, and
//! the switch-name check.

use crate::{
    TopoErrorKind, TopoFileError,
    hostlist::{self, HostlistError, MAX_HOSTS},
};

pub(crate) struct RawSwitch {
    pub(crate) name: String,
    pub(crate) line: u32,
    pub(crate) nodes: Vec<String>,
    pub(crate) children: Vec<String>,
}

#[derive(Default)]
pub(crate) struct RawSpec {
    pub(crate) switches: Vec<RawSwitch>,
    pub(crate) pes_per_node: Option<u32>,
    pub(crate) rails: Option<u32>,
    /// The job's nodes, with the line of the list.
    pub(crate) job_nodes: Option<(Vec<String>, u32)>,
}

/// Expands hostlists against a per-file budget of [`MAX_HOSTS`] names (one
/// budget for node names, one for switch references, one for the job list).
pub(crate) struct Expander {
    left: usize,
    what: &'static str,
}

impl Expander {
    pub(crate) fn new(what: &'static str) -> Self {
        Expander {
            left: MAX_HOSTS,
            what,
        }
    }

    pub(crate) fn expand(&mut self, list: &str, line: u32) -> Result<Vec<String>, TopoFileError> {
        match hostlist::expand_with_limit(list, self.left) {
            Ok(names) => {
                self.left -= names.len();
                Ok(names)
            }
            Err(HostlistError::TooMany { expr, .. }) => Err(TopoFileError::at(
                line,
                TopoErrorKind::TooManyNames {
                    expr,
                    what: self.what,
                    max: MAX_HOSTS,
                },
            )),
            Err(e) => Err(TopoFileError::at(line, e.into())),
        }
    }
}

pub(crate) const NODE_NAMES: &str = "node names";
pub(crate) const SWITCH_NAMES: &str = "switch names";

pub(crate) fn check_switch_name(name: &str, line: u32) -> Result<(), TopoFileError> {
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(TopoFileError::at(
            line,
            TopoErrorKind::BadSwitchName { name: name.into() },
        ));
    }
    Ok(())
}
