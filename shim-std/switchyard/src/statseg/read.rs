//! Reading stats segments from outside the PE: finding the jobs of this
//! node, opening one segment, taking consistent snapshots of its blocks.

use std::{collections::BTreeMap, io, path::PathBuf};

use switchyard_core::sync::atomic::{AtomicU64, Ordering, fence};

use super::{
    BLOCK_WORDS, CHANNEL_WORDS, CHANNELS, CHANNELS_WORD, ChannelRow, HIST_BUCKETS, HIST_OPS,
    HIST_WORDS, Header, Layout, MAGIC, N_TRANSPORTS, PE_WORDS, PUBLISHES_WORD, PeWord, PeerWord,
    READY_WORD, SHARED_WORDS, SHM_ROW_WORDS, SLOTS, SLOTS_USED_WORD, SLOTS_WORD, STATE_DEAD,
    STATE_HEALTHY, STATE_LOADED, STATE_ROUTE, SharedWord, VERSION, WIDE_OFF, chan::read_channel,
    shm_row, sys,
};
use crate::statseg::HistRow;

/// Tries of a block's seqlock before its words are taken as they are (a
/// writer killed mid-update leaves its sequence odd); the reader yields its
/// CPU every [`YIELD_EVERY`] tries.
const TRIES: u32 = 1 << 20;
const YIELD_EVERY: u32 = 64;

/// The name of transport index `t`: `shm`, `verbs`, `tcp0`...
pub fn transport_name(t: usize) -> String {
    match t {
        0 => "shm".into(),
        1 => "verbs".into(),
        r => format!("tcp{}", r - 2),
    }
}

/// One running job of this node: its id and the stats segments of its PEs
/// here, by rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// The job id.
    pub job_id: u64,
    /// `(rank, object path)` of each PE of this node whose process lives.
    pub pes: Vec<(u32, PathBuf)>,
}

/// The jobs with a live stats segment under `dir` (`/dev/shm`), by job id:
/// every `switchyard-<job>-stats-<rank>` object whose header is ready and
/// names a live process.
pub fn find_jobs(dir: &std::path::Path) -> Vec<Job> {
    let mut jobs: BTreeMap<u64, Vec<(u32, PathBuf)>> = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some((job, rank)) = name.to_str().and_then(parse_name) else {
            continue;
        };
        let path = e.path();
        let live = Reader::open(&path).is_ok_and(|r| r.alive());
        if live {
            jobs.entry(job).or_default().push((rank, path));
        }
    }
    jobs.into_iter()
        .map(|(job_id, mut pes)| {
            pes.sort();
            Job { job_id, pes }
        })
        .collect()
}

/// `(job id, rank)` of a stats object's file name.
fn parse_name(name: &str) -> Option<(u64, u32)> {
    let rest = name.strip_prefix("switchyard-")?;
    let (job, rest) = rest.split_once('-')?;
    let rank = rest.strip_prefix("stats-")?;
    if job.len() != 16 {
        return None;
    }
    Some((u64::from_str_radix(job, 16).ok()?, rank.parse().ok()?))
}

/// A mapped stats segment, read-only.
pub struct Reader {
    map: sys::Map,
    header: Header,
    layout: Layout,
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("header", &self.header)
            .finish_non_exhaustive()
    }
}

fn invalid(why: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why)
}

impl Reader {
    /// Maps the segment at `path` and checks its header.
    ///
    /// # Errors
    ///
    /// The object cannot be read, or is not a ready stats segment of
    /// version [`VERSION`] (its error says which).
    pub fn open(path: &std::path::Path) -> io::Result<Reader> {
        let map = sys::Map::open(path, super::PAGE)?;
        let w = map.words();
        // SYNC POINT with the Release store of the ready word in
        // `StatsSegment::create`.
        let ready = w[READY_WORD].load(Ordering::Acquire);
        if ready as u32 != switchyard_shm::OBJECT_READY {
            return Err(invalid("not ready".into()));
        }
        let word = |i: usize| w[i].load(Ordering::Relaxed);
        if word(0) != MAGIC {
            return Err(invalid("bad magic".into()));
        }
        let header = Header {
            version: word(1) as u32,
            rank: (word(1) >> 32) as u32,
            job_id: word(2),
            pid: word(3) as u32,
            n_pes: (word(3) >> 32) as u32,
            start_unix_ns: word(4),
            n_transports: word(5) as u32,
            hist_buckets: (word(5) >> 32) as u32,
            tick_unit: word(6) as u32,
            publishes: word(PUBLISHES_WORD),
        };
        if header.version != VERSION {
            return Err(invalid(format!(
                "layout version {}, this build reads {VERSION}",
                header.version
            )));
        }
        if header.n_transports as usize != N_TRANSPORTS
            || header.hist_buckets as usize != HIST_BUCKETS
            || word(SLOTS_WORD) != SLOTS as u64
            || word(CHANNELS_WORD) != CHANNELS as u64
        {
            return Err(invalid("geometry differs from this build's".into()));
        }
        let layout = Layout::new(header.n_pes);
        if w.len() * 8 < layout.len {
            return Err(invalid(format!(
                "{} bytes, {} expected",
                w.len() * 8,
                layout.len
            )));
        }
        Ok(Reader {
            map,
            header,
            layout,
        })
    }

