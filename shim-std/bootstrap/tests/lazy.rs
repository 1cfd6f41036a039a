//! Lazy cards end to end: PEs join with [`Bootstrap::join_lazy`], get every
//! rank's locality (as runs), fetch the cards they need, and meet the root's
//! limits (unknown rank, too many ranks, a card asked for a third time); a
//! hello of an older protocol version is refused. Threads as PEs on
//! 127.0.0.1; every wait is bounded by a timeout of a few seconds.

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    thread::{self, JoinHandle},
    time::Duration,
};

use switchyard_bootstrap::{
    Bootstrap, BootstrapError, Card, CardRefusal, CardSource, JobSecret, Localities,
    MAX_CARDS_PER_REQUEST, PROTOCOL_VERSION, Refusal, RootServer, RootStats,
};

const T: Duration = Duration::from_secs(5);

fn secret() -> JobSecret {
    JobSecret::from_hex("test", &"1a".repeat(32)).unwrap()
}

fn start_root(
    job: u64,
    size: u32,
) -> (
    SocketAddr,
    JoinHandle<Result<(), BootstrapError>>,
    RootStats,
) {
    let root = RootServer::bind("127.0.0.1:0".parse().unwrap(), job, size, T, &secret()).unwrap();
    let (addr, stats) = (root.local_addr(), root.stats());
    (addr, root.spawn().unwrap(), stats)
}

/// Rank `rank`'s card: four ranks per node, two nodes per switch.
fn card(job: u64, rank: u32) -> Card {
    let mut c = Card::new(job, rank, 100 + u64::from(rank / 4));
    c.switch_id = rank / 8;
    c.shm = Some(format!("/switchyard-{job:016x}-{rank}"));
    c.tcp = vec![SocketAddr::from((
        [10, 0, 0, rank as u8],
        7000 + rank as u16,
    ))];
    c.verbs = Some(vec![rank as u8; 24]);
    c
}

/// Runs `size` lazy PEs, each calling `body` after its join, then one
/// barrier and the goodbye; returns each PE's result.
fn lazy_job<R: Send + 'static>(
    job: u64,
    size: u32,
    body: impl Fn(&mut Bootstrap, &Localities) -> R + Send + Sync + Clone + 'static,
) -> (Vec<R>, RootStats) {
    let (addr, root, stats) = start_root(job, size);
    let pes: Vec<_> = (0..size)
        .map(|rank| {
            let body = body.clone();
            thread::spawn(move || {
                let (mut b, locs) =
                    Bootstrap::join_lazy(addr, rank, size, job, card(job, rank), T, &secret())
                        .unwrap();
                let r = body(&mut b, &locs);
                b.barrier(T).unwrap();
                b.finish().unwrap();
                r
            })
        })
        .collect();
    let out = pes.into_iter().map(|p| p.join().unwrap()).collect();
    root.join().unwrap().unwrap();
    (out, stats)
}

#[test]
fn lazy_join_gives_localities_as_runs_and_fetches_cards() {
    let job = 0x1a2_u64;
    let (out, stats) = lazy_job(job, 8, move |b, locs| {
        assert_eq!(locs.len(), 8);
        // Four ranks per node: two runs.
        assert_eq!(locs.run_count(), 2);
        let me = locs.get(b.rank()).unwrap();
        assert_eq!(me.node_id, 100 + u64::from(b.rank() / 4));
        assert_eq!(me.switch_id, 0);
        let on_node = locs.ranks_on(me.node_id);
        assert_eq!(on_node.len(), 4);
        // Without PMIx the cards come from the root.
        assert_eq!(b.card_source(), CardSource::Root);
        assert_eq!(b.card_source().to_string(), "root");
        let cards = b.fetch_cards(&on_node).unwrap();
        assert_eq!(cards.len(), 4);
        for c in cards.iter() {
            // With this job's id back, and the card the peer posted.
            assert_eq!(*c, card(job, c.rank));
        }
        cards.len()
    });
    assert_eq!(out, vec![4; 8]);
    assert_eq!(stats.cards_served(), 32);
    assert_eq!(stats.card_requests_refused(), 0);
    assert!(stats.bytes_sent() > 0);
}

#[test]
fn refusals_are_typed_and_leave_the_connection_usable() {
    let job = 0x1a3_u64;
    let (out, stats) = lazy_job(job, 2, |b, _| {
        if b.rank() == 1 {
            return 0;
        }
        let refused = |r: Result<_, BootstrapError>| match r {
            Err(BootstrapError::CardRefused { refusal }) => refusal,
            other => panic!("not refused: {other:?}"),
        };
        assert_eq!(refused(b.fetch_cards(&[0, 2])), CardRefusal::UnknownRank(2));
        let many = vec![1u32; MAX_CARDS_PER_REQUEST + 1];
        assert_eq!(
            refused(b.fetch_cards_unsplit(&many)),
            CardRefusal::TooMany(MAX_CARDS_PER_REQUEST as u32 + 1)
        );
        // Twice is served (in one request or two), a third time refused.
        assert_eq!(b.fetch_cards(&[1, 1]).unwrap().len(), 1);
        assert_eq!(refused(b.fetch_cards(&[1])), CardRefusal::AskedTwice(1));
        assert_eq!(b.fetch_cards(&[0]).unwrap().get(0).unwrap().rank, 0);
        assert_eq!(b.fetch_cards(&[0]).unwrap().len(), 1);
        assert_eq!(refused(b.fetch_cards(&[0, 1])), CardRefusal::AskedTwice(0));
        assert!(matches!(
            b.fetch_cards(&[]),
            Err(BootstrapError::InvalidArgument { .. })
        ));
        1
    });
    assert_eq!(out, vec![1, 0]);
    assert_eq!(stats.card_requests_refused(), 4);
    assert_eq!(stats.cards_served(), 4);
}

