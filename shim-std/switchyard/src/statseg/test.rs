use super::*;

/// A job id no other test or job uses.
fn job(tag: u64) -> u64 {
    0x5747_0000_0000_0000 | u64::from(std::process::id()) << 16 | tag
}

#[test]
fn buckets_are_log_linear_and_monotonic() {
    for v in 0..16 {
        assert_eq!(bucket(v), v as usize);
    }
    let mut last = 0;
    for v in (0..1u64 << 20)
        .step_by(7)
        .chain([u64::MAX, 1 << 40, (1 << 40) - 1])
    {
        let b = bucket(v);
        assert!(b < HIST_BUCKETS);
        assert!(
            bucket_low(b) <= v,
            "{v} in bucket {b} from {}",
            bucket_low(b)
        );
        if b + 1 < HIST_BUCKETS {
            assert!(v < bucket_low(b + 1), "{v} below bucket {}", b + 1);
            // At most 1/16 of the value wide.
            assert!((bucket_low(b + 1) - bucket_low(b)) * 16 <= bucket_low(b).max(16));
        }
        if v < 1 << 20 {
            assert!(b >= last);
            last = b;
        }
    }
    assert_eq!(bucket(u64::MAX), HIST_BUCKETS - 1);
}

/// The histogram bucket of `v`, with branches (layout 4's `bucket`).
fn bucket_ref(v: u64) -> usize {
    if v < 16 {
        return v as usize;
    }
    let e = 63 - v.leading_zeros() as usize;
    if e >= 4 + HIST_GROUPS {
        return HIST_BUCKETS - 1;
    }
    16 + (e - 4) * 16 + ((v >> (e - 4)) & 15) as usize
}

#[test]
fn the_branch_free_bucket_is_the_reference_one() {
    let edges = (0..64).flat_map(|e| {
        let p = 1u64 << e;
        [p - 1, p, p + 1, p | p >> 1, p | (p - 1)]
    });
    for v in (0..1u64 << 16).chain(edges).chain([u64::MAX, u64::MAX - 1]) {
        assert_eq!(bucket(v), bucket_ref(v), "{v}");
    }
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..100_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let v = x >> (x % 64);
        assert_eq!(bucket(v), bucket_ref(v), "{v}");
    }
}

#[test]
fn a_segment_counts_and_reads_back() {
    let id = job(1);
    let whole = StatsSegment::create(id, 3, 4).unwrap();
    let seg = whole.slot().unwrap();
    let path = whole.path().to_path_buf();
    assert_eq!(path, super::path(id, 3));
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&path).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
    for _ in 0..5 {
        seg.op(0, 1, 8);
    }
    seg.op(2, 2, 100);
    seg.bump(2, 2, PeerWord::Retries);
    whole.set_state(0, 1, STATE_HEALTHY | STATE_ROUTE);
    seg.latency(0, 0, 20);
    seg.latency(0, 0, 1000);
    seg.op(0, 4, 1); // out of range: ignored
    let mut pe = [0u64; PE_COUNTERS];
    pe[0] = 7;
    seg.set_pe(&pe);
    let r = Reader::open(&path).unwrap();
    let h = *r.header();
    assert_eq!((h.rank, h.n_pes, h.job_id, h.version), (3, 4, id, VERSION));
    assert_eq!(h.pid, std::process::id());
    let s = r.snapshot();
    assert!(s.alive);
    assert_eq!(s.pe["barriers"], 7);
    assert_eq!(s.total(PeerWord::Ops), 6);
    assert_eq!(s.total(PeerWord::Bytes), 140);
    let shm1 = s
        .peers
        .iter()
        .find(|p| p.peer == 1 && p.transport == "shm")
        .unwrap();
    assert_eq!(shm1.counters["ops"], 5);
    assert!(shm1.healthy && shm1.route && !shm1.loaded && !shm1.dead);
    let tcp2 = s
        .peers
        .iter()
        .find(|p| p.peer == 2 && p.transport == "tcp0")
        .unwrap();
    assert_eq!((tcp2.counters["ops"], tcp2.counters["retries"]), (1, 1));
    assert_eq!(s.hists.len(), 1);
    assert_eq!(
        (s.hists[0].count, s.hists[0].sum, s.hists[0].max),
        (2, 1020, 1000)
    );
    assert!(s.hists[0].quantile(0.5) >= 20 && s.hists[0].quantile(0.5) < 22);
    assert_eq!(s.hists[0].quantile(1.0), 1000);
    let jobs = find_jobs(std::path::Path::new(switchyard_shm::SHM_DIR));
    let j = jobs.iter().find(|j| j.job_id == id).unwrap();
    assert_eq!(j.pes, vec![(3, path.clone())]);
    drop(seg);
    assert!(path.exists(), "kept while the segment lives");
    drop(whole);
    assert!(!path.exists(), "removed on drop");
    // The reader's mapping stays valid after the unlink.
    assert_eq!(r.snapshot().total(PeerWord::Ops), 6);
}

