//! The `switchyard` command line, as a library: [`run`] takes the arguments and
//! returns what to print and the exit status, so the binary is a thin wrapper
//! and tests need no process.
//!
//! ## Commands
//!
//! | command | module | what |
//! |---|---|---|
//! | `switchyard run -n N [OPTIONS] [--] PROGRAM [ARGS]...` | [`launch`] | start N PEs on this machine (or in a sim) and wait for them ([`switchyard_launch`]) |
//! | `switchyard info [--config FILE] [--json]` | [`info`] | transports, devices, machine facts, the configuration |
//! | `switchyard perf [TEST] [OPTIONS]` | [`perf`] | benchmarks of the data path beside baselines (`--plot`: latency curves in an SVG) |
//! | `switchyard topo [FILE] [OPTIONS]` | [`topo`] | path classes and routes of a topology (`--svg`: as a heat map) |
//! | `switchyard sim up\|status\|link\|down` | [`sim`] | simulated clusters in network namespaces |
//! | `switchyard stat [JOB] [--once\|--json\|--prometheus]` | [`stat`] | the counters of the running jobs of this machine |
//! | `switchyard cc [--show] [--static] [CC ARGS]...` | [`cc`] | compile OpenSHMEM C programs |
//! | `switchyard trace [JOB\|FILE\|DIR] [--json] [--join]` | [`trace`] | the route trace of a running job or a dump, decoded |
//! | `switchyard completions bash\|zsh\|fish` | [`cli`] | shell completion scripts |
//!
//! The command line is one clap command tree ([`cli::Cli`]); each command's
//! flags are declared beside the command, in its module, and `--help` of
//! every command and subcommand is generated from them. Values are checked
//! as they are parsed: numbers are bounded (durations to a week, `perf
//! --iters` to [`perf::MAX_ITERS`]), names and sizes are validated, so bad
//! input is a usage error, never a panic. `switchyard run` and `switchyard
//! perf` stream their output as it comes (it is not buffered in [`Output`]),
//! and `switchyard cc` runs the C compiler, which writes for itself.
//!
//! ## Exit status
//!
//! 0 on success; 2 ([`EXIT_USAGE`]) on a usage error or bad input, with
//! `switchyard: error: MESSAGE` and the command's usage on stderr
//! (`switchyard run: error: ...` for `run`); 1 on a failure while running.
//! `switchyard run` passes on its job's status (see [`switchyard_launch`]),
//! `switchyard cc` the compiler's.
//!
//! ## Example
//!
//! ```
//! let out = switchyard_cli::run(&["topo".to_string(), "--json".to_string()]);
//! assert_eq!(out.code, 0);
//! assert!(out.stdout.contains("\"n_pes\": 8"));
//! let out = switchyard_cli::run(&["topo".to_string(), "--as".to_string()]);
//! assert_eq!(out.code, switchyard_cli::EXIT_USAGE);
//! assert!(out.stderr.starts_with("switchyard: error: "));
//! ```

#![deny(missing_docs)]
#![deny(unsafe_code)]

use std::ffi::OsString;

pub mod cc;
pub mod cli;
pub mod info;
pub mod launch;
pub mod perf;
mod plot;
pub mod sim;
pub mod stat;
pub mod topo;
pub mod trace;
mod values;

use cli::Command;

/// Exit status for bad usage or bad input.
pub const EXIT_USAGE: u8 = 2;

/// What a command produced.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Output {
    /// Exit status.
    pub code: u8,
    /// Text for standard output.
    pub stdout: String,
    /// Text for standard error.
    pub stderr: String,
}

impl Output {
    /// Success with `stdout`.
    pub fn ok(stdout: String) -> Output {
        Output {
            code: 0,
            stdout,
            stderr: String::new(),
        }
    }

    /// Exit status `code` and nothing (more) to print: what a command that
    /// wrote its output itself returns.
    pub fn status(code: u8) -> Output {
        Output {
            code,
            ..Output::default()
        }
    }

    /// Failure with exit status [`EXIT_USAGE`] and `message` on stderr.
    pub fn usage_error(message: impl std::fmt::Display) -> Output {
        Output {
            code: EXIT_USAGE,
            stdout: String::new(),
            stderr: format!("switchyard: error: {message}\n"),
        }
    }
}

/// Runs the command line `args` (without the program name).
pub fn run(args: &[String]) -> Output {
    run_os(args.iter().map(OsString::from))
}

