//! The bootstrap rendezvous end to end: a root and threads as PEs on
//! 127.0.0.1. Every wait is bounded by a timeout of a few seconds at most,
//! and no test orders its threads by sleeping: a port the root binds later
//! is held from the start ([`reserve_port`]), and a thread that must be
//! somewhere first says so on a channel or a socket.

use std::{
    io::{ErrorKind, Read, Write},
    net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream},
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    sync::mpsc,
    thread::{self, JoinHandle},
    time::Duration,
};

use switchyard_bootstrap::{
    Bootstrap, BootstrapError, Card, JobSecret, RankInfo, Refusal, RootServer, RootStats,
    rendezvous,
};

const T: Duration = Duration::from_secs(3);

type RootResult = Result<(), BootstrapError>;

/// The tests' job secret.
fn secret() -> JobSecret {
    JobSecret::from_hex("test", &"5e".repeat(32)).unwrap()
}

fn start_root(job: u64, size: u32, timeout: Duration) -> (SocketAddr, JoinHandle<RootResult>) {
    let (addr, root, _) = start_root_with_stats(job, size, timeout);
    (addr, root)
}

fn start_root_with_stats(
    job: u64,
    size: u32,
    timeout: Duration,
) -> (SocketAddr, JoinHandle<RootResult>, RootStats) {
    let root = RootServer::bind(
        "127.0.0.1:0".parse().unwrap(),
        job,
        size,
        timeout,
        &secret(),
    )
    .unwrap();
    let addr = root.local_addr();
    let stats = root.stats();
    (addr, root.spawn().unwrap(), stats)
}

fn card(job: u64, rank: u32) -> Card {
    let mut c = Card::new(job, rank, 100 + u64::from(rank / 2));
    c.shm = Some(format!("/switchyard-{job:016x}-{rank}"));
    c.tcp = vec![SocketAddr::from((
        [10, 0, 0, rank as u8],
        7000 + rank as u16,
    ))];
    c.verbs = Some(vec![rank as u8; 24]);
    c
}

/// A loopback port held for one test: bound by a socket with
/// `SO_REUSEADDR` that never listens. Connections to it are refused, no
/// other process is given the port while the test runs, and a
/// [`RootServer`] can still bind it (the standard library sets
/// `SO_REUSEADDR` on listeners, and Linux lets a listener share a port with
/// bound sockets that do not listen). Released on drop.
struct ReservedPort {
    addr: SocketAddr,
    _fd: OwnedFd,
}

fn reserve_port() -> ReservedPort {
    let check = |r: libc::c_int, what: &str| {
        assert!(r >= 0, "{what}: {}", std::io::Error::last_os_error());
    };
    // SAFETY: socket takes no pointers; a negative result is checked below.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    check(raw, "socket");
    // SAFETY: `raw` is a new descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let one: libc::c_int = 1;
    // SAFETY: a valid socket, and a pointer to a c_int of the length given.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_REUSEADDR,
            (&raw const one).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    check(r, "setsockopt SO_REUSEADDR");
    // SAFETY: sockaddr_in is plain data, valid when zeroed.
    let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    sa.sin_family = libc::AF_INET as libc::sa_family_t;
    sa.sin_addr.s_addr = u32::from(Ipv4Addr::LOCALHOST).to_be();
    let mut len = size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: a valid socket, and a sockaddr_in of the length given.
    let r = unsafe { libc::bind(fd.as_raw_fd(), (&raw const sa).cast(), len) };
    check(r, "bind 127.0.0.1:0");
    // SAFETY: a valid socket; `sa` and `len` are writable and `len` is its size.
    let r = unsafe { libc::getsockname(fd.as_raw_fd(), (&raw mut sa).cast(), &raw mut len) };
    check(r, "getsockname");
    let port = u16::from_be(sa.sin_port);
    ReservedPort {
        addr: SocketAddrV4::new(Ipv4Addr::LOCALHOST, port).into(),
        _fd: fd,
    }
}

fn join(
    addr: SocketAddr,
    rank: u32,
    size: u32,
    job: u64,
    timeout: Duration,
) -> Result<(Bootstrap, Vec<Card>), BootstrapError> {
    Bootstrap::join(addr, rank, size, job, card(job, rank), timeout, &secret())
}

