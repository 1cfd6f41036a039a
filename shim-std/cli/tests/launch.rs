//! `switchyard run` end to end: runs the built binary with small shell
//! commands as PEs. Every run is bounded twice: by `--timeout` and by a
//! test-side limit that kills the launcher and fails the test.

use std::{
    io::{BufRead, BufReader, Read},
    path::Path,
    process::{Child, Command, Stdio},
    sync::{OnceLock, mpsc},
    thread,
    time::{Duration, Instant},
};

use switchyard_tests::skip::{cargo_build, skip};

const BIN: &str = env!("CARGO_BIN_EXE_switchyard");
/// Test-side limit on any one run: a hang guard, not a performance assertion.
const LIMIT: Duration = Duration::from_secs(60);

/// A launcher being run, its stdout streamed line by line.
struct Launcher {
    child: Child,
    start: Instant,
    lines: mpsc::Receiver<String>,
    stdout: Vec<String>,
    stderr: thread::JoinHandle<String>,
}

/// What a finished run left.
struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    elapsed: Duration,
}

impl Ran {
    fn assert_code(&self, code: i32) {
        assert_eq!(
            self.code,
            Some(code),
            "stdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
    }
}

fn start(args: &[&str], env: &[(&str, &str)]) -> Launcher {
    let mut child = Command::new(BIN)
        .arg("run")
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start switchyard run");
    let out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let (tx, lines) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let stderr = thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    Launcher {
        child,
        start: Instant::now(),
        lines,
        stdout: Vec::new(),
        stderr,
    }
}

impl Launcher {
    /// Waits, bounded, until `n` stdout lines contain `what`.
    fn wait_for(&mut self, what: &str, n: usize) {
        let until = self.start + LIMIT;
        while self.stdout.iter().filter(|l| l.contains(what)).count() < n {
            let left = until.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.stdout.push(line),
                Err(_) => {
                    let _ = self.child.kill();
                    panic!("no {n} lines with {what:?}; got {:?}", self.stdout);
                }
            }
        }
    }

    /// Waits, bounded, for the launcher to exit.
    fn finish(mut self) -> Ran {
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if self.start.elapsed() > LIMIT {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("switchyard run still running after {LIMIT:?}");
            }
            thread::sleep(Duration::from_millis(10));
        };
        let elapsed = self.start.elapsed();
        // The launcher is gone; its PEs hold no copy of its stdout (tagged
        // output goes through the launcher), so the pipes end now.
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(10)) {
            self.stdout.push(line);
        }
        Ran {
            code: status.code(),
            stdout: self.stdout.join("\n"),
            stderr: self.stderr.join().unwrap(),
            elapsed,
        }
    }
}

fn run(args: &[&str]) -> Ran {
    start(args, &[]).finish()
}

fn job_id_in(stdout: &str) -> String {
    let at = stdout.find("job=").expect("a job= line") + 4;
    let id = &stdout[at..at + 16];
    assert!(
        id.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()),
        "{id}"
    );
    id.to_string()
}

fn shm_objects_of(job: &str) -> Vec<String> {
    let prefix = format!("switchyard-{job}-");
    std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.starts_with(&prefix))
        .collect()
}

