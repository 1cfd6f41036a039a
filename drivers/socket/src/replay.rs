//! The sender's replay buffer: every sequenced frame to one peer, kept until
//! the peer acknowledged it (and, for gets and fetching atomics, answered).
//!
//! Two fixed-capacity parts, allocated once per peer:
//! * a byte ring of `window` bytes holding each frame's header and, for
//!   copied puts, its payload (contiguous per frame; a frame that does not
//!   fit before the end starts again at 0);
//! * a table of [`WINDOW`] entry descriptors indexed by `seq % WINDOW`.
//!
//! Entries are released strictly in sequence order from the tail, so the
//! byte ring never fragments. A full ring is the sender's flow control: the
//! caller returns `WouldBlock`.
//!
//! Beside them, one [`Backlog`] per rail: the frames assigned to that rail
//! that are *outstanding* ([`Entry::outstanding`]: not yet acknowledged, or
//! acknowledged and still waiting for their reply), and the sum of their
//! credit. The counters change only where an entry's outstanding state or
//! rail does: [`ReplayRing::push`] (+1), [`ReplayRing::ack`] and
//! [`ReplayRing::answered`] (-1 when the entry stops being outstanding),
//! [`ReplayRing::reassign`] (moved to the new rail) and
//! [`ReplayRing::clear`] (zero). The fields those depend on (rail, acked,
//! awaiting reply, credit) are private to this module, so the counters
//! always equal the sum over the live outstanding entries.

use crate::{Backlog, MAX_RAILS, dedup::WINDOW};

/// Where a frame's payload lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Payload {
    /// None (gets, or copied into the ring right after the header).
    #[default]
    InRing,
    /// `len` bytes of the local heap at `offset` (`put_from_heap`, zero copy).
    Heap {
        /// Local heap offset.
        offset: u64,
        /// Bytes.
        len: u32,
    },
}

/// One frame kept for replay.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Entry {
    /// Its sequence.
    pub seq: u64,
    /// Offset of the header in the byte ring.
    pub at: usize,
    /// Bytes stored in the ring (header, plus the payload for copied puts).
    pub stored: usize,
    /// Where the payload is.
    pub payload: Payload,
    /// Rail it is assigned to (changed by [`ReplayRing::reassign`]).
    rail: u8,
    /// Connection of that rail.
    pub conn: u8,
    /// Fully written to its connection (since the last reassignment).
    pub sent: bool,
    /// Written at least once before (a later send carries `REPLAY`).
    pub ever_sent: bool,
    /// Acknowledged by the peer (set by [`ReplayRing::ack`]).
    acked: bool,
    /// Waiting for a `GetReply`/`AtomicReply` (cleared by
    /// [`ReplayRing::answered`]).
    awaiting_reply: bool,
    /// Being written right now (partially): must not be released.
    pub pinned: bool,
    /// Get or atomic table slot, for replies.
    pub slot: u32,
    /// Credit consumed (header + payload bytes).
    credit: u32,
    /// The frame's op code.
    pub op: u8,
}

impl Entry {
    /// A frame for `rail`, consuming `credit` (header + payload bytes),
    /// waiting for a reply or not; the other fields are the caller's to set
    /// before [`ReplayRing::push`].
    pub(crate) fn new(rail: u8, credit: u32, awaiting_reply: bool) -> Entry {
        Entry {
            rail,
            credit,
            awaiting_reply,
            ..Entry::default()
        }
    }

    /// Rail it is assigned to.
    #[inline]
    pub(crate) fn rail(&self) -> u8 {
        self.rail
    }

    /// Acknowledged by the peer.
    #[inline]
    pub(crate) fn acked(&self) -> bool {
        self.acked
    }

    /// Waiting for a `GetReply`/`AtomicReply`.
    #[inline]
    pub(crate) fn awaiting_reply(&self) -> bool {
        self.awaiting_reply
    }

    /// Not complete at the peer yet: unacknowledged, or acknowledged and
    /// still waiting for its reply. What the sender still owes a (re)send,
    /// and what [`Backlog`] counts.
    #[inline]
    pub(crate) fn outstanding(&self) -> bool {
        !self.acked || self.awaiting_reply
    }