/// Every rank of a job of `size` on a thread: join, one barrier, goodbye;
/// each must get all `size` cards.
fn run_job(addr: SocketAddr, size: u32, job: u64, timeout: Duration) {
    let pes: Vec<_> = (0..size)
        .map(|rank| {
            thread::spawn(move || {
                let (mut b, cards) = join(addr, rank, size, job, timeout)?;
                b.barrier(timeout)?;
                b.finish()?;
                Ok::<_, BootstrapError>(cards.len())
            })
        })
        .collect();
    for pe in pes {
        assert_eq!(pe.join().unwrap().unwrap(), size as usize);
    }
}

#[track_caller]
fn expect_reported<T: std::fmt::Debug>(r: Result<T, BootstrapError>, ranks: &[u32], text: &str) {
    match r {
        Err(BootstrapError::RootReported {
            ranks: got,
            message,
        }) => {
            assert_eq!(got, ranks, "{message}");
            assert!(message.contains(text), "{message:?} lacks {text:?}");
        }
        other => panic!("expected the root's verdict naming {ranks:?}, got {other:?}"),
    }
}

#[test]
fn four_pes_allgather_and_two_barriers() {
    let job = 0x00c0_ffee;
    let (addr, root) = start_root(job, 4, T);
    let pes: Vec<_> = (0..4)
        .map(|rank| {
            thread::spawn(move || {
                let (mut boot, cards) = join(addr, rank, 4, job, T)?;
                assert_eq!((boot.rank(), boot.size(), boot.job_id()), (rank, 4, job));
                boot.barrier(T)?;
                boot.barrier(T)?;
                assert_eq!(boot.barriers_done(), 2);
                boot.finish()?;
                Ok::<_, BootstrapError>(cards)
            })
        })
        .collect();
    let want: Vec<Card> = (0..4).map(|r| card(job, r)).collect();
    for pe in pes {
        assert_eq!(pe.join().unwrap().unwrap(), want);
    }
    root.join().unwrap().unwrap();
}

/// PEs started before the root exists find it once it is up: until the
/// root binds the held port, every connection is refused and retried.
/// (Whether a PE's first attempt comes before or after the bind is the
/// scheduler's choice; either way the job must complete.)
#[test]
fn pes_retry_until_the_root_is_up() {
    let job = 0x1;
    let port = reserve_port();
    let addr = port.addr;
    let refused = TcpStream::connect(addr).map(drop).unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::ConnectionRefused, "{refused}");
    let (started, starts) = mpsc::channel();
    let pes: Vec<_> = (0..2)
        .map(|rank| {
            let started = started.clone();
            thread::spawn(move || {
                started.send(rank).unwrap();
                join(addr, rank, 2, job, T).and_then(|(b, _)| b.finish())
            })
        })
        .collect();
    for _ in 0..2 {
        starts.recv_timeout(T).expect("a PE thread started");
    }
    let root = RootServer::bind(addr, job, 2, T, &secret())
        .unwrap()
        .spawn()
        .unwrap();
    for pe in pes {
        pe.join().unwrap().unwrap();
    }
    root.join().unwrap().unwrap();
}

#[test]
fn a_missing_rank_times_out_naming_it() {
    let job = 0x2;
    let timeout = Duration::from_secs(1);
    let (addr, root) = start_root(job, 4, timeout);
    let pes: Vec<_> = (0..3)
        .map(|rank| thread::spawn(move || join(addr, rank, 4, job, timeout)))
        .collect();
    let want = "bootstrap allgather timed out after 1s: ranks 3 never arrived";
    for pe in pes {
        expect_reported(pe.join().unwrap(), &[3], want);
    }
    match root.join().unwrap() {
        Err(
            e @ BootstrapError::Timeout {
                phase: "allgather", ..
            },
        ) => {
            assert_eq!(e.ranks(), vec![3]);
            assert_eq!(e.to_string(), want);
        }
        other => panic!("{other:?}"),
    }
}