#[test]
fn a_reader_refuses_what_is_not_a_segment() {
    let id = job(2);
    let p = super::path(id, 0);
    std::fs::write(&p, vec![0u8; 8192]).unwrap();
    assert!(Reader::open(&p).is_err());
    std::fs::remove_file(&p).unwrap();
    assert!(Reader::open(&p).is_err());
}

#[test]
fn the_stale_cleanup_removes_a_dead_pes_segment() {
    let id = job(3);
    let seg = StatsSegment::create(id, 0, 1).unwrap();
    let path = seg.path().to_path_buf();
    // A live one stays.
    let removed = switchyard_shm::remove_stale(std::path::Path::new(switchyard_shm::SHM_DIR), None);
    assert!(!removed.contains(&path));
    // Forget it (no unlink), as a killed process would, with a dead pid.
    let seg = Arc::into_inner(seg).unwrap();
    std::mem::forget(seg);
    let bytes = std::fs::read(&path).unwrap();
    let mut b = bytes.clone();
    b[24..28].copy_from_slice(&u32::MAX.to_le_bytes());
    std::fs::write(&path, &b).unwrap();
    let removed = switchyard_shm::remove_stale(std::path::Path::new(switchyard_shm::SHM_DIR), None);
    // Removed by this sweep, or by another test's (tests run in parallel).
    assert!(!path.exists(), "the dead PE's segment stays: {removed:?}");
}

#[test]
fn snapshots_of_a_block_are_consistent_under_a_writer() {
    let id = job(4);
    let whole = StatsSegment::create(id, 0, 2).unwrap();
    let seg = whole.slot().unwrap();
    let r = Reader::open(whole.path()).unwrap();
    let n = if cfg!(miri) { 100 } else { 100_000 };
    std::thread::scope(|s| {
        s.spawn(|| {
            // A published block (under its seqlock): every word i * k.
            for i in 1..=n {
                let mut v = [0u64; PE_COUNTERS];
                for (k, w) in v.iter_mut().enumerate() {
                    *w = i * (k as u64 + 1);
                }
                seg.set_pe(&v);
                // The per-operation words (outside it).
                seg.op(0, 1, 8);
            }
        });
        let mut last_ops = 0;
        for _ in 0..200 {
            let snap = r.snapshot();
            let b = snap.pe["barriers"];
            assert_eq!(snap.pe["links_lost"], 3 * b, "a torn block");
            assert_eq!(snap.pe["progress_bursts"], 12 * b, "a torn block");
            // The block's second cache line, under the same seqlock.
            assert_eq!(snap.pe["verbs_set_ops"], 16 * b, "a torn block");
            assert_eq!(snap.pe["verbs_sets_refused"], 17 * b, "a torn block");
            // Ops and bytes are whole words that only grow; a snapshot
            // may count an operation before its bytes.
            if let Some(p) = snap.peers.first() {
                let (ops, bytes) = (p.counters["ops"], p.counters["bytes"]);
                assert!(ops >= last_ops, "ops went back");
                assert!(bytes % 8 == 0, "a torn word");
                last_ops = ops;
            }
        }
    });
    let snap = r.snapshot();
    assert_eq!(snap.total(PeerWord::Ops), n);
    assert_eq!(snap.total(PeerWord::Bytes), 8 * n);
    assert_eq!(snap.pe["barriers"], n);
}

