//! `switchyard run`'s command line: every flag, form and refusal.

use switchyard_launch::Bind;

use super::*;
use crate::cli::{Command, parse_strs};

fn parse_full(a: &[&str]) -> Result<(LaunchOptions, Option<SimTarget>), String> {
    let mut all = vec!["run"];
    all.extend_from_slice(a);
    match parse_strs(&all) {
        Ok(Command::Run(r)) => r
            .options()
            .map_err(|m| crate::cli::usage_error(&["run"], m).stderr),
        Ok(other) => panic!("{other:?}"),
        Err(out) => Err(out.stderr),
    }
}

fn parse(a: &[&str]) -> Result<LaunchOptions, String> {
    parse_full(a).map(|(o, _)| o)
}

#[test]
fn parses_a_full_command_line() {
    let opts = parse(&[
        "-n",
        "4",
        "--bind-pes",
        "none",
        "--timeout",
        "2.5",
        "--grace=0.1",
        "--bootstrap-timeout",
        "7",
        "-x",
        "A=B",
        "-xC=",
        "--no-tag-output",
        "--",
        "prog",
        "-n",
        "x",
    ])
    .unwrap();
    assert_eq!(opts.n, 4);
    assert_eq!(opts.bind, Bind::None);
    assert_eq!(opts.timeout, Some(Duration::from_millis(2500)));
    assert_eq!(opts.grace, Duration::from_millis(100));
    assert_eq!(opts.bootstrap_timeout, Duration::from_secs(7));
    assert_eq!(
        opts.env,
        vec![("A".into(), "B".into()), ("C".into(), String::new())]
    );
    assert!(!opts.tag_output);
    assert_eq!(opts.program, "prog");
    assert_eq!(opts.args, vec![OsString::from("-n"), OsString::from("x")]);
}

#[test]
fn program_starts_at_the_first_operand() {
    assert_eq!(parse(&["-np", "3", "true"]).unwrap().n, 3);
    assert_eq!(parse(&["--np=3", "true"]).unwrap().n, 3);
    let opts = parse(&["-n2", "--bind-pes=core", "echo", "--help"]).unwrap();
    assert_eq!(opts.n, 2);
    assert_eq!(opts.bind, Bind::Core);
    assert!(opts.tag_output);
    assert_eq!(opts.program, "echo");
    assert_eq!(opts.args, vec![OsString::from("--help")]);
    assert_eq!(opts.grace, DEFAULT_GRACE);
    assert_eq!(opts.bootstrap_timeout, DEFAULT_BOOTSTRAP_TIMEOUT);
    assert_eq!(opts.timeout, None);
    // The program's own -np is its own.
    let opts = parse(&["-n", "1", "-x", "A=1", "prog", "-np", "9"]).unwrap();
    assert_eq!(opts.args, vec![OsString::from("-np"), OsString::from("9")]);
    let opts = parse(&["-n", "1", "--", "-np"]).unwrap();
    assert_eq!(opts.program, "-np");
    // The last of --tag-output and --no-tag-output wins.
    assert!(
        parse(&["-n1", "--no-tag-output", "--tag-output", "true"])
            .unwrap()
            .tag_output
    );
    assert_eq!(parse(&["-n", "1", "-"]).unwrap().program, "-");
    // Repeated: the last -n counts, every -x counts.
    let opts = parse(&["-n", "1", "-n", "3", "-x", "A=1", "-x", "B=2", "true"]).unwrap();
    assert_eq!(opts.n, 3);
    assert_eq!(opts.env.len(), 2);
    let help = crate::run(&["run".into(), "--help".into()]);
    assert_eq!(help.code, 0);
    assert!(help.stdout.starts_with("Usage: switchyard run -n N"));
}