/// Both claimants of rank 1 prove the secret: whichever the root reads
/// second is refused and counted, and the job goes on with the first.
#[test]
fn a_second_claim_of_a_rank_is_refused_counted_and_the_job_runs() {
    let job = 0x3;
    let (addr, root, stats) = start_root_with_stats(job, 3, T);
    let full = move |rank| {
        let (mut b, cards) = join(addr, rank, 3, job, T)?;
        b.barrier(T)?;
        b.finish()?;
        Ok::<_, BootstrapError>(cards.len())
    };
    let zero = thread::spawn(move || full(0));
    let (done, results) = mpsc::channel();
    let ones: Vec<_> = (0..2)
        .map(|_| {
            let done = done.clone();
            thread::spawn(move || {
                let _ = done.send(full(1));
            })
        })
        .collect();
    // The accepted claimant waits for rank 2; the refused one hears first.
    let first = results
        .recv_timeout(T + T)
        .expect("a verdict for a claimant");
    expect_reported(first, &[1], "rank 1 is claimed by two PEs");
    assert_eq!(stats.refused(), 1);
    let two = thread::spawn(move || full(2));
    assert_eq!(results.recv_timeout(T + T).unwrap().unwrap(), 3);
    for pe in [zero, two] {
        assert_eq!(pe.join().unwrap().unwrap(), 3);
    }
    for t in ones {
        t.join().unwrap();
    }
    root.join().unwrap().unwrap();
    assert_eq!((stats.refused(), stats.unauthenticated()), (1, 0));
    assert_eq!(
        stats.summary().as_deref(),
        Some("1 connection refused (1 duplicate rank)")
    );
}

/// A frame as the root reads it: length, kind, payload.
fn raw_frame(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = u32::try_from(payload.len() + 1)
        .unwrap()
        .to_le_bytes()
        .to_vec();
    f.push(kind);
    f.extend_from_slice(payload);
    f
}

/// Everything the root says to `bytes` before it closes.
fn reply_to(addr: SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    s.write_all(bytes).unwrap();
    let mut reply = Vec::new();
    let _ = s.read_to_end(&mut reply);
    reply
}

/// The attack of the control-plane issue: a hello of protocol version 1
/// with a wrong job id got an error frame naming the real one. Now nothing
/// the root says names it, in text or in bytes; and a PE with the right job
/// id but another secret is refused without harming the job.
#[test]
fn a_wrong_id_hello_learns_nothing_and_an_impostor_is_refused() {
    let job = 0x78c3_1a2b_3c4d_5e6f;
    let (addr, root, stats) = start_root_with_stats(job, 2, T);
    let mut v1 = b"SYBS\x01".to_vec();
    v1.extend_from_slice(&0u64.to_le_bytes());
    v1.extend_from_slice(&1u32.to_le_bytes());
    v1.extend_from_slice(&2u32.to_le_bytes());
    v1.extend_from_slice(&0u16.to_le_bytes());
    let reply = reply_to(addr, &raw_frame(1, &v1));
    let text = String::from_utf8_lossy(&reply).to_lowercase();
    assert!(text.contains("version 1 is not supported"), "{text:?}");
    assert!(!text.contains("78c3"), "{text:?}");
    for needle in [job.to_le_bytes(), job.to_be_bytes()] {
        assert!(!reply.windows(8).any(|w| w == needle), "{reply:?}");
    }

    // Right job id, rank 1 (not yet arrived), another secret: refused,
    // with no cards.
    let other = JobSecret::from_hex("impostor", &"17".repeat(16)).unwrap();
    let r = Bootstrap::join(addr, 1, 2, job, card(job, 1), T, &other);
    expect_reported(r, &[], "does not prove the job's secret");
    // A hello whose proof is zeros: the same.
    let mut forged = [
        b"SYBS".as_slice(),
        &[switchyard_bootstrap::PROTOCOL_VERSION, 0],
    ]
    .concat();
    forged.extend_from_slice(&1u32.to_le_bytes());
    forged.extend_from_slice(&2u32.to_le_bytes());
    forged.extend_from_slice(&[0; 16 + 32]);
    forged.extend_from_slice(&0u16.to_le_bytes());
    let text = String::from_utf8_lossy(&reply_to(addr, &raw_frame(1, &forged))).into_owned();
    assert!(text.contains("does not prove the job's secret"), "{text:?}");

    // The job itself runs, rank 1 included.
    run_job(addr, 2, job, T);
    root.join().unwrap().unwrap();
    assert_eq!((stats.unauthenticated(), stats.refused()), (3, 0));
    // By why: the version-1 hello is not one of this protocol, the other
    // two prove nothing.
    assert_eq!(
        (
            stats.count_of(Refusal::Malformed),
            stats.count_of(Refusal::BadMac)
        ),
        (1, 2)
    );
    assert_eq!(
        stats.summary().as_deref(),
        Some("3 connections refused (2 bad MAC, 1 malformed)")
    );
}

