//! The PMIx bootstrap under a real `mpirun` (Open MPI's, which runs a PMIx
//! server), with no `SWITCHYARD_ROOT` and no secret in the environment.
//!
//! Without arguments this program is the test: it starts itself under
//! `mpirun -n 2` and `-n 4` (each bounded by `timeout`) and checks that every
//! PE reported success; then once more with a root rank 0 cannot bind, where
//! every PE must fail with rank 0's reason and none may hang. Started by
//! mpirun (`SYBS_PMIX_PE` set) it is one PE: rank and size from PMIx, the
//! meeting through the PMIx store, the rendezvous, a barrier, the goodbye.
//!
//! The cards go through the PMIx store, every one (`rendezvous_at`, mode
//! `ok`) or the few a PE asks for (`rendezvous_at_lazy`, mode `lazy`), and
//! so do the localities: each PE checks every card it got byte for byte
//! and that it came from PMIx, with lazy cards that the localities it built
//! from PMIx are what each rank published (every rank on a node and switch
//! of its own here, the worst case for the root's localities frame), and
//! rank 0 that the root it hosts served no card and sent at most
//! [`ROOT_BYTES_PER_PE`] per PE, a bound that does not grow with the job
//! (run at 2, 4 and 16 PEs). The same job with `SWITCHYARD_PMIX=off`
//! (mode `root`: the root from `SWITCHYARD_ROOT`, every card through it)
//! checks that this bound would catch cards sent by the root. A job whose
//! PEs disagree on `cards` (mode `mixed`) fails at every PE at once,
//! naming the other mode.
//!
//! Without `mpirun` it skips, which is a failure as root or with `CI` or
//! `SWITCHYARD_NO_SKIP` set (as everywhere in the tests).

use std::{
    process::{Command, ExitCode},
    time::Duration,
};

use switchyard_bootstrap::{
    BootstrapError, Card, CardRefusal, CardSource, EnvSource, JobIdSource, Locality, RankInfo,
    RootStats, SecretOrigin, rendezvous_at, rendezvous_at_lazy,
};

/// What a PE started by the test does.
const PE_MODE: &str = "SYBS_PMIX_PE";
/// A root address rank 0 cannot bind (TEST-NET-1, on no interface here).
const UNBINDABLE_ROOT: &str = "192.0.2.1:9";
const TIMEOUT: Duration = Duration::from_secs(20);
/// The most bytes the root may send per PE when the cards and localities
/// come from PMIx, whatever the job's size: a challenge (26), a welcome
/// (37), the joined frame (10), a release (13); no room to spare. The
/// localities frame alone (at least 34 bytes, 20 more per run; here each
/// rank is a run of its own) or every card through the root (a card of
/// [`card_of`] is over 380 bytes) breaks it.
const ROOT_BYTES_PER_PE: u64 = 26 + 37 + 10 + 13;

fn main() -> ExitCode {
    match std::env::var(PE_MODE).as_deref() {
        Ok("ok") => report(pe(Cards::All)),
        Ok("lazy") => report(pe(Cards::Lazy)),
        Ok("root") => report(pe_root()),
        Ok("mixed") => report(pe_mixed()),
        Ok("rank0-fails") => report(pe_expecting_rank0_failure()),
        _ => drive(),
    }
}