    /// The header (as read at open; [`Snapshot::header`] has the live one).
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// Whether the PE's process still lives.
    pub fn alive(&self) -> bool {
        switchyard_shm::process_alive(self.header.pid)
    }

    /// A snapshot: each block consistent in itself (its seqlock), blocks
    /// read one after the other while the PE runs; the counters are the
    /// sums over the context slots taken so far.
    pub fn snapshot(&self) -> Snapshot {
        let w = self.map.words();
        let mut header = self.header;
        header.publishes = w[PUBLISHES_WORD].load(Ordering::Relaxed);
        // SYNC POINT with the Release store of the bitmap in `StatsSegment::slot`.
        let used = w[SLOTS_USED_WORD].load(Ordering::Acquire);
        let slots: Vec<usize> = (0..SLOTS)
            .filter(|k| used & 1 << k != 0)
            .map(|k| self.layout.slot(k))
            .collect();
        // The sum over the slots of the block at `rel` from a slot's start.
        let summed = |rel: usize, words: usize| {
            let mut sum = vec![0u64; words];
            for s in &slots {
                let b = read_block(&w[s + rel..s + rel + words]);
                for (a, v) in sum.iter_mut().zip(&b).skip(1) {
                    *a = a.wrapping_add(*v);
                }
            }
            sum
        };
        let pe_block = summed(0, PE_WORDS);
        let pe = named(
            PeWord::ALL
                .iter()
                .map(|k| (k.name(), pe_block[*k as usize])),
        );
        let mut wide = Vec::new();
        for t in 0..N_TRANSPORTS {
            let at = WIDE_OFF + t * BLOCK_WORDS;
            let b = read_block(&w[at..at + BLOCK_WORDS]);
            if b[1..].iter().any(|v| *v != 0) {
                let names = super::wide_names(t);
                wide.push(WideRow {
                    transport: transport_name(t),
                    counters: named(names.into_iter().zip(b[1..].iter().copied())),
                });
            }
        }
        let mut peers = Vec::new();
        for peer in 0..header.n_pes {
            for t in 0..N_TRANSPORTS {
                let mut b = summed(Layout::peer_rel(peer, t), BLOCK_WORDS);
                if t == 0 {
                    // The shm leg's counts, in the slots' dense shm rows.
                    let rel = self.layout.shm_row_rel(peer);
                    for s in &slots {
                        let [ops, bytes] = shm_row(&w[s + rel..s + rel + SHM_ROW_WORDS]);
                        let o = &mut b[PeerWord::Ops as usize];
                        *o = o.wrapping_add(ops);
                        let o = &mut b[PeerWord::Bytes as usize];
                        *o = o.wrapping_add(bytes);
                    }
                }
                let at = Layout::shared(peer, t);
                let sh = read_block(&w[at..at + SHARED_WORDS]);
                let state = sh[SharedWord::State as usize];
                if sh[1..].iter().chain(&b[1..]).all(|v| *v == 0) {
                    continue;
                }
                peers.push(PeerRow {
                    peer,
                    transport: transport_name(t),
                    counters: named(
                        PeerWord::ALL
                            .iter()
                            .filter(|k| **k != PeerWord::State)
                            .map(|k| (k.name(), b[*k as usize]))
                            .chain(
                                SharedWord::ALL
                                    .iter()
                                    .filter(|k| **k != SharedWord::State)
                                    .map(|k| (k.name(), sh[*k as usize])),
                            ),
                    ),
                    healthy: state & STATE_HEALTHY != 0,
                    loaded: state & STATE_LOADED != 0,
                    route: state & STATE_ROUTE != 0,
                    dead: state & STATE_DEAD != 0,
                });
            }
        }
        let mut hists = Vec::new();
        for (op, name) in HIST_OPS.iter().enumerate() {
            for t in 0..N_TRANSPORTS {
                let rel = self.layout.hist_rel(op, t);
                let mut h = vec![0u64; HIST_WORDS];
                for s in &slots {
                    let b = read_block(&w[s + rel..s + rel + HIST_WORDS]);
                    for (i, (a, v)) in h.iter_mut().zip(&b).enumerate().skip(1) {
                        // Word 3 is the largest sample; the others add up.
                        *a = if i == 3 {
                            (*a).max(*v)
                        } else {
                            a.wrapping_add(*v)
                        };
                    }
                }
                if h[1] == 0 {
                    continue;
                }
                hists.push(HistRow {
                    op: (*name).into(),
                    transport: transport_name(t),
                    count: h[1],
                    sum: h[2],
                    max: h[3],
                    buckets: h[4..]
                        .iter()
                        .enumerate()
                        .filter(|(_, c)| **c != 0)
                        .map(|(i, c)| (i, *c))
                        .collect(),
                });
            }
        }
        let mut channels: Vec<ChannelRow> = (0..CHANNELS)
            .filter_map(|k| {
                let at = self.layout.channel(k);
                read_channel(&w[at..at + CHANNEL_WORDS])
            })
            .collect();
        channels.sort_by(|a, b| (a.channel, &a.role).cmp(&(b.channel, &b.role)));
        Snapshot {
            header,
            alive: self.alive(),
            contexts: used.count_ones(),
            pe,
            wide,
            peers,
            hists,
            channels,
        }
    }
}