/// A root that does not know the secret cannot pass for the job's: its
/// welcome is refused before any card is trusted.
#[test]
fn a_root_without_the_secret_is_not_believed() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let fake = thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(T)).unwrap();
        let mut challenge = [
            b"SYBS".as_slice(),
            &[switchyard_bootstrap::PROTOCOL_VERSION],
        ]
        .concat();
        challenge.extend_from_slice(&[9; 16]);
        s.write_all(&raw_frame(7, &challenge)).unwrap();
        let mut head = [0u8; 4];
        s.read_exact(&mut head).unwrap();
        let mut hello = vec![0u8; u32::from_le_bytes(head) as usize];
        s.read_exact(&mut hello).unwrap();
        s.write_all(&raw_frame(8, &[0; 32])).unwrap();
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
    });
    match join(addr, 0, 2, 11, T) {
        Err(BootstrapError::RootNotAuthenticated { root }) => assert_eq!(root, addr),
        other => panic!("{other:?}"),
    }
    fake.join().unwrap();
}

#[test]
fn no_secret_is_refused_for_a_root_off_loopback() {
    let env = [
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "2"),
        ("SLURM_JOB_ID", "5"),
        ("SWITCHYARD_ROOT", "10.1.2.3:4000"),
    ];
    let look = |k: &str| {
        env.iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| (*v).to_owned())
    };
    let info = RankInfo::from_lookup(look).unwrap();
    assert!(info.secret.is_none());
    match info.job_secret("10.1.2.3:4000".parse().unwrap()) {
        Err(e @ BootstrapError::NoSecret { .. }) => {
            assert!(e.to_string().contains("SWITCHYARD_JOB_SECRET_FILE"), "{e}")
        }
        other => panic!("{other:?}"),
    }
    assert!(info.job_secret("127.0.0.1:4000".parse().unwrap()).is_ok());
    let hex = "ab".repeat(20);
    let with = RankInfo::from_lookup(|k| match k {
        "SWITCHYARD_JOB_SECRET" => Some(hex.clone()),
        _ => look(k),
    })
    .unwrap();
    assert!(with.job_secret("10.1.2.3:4000".parse().unwrap()).is_ok());
    assert!(!format!("{with:?}").contains(&hex));
    let bad = RankInfo::from_lookup(|k| match k {
        "SWITCHYARD_JOB_SECRET" => Some("0123".into()),
        _ => None,
    })
    .unwrap_err()
    .to_string();
    assert!(
        bad.contains("SWITCHYARD_JOB_SECRET") && !bad.contains("0123"),
        "{bad}"
    );
}

#[test]
fn a_wrong_job_id_and_garbage_are_refused_and_do_not_count() {
    let job = 0x4;
    let (addr, root) = start_root(job, 2, T);

    // Another job's PE proves nothing: it is refused, and not counted.
    let r = Bootstrap::join(addr, 0, 2, 0x5, card(0x5, 0), T, &secret());
    expect_reported(r, &[], "does not prove the job's secret");

    // Not our protocol: refused with an error frame, or just closed. Before
    // it has proved the secret a connection may send one hello's worth of
    // bytes (well under 1 KiB), not a whole frame of 1 MiB.
    let mut http = TcpStream::connect(addr).unwrap();
    http.set_read_timeout(Some(T)).unwrap();
    http.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut reply = Vec::new();
    let _ = http.read_to_end(&mut reply);
    let text = String::from_utf8_lossy(&reply);
    assert!(text.contains("bytes announced, at most"), "{text:?}");
    assert!(!text.contains("at most 1048576"), "{text:?}");

    // A length that would exhaust memory if believed.
    let mut huge = TcpStream::connect(addr).unwrap();
    huge.set_read_timeout(Some(T)).unwrap();
    huge.write_all(&u32::MAX.to_le_bytes()).unwrap();
    let mut reply = Vec::new();
    let _ = huge.read_to_end(&mut reply);

    // A connection that says nothing and goes away.
    drop(TcpStream::connect(addr).unwrap());

    // The job itself is unharmed.
    run_job(addr, 2, job, T);
    root.join().unwrap().unwrap();
}