fn report(r: Result<String, String>) -> ExitCode {
    match r {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// Whether `needle` occurs in a file of this process (its environment or
/// command line, NUL-separated).
fn proc_self_has(file: &str, needle: &str) -> Result<bool, String> {
    let bytes = std::fs::read(format!("/proc/self/{file}")).map_err(|e| format!("{file}: {e}"))?;
    Ok(bytes.windows(needle.len()).any(|w| w == needle.as_bytes()))
}

/// How a PE of mode `ok` or `lazy` gets the cards.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Cards {
    All,
    Lazy,
}

/// The card `rank` publishes: every part a card can have, and big enough
/// that the root's bytes tell whether it relayed cards; each rank on a
/// locality of its own (two ranks a node, one a switch), so that the
/// localities are as many runs as ranks.
fn card_of(job_id: u64, rank: u32) -> Card {
    Card {
        switch_id: rank % 2,
        shm: Some(format!("/sybs-pmix-test-{rank}-{}", "x".repeat(100))),
        tcp: vec![([127, 0, 0, 1], 20_000 + rank as u16).into()],
        verbs: Some(vec![rank as u8; 200]),
        // Not this process's: every PE computes every card.
        pid: 1000 + rank,
        ..Card::new(job_id, rank, 0x5eed_0000 + u64::from(rank / 2))
    }
}

/// Rank 0's check of the root it hosts, after the first barrier.
fn check_root(rank: u32, size: u32, stats: Option<RootStats>) -> Result<(), String> {
    let Some(stats) = stats else {
        return Ok(());
    };
    let (served, sent) = (stats.cards_served(), stats.bytes_sent());
    if served != 0 || sent > u64::from(size) * ROOT_BYTES_PER_PE {
        return Err(format!(
            "PE {rank}: the root served {served} cards and sent {sent} bytes to {size} PEs \
             (the cards come from PMIx)"
        ));
    }
    println!(
        "PE {rank}: the root served 0 cards, sent {sent} bytes ({} a PE)",
        sent / u64::from(size)
    );
    Ok(())
}

fn pe(mode: Cards) -> Result<String, String> {
    let info = RankInfo::from_env().map_err(|e| format!("rank info: {e}"))?;
    let rank = info.rank;
    let fail = |what: &str, e: BootstrapError| format!("PE {rank}: {what}: {e}");
    if info.source != EnvSource::Pmix || info.job_id_source != JobIdSource::Pmix {
        return Err(format!(
            "PE {rank}: rank from {:?}, job id from {:?}; expected PMIx for both",
            info.source, info.job_id_source
        ));
    }
    // PMIx agrees with Open MPI's own variables.
    let ompi_size = std::env::var("OMPI_COMM_WORLD_SIZE").unwrap_or_default();
    if ompi_size != info.size.to_string() {
        return Err(format!(
            "PE {rank}: PMIx says {} PEs, OMPI_COMM_WORLD_SIZE={ompi_size}",
            info.size
        ));
    }
    let meeting = info.meeting(TIMEOUT).map_err(|e| fail("meeting", e))?;
    let expected_origin = if rank == 0 {
        SecretOrigin::Generated
    } else {
        SecretOrigin::Pmix
    };
    if *meeting.secret.origin() != expected_origin || meeting.hosts_root() != (rank == 0) {
        return Err(format!(
            "PE {rank}: secret from {:?}, hosts the root: {}",
            meeting.secret.origin(),
            meeting.hosts_root()
        ));
    }
    let hex = meeting.secret.to_env_value();
    for file in ["environ", "cmdline"] {
        if proc_self_has(file, &hex)? {
            return Err(format!("PE {rank}: the job secret is in /proc/self/{file}"));
        }
    }
    if !meeting.root.ip().is_loopback() {
        return Err(format!(
            "PE {rank}: a job on one node met at {}, not on loopback",
            meeting.root
        ));
    }
    let card = card_of(info.job_id, rank);
    let host_root = info.hosts_root();
    let size = info.size;
    let (mut boot, root, stats) = match mode {
        Cards::All => {
            let rv = rendezvous_at(&info, meeting, card, TIMEOUT, host_root)
                .map_err(|e| fail("rendezvous", e))?;
            let want: Vec<Card> = (0..size).map(|r| card_of(info.job_id, r)).collect();
            if rv.cards != want {
                let ranks: Vec<u32> = rv.cards.iter().map(|c| c.rank).collect();
                return Err(format!("PE {rank}: wrong cards (of ranks {ranks:?})"));
            }
            // Every card came at the rendezvous; the session is let go.
            let mut boot = rv.bootstrap;
            match boot.fetch_cards(&[0]) {
                Err(BootstrapError::CardRefused {
                    refusal: CardRefusal::NotNow,
                }) => {}
                other => return Err(format!("PE {rank}: a fetch after all cards: {other:?}")),
            }
            (boot, rv.root, rv.root_stats)
        }
        Cards::Lazy => {
            let mut rv = rendezvous_at_lazy(&info, meeting, card, TIMEOUT, host_root)
                .map_err(|e| fail("lazy rendezvous", e))?;
            // The localities came from PMIx: each rank's is what it
            // published, one run each.
            let published = |r: u32| Some(Locality::of(&card_of(info.job_id, r)));
            if rv.localities.len() != size
                || rv.localities.run_count() != size as usize
                || (0..size).any(|r| rv.localities.get(r) != published(r))
                || rv.localities.get(size).is_some()
            {
                return Err(format!("PE {rank}: localities {:?}", rv.localities));
            }
            println!(
                "PE {rank}: {} localities from PMIx",
                rv.localities.run_count()
            );
            // The next rank's card, twice (PMIx has no serve limit), and a
            // rank not in the job, refused like the root refuses it.
            let next = (rank + 1) % size;
            for _ in 0..2 {
                let got = rv
                    .bootstrap
                    .fetch_cards(&[next])
                    .map_err(|e| fail("fetch", e))?;
                let c = got.get(next);
                if got.len() != 1 || c != Some(&card_of(info.job_id, next)) {
                    return Err(format!("PE {rank}: fetched {got:?} for rank {next}"));
                }
            }
            match rv.bootstrap.fetch_cards(&[next, size]) {
                Err(BootstrapError::CardRefused {
                    refusal: CardRefusal::UnknownRank(r),
                }) if r == size => {}
                other => return Err(format!("PE {rank}: fetch of rank {size}: {other:?}")),
            }
            (rv.bootstrap, rv.root, rv.root_stats)
        }
    };
    if boot.card_source() != CardSource::Pmix {
        return Err(format!("PE {rank}: cards from {}", boot.card_source()));
    }
    boot.barrier(TIMEOUT).map_err(|e| fail("barrier", e))?;
    check_root(rank, size, stats)?;
    boot.finish().map_err(|e| fail("goodbye", e))?;
    if let Some(root) = root {
        root.join()
            .map_err(|_| format!("PE {rank}: the root thread panicked"))?
            .map_err(|e| fail("root", e))?;
    }
    Ok(format!("PE {rank}/{}: ok", info.size))
}

/// `SWITCHYARD_PMIX=off`: rank and size from Open MPI's variables, the
/// root at `SWITCHYARD_ROOT`, every card through it; rank 0 checks that
/// the root sent more than [`check_root`] allows.
fn pe_root() -> Result<String, String> {
    let info = RankInfo::from_env().map_err(|e| format!("rank info: {e}"))?;
    let (rank, size) = (info.rank, info.size);
    let fail = |what: &str, e: BootstrapError| format!("PE {rank}: {what}: {e}");
    if info.source != EnvSource::OpenMpi {
        return Err(format!("PE {rank}: rank from {:?}", info.source));
    }
    let meeting = info.meeting(TIMEOUT).map_err(|e| fail("meeting", e))?;
    let card = card_of(info.job_id, rank);
    let rv = rendezvous_at(&info, meeting, card, TIMEOUT, info.hosts_root())
        .map_err(|e| fail("rendezvous", e))?;
    let want: Vec<Card> = (0..size).map(|r| card_of(info.job_id, r)).collect();
    let mut boot = rv.bootstrap;
    if rv.cards != want || boot.card_source() != CardSource::Root {
        return Err(format!(
            "PE {rank}: wrong cards, or from {}",
            boot.card_source()
        ));
    }
    boot.barrier(TIMEOUT).map_err(|e| fail("barrier", e))?;
    if let Some(stats) = rv.root_stats {
        let sent = stats.bytes_sent();
        if sent <= u64::from(size) * ROOT_BYTES_PER_PE {
            return Err(format!(
                "PE {rank}: the root sent {sent} bytes, within the bound for no cards"
            ));
        }
        println!("PE {rank}: the root relayed the cards, sent {sent} bytes");
    }
    boot.finish().map_err(|e| fail("goodbye", e))?;
    if let Some(root) = rv.root {
        root.join()
            .map_err(|_| format!("PE {rank}: the root thread panicked"))?
            .map_err(|e| fail("root", e))?;
    }
    Ok(format!("PE {rank}/{size}: ok"))
}

/// Even ranks want every card, odd ones lazy cards: every PE fails at
/// once (well before the timeout), naming the other mode, found in the
/// localities from PMIx.
fn pe_mixed() -> Result<String, String> {
    let info = RankInfo::from_env().map_err(|e| format!("rank info: {e}"))?;
    let rank = info.rank;
    let start = std::time::Instant::now();
    let meeting = info
        .meeting(TIMEOUT)
        .map_err(|e| format!("PE {rank}: meeting: {e}"))?;
    let card = card_of(info.job_id, rank);
    let host_root = info.hosts_root();
    let r = if rank % 2 == 0 {
        rendezvous_at(&info, meeting, card, TIMEOUT, host_root).map(|_| ())
    } else {
        rendezvous_at_lazy(&info, meeting, card, TIMEOUT, host_root).map(|_| ())
    };
    match r {
        Err(e) if e.to_string().contains("must have the same `cards`") => {
            if start.elapsed() >= TIMEOUT {
                return Err(format!(
                    "PE {rank}: failed only after {:?}",
                    start.elapsed()
                ));
            }
            Ok(format!("PE {rank}: mixed cards refused"))
        }
        other => Err(format!("PE {rank}: mixed cards: {other:?}")),
    }
}

/// Rank 0 cannot bind `SWITCHYARD_ROOT`: it fails with the bind error, and
/// every other PE with rank 0's reason, from the PMIx store.
fn pe_expecting_rank0_failure() -> Result<String, String> {
    let info = RankInfo::from_env().map_err(|e| format!("rank info: {e}"))?;
    let rank = info.rank;
    match info.meeting(TIMEOUT) {
        Ok(m) => Err(format!(
            "PE {rank}: met at {} though rank 0 cannot bind",
            m.root
        )),
        Err(BootstrapError::Bind { .. }) if rank == 0 => {
            Ok(format!("PE {rank}: refused as expected"))
        }
        Err(BootstrapError::PmixRank0Failed { reason })
            if rank != 0 && reason.contains(UNBINDABLE_ROOT) =>
        {
            Ok(format!("PE {rank}: refused as expected"))
        }
        Err(e) => Err(format!("PE {rank}: unexpected error: {e}")),
    }
}

/// Whether a skip is a failure here (root, `CI`, `SWITCHYARD_NO_SKIP`).
fn skip_forbidden() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    root || std::env::var_os("CI").is_some() || std::env::var_os("SWITCHYARD_NO_SKIP").is_some()
}

