//! Numbers from users are bounded: values that once panicked or tried to
//! allocate tens of gigabytes are usage errors of the built binary (exit
//! status 2, a message naming the flag, no panic), and nothing is started.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_switchyard");

/// Runs `switchyard args`; expects exit status 2 with a message naming
/// `flag`; returns stderr.
fn refused(args: &[&str], flag: &str) -> String {
    let out = Command::new(BIN)
        .args(args)
        .output()
        .expect("run switchyard");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    assert!(
        stderr.contains(&format!("for '{flag}")),
        "{args:?} does not name {flag}: {stderr}"
    );
    assert!(out.stdout.is_empty(), "{args:?}: something ran");
    stderr
}

#[test]
fn run_durations_are_at_most_a_week() {
    for flag in ["--grace", "--bootstrap-timeout", "--timeout"] {
        for value in ["1e19", "604801", "1e400"] {
            let err = refused(&["run", "-n", "1", flag, value, "--", "true"], flag);
            assert!(err.contains("at most a week"), "{flag} {value}: {err}");
        }
    }
    refused(&["run", "-n", "1", "--grace", "-1", "true"], "--grace");
    refused(&["run", "-n", "1", "--timeout", "nan", "true"], "--timeout");
}

#[test]
fn perf_iterations_are_bounded() {
    for value in ["18446744073709551615", "4000000000", "100000001"] {
        for flag in ["--iters", "--warmup"] {
            let err = refused(&["perf", "put-lat", flag, value], flag);
            assert!(err.contains("at most 100000000"), "{flag} {value}: {err}");
        }
    }
    refused(&["perf", "--iters", "-1"], "--iters");
    refused(&["perf", "-n", "5000"], "-n");
    let out = Command::new(BIN)
        .args([
            "perf",
            "put-lat",
            "--transport",
            "verbs",
            "--qd-sweep",
            "--iters",
            "100000000",
        ])
        .output()
        .expect("run switchyard");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--iters 100000000: at most 1562500 with --qd-sweep"),
        "{stderr}"
    );
}