#[test]
fn a_pe_dropping_before_the_barrier_fails_the_others_fast() {
    let job = 0x6;
    // A long timeout: the others must learn of the drop from the root, not
    // from a deadline (a deadline would give a Timeout, not this verdict).
    let timeout = Duration::from_secs(20);
    let (addr, root) = start_root(job, 3, timeout);
    let pes: Vec<_> = (0..3)
        .map(|rank| {
            thread::spawn(move || {
                let (mut b, _) = join(addr, rank, 3, job, timeout)?;
                if rank == 2 {
                    drop(b);
                    return Ok(());
                }
                b.barrier(timeout)
            })
        })
        .collect();
    for (rank, pe) in pes.into_iter().enumerate() {
        let r = pe.join().unwrap();
        if rank == 2 {
            r.unwrap();
        } else {
            expect_reported(r, &[2], "rank 2 disconnected");
        }
    }
    match root.join().unwrap() {
        Err(BootstrapError::Disconnected { rank: 2, .. }) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_barrier_times_out_naming_the_rank_that_never_entered() {
    let job = 0x7;
    let timeout = Duration::from_secs(1);
    let (addr, root) = start_root(job, 3, timeout);
    let (hold_tx, hold_rx) = mpsc::channel::<()>();
    let late = thread::spawn(move || {
        let (b, _) = join(addr, 2, 3, job, timeout).unwrap();
        // Stay connected, never enter the barrier, until the test is done.
        let _ = hold_rx.recv_timeout(Duration::from_secs(10));
        drop(b);
    });
    let pes: Vec<_> = (0..2)
        .map(|rank| {
            thread::spawn(move || {
                let (mut b, _) = join(addr, rank, 3, job, timeout)?;
                b.barrier(timeout)
            })
        })
        .collect();
    let want = "bootstrap barrier timed out after 1s: ranks 2 never arrived";
    for pe in pes {
        expect_reported(pe.join().unwrap(), &[2], want);
    }
    drop(hold_tx);
    late.join().unwrap();
    match root.join().unwrap() {
        Err(
            e @ BootstrapError::Timeout {
                phase: "barrier", ..
            },
        ) => assert_eq!(e.to_string(), want),
        other => panic!("{other:?}"),
    }
}

#[test]
fn mismatched_size_or_class_version_fails_the_job() {
    let job = 0x8;
    let (addr, root) = start_root(job, 2, T);
    let r = join(addr, 1, 3, job, T);
    expect_reported(r, &[1], "rank 1 says the job has 3 PEs, the root expects 2");
    match root.join().unwrap() {
        Err(BootstrapError::SizeMismatch {
            rank: 1,
            expected: 2,
            found: 3,
        }) => {}
        other => panic!("{other:?}"),
    }

    // Rank 1's card has another class encoding version. The first card the
    // root reads is the reference and the other is the one named, and which
    // comes first is up to the scheduler: the verdict must name the other
    // rank, and both PEs must get it.
    let (addr, root) = start_root(job, 2, T);
    let first = thread::spawn(move || join(addr, 0, 2, job, T));
    let mut odd = card(job, 1);
    odd.class_encoding_version = odd.class_encoding_version.wrapping_add(1);
    let r = Bootstrap::join(addr, 1, 2, job, odd, T, &secret());
    let (named, reference) = match root.join().unwrap() {
        Err(BootstrapError::ClassVersionMismatch {
            rank, reference, ..
        }) => (rank, reference),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        (named, reference),
        if named == 1 { (1, 0) } else { (0, 1) },
        "one rank is the reference, the other is named"
    );
    expect_reported(r, &[named], "path-class encoding version");
    expect_reported(
        first.join().unwrap(),
        &[named],
        "path-class encoding version",
    );
}

#[test]
fn rank0_hosts_the_root_under_srun() {
    let port = reserve_port();
    let root = port.addr;
    let root_var = root.to_string();
    let pes: Vec<_> = (0..3u32)
        .map(|rank| {
            let root_var = root_var.clone();
            thread::spawn(move || {
                let env = [
                    ("SLURM_PROCID", rank.to_string()),
                    ("SLURM_NTASKS", "3".to_owned()),
                    ("SLURM_JOB_ID", "31337".to_owned()),
                    ("SLURM_STEP_ID", "0".to_owned()),
                    ("SWITCHYARD_ROOT", root_var),
                ];
                let info = RankInfo::from_lookup(|k| {
                    env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())
                })?;
                assert_eq!(info.hosts_root(), rank == 0);
                let card = Card::new(info.job_id, rank, 1);
                let mut rv = rendezvous(&info, info.root_addr()?, card, T, info.hosts_root())?;
                assert_eq!(rv.cards.len(), 3);
                assert_eq!(rv.root.is_some(), rank == 0);
                rv.bootstrap.barrier(T)?;
                rv.bootstrap.finish()?;
                if let Some(h) = rv.root {
                    h.join().unwrap()?;
                }
                Ok::<_, BootstrapError>(())
            })
        })
        .collect();
    for pe in pes {
        pe.join().unwrap().unwrap();
    }
}

#[test]
fn no_root_is_a_connect_error_after_the_timeout() {
    let port = reserve_port();
    let addr = port.addr;
    let timeout = Duration::from_millis(300);
    match join(addr, 0, 1, 9, timeout) {
        Err(BootstrapError::Connect { root, waited, .. }) => {
            assert_eq!((root, waited), (addr, timeout));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_hostile_root_cannot_make_a_pe_allocate_or_hang() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let fake = thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(T)).unwrap();
        // A challenge frame "of 4 GiB".
        s.write_all(&u32::MAX.to_le_bytes()).unwrap();
        s.write_all(&[2]).unwrap();
        // Stay connected until the PE has read the header, refused it and
        // closed its end (end of stream here): closing first, with its hello
        // unread, would reset the connection under the PE instead.
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
    });
    match join(addr, 0, 2, 10, T) {
        Err(BootstrapError::Protocol { reason, .. }) => {
            assert!(reason.contains("4294967295 bytes announced"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    fake.join().unwrap();
}

#[test]
fn bad_arguments_are_refused_before_connecting() {
    let port = reserve_port();
    let addr = port.addr;
    for (rank, size, c) in [
        (2, 2, card(1, 2)),
        (0, 0, card(1, 0)),
        (0, 2, card(1, 1)),
        (0, 2, card(2, 0)),
    ] {
        match Bootstrap::join(addr, rank, size, 1, c, T, &secret()) {
            Err(BootstrapError::InvalidArgument { .. }) => {}
            other => panic!("{other:?}"),
        }
    }
    assert!(matches!(
        RootServer::bind(addr, 1, 0, T, &secret()),
        Err(BootstrapError::InvalidArgument { .. })
    ));
}

/// Slowloris: more idle connections than the root keeps unidentified are
/// held open before the PEs come. Each gets a short window to answer the
/// challenge; the PEs the root turned away meanwhile try again, and the job
/// starts.
#[test]
fn idle_connections_do_not_keep_the_pes_out() {
    let job = 0x9;
    // An authentication window of 2 s (a quarter), well inside the timeout.
    let timeout = Duration::from_secs(8);
    let (addr, root, stats) = start_root_with_stats(job, 2, timeout);
    let idle: Vec<TcpStream> = (0..80)
        .map(|_| TcpStream::connect(addr).expect("connect"))
        .collect();
    run_job(addr, 2, job, timeout);
    root.join().unwrap().unwrap();
    assert!(stats.unauthenticated() >= 1, "the idle ones timed out");
    // Closed at the cap on connections owing their hello, or silent until
    // their window closed; nothing else, and no rank claimed twice.
    let (over, silent) = (
        stats.count_of(Refusal::OverLimit),
        stats.count_of(Refusal::NoHello),
    );
    assert_eq!(over + silent, stats.total(), "{:?}", stats.summary());
    assert_eq!(stats.refused(), 0);
    drop(idle);
}