#[test]
fn every_rank_gets_its_environment_and_tagged_output() {
    let launcher = start(
        &[
            "-n",
            "4",
            "--timeout",
            "30",
            "--",
            "sh",
            "-c",
            "echo \"rank=$SWITCHYARD_RANK size=$SWITCHYARD_SIZE \
             local=$SWITCHYARD_LOCAL_RANK/$SWITCHYARD_LOCAL_SIZE \
             host=$SWITCHYARD_ROOT_HOST pid=$SWITCHYARD_LAUNCHER_PID \
             root=$SWITCHYARD_ROOT job=$SWITCHYARD_JOB_ID\"; \
             echo \"err $SWITCHYARD_RANK\" >&2; printf \"tail $SWITCHYARD_RANK\"",
        ],
        &[],
    );
    let pid = launcher.child.id();
    let ran = launcher.finish();
    ran.assert_code(0);
    for line in ran.stdout.lines() {
        assert!(line.starts_with('['), "untagged line {line:?}");
    }
    let job = job_id_in(&ran.stdout);
    for r in 0..4 {
        let tag =
            format!("[{r}] rank={r} size=4 local={r}/4 host=launcher pid={pid} root=127.0.0.1:");
        assert!(ran.stdout.contains(&tag), "{tag}\n{}", ran.stdout);
        assert!(ran.stdout.contains(&format!("job={job}")));
        assert!(
            ran.stdout.contains(&format!("[{r}] tail {r}")),
            "{}",
            ran.stdout
        );
        assert!(
            ran.stderr.contains(&format!("[{r}] err {r}\n")),
            "{}",
            ran.stderr
        );
    }
    assert_eq!(ran.stdout.matches(&format!("job={job}")).count(), 4);
}

#[test]
fn no_tag_output_passes_lines_through() {
    let ran = run(&[
        "-n",
        "3",
        "--no-tag-output",
        "--timeout",
        "30",
        "sh",
        "-c",
        "echo \"rank $SWITCHYARD_RANK\"",
    ]);
    ran.assert_code(0);
    let mut lines: Vec<&str> = ran.stdout.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines, ["rank 0", "rank 1", "rank 2"]);
}

#[test]
fn a_failing_rank_is_named_and_stops_the_others() {
    let ran = run(&[
        "-n",
        "4",
        "--timeout",
        "50",
        "--",
        "sh",
        "-c",
        "if [ \"$SWITCHYARD_RANK\" = 2 ]; then echo bye >&2; exit 3; fi; sleep 30",
    ]);
    ran.assert_code(3);
    assert!(
        ran.stderr
            .contains("switchyard run: rank 2 exited with status 3"),
        "{}",
        ran.stderr
    );
    assert!(ran.stderr.contains("[2] bye"), "{}", ran.stderr);
    // Hang guard: the sleeping ranks were stopped, not waited for.
    assert!(ran.elapsed < Duration::from_secs(20), "{:?}", ran.elapsed);
}

#[test]
fn a_rank_killed_by_a_signal_is_named_with_it() {
    let ran = run(&[
        "-n",
        "2",
        "--timeout",
        "50",
        "--",
        "sh",
        "-c",
        "if [ \"$SWITCHYARD_RANK\" = 1 ]; then kill -KILL $$; fi; sleep 30",
    ]);
    ran.assert_code(128 + 9);
    assert!(
        ran.stderr
            .contains("rank 1 was killed by signal 9 (SIGKILL)"),
        "{}",
        ran.stderr
    );
    assert!(ran.elapsed < Duration::from_secs(20), "{:?}", ran.elapsed);
}

#[test]
fn shm_objects_are_removed_after_a_normal_run() {
    if !Path::new("/dev/shm").is_dir() {
        skip("no /dev/shm here");
        return;
    }
    let ran = run(&[
        "-n",
        "2",
        "--timeout",
        "30",
        "--",
        "sh",
        "-c",
        "touch /dev/shm/switchyard-$SWITCHYARD_JOB_ID-$SWITCHYARD_RANK && \
         echo job=$SWITCHYARD_JOB_ID",
    ]);
    ran.assert_code(0);
    let job = job_id_in(&ran.stdout);
    assert_eq!(shm_objects_of(&job), Vec::<String>::new());
    assert!(
        ran.stderr
            .contains("removed 2 leftover shared-memory object(s)"),
        "{}",
        ran.stderr
    );
}