fn named<'a>(it: impl Iterator<Item = (&'a str, u64)>) -> BTreeMap<String, u64> {
    it.map(|(k, v)| (k.to_string(), v)).collect()
}

/// A copy of `block` that is one state of it (its seqlock; see the module
/// docs), or, after [`TRIES`] tries, its words as they are.
fn read_block(block: &[AtomicU64]) -> Vec<u64> {
    let mut out = vec![0u64; block.len()];
    for i in 0..TRIES {
        if i % YIELD_EVERY == YIELD_EVERY - 1 {
            std::thread::yield_now();
        }
        // SYNC POINT with the Release store of the even sequence in
        // `write_block`.
        let s1 = block[0].load(Ordering::Acquire);
        if s1 & 1 == 1 {
            switchyard_core::sync::spin_hint();
            continue;
        }
        for (o, w) in out.iter_mut().zip(block).skip(1) {
            *o = w.load(Ordering::Relaxed);
        }
        // SYNC POINT with the Release fence after the odd sequence in
        // `write_block`.
        fence(Ordering::Acquire);
        if block[0].load(Ordering::Relaxed) == s1 {
            out[0] = s1;
            return out;
        }
    }
    for (o, w) in out.iter_mut().zip(block) {
        *o = w.load(Ordering::Relaxed);
    }
    out
}

/// One snapshot of a PE's segment.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Snapshot {
    /// The header.
    pub header: Header,
    /// Whether the PE's process lived when the snapshot was taken.
    pub alive: bool,
    /// The context slots the counters sum: those ever taken (a dropped
    /// context's slot, counts kept, goes to the PE's next context).
    pub contexts: u32,
    /// The PE block ([`PeWord`] names).
    pub pe: BTreeMap<String, u64>,
    /// The wide blocks with anything counted.
    pub wide: Vec<WideRow>,
    /// The (peer, transport) blocks with anything counted or set.
    pub peers: Vec<PeerRow>,
    /// The histograms with samples.
    pub hists: Vec<HistRow>,
    /// The PE's live channel ends that have an entry, by channel number.
    pub channels: Vec<ChannelRow>,
}

impl Snapshot {
    /// The sum of peer counter `word` over every peer and transport.
    pub fn total(&self, word: PeerWord) -> u64 {
        self.total_of(word.name())
    }

    /// The sum of the peer counter named `name` (a [`PeerWord`] or
    /// [`SharedWord`] name) over every peer and
    /// transport.
    pub fn total_of(&self, name: &str) -> u64 {
        self.peers
            .iter()
            .map(|p| p.counters.get(name).copied().unwrap_or(0))
            .sum()
    }
}

/// One driver's own counters.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct WideRow {
    /// The transport (`tcp0` stands for the socket driver, all rails;
    /// `verbs` for the verbs driver).
    pub transport: String,
    /// [`WideWord`](super::WideWord) names and values
    /// ([`VerbsWord`](super::VerbsWord)s for `verbs`).
    pub counters: BTreeMap<String, u64>,
}

/// One (peer, transport)'s counters and state.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PeerRow {
    /// The peer.
    pub peer: u32,
    /// The transport.
    pub transport: String,
    /// [`PeerWord`] names and values (summed over the context slots) and
    /// [`SharedWord`] names and values (the
    /// publisher's); not the state words.
    pub counters: BTreeMap<String, u64>,
    /// Health bit (as last published).
    pub healthy: bool,
    /// Load bit.
    pub loaded: bool,
    /// Whether this is the peer's current route for a short put.
    pub route: bool,
    /// Whether the peer is dead.
    pub dead: bool,
}
