//! When a test may skip, and building what a test runs.
//!
//! A test that cannot run here (no C compiler, no `ip netns`, no IPv6
//! loopback, no `/dev/shm`) calls [`skip`] with the reason and returns. On a
//! developer's machine without root that prints `skipped: <reason>` and the
//! test passes without having checked anything. Where everything the tests
//! need is meant to be installed, a skip is a failure instead: as root (CI
//! runs as root, and root can build namespaces), or when `CI` or
//! `SWITCHYARD_NO_SKIP` is set in the environment. [`skip`] then panics with
//! the reason, so a missing tool never passes as a green test.
//!
//! Tests that need hardware the project cannot install (an RDMA port) are
//! `#[ignore]`d instead, and fail when run with `--ignored` without it.

use std::{
    fmt::Display,
    path::{Path, PathBuf},
    process::Command,
};

/// Why a skip would be a failure here, or `None` where tests may skip: the
/// process runs as root, or `CI` or `SWITCHYARD_NO_SKIP` is set.
pub fn forbidden() -> Option<&'static str> {
    if std::env::var_os("SWITCHYARD_NO_SKIP").is_some() {
        Some("SWITCHYARD_NO_SKIP is set")
    } else if std::env::var_os("CI").is_some() {
        Some("CI is set")
    } else if effective_uid() == 0 {
        Some("running as root, where every tool the tests need is expected")
    } else {
        None
    }
}

/// Skips the calling test because of `why` (the caller returns next): prints
/// `skipped: <why>` where skips are allowed.
///
/// # Panics
/// Where a skip is a failure ([`forbidden`]): the message gives `why` and
/// the rule.
#[track_caller]
pub fn skip(why: impl Display) {
    match forbidden() {
        Some(rule) => panic!("cannot run: {why} (a skip is a failure here: {rule})"),
        None => eprintln!("skipped: {why}"),
    }
}

/// The effective user id of this process (0 for root).
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions, touches no memory and cannot fail.
    unsafe { libc::geteuid() }
}

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root holds tests/")
        .to_path_buf()
}

/// Builds `args` (packages, examples: what follows `cargo build`) into the
/// running test's own target directory and profile, and returns
/// `target/<profile>`, where the binaries are.
///
/// # Panics
/// When the build fails, or the test executable is not in
/// `target/<profile>/deps`.
pub fn cargo_build(args: &[&str]) -> PathBuf {
    // target/<profile>/deps/<test>-HASH
    let exe = std::env::current_exe().expect("current_exe");
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>")
        .to_path_buf();
    let target = bin.parent().expect("the target dir");
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args(["build", "-q"])
        .args(args)
        .arg("--target-dir")
        .arg(target)
        .current_dir(workspace());
    if bin.file_name().is_some_and(|n| n == "release") {
        cmd.arg("--release");
    }
    let st = cmd.status().expect("run cargo build");
    assert!(st.success(), "cargo build {args:?} failed");
    bin
}