#[test]
fn prometheus_and_summary_show_the_counts() {
    let id = job(5);
    let whole = StatsSegment::create(id, 0, 2).unwrap();
    let seg = whole.slot().unwrap();
    seg.op(0, 1, 8);
    seg.latency(0, 0, 100);
    let s = Reader::open(whole.path()).unwrap().snapshot();
    let text = prometheus(std::slice::from_ref(&s));
    let job = format!("{id:016x}");
    assert!(text.contains(&format!(
        "switchyard_peer_ops_total{{job_id=\"{job}\",pe=\"0\",peer=\"1\",transport=\"shm\"}} 1\n"
    )));
    assert!(text.contains("# TYPE switchyard_latency_seconds histogram\n"));
    assert!(text.contains("le=\"+Inf\"} 1\n"));
    let sum = summary(&s);
    assert!(sum.contains("shm    ops 1 bytes 8"), "{sum}");
}

#[test]
fn the_publishers_peer_counters_read_back_per_peer_and_transport() {
    let id = job(10);
    let whole = StatsSegment::create(id, 0, 3).unwrap();
    let seg = whole.slot().unwrap();
    seg.op(3, 2, 8); // tcp1 to PE 2: counted by the context
    // The publisher's words: tcp0 to PE 1, tcp1 to PE 2.
    whole.set_peer_counts(2, 1, [5, 0, 1]);
    whole.set_state(2, 1, STATE_HEALTHY);
    whole.set_peer_counts(3, 2, [0, 7, 0]);
    whole.set_peer_counts(6, 1, [1, 1, 1]); // out of range: ignored
    whole.set_peer_counts(2, 3, [1, 1, 1]);
    // The state word and the counters are separate words of the block.
    assert_eq!(whole.state(2, 1), STATE_HEALTHY);
    let r = Reader::open(whole.path()).unwrap();
    let s = r.snapshot();
    let row = |peer: u32, t: &str| {
        s.peers
            .iter()
            .find(|p| p.peer == peer && p.transport == t)
            .unwrap_or_else(|| panic!("no row {peer} {t}: {:?}", s.peers))
    };
    let a = row(1, "tcp0");
    assert_eq!(
        (
            a.counters["replays"],
            a.counters["dedup_drops"],
            a.counters["crc_failures"],
            a.counters["ops"]
        ),
        (5, 0, 1, 0)
    );
    assert!(a.healthy);
    let b = row(2, "tcp1");
    assert_eq!((b.counters["dedup_drops"], b.counters["ops"]), (7, 1));
    assert!(!b.healthy);
    assert_eq!(s.peers.len(), 2, "{:?}", s.peers);
    assert_eq!(s.total_of("replays"), 5);
    assert_eq!(s.total_of("crc_failures"), 1);
    // Published again: the newest values, not a sum.
    whole.set_peer_counts(2, 1, [6, 0, 1]);
    assert_eq!(r.snapshot().total_of("replays"), 6);
    let text = prometheus(std::slice::from_ref(&r.snapshot()));
    let job = format!("{id:016x}");
    for (name, peer, t, v) in [
        ("replays", 1, "tcp0", 6),
        ("crc_failures", 1, "tcp0", 1),
        ("dedup_drops", 2, "tcp1", 7),
    ] {
        let want = format!(
            "switchyard_peer_{name}_total{{job_id=\"{job}\",pe=\"0\",peer=\"{peer}\",transport=\"{t}\"}} {v}\n"
        );
        assert!(text.contains(&want), "{want} in {text}");
    }
    let sum = summary(&r.snapshot());
    assert!(
        sum.contains("peer 1 tcp0: replays 6 dedup_drops 0 crc_failures 1"),
        "{sum}"
    );
}

