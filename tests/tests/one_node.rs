//! One-node jobs end to end: real PE processes (`sy_pe`) started by the
//! launcher library, talking over the shared-memory driver. Every job is
//! bounded by a launcher timeout, and every wait inside a PE by its op
//! timeout.

use std::{
    process::Command,
    time::{Duration, Instant},
};

use switchyard_launch::{self as launch, Bind, JobEnd, JobOutcome, LaunchOptions, RankExit};

const PE: &str = env!("CARGO_BIN_EXE_sy_pe");

fn job(n: u32, args: &[&str]) -> JobOutcome {
    let mut o = LaunchOptions::new(n, PE);
    o.args = args.iter().map(Into::into).collect();
    o.bind = Bind::None;
    o.timeout = Some(Duration::from_secs(90));
    o.grace = Duration::from_millis(500);
    o.env.push(("SWITCHYARD_HEAP_SIZE".into(), "4M".into()));
    o.env.push(("SWITCHYARD_OP_TIMEOUT".into(), "20s".into()));
    let out = launch::launch(&o).expect("launch");
    assert_no_objects_left(out.job_id);
    out
}

fn assert_no_objects_left(job_id: u64) {
    let prefix = launch::shm_object_prefix(job_id);
    let left: Vec<_> = std::fs::read_dir("/dev/shm")
        .expect("/dev/shm")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "objects left behind: {left:?}");
}

fn assert_ok(out: &JobOutcome) {
    assert!(
        out.success(),
        "job failed: {:?} {:?}",
        out.end,
        out.bootstrap_error
    );
}

#[test]
fn put_get_random_offsets_2_pes() {
    assert_ok(&job(2, &["putget", "11"]));
}

#[test]
fn put_get_random_offsets_4_pes() {
    assert_ok(&job(4, &["putget", "12"]));
}

#[test]
fn global_variables_are_symmetric_over_shm_2_and_4_pes() {
    assert_ok(&job(2, &["globals"]));
    assert_ok(&job(4, &["globals"]));
}

#[test]
fn global_variables_are_symmetric_over_tcp() {
    let mut o = LaunchOptions::new(3, PE);
    o.args = vec!["globals".into()];
    o.bind = Bind::None;
    o.timeout = Some(Duration::from_secs(90));
    o.grace = Duration::from_millis(500);
    o.env.push(("SWITCHYARD_HEAP_SIZE".into(), "4M".into()));
    o.env.push(("SWITCHYARD_OP_TIMEOUT".into(), "20s".into()));
    o.env.push(("SWITCHYARD_TRANSPORTS".into(), "tcp".into()));
    let out = launch::launch(&o).expect("launch");
    assert_no_objects_left(out.job_id);
    assert_ok(&out);
}

/// A job with `cards = lazy` and every pair over TCP (shared memory off),
/// with `extra` in the PEs' environment.
fn lazy_tcp(n: u32, args: &[&str], extra: &[(&str, &str)]) -> JobOutcome {
    let mut o = LaunchOptions::new(n, PE);
    o.args = args.iter().map(Into::into).collect();
    o.bind = Bind::None;
    o.timeout = Some(Duration::from_secs(90));
    o.grace = Duration::from_millis(500);
    for (k, v) in [
        ("SWITCHYARD_HEAP_SIZE", "4M"),
        ("SWITCHYARD_OP_TIMEOUT", "20s"),
        ("SWITCHYARD_TRANSPORTS", "tcp"),
        ("SWITCHYARD_CARDS", "lazy"),
        ("SWITCHYARD_PROGRESS", "adaptive"),
        // Four PEs and their progress threads on two cores: a generous
        // window keeps a starved thread from looking like a dead link.
        ("SWITCHYARD_HEARTBEAT", "2s"),
    ]
    .into_iter()
    .chain(extra.iter().copied())
    {
        o.env.push((k.into(), v.into()));
    }
    let out = launch::launch(&o).expect("launch");
    assert_no_objects_left(out.job_id);
    out
}

/// `cards = lazy` over TCP: a PE that talks to one peer fetches exactly
/// one card (its partner, which answers over that connection, fetches
/// none) and holds one TCP peer, and the data arrives (`sy_pe
/// lazy-pairs`).
#[test]
fn lazy_cards_over_tcp_connect_only_the_peer_a_pe_talks_to() {
    let out = lazy_tcp(4, &["lazy-pairs"], &[]);
    assert_ok(&out);
}

/// `cards = lazy` over TCP, all to all: every PE puts, gets and
/// fetch-adds with every other, each connection made at its first use
/// (both sides of a pair often at once), and the routes and values are
/// those of the eager job (`sy_pe classes`).
#[test]
fn lazy_cards_over_tcp_all_to_all() {
    let out = lazy_tcp(4, &["classes"], &[("SWITCHYARD_TRACE", "all")]);
    assert_ok(&out);
}