    /// Whether it can be released.
    #[inline]
    pub(crate) fn done(&self) -> bool {
        !self.outstanding() && !self.pinned
    }
}

/// No room: the frame must wait (the caller's `WouldBlock`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Full;

/// The replay buffer of one peer (module docs).
#[derive(Debug)]
pub(crate) struct ReplayRing {
    bytes: Box<[u8]>,
    head: usize,
    tail: usize,
    /// Entry descriptors, `seq % WINDOW`, live from `tail_seq` to
    /// `next_seq`. Hand-written, not a `heapless::Deque<Entry, 4096>`: in
    /// the `replay_table/*` benches (`benches/benches/collections.rs`,
    /// `cargo bench -p switchyard-benches --bench collections`, interleaved
    /// ratios, crate/hand) the deque is slower at the walks by sequence the
    /// driver does on every send (the cursor) and for the fence rule and
    /// failover (`scan`: 1.06 to 1.20 in every run) and no faster at push,
    /// look-up and release (`steady`: 0.91 to 1.19 from one build to the
    /// next); and it is 224 KiB inline, built on the stack before boxing,
    /// where this slice goes straight to the heap.
    ents: Box<[Entry]>,
    /// Oldest live sequence.
    tail_seq: u64,
    /// Next sequence to hand out.
    next_seq: u64,
    /// Outstanding frames and their credit, per rail (module docs).
    held: [Backlog; MAX_RAILS],
}

impl ReplayRing {
    /// A ring of `capacity` bytes; sequences start at 1.
    pub(crate) fn new(capacity: usize) -> ReplayRing {
        ReplayRing {
            bytes: vec![0u8; capacity].into_boxed_slice(),
            head: 0,
            tail: 0,
            ents: vec![Entry::default(); WINDOW as usize].into_boxed_slice(),
            tail_seq: 1,
            next_seq: 1,
            held: [Backlog::default(); MAX_RAILS],
        }
    }

    /// The outstanding frames assigned to `rail` and their credit (module
    /// docs); zero for a rail out of range.
    #[inline]
    pub(crate) fn backlog(&self, rail: usize) -> Backlog {
        self.held.get(rail).copied().unwrap_or_default()
    }

    /// Counts `e` (outstanding) on its rail.
    #[inline]
    fn hold(&mut self, e: Entry) {
        if let Some(h) = self.held.get_mut(usize::from(e.rail)) {
            h.frames += 1;
            h.bytes += u64::from(e.credit);
        }
    }

    /// Uncounts `e` (outstanding until now) from its rail. Saturating: the
    /// counters never wrap (the module keeps them exact; the tests check).
    #[inline]
    fn unhold(&mut self, e: Entry) {
        if let Some(h) = self.held.get_mut(usize::from(e.rail)) {
            debug_assert!(h.frames >= 1 && h.bytes >= u64::from(e.credit));
            h.frames = h.frames.saturating_sub(1);
            h.bytes = h.bytes.saturating_sub(u64::from(e.credit));
        }
    }

    /// Oldest live sequence (== `next_seq()` when empty).
    #[inline]
    pub(crate) fn tail_seq(&self) -> u64 {
        self.tail_seq
    }

    /// The sequence the next pushed frame gets.
    #[inline]
    pub(crate) fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Live entries.
    #[inline]
    pub(crate) fn len(&self) -> u64 {
        self.next_seq - self.tail_seq
    }

    /// No live entry.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Where `n` contiguous bytes would go, without taking them.
    fn place(&self, n: usize) -> Option<usize> {
        ring_place(self.bytes.len(), self.head, self.tail, self.is_empty(), n)
    }