#[test]
fn slots_are_summed_and_reused() {
    let id = job(6);
    let whole = StatsSegment::create(id, 0, 2).unwrap();
    let r = Reader::open(whole.path()).unwrap();
    let (a, b) = (whole.slot().unwrap(), whole.slot().unwrap());
    assert_eq!((a.index(), b.index()), (0, 1));
    let n = if cfg!(miri) { 10 } else { 10_000 };
    std::thread::scope(|s| {
        for (slot, bytes) in [(&a, 8), (&b, 16)] {
            s.spawn(move || {
                for _ in 0..n {
                    slot.op(0, 1, bytes);
                }
                slot.latency(0, 0, bytes);
                slot.bump(0, 1, PeerWord::Retries);
                let mut pe = [0u64; PE_COUNTERS];
                pe[0] = 1;
                slot.set_pe(&pe);
            });
        }
    });
    let s = r.snapshot();
    assert_eq!(s.contexts, 2);
    assert_eq!(s.total(PeerWord::Ops), 2 * n);
    assert_eq!(s.total(PeerWord::Bytes), 24 * n);
    assert_eq!(s.total(PeerWord::Retries), 2);
    assert_eq!(s.pe["barriers"], 2);
    assert_eq!(
        (s.hists[0].count, s.hists[0].sum, s.hists[0].max),
        (2, 24, 16)
    );
    // A freed slot goes to the next context, which adds to its counts.
    drop(b);
    let c = whole.slot().unwrap();
    assert_eq!(c.index(), 1);
    // Its PE block as `b` left it, for the next context to add to.
    let mut left = [0u64; PE_COUNTERS];
    left[0] = 1;
    assert_eq!(c.pe_counts(), left);
    c.op(0, 1, 1);
    let s = r.snapshot();
    assert_eq!((s.contexts, s.total(PeerWord::Ops)), (2, 2 * n + 1));
    // Every slot taken: no more.
    let rest: Vec<_> = (2..SLOTS).map(|_| whole.slot().unwrap()).collect();
    assert!(whole.slot().is_none());
    assert_eq!(r.snapshot().contexts as usize, SLOTS);
    drop(rest);
}

/// A channel end's description for the tests.
fn end(role: ChannelRole, peer: u32) -> ChannelInfo {
    ChannelInfo {
        role,
        peer,
        capacity: 64,
        message_size: 56,
        flags: CHANNEL_DIRECT,
    }
}

#[test]
fn the_channel_table_sits_between_the_state_words_and_the_slots() {
    for n in [1, 2, 85, 86, 1000] {
        let l = Layout::new(n);
        let page = PAGE / 8;
        assert_eq!(l.chan_off % page, 0);
        assert!(l.chan_off >= Layout::shared(n - 1, N_TRANSPORTS - 1) + SHARED_WORDS);
        assert!(Layout::shared(0, 0) >= WIDE_OFF + N_TRANSPORTS * BLOCK_WORDS);
        assert_eq!(
            l.channel(CHANNELS - 1) + CHANNEL_WORDS,
            l.chan_off + 2 * page
        );
        assert_eq!(l.slots_off, l.chan_off + 2 * page);
        assert_eq!(l.slot(0), l.slots_off);
        // The PE block, then the peer blocks.
        assert_eq!(Layout::peer_rel(0, 0), PE_WORDS);
        assert_eq!(l.len, (l.slots_off + SLOTS * l.stride) * 8);
        // The dense shm row between the peer blocks and the histograms.
        assert_eq!(
            l.shm_row_rel(0),
            Layout::peer_rel(n - 1, N_TRANSPORTS - 1) + BLOCK_WORDS
        );
        assert!(l.hist_rel(0, 0) >= l.shm_row_rel(n));
        assert_eq!(l.hist_rel % page, 0);
    }
}

