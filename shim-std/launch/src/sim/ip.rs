//! Running `ip` with a bounded wait, reading its JSON, and running code
//! inside a network namespace.

use std::{
    fs::{self, File},
    io::{self, Read},
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use super::{COMMAND_TIMEOUT, STATE_DIR, SimError, check_name, netns_path, spec::belongs_to};

/// Runs `f` on a new thread inside network namespace `netns` (a name under
/// [`NETNS_DIR`](super::NETNS_DIR)) and returns its result; the calling thread's namespace is
/// untouched. Sockets created by `f` stay in `netns` wherever they are used.
///
/// # Errors
///
/// [`SimError::EnterNamespace`] when the namespace cannot be opened or
/// entered, [`SimError::Thread`] when the thread cannot start or panics.
pub fn in_netns<R, F>(netns: &str, f: F) -> Result<R, SimError>
where
    R: Send + 'static,
    F: FnOnce() -> R + Send + 'static,
{
    let path = netns_path(netns);
    let file = File::open(&path).map_err(|source| SimError::EnterNamespace {
        path: path.clone(),
        source,
    })?;
    let thread_err = |source| SimError::Thread {
        netns: netns.into(),
        source,
    };
    let handle = thread::Builder::new()
        .name(format!("netns-{netns}"))
        .spawn(move || -> Result<R, SimError> {
            crate::sys::enter_net_namespace(&file)
                .map_err(|source| SimError::EnterNamespace { path, source })?;
            Ok(f())
        })
        .map_err(thread_err)?;
    handle
        .join()
        .map_err(|_| thread_err(io::Error::other("the thread panicked")))?
}

/// Every namespace `ip netns list` shows.
///
/// # Errors
///
/// A failed `ip`.
pub fn list_namespaces() -> Result<Vec<String>, SimError> {
    let out = ip(&["netns", "list"])?;
    Ok(out
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect())
}

/// The namespaces of sim `name` that exist now.
///
/// # Errors
///
/// A failed `ip`.
pub fn sim_namespaces(name: &str) -> Result<Vec<String>, SimError> {
    Ok(list_namespaces()?
        .into_iter()
        .filter(|ns| belongs_to(ns, name))
        .collect())
}

/// The names of the sims that have a state file.
pub fn list_sims() -> Vec<String> {
    let Ok(dir) = fs::read_dir(STATE_DIR) else {
        return Vec::new();
    };
    let mut names: Vec<String> = dir
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_suffix(".json")
                .map(str::to_string)
        })
        .filter(|n| check_name(n).is_ok())
        .collect();
    names.sort();
    names
}

pub(super) fn find_iface<'a>(
    links: &'a [serde_json::Value],
    name: &str,
) -> Option<&'a serde_json::Value> {
    links
        .iter()
        .find(|l| l.get("ifname").and_then(|n| n.as_str()) == Some(name))
}

pub(super) fn ip_json(args: &[&str]) -> Result<Vec<serde_json::Value>, SimError> {
    let out = ip(args)?;
    if out.trim().is_empty() {
        return Ok(Vec::new());
    }
    serde_json::from_str(&out).map_err(|source| SimError::CommandOutput {
        command: command_line(args),
        source,
    })
}

fn command_line(args: &[&str]) -> String {
    let mut s = String::from("ip");
    for a in args {
        s.push(' ');
        s.push_str(a);
    }
    s
}

/// Runs `ip ARGS` with a bounded wait; returns its stdout.
pub(super) fn ip(args: &[&str]) -> Result<String, SimError> {
    let command = command_line(args);
    let child = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let child = match child {
        Ok(c) => c,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(SimError::NoIp),
        Err(source) => return Err(SimError::Spawn { command, source }),
    };
    run_bounded(child, command, COMMAND_TIMEOUT)
}

/// Waits up to `bound` for `child`, collecting its output; kills it after.
fn run_bounded(mut child: Child, command: String, bound: Duration) -> Result<String, SimError> {
    fn reader(pipe: Option<impl Read + Send + 'static>) -> Option<thread::JoinHandle<Vec<u8>>> {
        let mut pipe = pipe?;
        thread::Builder::new()
            .spawn(move || {
                let mut buf = Vec::new();
                let _ = pipe.read_to_end(&mut buf);
                buf
            })
            .ok()
    }
    let out = reader(child.stdout.take());
    let err = reader(child.stderr.take());
    let until = Instant::now() + bound;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < until => thread::sleep(Duration::from_millis(1)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(SimError::CommandTimeout {
                    command,
                    after: bound,
                });
            }
            Err(source) => {
                let _ = child.kill();
                return Err(SimError::Spawn { command, source });
            }
        }
    };
    let collect = |h: Option<thread::JoinHandle<Vec<u8>>>| {
        h.and_then(|h| h.join().ok())
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    };
    let stdout = collect(out);
    let stderr = collect(err);
    if status.success() {
        Ok(stdout)
    } else {
        Err(SimError::Command {
            command,
            status: status.to_string(),
            stderr: stderr.trim().to_string(),
        })
    }
}