    /// Appends a frame of `stored` ring bytes; `fill` writes them. Returns the
    /// new sequence.
    ///
    /// # Errors
    /// [`Full`] when the entry table or the byte ring has no room.
    pub(crate) fn push(
        &mut self,
        stored: usize,
        mut entry: Entry,
        fill: impl FnOnce(&mut [u8], u64),
    ) -> Result<u64, Full> {
        if self.len() >= WINDOW {
            return Err(Full);
        }
        let at = self.place(stored).ok_or(Full)?;
        if self.is_empty() {
            self.tail = 0;
        }
        let seq = self.next_seq;
        fill(&mut self.bytes[at..at + stored], seq);
        self.head = at + stored;
        entry.seq = seq;
        entry.at = at;
        entry.stored = stored;
        entry.acked = false;
        self.ents[(seq % WINDOW) as usize] = entry;
        self.hold(entry);
        self.next_seq += 1;
        Ok(seq)
    }

    /// The live entry `seq`, if it is one.
    #[inline]
    pub(crate) fn get(&self, seq: u64) -> Option<&Entry> {
        (seq >= self.tail_seq && seq < self.next_seq).then(|| &self.ents[(seq % WINDOW) as usize])
    }

    /// The live entry `seq`, mutable.
    #[inline]
    pub(crate) fn get_mut(&mut self, seq: u64) -> Option<&mut Entry> {
        (seq >= self.tail_seq && seq < self.next_seq)
            .then(|| &mut self.ents[(seq % WINDOW) as usize])
    }

    /// The stored bytes of an entry (header, then copied payload).
    #[inline]
    pub(crate) fn bytes(&self, e: &Entry) -> &[u8] {
        &self.bytes[e.at..e.at + e.stored]
    }

    /// The stored bytes of an entry, mutable (to re-seal its header).
    #[inline]
    pub(crate) fn bytes_mut(&mut self, at: usize, stored: usize) -> &mut [u8] {
        &mut self.bytes[at..at + stored]
    }

    /// Marks everything up to `upto` acknowledged and releases what is done.
    /// Returns the credit bytes of entries newly acked.
    pub(crate) fn ack(&mut self, upto: u64) -> u64 {
        let mut n = 0;
        let end = upto.saturating_add(1).min(self.next_seq);
        let mut s = self.tail_seq;
        while s < end {
            let e = &mut self.ents[(s % WINDOW) as usize];
            if !e.acked {
                e.acked = true;
                n += u64::from(e.credit);
                let e = *e;
                if !e.awaiting_reply {
                    self.unhold(e);
                }
            }
            s += 1;
        }
        self.release();
        n
    }

    /// The reply to the live entry `seq` arrived: it no longer waits for one,
    /// and what is done is released. Returns whether `seq` was live and
    /// waiting.
    pub(crate) fn answered(&mut self, seq: u64) -> bool {
        let Some(e) = self.get_mut(seq) else {
            return false;
        };
        if !e.awaiting_reply {
            return false;
        }
        e.awaiting_reply = false;
        let e = *e;
        if e.acked {
            self.unhold(e);
        }
        self.release();
        true
    }

    /// Assigns the live entry `seq` to `rail`, to be sent (again) there: its
    /// counts move with it when it is outstanding. Returns whether `seq` was
    /// live.
    pub(crate) fn reassign(&mut self, seq: u64, rail: u8) -> bool {
        let Some(e) = self.get_mut(seq) else {
            return false;
        };
        let old = *e;
        e.rail = rail;
        e.sent = false;
        let new = *e;
        if old.outstanding() && old.rail != rail {
            self.unhold(old);
            self.hold(new);
        }
        true
    }

    /// Releases done entries from the tail.
    pub(crate) fn release(&mut self) {
        while self.tail_seq < self.next_seq && self.ents[(self.tail_seq % WINDOW) as usize].done() {
            self.tail_seq += 1;
        }
        if self.is_empty() {
            self.head = 0;
            self.tail = 0;
        } else {
            self.tail = self.ents[(self.tail_seq % WINDOW) as usize].at;
        }
    }

    /// Drops every entry (a peer given up on). Sequences keep counting.
    pub(crate) fn clear(&mut self) {
        self.tail_seq = self.next_seq;
        self.head = 0;
        self.tail = 0;
        self.held = [Backlog::default(); MAX_RAILS];
    }
}

