//! The `switchyard` command: a thin wrapper around [`switchyard_cli::run`]
//! (and [`switchyard_launch::main`] for `switchyard run`, which streams).

use std::{
    io::{ErrorKind, Write},
    process::ExitCode,
};

use switchyard_cli::{self as cli, Output};

fn main() -> ExitCode {
    let out = match std::env::args_os()
        .skip(1)
        .map(|a| a.into_string())
        .collect::<Result<Vec<_>, _>>()
    {
        // `run` streams its PEs' output as it comes, so it is not buffered
        // through `cli::run`.
        Ok(args) if args.first().is_some_and(|a| a == "run") => {
            return switchyard_launch::main(&args[1..]);
        }
        Ok(args) if args.first().is_some_and(|a| a == "cc") => {
            return cli::cc::main(&args[1..]);
        }
        Ok(args) if args.first().is_some_and(|a| a == "perf") => {
            return cli::perf::main(&args[1..]);
        }
        Ok(args) => cli::run(&args),
        Err(bad) => Output::usage_error(format_args!("argument {bad:?} is not valid UTF-8")),
    };
    // Write without println!: a closed pipe (`switchyard topo | head`) is not a
    // reason to panic.
    let wrote = std::io::stdout()
        .lock()
        .write_all(out.stdout.as_bytes())
        .and_then(|()| std::io::stdout().flush());
    let _ = std::io::stderr().lock().write_all(out.stderr.as_bytes());
    match wrote {
        Err(e) if e.kind() != ErrorKind::BrokenPipe => {
            let _ = writeln!(std::io::stderr(), "switchyard: cannot write output: {e}");
            ExitCode::from(1)
        }
        _ => ExitCode::from(out.code),
    }
}