#[test]
fn eager_and_lazy_pes_share_a_job() {
    let job = 0x1a4_u64;
    let (addr, root, stats) = start_root(job, 2);
    let eager = thread::spawn(move || {
        let (b, cards) = Bootstrap::join(addr, 0, 2, job, card(job, 0), T, &secret()).unwrap();
        assert_eq!(cards, vec![card(job, 0), card(job, 1)]);
        b.finish().unwrap();
    });
    let (mut b, locs) = Bootstrap::join_lazy(addr, 1, 2, job, card(job, 1), T, &secret()).unwrap();
    assert_eq!(locs.get(0).unwrap().node_id, 100);
    assert_eq!(b.fetch_cards(&[0]).unwrap().get(0), Some(&card(job, 0)));
    b.finish().unwrap();
    eager.join().unwrap();
    root.join().unwrap().unwrap();
    assert_eq!(stats.cards_served(), 1);
}

/// Reads one frame (length, kind, payload) within the timeout.
fn read_frame(s: &mut TcpStream) -> (u8, Vec<u8>) {
    s.set_read_timeout(Some(T)).unwrap();
    let mut len = [0; 4];
    s.read_exact(&mut len).unwrap();
    let len = u32::from_le_bytes(len) as usize;
    assert!((1..=1 << 16).contains(&len), "frame length {len}");
    let mut body = vec![0; len];
    s.read_exact(&mut body).unwrap();
    (body[0], body[1..].to_vec())
}

#[test]
fn a_hello_of_an_older_version_is_refused() {
    assert_eq!(PROTOCOL_VERSION, 5);
    let job = 0x1a5_u64;
    let (addr, root, stats) = start_root(job, 1);
    // A version-2 hello (no flags byte), a version-3 one (lazy flag) and
    // a version-4 one (lazy and store flags): each refused with an error
    // frame that names the version, counted as malformed; the job goes on.
    for (version, flags) in [(2u8, None), (3, Some(1u8)), (4, Some(3))] {
        let mut s = TcpStream::connect(addr).unwrap();
        let (kind, challenge) = read_frame(&mut s);
        assert_eq!(kind, 7);
        assert_eq!(challenge[4], 5, "the root announces version 5");
        let mut hello = b"SYBS".to_vec();
        hello.push(version);
        hello.extend(flags);
        hello.extend_from_slice(&0u32.to_le_bytes());
        hello.extend_from_slice(&1u32.to_le_bytes());
        hello.extend_from_slice(&[0; 16 + 32]);
        hello.extend_from_slice(&0u16.to_le_bytes());
        let mut f = u32::try_from(hello.len() + 1)
            .unwrap()
            .to_le_bytes()
            .to_vec();
        f.push(1);
        f.extend_from_slice(&hello);
        s.write_all(&f).unwrap();
        let (kind, err) = read_frame(&mut s);
        assert_eq!(kind, 6);
        let text = String::from_utf8_lossy(&err);
        assert!(text.contains(&format!("version {version}")), "{text}");
    }
    let (b, _) = Bootstrap::join_lazy(addr, 0, 1, job, card(job, 0), T, &secret()).unwrap();
    b.finish().unwrap();
    root.join().unwrap().unwrap();
    assert_eq!(stats.count_of(Refusal::Malformed), 3);
}

#[test]
fn a_pe_refuses_a_root_of_another_version() {
    // A fake root that speaks version 2.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let fake = thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut p = vec![0, 0, 0, 0, 7];
        p.extend_from_slice(b"SYBS");
        p.push(2);
        p.extend_from_slice(&[9; 16]);
        let len = u32::try_from(p.len() - 4).unwrap();
        p[..4].copy_from_slice(&len.to_le_bytes());
        s.write_all(&p).unwrap();
        // Held open until the PE has read it and gone.
        let mut sink = Vec::new();
        let _ = s.set_read_timeout(Some(T));
        let _ = s.read_to_end(&mut sink);
    });
    let job = 0x1a6;
    match Bootstrap::join_lazy(addr, 0, 1, job, card(job, 0), T, &secret()) {
        Err(BootstrapError::ProtocolVersion {
            found, supported, ..
        }) => assert_eq!((found, supported), (2, PROTOCOL_VERSION)),
        other => panic!("{other:?}"),
    }
    fake.join().unwrap();
}

#[test]
fn a_job_without_lazy_pes_refuses_card_requests() {
    let job = 0x1a7_u64;
    let (addr, root, stats) = start_root(job, 1);
    let (mut b, cards) = Bootstrap::join(addr, 0, 1, job, card(job, 0), T, &secret()).unwrap();
    assert_eq!(cards.len(), 1);
    // The root dropped the cards after the allgather: nothing to serve.
    match b.fetch_cards(&[0]) {
        Err(BootstrapError::CardRefused { refusal }) => assert_eq!(refusal, CardRefusal::NotNow),
        other => panic!("{other:?}"),
    }
    b.finish().unwrap();
    root.join().unwrap().unwrap();
    assert_eq!(
        (stats.card_requests_refused(), stats.cards_served()),
        (1, 0)
    );
}