/// Where `n` contiguous bytes go in a byte ring of `cap` bytes whose live
/// bytes run from `tail` up to `head` (wrapping; `empty`: none are live): at
/// `head`, or at 0 when they do not fit before the end, or `None` when they
/// do not fit at all. A region never wraps, so a ring released strictly from
/// its tail never fragments (the replay ring, and the arena of get replies).
pub(crate) fn ring_place(
    cap: usize,
    head: usize,
    tail: usize,
    empty: bool,
    n: usize,
) -> Option<usize> {
    if n > cap {
        return None;
    }
    if empty {
        return Some(0);
    }
    if head > tail {
        if cap - head >= n {
            Some(head)
        } else if tail >= n {
            Some(0)
        } else {
            None
        }
    } else if head < tail {
        (tail - head >= n).then_some(head)
    } else {
        // head == tail with live bytes: full. (head == tail == 0 after a wrap
        // that ended exactly at the end is the same case.)
        None
    }
}

#[cfg(test)]
mod test {
    use super::*;

    fn push(r: &mut ReplayRing, n: usize, tag: u8) -> Result<u64, Full> {
        r.push(n, Entry::default(), |b, _| b.fill(tag))
    }

    #[test]
    fn fills_wraps_and_releases_in_order() {
        let mut r = ReplayRing::new(1000);
        let a = push(&mut r, 400, 1).unwrap();
        let b = push(&mut r, 400, 2).unwrap();
        assert_eq!((a, b), (1, 2));
        assert_eq!(
            push(&mut r, 300, 3),
            Err(Full),
            "200 left at the end, 0 at the front"
        );
        r.ack(1);
        assert_eq!(r.tail_seq(), 2);
        // 200 at the end is too little for 300: wraps to 0 (400 free there).
        let c = push(&mut r, 300, 3).unwrap();
        assert_eq!(r.get(c).unwrap().at, 0);
        assert_eq!(r.bytes(r.get(b).unwrap())[0], 2);
        assert_eq!(push(&mut r, 101, 4), Err(Full));
        let d = push(&mut r, 100, 4).unwrap();
        assert_eq!(r.get(d).unwrap().at, 300);
        assert_eq!(push(&mut r, 1, 5), Err(Full), "head met tail");
        r.ack(d);
        assert!(r.is_empty());
        assert_eq!(push(&mut r, 1000, 6).unwrap(), 5);
    }

    #[test]
    fn replies_and_pins_hold_the_tail() {
        let mut r = ReplayRing::new(4096);
        let g = r
            .push(
                64,
                Entry {
                    awaiting_reply: true,
                    ..Entry::default()
                },
                |_, _| {},
            )
            .unwrap();
        let p = push(&mut r, 64, 0).unwrap();
        assert_eq!(r.ack(p), 0);
        assert_eq!(r.len(), 2, "the get waits for its reply");
        r.get_mut(g).unwrap().awaiting_reply = false;
        r.get_mut(g).unwrap().pinned = true;
        r.release();
        assert_eq!(r.len(), 2, "pinned");
        r.get_mut(g).unwrap().pinned = false;
        r.release();
        assert!(r.is_empty());
    }

    #[test]
    fn entry_table_bounds_outstanding_frames() {
        let mut r = ReplayRing::new(1 << 20);
        for _ in 0..WINDOW {
            push(&mut r, 64, 0).unwrap();
        }
        assert_eq!(push(&mut r, 64, 0), Err(Full));
        r.ack(10);
        for _ in 0..10 {
            push(&mut r, 64, 0).unwrap();
        }
        assert_eq!(push(&mut r, 64, 0), Err(Full));
    }

    fn frame(r: &mut ReplayRing, rail: u8, credit: u32, reply: bool) -> Result<u64, Full> {
        r.push(64, Entry::new(rail, credit, reply), |_, _| {})
    }

    fn held(frames: u32, bytes: u64) -> Backlog {
        Backlog { frames, bytes }
    }

