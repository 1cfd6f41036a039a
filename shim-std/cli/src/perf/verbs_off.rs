//! `switchyard perf --transport verbs` in a build without the `verbs`
//! feature: there is no verbs driver to measure, so the command fails at
//! once (exit status 1) saying why, as it does on a machine without a usable
//! device.

use super::Options;

fn reason() -> String {
    format!(
        "transport verbs is not available: {}",
        switchyard::context::verbs::NO_VERBS
    )
}

/// Why verbs perf cannot run: this build has no verbs support.
pub fn unavailable() -> Option<String> {
    Some(reason())
}

/// `switchyard perf --transport verbs`: fails with the reason.
pub(super) fn drive(_: &Options) -> Result<(), String> {
    Err(reason())
}
