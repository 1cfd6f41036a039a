//! The `switchyard` command: a thin wrapper around [`switchyard_cli::run_os`].

use std::{
    io::{ErrorKind, Write},
    process::ExitCode,
};

fn main() -> ExitCode {
    // The library's events (SWITCHYARD_LOG; default: warnings on stderr).
    switchyard::logging::install();
    let out = switchyard_cli::run_os(std::env::args_os().skip(1));
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