#[test]
fn shm_objects_are_removed_after_a_crash() {
    if !Path::new("/dev/shm").is_dir() {
        skip("no /dev/shm here");
        return;
    }
    let ran = run(&[
        "-n",
        "2",
        "--timeout",
        "50",
        "--",
        "sh",
        "-c",
        "touch /dev/shm/switchyard-$SWITCHYARD_JOB_ID-$SWITCHYARD_RANK && \
         echo job=$SWITCHYARD_JOB_ID && \
         if [ \"$SWITCHYARD_RANK\" = 0 ]; then \
           while [ ! -e /dev/shm/switchyard-$SWITCHYARD_JOB_ID-1 ]; do sleep 0.05; done; \
           kill -KILL $$; \
         fi; sleep 30",
    ]);
    ran.assert_code(128 + 9);
    let job = job_id_in(&ran.stdout);
    assert_eq!(shm_objects_of(&job), Vec::<String>::new());
    assert!(
        ran.stderr.contains("rank 0 was killed by signal 9"),
        "{}",
        ran.stderr
    );
    assert!(ran.stderr.contains("removed 2 leftover"), "{}", ran.stderr);
}

#[test]
fn exported_variables_reach_the_pes() {
    let ran = start(
        &[
            "-n",
            "2",
            "-x",
            "A=B=C",
            "-x",
            "SWITCHYARD_TEST_FROM_LAUNCHER",
            "--timeout",
            "30",
            "--",
            "sh",
            "-c",
            "echo \"A=$A F=$SWITCHYARD_TEST_FROM_LAUNCHER\"",
        ],
        &[("SWITCHYARD_TEST_FROM_LAUNCHER", "here")],
    )
    .finish();
    ran.assert_code(0);
    assert!(ran.stdout.contains("[0] A=B=C F=here"), "{}", ran.stdout);
    assert!(ran.stdout.contains("[1] A=B=C F=here"), "{}", ran.stdout);
}