#[test]
fn sim_flags_make_a_target() {
    let (opts, sim) = parse_full(&[
        "--sim",
        "t.toml",
        "--name",
        "c1",
        "--pes-per-node",
        "2",
        "--rails=2",
        "-n",
        "4",
        "true",
    ])
    .unwrap();
    assert_eq!(opts.sim, None, "set once the sim is up");
    assert_eq!(
        sim,
        Some(SimTarget {
            target: "t.toml".into(),
            name: Some("c1".into()),
            pes_per_node: Some(2),
            rails: Some(2),
        })
    );
    assert_eq!(parse_full(&["-n", "1", "true"]).unwrap().1, None);
    let e = parse(&["--rails", "2", "-n", "1", "true"]).unwrap_err();
    assert!(e.contains("--sim"), "{e}");
    let e = parse(&["--sim", "x", "--rails", "9", "-n", "1", "true"]).unwrap_err();
    assert!(e.contains("bad number of rails 9"), "{e}");
}

#[test]
fn rejects_bad_usage() {
    for bad in [
        &[][..],
        &["-n", "2"],
        &["-n", "2", "--"],
        &["echo"],
        &["-n", "0", "echo"],
        &["-n", "4097", "echo"],
        &["-n", "x", "echo"],
        &["-n"],
        &["-n", "2", "--bind-pes", "socket", "echo"],
        &["-n", "2", "--bind-to", "socket", "echo"],
        &["-n", "2", "--bind-pes", "core", "--bind-to", "none", "echo"],
        &["-n", "2", "--timeout", "0", "echo"],
        &["-n", "2", "--timeout", "-1", "echo"],
        &["-n", "2", "--timeout", "nan", "echo"],
        &["-n", "2", "--grace", "x", "echo"],
        &["-n", "2", "-x", "=B", "echo"],
        &["-n", "2", "-x", "1A=B", "echo"],
        &["-n", "2", "-x", "A-B=C", "echo"],
        &["-n", "2", "-x", "", "echo"],
        &["-n", "2", "-x", "SWITCHYARD_RANK=3", "echo"],
        &["-n", "2", "-x", "SWITCHYARD_TEST_SURELY_UNSET_VAR", "echo"],
        &["-n", "2", "--frobnicate", "echo"],
        &["-n", "2", "--no-tag-output=yes", "echo"],
    ] {
        let e = parse(bad).expect_err(&format!("{bad:?} parsed"));
        assert!(e.starts_with("switchyard run: error: "), "{bad:?}: {e}");
        assert!(e.contains("Usage: switchyard run"), "{bad:?}: {e}");
    }
    let e = parse(&["-n", "2", "-x", "SWITCHYARD_RANK=3", "echo"]).unwrap_err();
    assert!(
        e.contains("-x: SWITCHYARD_RANK is set by the launcher"),
        "{e}"
    );
}

#[test]
fn durations_are_bounded() {
    for flag in ["--grace", "--bootstrap-timeout", "--timeout"] {
        for v in ["1e19", "604801", "inf"] {
            let e = parse(&["-n", "1", flag, v, "true"]).unwrap_err();
            assert!(e.contains(flag), "{flag} {v}: {e}");
        }
        assert!(
            parse(&["-n", "1", flag, "604800", "true"]).is_ok(),
            "{flag}"
        );
    }
}

#[test]
fn x_alone_passes_the_launchers_value() {
    // PATH is set wherever tests run.
    let opts = parse(&["-n", "1", "-x", "PATH", "true"]).unwrap();
    assert_eq!(opts.env[0].0, "PATH");
    assert_eq!(opts.env[0].1, std::env::var("PATH").unwrap());
}

#[test]
fn bind_to_is_read_as_bind_pes_with_a_deprecation() {
    let args = |a: &[&str]| {
        let mut all = vec!["run"];
        all.extend_from_slice(a);
        match parse_strs(&all) {
            Ok(Command::Run(r)) => r,
            other => panic!("{other:?}"),
        }
    };
    let old = args(&["-n2", "--bind-to", "core", "echo"]);
    assert_eq!(old.options().unwrap().0.bind, Bind::Core);
    assert_eq!(old.deprecations().len(), 1);
    assert!(old.deprecations()[0].contains("use --bind-pes"));
    let new = args(&["-n2", "--bind-pes", "none", "echo"]);
    assert_eq!(new.options().unwrap().0.bind, Bind::None);
    assert!(new.deprecations().is_empty());
    assert_eq!(args(&["-n2", "echo"]).options().unwrap().0.bind, Bind::Auto);
}