/// Two PEs over TCP: PE 1 computes (sleeps outside the library) while PE 0
/// fetch-adds and gets on it, with `env` added.
fn compute_over_tcp(env: &[(&str, String)]) {
    let mut o = LaunchOptions::new(2, PE);
    o.args = vec!["compute".into(), "1500".into(), "50".into()];
    o.bind = Bind::None;
    o.timeout = Some(Duration::from_secs(90));
    o.grace = Duration::from_millis(500);
    o.env.push(("SWITCHYARD_HEAP_SIZE".into(), "4M".into()));
    o.env.push(("SWITCHYARD_OP_TIMEOUT".into(), "20s".into()));
    o.env.push(("SWITCHYARD_TRANSPORTS".into(), "tcp".into()));
    // The test is about serving, not detection: on a loaded machine (CI
    // beside other jobs) a progress thread sharing its CPU may not run for
    // longer than the default window (200 ms), and a link would go down.
    // (2 s: `give_up`, 5 s by default, may not be shorter.)
    o.env.push(("SWITCHYARD_HEARTBEAT".into(), "2s".into()));
    o.env
        .extend(env.iter().map(|(k, v)| ((*k).to_string(), v.clone())));
    let out = launch::launch(&o).expect("launch");
    assert_no_objects_left(out.job_id);
    assert_ok(&out);
}

#[test]
fn a_computing_pe_serves_tcp_peers_through_its_progress_thread() {
    compute_over_tcp(&[]);
}

#[test]
fn a_computing_pe_serves_tcp_peers_through_a_dedicated_pinned_progress_thread() {
    // Both PEs' threads on the last CPU the job may use (2 PEs at most: on
    // a 2-core machine they share it, the applications keep the other).
    let cpu = switchyard::cpus::allowed().last().copied().unwrap_or(0);
    compute_over_tcp(&[
        ("SWITCHYARD_PROGRESS", "dedicated".into()),
        ("SWITCHYARD_PROGRESS_CPU", cpu.to_string()),
    ]);
}

#[test]
fn four_pes_times_10000_fetch_adds_give_the_exact_total() {
    assert_ok(&job(4, &["counter", "10000"]));
}

#[test]
fn out_of_bounds_put_fails_and_leaves_the_target_untouched() {
    assert_ok(&job(2, &["oob"]));
}

#[test]
fn a_rank_exiting_non_zero_is_named_and_the_others_do_not_hang() {
    let t0 = Instant::now();
    let out = job(4, &["fail", "2", "3"]);
    match out.end {
        JobEnd::RankFailed { rank, exit } => {
            assert_eq!(rank, 2);
            assert_eq!(exit, RankExit::Code(3));
        }
        other => panic!("expected rank 2 to fail, got {other:?}"),
    }
    assert_ne!(out.exit_code(), 0);
    // A hang guard, not a performance assertion: the others wait on a flag
    // with a 20 s op timeout, so only fail-fast ends the job this soon.
    assert!(
        t0.elapsed() < Duration::from_secs(15),
        "took {:?}",
        t0.elapsed()
    );
}

#[test]
fn a_killed_rank_is_named_and_its_objects_removed() {
    let out = job(3, &["fail", "1", "kill"]);
    match out.end {
        JobEnd::RankFailed { rank, exit } => {
            assert_eq!(rank, 1);
            assert_eq!(exit, RankExit::Signal(9));
        }
        other => panic!("expected rank 1 to be killed, got {other:?}"),
    }
}

#[test]
fn a_peer_killed_during_a_wait_ends_it_with_peer_dead() {
    let mark = std::env::temp_dir().join(format!("sy-waitdead-{}", std::process::id()));
    let _ = std::fs::remove_file(&mark);
    let mut o = LaunchOptions::new(2, PE);
    o.args = vec!["waitdead".into()];
    o.bind = Bind::None;
    o.timeout = Some(Duration::from_secs(90));
    // PE 0 ignores SIGTERM: it has until the SIGKILL to write its mark.
    o.grace = Duration::from_secs(60);
    o.env.push(("SWITCHYARD_HEAP_SIZE".into(), "4M".into()));
    // Short: the wait must not end by it (a wait on a live peer has none).
    o.env.push(("SWITCHYARD_OP_TIMEOUT".into(), "1s".into()));
    o.env
        .push(("SY_MARK".into(), mark.to_string_lossy().into_owned()));
    let out = launch::launch(&o).expect("launch");
    assert_no_objects_left(out.job_id);
    match out.end {
        JobEnd::RankFailed { rank, exit } => {
            assert_eq!(rank, 1);
            assert_eq!(exit, RankExit::Signal(9));
        }
        other => panic!("expected rank 1 to be killed, got {other:?}"),
    }
    let what = std::fs::read_to_string(&mark).expect("PE 0's mark");
    let _ = std::fs::remove_file(&mark);
    assert_eq!(what, "PeerDead 1");
}

fn direct(env: &[(&str, &str)]) -> (i32, String) {
    let mut c = Command::new(PE);
    c.arg("init");
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("SWITCHYARD_")) {
        c.env_remove(k);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("run sy_pe");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bad_environment_is_a_clear_error_naming_the_variable() {
    let (code, err) = direct(&[("SWITCHYARD_HEAP_SIZE", "abc")]);
    assert_ne!(code, 0);
    assert!(
        err.contains("SWITCHYARD_HEAP_SIZE") && err.contains("abc"),
        "{err}"
    );
    let (code, err) = direct(&[("SWITCHYARD_RANK", "5"), ("SWITCHYARD_SIZE", "2")]);
    assert_ne!(code, 0);
    assert!(err.contains("SWITCHYARD_RANK"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    // Without any launcher variable, a program is a job of one PE.
    let (code, err) = direct(&[]);
    assert_eq!(code, 0, "{err}");
}