#[test]
fn channel_entries_are_numbered_shown_and_freed() {
    let id = job(7);
    let seg = StatsSegment::create(id, 1, 3).unwrap();
    let r = Reader::open(seg.path()).unwrap();
    assert!(r.snapshot().channels.is_empty());
    // Channel 0: this PE a bystander (numbered, no entry).
    assert!(seg.channel(None).is_none());
    let tx = seg.channel(Some(end(ChannelRole::Producer, 2))).unwrap();
    let mut pubend = end(ChannelRole::Publisher, 2);
    pubend.flags = CHANNEL_DROP;
    let pb = seg.channel(Some(pubend)).unwrap();
    tx.set(ChannelCounter::Sent, 10);
    tx.set(ChannelCounter::Full, 3);
    pb.set(ChannelCounter::Sent, 7);
    let s = r.snapshot();
    assert_eq!(s.channels.len(), 2);
    let c = &s.channels[0];
    assert_eq!(
        (c.channel, c.kind.as_str(), c.role.as_str(), c.peer),
        (1, "spsc", "producer", 2)
    );
    assert_eq!(
        (c.capacity, c.message_size, c.direct, c.drop),
        (64, 56, true, false)
    );
    assert_eq!((c.sent, c.received, c.full, c.lost), (10, 0, 3, 0));
    let p = &s.channels[1];
    assert_eq!(
        (p.channel, p.kind.as_str(), p.role.as_str(), p.peer),
        (2, "broadcast", "publisher", 2)
    );
    assert!(!p.direct && p.drop);
    assert_eq!(p.counter(ChannelCounter::Sent), 7);
    // A dropped end's entry is gone; the next end takes it, from zero.
    drop(tx);
    let s = r.snapshot();
    assert_eq!(s.channels.len(), 1);
    assert_eq!(s.channels[0].channel, 2);
    let rx = seg.channel(Some(end(ChannelRole::Subscriber, 0))).unwrap();
    assert_eq!(rx.index(), 0, "the freed entry again");
    rx.set(ChannelCounter::Lost, 5);
    let s = r.snapshot();
    let c = &s.channels[1];
    assert_eq!(
        (c.channel, c.role.as_str(), c.sent, c.lost),
        (3, "subscriber", 0, 5)
    );
    // A full table: the next end has no entry, and the numbers go on.
    let rest: Vec<_> = (2..CHANNELS)
        .map(|_| seg.channel(Some(end(ChannelRole::Consumer, 0))).unwrap())
        .collect();
    assert!(seg.channel(Some(end(ChannelRole::Consumer, 0))).is_none());
    let s = r.snapshot();
    assert_eq!(s.channels.len(), CHANNELS);
    assert_eq!(s.channels.last().unwrap().channel, 3 + CHANNELS as u64 - 2);
    drop(rest);
    let last = seg.channel(Some(end(ChannelRole::Consumer, 0))).unwrap();
    let s = r.snapshot();
    assert_eq!(s.channels.len(), 3);
    assert_eq!(s.channels[2].channel, 3 + CHANNELS as u64);
    drop((pb, rx, last));
    assert!(r.snapshot().channels.is_empty());
}

#[test]
fn an_entry_read_under_its_writer_and_reuse_is_whole() {
    let id = job(8);
    let seg = StatsSegment::create(id, 0, 2).unwrap();
    let r = Reader::open(seg.path()).unwrap();
    let n = if cfg!(miri) { 40 } else { 400_000 };
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            // Ends come and go in one entry; channel `round`'s counts
            // carry its round in their high bits.
            for round in 0..20u64 {
                let e = seg.channel(Some(end(ChannelRole::Producer, 1))).unwrap();
                assert_eq!(e.index(), 0);
                for i in 1..=n / 20 {
                    e.set(ChannelCounter::Sent, round << 32 | i);
                    e.set(ChannelCounter::Received, (round << 32) | (2 * i));
                }
            }
            done.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        while !done.load(std::sync::atomic::Ordering::Relaxed) {
            for c in r.snapshot().channels {
                assert_eq!((c.role.as_str(), c.peer, c.capacity), ("producer", 1, 64));
                // Never an earlier end's counts under a later end's
                // number (0: not counted yet).
                for v in [c.sent, c.received] {
                    assert!(v == 0 || v >> 32 == c.channel, "{c:?}");
                }
            }
        }
    });
    assert!(r.snapshot().channels.is_empty());
}

