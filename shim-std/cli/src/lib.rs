//! The `switchyard` command line, as a library: [`run`] takes the arguments and
//! returns what to print and the exit status, so the binary is a thin wrapper
//! and tests need no process.
//!
//! Exit status: 0 on success, 2 on a usage error or bad input (a message on
//! stderr, never a panic).

#![deny(missing_docs)]
#![deny(unsafe_code)]

pub mod cc;
pub mod info;
pub mod perf;
pub mod sim;
pub mod topo;

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

    /// Failure with exit status [`EXIT_USAGE`] and `message` on stderr.
    pub fn usage_error(message: impl std::fmt::Display) -> Output {
        Output {
            code: EXIT_USAGE,
            stdout: String::new(),
            stderr: format!("switchyard: error: {message}\n"),
        }
    }
}

/// Top-level usage.
pub const USAGE: &str = "\
switchyard: transport-routing data plane for SHMEM-style one-sided communication

Usage:
  switchyard run -n N [OPTIONS] -- PROGRAM [ARGS...]
                                     start N PEs of PROGRAM on this machine
  switchyard info [OPTIONS]          show transports, devices, machine facts and the configuration
  switchyard topo [FILE] [OPTIONS]   show the path classes and routes of a topology
  switchyard sim up|status|link|down simulate a cluster in network namespaces (root)
  switchyard cc [--show] [CC ARGS...] compile an OpenSHMEM C program against libswitchyard_shmem
  switchyard --help                  this text
  switchyard --version               the version

Run `switchyard <command> --help` for a command's options.
More commands (perf) are coming.
";

/// Runs the command line `args` (without the program name).
pub fn run(args: &[String]) -> Output {
    match args.first().map(String::as_str) {
        Some("info") => info::run(&args[1..]),
        Some("topo") => topo::run(&args[1..]),
        Some("sim") => sim::run(&args[1..]),
        Some("-h" | "--help" | "help") => Output::ok(USAGE.into()),
        Some("-V" | "--version") => {
            Output::ok(format!("switchyard {}\n", env!("CARGO_PKG_VERSION")))
        }
        Some(other) => {
            let mut out = Output::usage_error(format_args!("unknown command '{other}'"));
            out.stderr.push('\n');
            out.stderr.push_str(USAGE);
            out
        }
        None => Output {
            code: EXIT_USAGE,
            stdout: String::new(),
            stderr: USAGE.into(),
        },
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
        assert_eq!(run(&args(&["--help"])).code, 0);
        assert!(run(&args(&["--help"])).stdout.contains("switchyard topo"));
        assert_eq!(
            run(&args(&["--version"])).stdout,
            format!("switchyard {}\n", env!("CARGO_PKG_VERSION"))
        );
        let out = run(&args(&["frobnicate"]));
        assert_eq!(out.code, EXIT_USAGE);
        assert!(
            out.stderr
                .starts_with("switchyard: error: unknown command 'frobnicate'")
        );
        assert!(out.stderr.contains("Usage:"));
        assert_eq!(run(&[]).code, EXIT_USAGE);
    }
}