/// `mpirun -n <n>` of this program in `mode`, bounded by `timeout(1)`.
fn mpirun(n: u32, mode: &str, extra_env: &[(&str, &str)]) -> std::process::Output {
    let exe = std::env::current_exe().expect("current_exe");
    let mut c = Command::new("timeout");
    c.args(["--kill-after=5", "120", "mpirun", "--oversubscribe", "-n"])
        .arg(n.to_string())
        .arg(exe)
        .env(PE_MODE, mode)
        // Open MPI refuses root without these (CI runs as root).
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    for (k, _) in std::env::vars() {
        if k.starts_with("SWITCHYARD_") && k != "SWITCHYARD_NO_SKIP" {
            c.env_remove(k);
        }
    }
    for (k, v) in extra_env {
        c.env(k, v);
    }
    c.output().expect("run timeout mpirun")
}

fn drive() -> ExitCode {
    let have = Command::new("mpirun")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have {
        let why = "no `mpirun` (install openmpi-bin)";
        if skip_forbidden() {
            eprintln!(
                "cannot run: {why} (a skip is a failure here: root, CI or SWITCHYARD_NO_SKIP)"
            );
            return ExitCode::FAILURE;
        }
        eprintln!("skipped: {why}");
        return ExitCode::SUCCESS;
    }
    let mut failed = false;
    let mut check = |what: String, out: std::process::Output, lines: Vec<String>| {
        let stdout = String::from_utf8_lossy(&out.stdout);
        let missing: Vec<&String> = lines
            .iter()
            .filter(|l| !stdout.contains(l.as_str()))
            .collect();
        if out.status.success() && missing.is_empty() {
            println!("ok: {what}");
        } else {
            failed = true;
            println!(
                "FAILED: {what}: {}, missing {missing:?}\n--- stdout\n{stdout}--- stderr\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
    };
    for (n, modes) in [
        (2, &["ok", "lazy"][..]),
        (4, &["ok", "lazy"]),
        (16, &["lazy"]),
    ] {
        for &mode in modes {
            let what = if mode == "ok" {
                "every card"
            } else {
                "lazy cards"
            };
            let out = mpirun(n, mode, &[]);
            let mut lines: Vec<String> = (0..n).map(|r| format!("PE {r}/{n}: ok")).collect();
            lines.push("PE 0: the root served 0 cards".into());
            if mode == "lazy" {
                lines.extend((0..n).map(|r| format!("PE {r}: {n} localities from PMIx")));
            }
            check(
                format!("PMIx bootstrap of {n} PEs under mpirun, {what} and localities from PMIx"),
                out,
                lines,
            );
        }
    }
    // The contrast: the same cards through the root, without PMIx.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    let root = format!("127.0.0.1:{port}");
    let out = mpirun(
        4,
        "root",
        &[("SWITCHYARD_PMIX", "off"), ("SWITCHYARD_ROOT", &root)],
    );
    let mut lines: Vec<String> = (0..4).map(|r| format!("PE {r}/4: ok")).collect();
    lines.push("PE 0: the root relayed the cards".into());
    check(
        "without PMIx every card goes through the root (and shows)".into(),
        out,
        lines,
    );
    let out = mpirun(4, "mixed", &[]);
    let lines = (0..4)
        .map(|r| format!("PE {r}: mixed cards refused"))
        .collect();
    check(
        "PEs of both cards modes: every PE fails at once, naming the other".into(),
        out,
        lines,
    );
    let out = mpirun(2, "rank0-fails", &[("SWITCHYARD_ROOT", UNBINDABLE_ROOT)]);
    let lines = (0..2)
        .map(|r| format!("PE {r}: refused as expected"))
        .collect();
    check(
        "rank 0 cannot bind: every PE fails with its reason".into(),
        out,
        lines,
    );
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