#[test]
fn a_segment_of_another_layout_version_is_refused() {
    let id = job(9);
    let seg = StatsSegment::create(id, 0, 1).unwrap();
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(seg.path())
        .unwrap();
    use std::io::{Seek, SeekFrom, Write};
    // 3: the last layout before the shared (peer, transport) blocks; 4:
    // the last before the dense shm rows; 5: the last with a one-block
    // PE block (15 counters, without the QP set counters).
    for old in [3u32, 4, 5] {
        f.seek(SeekFrom::Start(8)).unwrap();
        f.write_all(&old.to_le_bytes()).unwrap();
        let e = Reader::open(seg.path()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        let want = format!("layout version {old}, this build reads {VERSION}");
        assert!(e.to_string().contains(&want), "{e}");
    }
}

#[test]
#[allow(unsafe_code)]
fn the_shm_legs_dense_row_adds_to_the_peer_shm_block() {
    let id = job(11);
    let whole = StatsSegment::create(id, 0, 3).unwrap();
    let slot = whole.slot().unwrap();
    let shm = slot.shm_counts();
    for (pe, bytes) in [(1, 8), (1, 8), (1, 100), (2, 8), (0, 16)] {
        // SAFETY: `slot`, which `shm` came from, lives.
        assert!(unsafe { shm.op(pe, bytes) });
    }
    // SAFETY: as above.
    assert!(!unsafe { shm.op(3, 8) }, "PE 3 has no row");
    // SAFETY: no slot, no rows: nothing is touched.
    assert!(!unsafe { ShmCounts::default().op(0, 8) });
    // An 8-byte operation writes only its ops word; others add their bytes
    // beyond 8 (wrapping below 8).
    let w = whole.map.words();
    let row = |pe| {
        let at = slot.base + whole.layout.shm_row_rel(pe);
        [
            w[at].load(Ordering::Relaxed),
            w[at + 1].load(Ordering::Relaxed),
        ]
    };
    assert_eq!(row(2), [1, 0]);
    assert_eq!(row(1), [3, 92]);
    // SAFETY: `slot` lives.
    assert!(unsafe { shm.op(0, 1) });
    assert_eq!(row(0), [2, 1], "16 - 8 + 1 - 8, wrapping");
    // The generic loop's count of a (downgraded) shm route, in the block.
    slot.op(0, 1, 8);
    slot.op(2, 1, 24);
    assert_eq!(slot.ops_by_transport()[..3], [7, 0, 1]);
    // A second slot's rows add up too.
    let other = whole.slot().unwrap();
    // SAFETY: `other` lives.
    assert!(unsafe { other.shm_counts().op(1, 8) });
    let s = Reader::open(whole.path()).unwrap().snapshot();
    let row = |peer: u32, t: &str| {
        s.peers
            .iter()
            .find(|p| p.peer == peer && p.transport == t)
            .map(|p| (p.counters["ops"], p.counters["bytes"]))
    };
    assert_eq!(row(0, "shm"), Some((2, 17)));
    assert_eq!(row(1, "shm"), Some((5, 132)));
    assert_eq!(row(2, "shm"), Some((1, 8)));
    assert_eq!(row(1, "tcp0"), Some((1, 24)));
    assert_eq!(s.total(PeerWord::Ops), 9);
    assert_eq!(s.total(PeerWord::Bytes), 181);
    drop((slot, other));
}

#[test]
fn prometheus_and_summary_show_the_channels() {
    let id = job(10);
    let seg = StatsSegment::create(id, 0, 3).unwrap();
    let tx = seg.channel(Some(end(ChannelRole::Producer, 1))).unwrap();
    let pb = seg.channel(Some(end(ChannelRole::Publisher, 2))).unwrap();
    tx.set(ChannelCounter::Sent, 4);
    pb.set(ChannelCounter::Full, 2);
    let s = Reader::open(seg.path()).unwrap().snapshot();
    let text = prometheus(std::slice::from_ref(&s));
    let job = format!("{id:016x}");
    for (name, labels, v) in [
        (
            "sent",
            "channel=\"0\",kind=\"spsc\",role=\"producer\",peer=\"1\"",
            4,
        ),
        (
            "full",
            "channel=\"1\",kind=\"broadcast\",role=\"publisher\",peer=\"all\"",
            2,
        ),
        (
            "lost",
            "channel=\"0\",kind=\"spsc\",role=\"producer\",peer=\"1\"",
            0,
        ),
    ] {
        let line =
            format!("switchyard_channel_{name}_total{{job_id=\"{job}\",pe=\"0\",{labels}}} {v}\n");
        assert!(text.contains(&line), "{line} in {text}");
    }
    for c in ChannelCounter::ALL {
        let f = format!("switchyard_channel_{}_total", c.name());
        assert_eq!(text.matches(&format!("# TYPE {f} counter\n")).count(), 1);
        assert_eq!(text.matches(&format!("# HELP {f} ")).count(), 1);
    }
    let sum = summary(&s);
    assert!(
        sum.contains("channel 0 spsc producer peer 1: sent 4 received 0 full 0 lost 0"),
        "{sum}"
    );
    assert!(
        sum.contains("channel 1 broadcast publisher subscribers 2:"),
        "{sum}"
    );
    drop((tx, pb));
}

#[test]
fn every_pe_word_reads_back_under_its_name_and_in_its_place() {
    let id = job(12);
    let whole = StatsSegment::create(id, 0, 2).unwrap();
    let r = Reader::open(whole.path()).unwrap();
    let (a, b) = (whole.slot().unwrap(), whole.slot().unwrap());
    // A distinct value per word, each slot its own (the reader sums them).
    let va: [u64; PE_COUNTERS] = std::array::from_fn(|i| 1000 + i as u64);
    let vb: [u64; PE_COUNTERS] = std::array::from_fn(|i| (i as u64 + 1) << 20);
    a.set_pe(&va);
    b.set_pe(&vb);
    // The per-operation words of (PE 0, shm), right after the PE block.
    a.op(0, 0, 8);
    let w = whole.map.words();
    for (i, word) in PeWord::ALL.iter().enumerate() {
        // Word `i + 1` of the slot: where a reader of this layout looks.
        assert_eq!(
            w[a.base + *word as usize].load(Ordering::Relaxed),
            va[i],
            "{} at word {}",
            word.name(),
            *word as usize
        );
    }
    // Nothing past the counters in the PE block.
    for k in PE_COUNTERS + 1..PE_WORDS {
        assert_eq!(
            w[a.base + k].load(Ordering::Relaxed),
            0,
            "PE block word {k}"
        );
    }
    let s = r.snapshot();
    assert_eq!(s.pe.len(), PE_COUNTERS, "{:?}", s.pe);
    for (i, word) in PeWord::ALL.iter().enumerate() {
        assert_eq!(s.pe[word.name()], va[i] + vb[i], "{}", word.name());
    }
    assert_eq!(s.total(PeerWord::Ops), 1, "the peer blocks apart");
    // The QP set counters, named, in every output.
    let (ops, refused) = (
        va[PeWord::VerbsSetOps as usize - 1] + vb[PeWord::VerbsSetOps as usize - 1],
        va[PeWord::VerbsSetsRefused as usize - 1] + vb[PeWord::VerbsSetsRefused as usize - 1],
    );
    assert_eq!(
        (s.pe["verbs_set_ops"], s.pe["verbs_sets_refused"]),
        (ops, refused)
    );
    let text = prometheus(std::slice::from_ref(&s));
    let job = format!("{id:016x}");
    for (name, v) in [("verbs_set_ops", ops), ("verbs_sets_refused", refused)] {
        let f = format!("switchyard_pe_{name}_total");
        assert!(text.contains(&format!("# TYPE {f} counter\n")), "{text}");
        let line = format!("{f}{{job_id=\"{job}\",pe=\"0\"}} {v}\n");
        assert!(text.contains(&line), "{line} in {text}");
    }
    let sum = summary(&s);
    assert!(sum.contains(&format!("verbs_set_ops {ops}")), "{sum}");
    assert!(
        sum.contains(&format!("verbs_sets_refused {refused}")),
        "{sum}"
    );
    drop((a, b));
}