    #[test]
    fn backlog_rises_with_pushes_and_falls_with_acks() {
        let mut r = ReplayRing::new(1 << 16);
        let a = frame(&mut r, 0, 100, false).unwrap();
        frame(&mut r, 1, 200, false).unwrap();
        let c = frame(&mut r, 0, 300, false).unwrap();
        assert_eq!(r.backlog(0), held(2, 400));
        assert_eq!(r.backlog(1), held(1, 200));
        assert_eq!(r.backlog(2), held(0, 0));
        assert_eq!(r.backlog(MAX_RAILS), held(0, 0), "out of range");
        assert_eq!(r.ack(a), 100);
        assert_eq!(r.backlog(0), held(1, 300));
        assert_eq!(r.ack(a), 0, "acked once");
        assert_eq!(r.backlog(0), held(1, 300));
        assert_eq!(r.ack(c), 500);
        assert_eq!((r.backlog(0), r.backlog(1)), (held(0, 0), held(0, 0)));
        assert!(r.is_empty());
    }

    #[test]
    fn backlog_holds_a_reply_until_it_is_answered() {
        let mut r = ReplayRing::new(1 << 16);
        let g = frame(&mut r, 2, 64, true).unwrap();
        let p = frame(&mut r, 2, 128, false).unwrap();
        assert!(!r.answered(p), "a put waits for no reply");
        r.ack(p);
        assert_eq!(r.backlog(2), held(1, 64), "the get waits for its reply");
        assert!(r.answered(g));
        assert!(!r.answered(g), "answered once");
        assert_eq!(r.backlog(2), held(0, 0));
        assert!(r.is_empty());
        // Reply first, ack later.
        let g = frame(&mut r, 2, 64, true).unwrap();
        assert!(r.answered(g));
        assert_eq!(r.backlog(2), held(1, 64), "not acked yet");
        r.ack(g);
        assert_eq!(r.backlog(2), held(0, 0));
    }

    #[test]
    fn backlog_moves_with_reassign_and_clears_to_zero() {
        let mut r = ReplayRing::new(1 << 16);
        let g = frame(&mut r, 0, 64, true).unwrap();
        let a = frame(&mut r, 0, 100, false).unwrap();
        let c = frame(&mut r, 0, 300, false).unwrap();
        r.ack(g);
        // `g` waits for its reply, `a` and `c` for their acks.
        assert_eq!(r.backlog(0), held(3, 464));
        for s in [g, a, c] {
            assert!(r.reassign(s, 1));
        }
        assert_eq!((r.backlog(0), r.backlog(1)), (held(0, 0), held(3, 464)));
        assert!(!r.get(c).unwrap().sent, "to be sent again");
        assert!(r.reassign(a, 1), "same rail: no change");
        assert_eq!(r.backlog(1), held(3, 464));
        r.ack(c);
        assert_eq!(r.backlog(1), held(1, 64), "the get waits for its reply");
        assert!(r.reassign(a, 3), "live behind the get, but complete");
        assert_eq!((r.backlog(1), r.backlog(3)), (held(1, 64), held(0, 0)));
        assert!(r.reassign(g, 3));
        assert_eq!((r.backlog(1), r.backlog(3)), (held(0, 0), held(1, 64)));
        assert!(r.answered(g));
        assert!(r.is_empty());
        assert!(!r.reassign(a, 2), "released");
        assert_eq!(r.backlog(2), held(0, 0));
        let g = frame(&mut r, 2, 64, true).unwrap();
        frame(&mut r, 2, 500, false).unwrap();
        r.clear();
        for rail in 0..MAX_RAILS {
            assert_eq!(r.backlog(rail), held(0, 0));
        }
        assert!(!r.answered(g), "dropped");
    }

    /// The model of one pushed frame: (rail, credit, acked, awaiting reply).
    type ModelFrame = (u8, u32, bool, bool);