/// [`run`] for arguments as the process got them (`std::env::args_os`); a
/// value that must be text and is not UTF-8 is a usage error, the program
/// and arguments of `switchyard run` may be anything.
pub fn run_os(args: impl IntoIterator<Item = OsString>) -> Output {
    let cli = match cli::parse(args) {
        Ok(cli) => cli,
        Err(out) => return out,
    };
    match &cli.command {
        Command::Run(a) => launch::run(a),
        Command::Info(a) => info::run(a),
        Command::Perf(a) => perf::run(a),
        Command::Topo(a) => topo::run(a),
        Command::Sim(a) => sim::run(a),
        Command::Stat(a) => stat::run(a),
        Command::Cc(a) => cc::run(a),
        Command::Trace(a) => trace::run(a),
        Command::Completions(a) => cli::completions(a),
    }
}

#[cfg(test)]
mod test {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn dispatch() {
        let help = run(&args(&["--help"]));
        assert_eq!(help.code, 0);
        for command in [
            "run",
            "info",
            "perf",
            "topo",
            "sim",
            "cc",
            "trace",
            "completions",
        ] {
            assert!(
                help.stdout.contains(&format!("\n  {command} ")),
                "{command}: {}",
                help.stdout
            );
        }
        assert!(!help.stdout.contains("coming"), "{}", help.stdout);
        assert_eq!(
            run(&args(&["--version"])).stdout,
            format!("switchyard {}\n", env!("CARGO_PKG_VERSION"))
        );
        let out = run(&args(&["frobnicate"]));
        assert_eq!(out.code, EXIT_USAGE);
        assert!(
            out.stderr
                .starts_with("switchyard: error: unrecognized subcommand 'frobnicate'"),
            "{}",
            out.stderr
        );
        assert!(out.stderr.contains("Usage:"));
        let none = run(&[]);
        assert_eq!(none.code, EXIT_USAGE);
        assert!(none.stderr.contains("Usage: switchyard"), "{}", none.stderr);
    }

    #[test]
    fn every_command_has_help() {
        for path in [
            &["run"][..],
            &["info"],
            &["perf"],
            &["topo"],
            &["sim"],
            &["sim", "up"],
            &["sim", "status"],
            &["sim", "link"],
            &["sim", "down"],
            &["cc"],
            &["trace"],
            &["completions"],
        ] {
            let mut a = args(path);
            a.push("--help".into());
            let out = run(&a);
            assert_eq!(out.code, 0, "{path:?}: {}", out.stderr);
            let usage = format!("Usage: switchyard {}", path.join(" "));
            assert!(out.stdout.starts_with(&usage), "{path:?}: {}", out.stdout);
        }
    }

    #[test]
    fn usage_errors_name_the_command() {
        let out = run(&args(&["sim", "up", "--json"]));
        assert_eq!(out.code, EXIT_USAGE);
        assert!(
            out.stderr.starts_with("switchyard: error: "),
            "{}",
            out.stderr
        );
        assert!(
            out.stderr.contains("try `switchyard sim up --help`"),
            "{}",
            out.stderr
        );
        let out = cli::usage_error(&["perf"], "bad");
        assert!(
            out.stderr.starts_with("switchyard: error: bad\n"),
            "{}",
            out.stderr
        );
        assert!(out.stderr.contains("Usage: switchyard perf"));
        let out = cli::usage_error(&["run"], "bad");
        assert!(out.stderr.starts_with("switchyard run: error: bad\n"));
    }

    #[test]
    fn text_arguments_must_be_utf8() {
        use std::os::unix::ffi::OsStringExt;
        let bad = OsString::from_vec(vec![b'x', 0xff]);
        let out = run_os(["topo".into(), bad.clone()]);
        assert_eq!(out.code, EXIT_USAGE, "{}", out.stderr);
        assert!(out.stderr.contains("invalid UTF-8"), "{}", out.stderr);
        // The program and arguments of `run` need not be text.
        match cli::parse([
            "run".into(),
            "-n1".into(),
            "--".into(),
            bad.clone(),
            bad.clone(),
        ]) {
            Ok(cli::Cli {
                command: Command::Run(r),
            }) => assert_eq!(r.command, [bad.clone(), bad]),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn completions_for_each_shell() {
        for (shell, marker) in [
            ("bash", "complete -F"),
            ("zsh", "#compdef switchyard"),
            ("fish", "complete -c switchyard"),
        ] {
            let out = run(&args(&["completions", shell]));
            assert_eq!(out.code, 0, "{shell}: {}", out.stderr);
            assert!(out.stdout.contains(marker), "{shell}");
            for command in ["run", "topo", "sim"] {
                assert!(out.stdout.contains(command), "{shell}: {command}");
            }
        }
        assert_eq!(run(&args(&["completions", "tcsh"])).code, EXIT_USAGE);
    }
}