#[test]
fn binding_is_visible_to_the_pe() {
    let ran = run(&[
        "-n",
        "1",
        "--bind-pes",
        "core",
        "--timeout",
        "30",
        "--",
        "sh",
        "-c",
        "echo \"cpu=$SWITCHYARD_BOUND_CPU pes=$SWITCHYARD_PE_CPUS\"; grep Cpus_allowed_list /proc/self/status",
    ]);
    ran.assert_code(0);
    assert!(!ran.stderr.contains("deprecated"), "{}", ran.stderr);
    let at = ran.stdout.find("cpu=").unwrap() + 4;
    let cpu: String = ran.stdout[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    assert!(!cpu.is_empty(), "{}", ran.stdout);
    // One PE: the PEs' CPUs are its own.
    assert!(
        ran.stdout.contains(&format!("cpu={cpu} pes={cpu}\n")),
        "{}",
        ran.stdout
    );
    assert!(
        ran.stdout.contains(&format!("Cpus_allowed_list:\t{cpu}\n"))
            || ran.stdout.ends_with(&format!("Cpus_allowed_list:\t{cpu}")),
        "{}",
        ran.stdout
    );

    let ran = run(&[
        "-n",
        "1",
        "--bind-to",
        "none",
        "--timeout",
        "30",
        "--",
        "sh",
        "-c",
        "echo \"cpu=${SWITCHYARD_BOUND_CPU-unset} pes=${SWITCHYARD_PE_CPUS-unset}\"",
    ]);
    ran.assert_code(0);
    assert!(
        ran.stdout.contains("[0] cpu=unset pes=unset"),
        "{}",
        ran.stdout
    );
    // The old name still works, with a warning.
    assert!(
        ran.stderr
            .contains("switchyard run: warning: --bind-to is deprecated"),
        "{}",
        ran.stderr
    );
}

#[test]
fn bad_usage_exits_2() {
    for args in [
        &[][..],
        &["-n", "2"],
        &["echo", "hi"],
        &["-n", "0", "echo"],
        &["-n", "two", "echo"],
        &["-n", "2", "-x", "=B", "echo"],
        &["-n", "2", "-x", "NOT-A-NAME=1", "echo"],
        &["-n", "2", "--bind-pes", "socket", "echo"],
        &["-n", "2", "--timeout", "soon", "echo"],
        &["-n", "2", "--frobnicate", "echo"],
    ] {
        let ran = run(args);
        ran.assert_code(2);
        assert!(
            ran.stderr.starts_with("switchyard run: error: "),
            "{args:?}: {}",
            ran.stderr
        );
        assert!(ran.stderr.contains("Usage: switchyard run"), "{args:?}");
    }
    let ran = run(&["--help"]);
    ran.assert_code(0);
    assert!(ran.stdout.contains("Usage: switchyard run"));
}

#[test]
fn a_missing_program_exits_127() {
    let ran = run(&[
        "-n",
        "2",
        "--timeout",
        "30",
        "--",
        "switchyard-no-such-program",
    ]);
    ran.assert_code(127);
    assert!(
        ran.stderr
            .contains("cannot start 'switchyard-no-such-program' for rank 0"),
        "{}",
        ran.stderr
    );
    assert!(ran.stderr.contains("No such file"), "{}", ran.stderr);
}

/// Strangers at the launcher's rendezvous: rank 0 (a shell, not a PE)
/// sends it a frame that is no hello, then a hello whose proof is zeros,
/// each time reading until the root closes. The job itself ends well, and
/// the launcher's summary counts both, by why.
#[test]
fn refused_connections_are_in_the_launchers_summary() {
    // A frame: length (kind + payload), kind, payload. The hello: magic,
    // this build's protocol version, no flags, rank 1, size 2, a nonce and
    // a proof of zeros, no card.
    let script = format!(
        r#"
        [ "$SWITCHYARD_RANK" = 0 ] || exit 0
        host=${{SWITCHYARD_ROOT%:*}}; port=${{SWITCHYARD_ROOT##*:}}
        exec 3<>"/dev/tcp/$host/$port"
        printf '\x05\x00\x00\x00\x63ABCD' >&3
        cat <&3 >/dev/null
        exec 3<>"/dev/tcp/$host/$port"
        printf '\x41\x00\x00\x00\x01SYBS\x{:02x}\x00\x01\x00\x00\x00\x02\x00\x00\x00' >&3
        head -c 50 /dev/zero >&3
        cat <&3 >/dev/null
        echo sent
    "#,
        switchyard_bootstrap::PROTOCOL_VERSION
    );
    let ran = run(&["-n", "2", "--timeout", "30", "--", "bash", "-c", &script]);
    ran.assert_code(0);
    assert!(ran.stdout.contains("[0] sent"), "{}", ran.stdout);
    assert!(
        ran.stderr
            .contains("switchyard run: bootstrap: 2 connections refused (1 bad MAC, 1 malformed)"),
        "{}",
        ran.stderr
    );
}

#[test]
fn the_timeout_stops_the_job() {
    let ran = run(&["-n", "2", "--timeout", "0.5", "--", "sleep", "30"]);
    ran.assert_code(124);
    assert!(
        ran.stderr.contains("timed out after 0.5 s"),
        "{}",
        ran.stderr
    );
    assert!(ran.elapsed < Duration::from_secs(20), "{:?}", ran.elapsed);
}

#[test]
fn sigterm_to_the_launcher_is_forwarded() {
    let mut launcher = start(
        &[
            "-n",
            "2",
            "--timeout",
            "50",
            "--",
            "sh",
            "-c",
            "trap 'echo got TERM; exit 0' TERM; echo ready; sleep 30 & wait $!",
        ],
        &[],
    );
    launcher.wait_for("ready", 2);
    let killed = Command::new("kill")
        .args(["-TERM", &launcher.child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let ran = launcher.finish();
    ran.assert_code(128 + 15);
    assert!(ran.stdout.contains("[0] got TERM"), "{}", ran.stdout);
    assert!(ran.stdout.contains("[1] got TERM"), "{}", ran.stdout);
    assert!(
        ran.stderr.contains("got SIGTERM; forwarding it"),
        "{}",
        ran.stderr
    );
    assert!(ran.elapsed < Duration::from_secs(20), "{:?}", ran.elapsed);
}

/// The `counter` example of the `switchyard` crate, a real PE that
/// bootstraps through the launcher's rendezvous, built once in this test's
/// profile (`cargo test -p switchyard-cli` does not build another
/// package's examples).
fn counter_example() -> &'static str {
    static COUNTER: OnceLock<String> = OnceLock::new();
    COUNTER.get_or_init(|| {
        let bin = cargo_build(&["-p", "switchyard", "--example", "counter"]);
        let example = bin.join("examples").join("counter");
        assert!(example.is_file(), "{} was not built", example.display());
        example.to_string_lossy().into_owned()
    })
}

#[test]
fn real_pes_bootstrap_through_the_launcher() {
    let counter = counter_example();
    let ran = run(&["-n", "2", "--timeout", "50", "--", counter, "100"]);
    ran.assert_code(0);
    assert!(ran.stdout.contains("[0] counter = 200"), "{}", ran.stdout);
    assert!(!ran.stderr.contains("bootstrap failed"), "{}", ran.stderr);
}

#[test]
fn a_rank_that_never_bootstraps_is_reported() {
    let counter = counter_example();
    let script =
        format!("if [ \"$SWITCHYARD_RANK\" = 0 ]; then exec '{counter}' 10; else sleep 30; fi");
    let ran = run(&[
        "-n",
        "2",
        "--timeout",
        "50",
        "--bootstrap-timeout",
        "1",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    assert_ne!(ran.code, Some(0), "{}", ran.stderr);
    assert!(
        ran.stderr.contains("rank 0 exited with status"),
        "{}",
        ran.stderr
    );
    assert!(
        ran.stderr.contains("switchyard run: bootstrap failed: ")
            && ran.stderr.contains("never arrived"),
        "{}",
        ran.stderr
    );
    assert!(
        ran.elapsed < Duration::from_secs(20),
        "{:?}\nstdout:\n{}\nstderr:\n{}",
        ran.elapsed,
        ran.stdout,
        ran.stderr
    );
}

/// The job secret: 256 bits as 64 hex digits in every rank's environment,
/// the same for the ranks of a job and another for the next job, on no
/// command line, never printed by the launcher, and not settable with `-x`.
#[test]
fn every_rank_gets_the_job_secret_and_only_in_its_environment() {
    let script = "printf 'secret=%s\\n' \"$SWITCHYARD_JOB_SECRET\"; \
                  tr '\\0' ' ' < /proc/$$/cmdline; echo";
    let secrets = |ran: &Ran| -> Vec<String> {
        ran.stdout
            .lines()
            .filter_map(|l| l.split_once("] secret=").map(|(_, s)| s.to_owned()))
            .collect()
    };
    let first = run(&["-n", "2", "--timeout", "30", "--", "sh", "-c", script]);
    first.assert_code(0);
    let s = secrets(&first);
    assert_eq!(s.len(), 2, "{}", first.stdout);
    assert_eq!(s[0], s[1]);
    assert_eq!(s[0].len(), 64);
    assert!(s[0].bytes().all(|b| b.is_ascii_hexdigit()), "{}", s[0]);
    // Only the ranks' own output shows it: no command line, no launcher line.
    assert_eq!(first.stdout.matches(&s[0]).count(), 2, "{}", first.stdout);
    assert!(!first.stderr.contains(&s[0]), "{}", first.stderr);
    let second = run(&["-n", "2", "--timeout", "30", "--", "sh", "-c", script]);
    second.assert_code(0);
    assert_ne!(secrets(&second)[0], s[0]);
    let forced = run(&["-n", "2", "-x", "SWITCHYARD_JOB_SECRET=00", "echo"]);
    assert_ne!(forced.code, Some(0));
    assert!(
        forced.stderr.contains("SWITCHYARD_JOB_SECRET"),
        "{}",
        forced.stderr
    );
}