    #[derive(Debug, Clone)]
    enum Op {
        Push {
            rail: u8,
            credit: u32,
            stored: usize,
            reply: bool,
        },
        Ack(usize),
        Answer(usize),
        Reassign(usize, u8),
        Clear,
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            6 => (0..MAX_RAILS as u8, 64..20_000u32, 64..3000usize, any::<bool>())
                .prop_map(|(rail, credit, stored, reply)| Op::Push { rail, credit, stored, reply }),
            3 => any::<usize>().prop_map(Op::Ack),
            2 => any::<usize>().prop_map(Op::Answer),
            2 => (any::<usize>(), 0..MAX_RAILS as u8).prop_map(|(i, r)| Op::Reassign(i, r)),
            1 => Just(Op::Clear),
        ]
    }

    proptest::proptest! {
        /// The per-rail counters equal the sum over a model of every frame
        /// pushed (since the last clear) that is unacked or awaiting its
        /// reply, after every operation; they never underflow (`unhold`
        /// asserts it).
        #[test]
        fn backlog_matches_a_model(ops in proptest::collection::vec(op(), 1..300)) {
            use std::collections::BTreeMap;
            let mut r = ReplayRing::new(20_000);
            let mut model: BTreeMap<u64, ModelFrame> = BTreeMap::new();
            // The `i`-th pushed frame still in the model (or a sequence past
            // it when there is none: the ring ignores it).
            let pick = |m: &BTreeMap<u64, ModelFrame>, next: u64, i: usize| {
                m.keys().nth(i % (m.len() + 1)).copied().unwrap_or(next)
            };
            for op in ops {
                match op {
                    Op::Push { rail, credit, stored, reply } => {
                        if let Ok(s) = r.push(stored, Entry::new(rail, credit, reply), |_, _| {}) {
                            model.insert(s, (rail, credit, false, reply));
                        }
                    }
                    Op::Ack(i) => {
                        let upto = pick(&model, r.next_seq(), i);
                        r.ack(upto);
                        for (_, m) in model.range_mut(..=upto) {
                            m.2 = true;
                        }
                    }
                    Op::Answer(i) => {
                        let s = pick(&model, r.next_seq(), i);
                        let was = model.get(&s).is_some_and(|m| m.3);
                        proptest::prop_assert_eq!(r.answered(s), was);
                        if let Some(m) = model.get_mut(&s) {
                            m.3 = false;
                        }
                    }
                    Op::Reassign(i, rail) => {
                        let s = pick(&model, r.next_seq(), i);
                        r.reassign(s, rail);
                        if let Some(m) = model.get_mut(&s) {
                            m.0 = rail;
                        }
                    }
                    Op::Clear => {
                        r.clear();
                        model.clear();
                    }
                }
                for rail in 0..MAX_RAILS {
                    let mut want = Backlog::default();
                    for &(mr, credit, acked, awaiting) in model.values() {
                        if usize::from(mr) == rail && (!acked || awaiting) {
                            want.frames += 1;
                            want.bytes += u64::from(credit);
                        }
                    }
                    proptest::prop_assert_eq!(r.backlog(rail), want, "rail {}", rail);
                }
            }
        }
    }

    #[test]
    fn random_against_model() {
        use std::collections::VecDeque;
        let mut r = ReplayRing::new(10_000);
        let mut model: VecDeque<(u64, u8, usize)> = VecDeque::new();
        let mut x = 77u64;
        for i in 0..100_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if !x.is_multiple_of(3) {
                let n = 1 + (x >> 8) as usize % 3000;
                let tag = i as u8;
                if let Ok(s) = push(&mut r, n, tag) {
                    model.push_back((s, tag, n));
                }
            } else if let Some(&(s, _, _)) = model.get((x >> 8) as usize % (model.len() + 1)) {
                r.ack(s);
                while model.front().is_some_and(|m| m.0 <= s) {
                    model.pop_front();
                }
            }
            for &(s, tag, n) in &model {
                let e = *r.get(s).unwrap();
                assert_eq!(e.stored, n);
                let b = r.bytes(&e);
                assert!(b[0] == tag && b[n - 1] == tag, "overwritten live bytes");
            }
        }
    }
}
