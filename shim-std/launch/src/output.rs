//! Tagged output: each line a PE writes, prefixed with `[rank] ` and written
//! in one locked write to the launcher's stdout or stderr.

use std::{
    io::{self, BufRead, BufReader, Read, Write},
    thread::{self, JoinHandle},
};

use crate::{LaunchError, MAX_LINE};

/// Where forwarded lines go.
#[derive(Clone, Copy)]
pub(crate) enum Sink {
    Stdout,
    Stderr,
}

impl Sink {
    fn write_line(self, line: &[u8]) -> io::Result<()> {
        match self {
            Sink::Stdout => {
                let mut out = io::stdout().lock();
                out.write_all(line)?;
                out.flush()
            }
            Sink::Stderr => io::stderr().lock().write_all(line),
        }
    }
}

/// Starts a thread that copies `pipe` to `sink` line by line, each line
/// prefixed with `prefix` and written in one locked write.
pub(crate) fn forward(
    pipe: impl Read + Send + 'static,
    prefix: Vec<u8>,
    sink: Sink,
    rank: u32,
) -> Result<JoinHandle<()>, LaunchError> {
    let name = match sink {
        Sink::Stdout => format!("rank{rank}-stdout"),
        Sink::Stderr => format!("rank{rank}-stderr"),
    };
    thread::Builder::new()
        .name(name)
        .spawn(move || {
            let mut reader = BufReader::with_capacity(MAX_LINE, pipe);
            let mut line = Vec::with_capacity(prefix.len() + 256);
            // After a failed write (a closed stdout) keep reading, so the PE
            // never blocks on a full pipe, but stop writing.
            let mut writing = true;
            loop {
                line.clear();
                line.extend_from_slice(&prefix);
                match (&mut reader)
                    .take(MAX_LINE as u64)
                    .read_until(b'\n', &mut line)
                {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                if line.last() != Some(&b'\n') {
                    line.push(b'\n');
                }
                if writing {
                    writing = sink.write_line(&line).is_ok();
                }
            }
        })
        .map_err(|source| LaunchError::OutputThread { rank, source })
}
