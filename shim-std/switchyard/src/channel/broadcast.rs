//! [`Broadcast`]: one publisher PE to several subscriber PEs (the
//! protocol is described on [`Broadcast`]).

use core::{borrow::Borrow, marker::PhantomData};

use switchyard_core::sync::atomic::{Ordering, fence};

// The header's layout and path words, and the path values, are the SPSC
// header's: a subscriber's path is `PATH_DIRECT` (it reads the publisher's
// ring through its mapping) or `PATH_ROUTED` (its own ring, written with
// puts).
use super::{
    ChannelError, ChannelStats, Counters, Credit, HDR_LAYOUT, HDR_PATH, Made, PATH_DIRECT,
    PATH_ROUTED, TrySendError, layout_of, layout_word,
    slots::{SEQ_BYTES, Slots, Word, header_word, slots_in},
    stride_of,
};
#[cfg(doc)]
use crate::context::Error as CtxError;
use crate::{
    context::{Context, Error, Pe, Plain, Result, Signal, Sym},
    statseg::{CHANNEL_DIRECT, CHANNEL_DROP, ChannelInfo, ChannelRole},
};

/// What a broadcast stream does about a subscriber that falls behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlowSubscriber {
    /// The publisher waits for the slowest subscriber (nothing is lost).
    Backpressure,
    /// The publisher never waits; a lapped subscriber skips ahead and
    /// counts what it lost.
    Drop,
}

/// What [`Context::broadcast`] hands each PE: one publisher PE to several
/// subscriber PEs, each with its own cursor, and a per-stream policy for a
/// slow subscriber ([`SlowSubscriber`]).
///
/// # Layout and protocol
///
/// Every PE allocates the same two blocks (creation is collective): a header
/// of one 128-byte line for the layout word and the path, then one line per
/// subscriber for its cursor; and a ring of `capacity` slots laid out as an
/// SPSC ring's (a sequence word, then the message: one cache line for up to
/// 56 bytes).
///
/// * **Subscribers on the publisher's node** (the publisher's heap mapped
///   there) all read ONE ring, the one in the publisher's heap: the publisher
///   writes each message once into its own memory, and each such subscriber
///   reads that copy through its mapping. It publishes its cursor (its next
///   index) with a Release store into its own line of the publisher's
///   header (once per `recv`, or per batch of `recv_into`), which the publisher reads (Acquire) only when its cached limit
///   says the ring is full.
/// * **Subscribers on other nodes** each have the ring at the same offset of
///   their own heap, and one per node, its *lead* (the lowest-numbered
///   subscriber there, decided at creation, the same on every PE), has its
///   ring filled: the publisher writes **once per remote node**, a
///   [`Context::put_signal`] of the message and its sequence word into the
///   lead's ring. The lead's node-mates read that ring through their mapping
///   of the lead's heap, as same-node subscribers read the publisher's (same
///   slots and sequence words, Acquire loads); the puts are applied there by
///   the lead's context or its progress thread, so with
///   `progress = caller` they need the lead to keep calling the library.
///   Cursors stay per subscriber: under [`SlowSubscriber::Backpressure`]
///   every subscriber on another node, lead or not, sends its own cursor
///   back as an atomic set into its line of the publisher's header every
///   quarter of the ring: the publisher waits for the slowest of all, and
///   the lead's cursor holds back only what it holds back as any
///   subscriber (its node-mates keep reading what arrived after it stopped).
///   Under [`SlowSubscriber::Drop`] a node-mate finds laps in the lead's
///   ring from the sequence words, as every subscriber does (below).
///
/// # Slow subscribers
///
/// * [`SlowSubscriber::Backpressure`]: the publisher may be at most
///   `capacity` messages ahead of the slowest subscriber; [`Publisher::send`]
///   waits for it, [`Publisher::try_send`] gives the message back
///   ([`TrySendError::Full`]).
/// * [`SlowSubscriber::Drop`]: the publisher never waits and never reads a
///   cursor. Before it rewrites a slot it sets the slot's sequence word to 0
///   (then a Release fence on the node; a set and a fence before the
///   put-and-signal across nodes: that marker is the target's Release store
///   of an atomic set, ordered before the put's bytes on x86's total store
///   order, not formally on weakly ordered machines), so a subscriber reads a
///   message as a seqlock reader does: the sequence word (Acquire), the
///   bytes, an Acquire fence, the sequence word again; a copy the publisher
///   overwrote meanwhile is thrown away. A subscriber that finds a later lap's sequence word in
///   its next slot was lapped: it skips to the oldest message that can still
///   be in the ring and counts what it skipped in [`ChannelStats::lost`], so
///   what it receives is an in-order subsequence of what was sent and
///   `received + lost` reaches `sent` once it has caught up.
#[derive(Debug)]
pub enum Broadcast<T> {
    /// The publisher PE's end.
    Publisher(Publisher<T>),
    /// A subscriber PE's end.
    Subscriber(Subscriber<T>),
    /// A PE that is neither.
    Bystander,
}

impl<T> Broadcast<T> {
    /// The publisher's end, if this is it.
    pub fn publisher(self) -> Option<Publisher<T>> {
        match self {
            Broadcast::Publisher(p) => Some(p),
            _ => None,
        }
    }

    /// The subscriber's end, if this is it.
    pub fn subscriber(self) -> Option<Subscriber<T>> {
        match self {
            Broadcast::Subscriber(s) => Some(s),
            _ => None,
        }
    }
}

/// Bytes of a header line (two cache lines: apart from the adjacent-line
/// prefetch of the next).
const LINE: u64 = 128;
/// The bit of the layout word for [`SlowSubscriber::Drop`].
const DROP_BIT: u64 = 1 << 32;

/// Header word (line 0, after the layout and path words): the PE whose ring
/// this subscriber reads when it is on another node than the publisher (its
/// node's lead as it sees it, itself when it leads), [`NO_LEAD`] otherwise.
const HDR_LEAD: usize = 2;
/// [`HDR_LEAD`] of a PE that is not a subscriber on another node.
const NO_LEAD: u64 = u64::MAX;

/// Header word of subscriber `k`'s cursor (in the publisher's header).
fn cursor_word(k: usize) -> usize {
    (LINE as usize / 8) * (1 + k)
}

/// The sending end of a [`Broadcast`] stream (`Send`, not `Sync`), on the
/// publisher PE. Every call takes a context of that PE.
#[derive(Debug)]
pub struct Publisher<T> {
    /// Index of the next message.
    tail: u64,
    /// Messages may be sent while `tail < limit` (backpressure).
    limit: u64,
    capacity: u64,
    policy: SlowSubscriber,
    /// The ring in this PE's heap, when a subscriber reads it.
    local: Option<Slots>,
    /// The subscribers' cursor words (this PE's header), one per subscriber.
    cursors: Vec<Word>,
    /// The leads of the other nodes (their lowest-numbered subscriber), one
    /// put and signal each per message.
    remotes: Vec<u32>,
    /// Subscribers on other nodes, leads or not.
    remote_subs: usize,
    ring: u64,
    stride: u64,
    /// The ring block as 64-bit words (the sequence words' handle).
    seqs: Sym<u64>,
    /// The subscribers' PEs, in cursor order (a wait watches the slowest).
    watch: Vec<u32>,
    owner: u64,
    stats: Counters,
    /// Keeps the PE, and the mappings, alive.
    _pe: Pe,
    _t: PhantomData<fn(T) -> T>,
}

/// How a subscriber publishes its cursor.
#[derive(Debug)]
enum Cursor {
    /// A store through its mapping of the publisher's header.
    Direct(Word),
    /// Atomic sets into the publisher's header.
    Routed(Credit),
    /// Not at all ([`SlowSubscriber::Drop`]).
    None,
}

/// A receiving end of a [`Broadcast`] stream (`Send`, not `Sync`), on a
/// subscriber PE. Every call takes a context of that PE.
#[derive(Debug)]
pub struct Subscriber<T> {
    /// Index of the next message.
    head: u64,
    capacity: u64,
    /// The publisher's ring (same node), its node lead's, or this PE's own.
    slots: Slots,
    cursor: Cursor,
    /// On another node than the publisher: credits over the route
    /// (progress while waiting).
    routed: bool,
    /// The node-mate whose ring this subscriber reads through its mapping
    /// (its node's lead), when it is on another node and does not lead.
    lead: Option<u32>,
    publisher: u32,
    owner: u64,
    stats: Counters,
    /// Keeps the PE, and the mapping, alive.
    _pe: Pe,
    _t: PhantomData<fn(T) -> T>,
}

impl Context {
    /// Collectively makes a broadcast stream of `T` from PE `publisher` to
    /// the PEs of `subscribers` (a slice, an array, a range: no repeats, not
    /// the publisher) with `capacity` slots (a power of two) and the slow
    /// subscriber `policy`. Every PE calls it with the same arguments, in
    /// the same order as its other collective calls; the publisher gets
    /// [`Broadcast::Publisher`], each subscriber [`Broadcast::Subscriber`],
    /// the others [`Broadcast::Bystander`]. See the
    /// [module docs](crate::channel) and [`Broadcast`]'s layout.
    ///
    /// # Errors
    ///
    /// [`CtxError::Channel`] with [`ChannelError::Capacity`],
    /// [`ChannelError::NoSubscribers`], [`ChannelError::SamePe`] (the
    /// publisher among the subscribers), [`ChannelError::Repeated`],
    /// [`ChannelError::NoSuchPe`], [`ChannelError::Mismatch`] (on every PE,
    /// when a subscriber's `T`, capacity or policy differs from the
    /// publisher's; its figures are the first such subscriber's);
    /// [`CtxError::OutOfMemory`]; barrier and transport errors.
    ///
    /// ```no_run
    /// use switchyard::{
    ///     channel::{Broadcast, SlowSubscriber},
    ///     context::Context,
    /// };
    ///
    /// let mut ctx = Context::from_env()?;
    /// let n = ctx.n_pes();
    /// match ctx.broadcast::<[u64; 7], _>(0, 1..n, 1024, SlowSubscriber::Drop)? {
    ///     Broadcast::Publisher(mut tx) => {
    ///         for i in 0..1000u64 {
    ///             tx.send(&mut ctx, [i; 7])?; // never waits under `Drop`
    ///         }
    ///     }
    ///     Broadcast::Subscriber(mut rx) => {
    ///         let st = loop {
    ///             let q = rx.recv(&mut ctx)?; // in order, perhaps with gaps
    ///             if q[0] == 999 {
    ///                 break rx.stats();
    ///             }
    ///         };
    ///         assert_eq!(st.received + st.lost, 1000);
    ///     }
    ///     Broadcast::Bystander => {}
    /// }
    /// # Ok::<(), switchyard::context::Error>(())
    /// ```
    pub fn broadcast<T: Plain, I>(
        &mut self,
        publisher: u32,
        subscribers: I,
        capacity: usize,
        policy: SlowSubscriber,
    ) -> Result<Broadcast<T>>
    where
        I: IntoIterator,
        I::Item: Borrow<u32>,
    {
        let drop_bit = if policy == SlowSubscriber::Drop {
            DROP_BIT
        } else {
            0
        };
        let mine = layout_word::<T>(capacity)? | drop_bit;
        let subs: Vec<u32> = subscribers.into_iter().map(|s| *s.borrow()).collect();
        let n_pes = self.n_pes();
        if subs.is_empty() {
            return Err(ChannelError::NoSubscribers.into());
        }
        for &pe in subs.iter().chain([&publisher]) {
            if pe >= n_pes {
                return Err(ChannelError::NoSuchPe { pe, n_pes }.into());
            }
        }
        for (k, &pe) in subs.iter().enumerate() {
            if pe == publisher {
                return Err(ChannelError::SamePe { pe }.into());
            }
            if subs[..k].contains(&pe) {
                return Err(ChannelError::Repeated { pe }.into());
            }
        }
        let me = self.my_pe();
        let hdr_bytes = LINE * (1 + subs.len() as u64);
        let hdr_off = self.alloc_bytes(hdr_bytes, 64)?;
        let hdr = self.sym_at::<u64>(hdr_off, (hdr_bytes / 8) as usize)?;
        let direct = subs.contains(&me) && self.shm_to(publisher);
        let path = if direct { PATH_DIRECT } else { PATH_ROUTED };
        // A subscriber on another node proposes its node's lead: the
        // lowest-numbered subscriber it reaches over shared memory, itself
        // included.
        let lead = if subs.contains(&me) && !direct {
            let mut lead = me;
            for &s in &subs {
                if s < lead && self.shm_to(s) {
                    lead = s;
                }
            }
            u64::from(lead)
        } else {
            NO_LEAD
        };
        self.put(&hdr, HDR_LAYOUT, &[mine, path, lead], me)?;
        self.barrier_all()?;
        let mut p = [0u64; 1];
        self.get(&hdr, HDR_LAYOUT, &mut p, publisher)?;
        let mut paths = Vec::with_capacity(subs.len());
        let mut proposed = Vec::with_capacity(subs.len());
        let mut bad = None;
        for &s in &subs {
            let mut w = [0u64; 3];
            self.get(&hdr, HDR_LAYOUT, &mut w, s)?;
            if w[0] != p[0] && bad.is_none() {
                bad = Some(w[0]);
            }
            paths.push(w[HDR_PATH] == PATH_DIRECT);
            proposed.push(w[HDR_LEAD]);
        }
        let leads = leads_of(&subs, &paths, &proposed);
        if let Some(c) = bad {
            self.free_bytes(hdr_off)?;
            let ((producer_size, producer_capacity), (consumer_size, consumer_capacity)) =
                (layout_of(p[0]), layout_of(c));
            return Err(ChannelError::Mismatch {
                producer_size,
                producer_capacity,
                consumer_size,
                consumer_capacity,
            }
            .into());
        }
        let (size, capacity) = layout_of(p[0]);
        let drop = p[0] & DROP_BIT != 0;
        let stride = stride_of(size);
        let ring = match self.alloc_bytes(capacity * stride, 64) {
            Ok(r) => r,
            Err(e) => {
                self.free_bytes(hdr_off)?;
                return Err(e);
            }
        };
        let policy = if drop {
            SlowSubscriber::Drop
        } else {
            SlowSubscriber::Backpressure
        };
        // This PE's lead when it reads a node-mate's ring.
        let relay = subs
            .iter()
            .position(|&s| s == me)
            .and_then(|k| leads[k])
            .filter(|&l| l != me);
        let end = if me == publisher {
            let all_direct = paths.iter().all(|&d| d);
            Some((ChannelRole::Publisher, subs.len() as u32, all_direct))
        } else if subs.contains(&me) {
            Some((
                ChannelRole::Subscriber,
                publisher,
                direct || relay.is_some(),
            ))
        } else {
            None
        };
        let sx = self.sx_channel(end.map(|(role, peer, direct)| ChannelInfo {
            role,
            peer,
            capacity: capacity as u32,
            message_size: size,
            flags: if direct { CHANNEL_DIRECT } else { 0 } | if drop { CHANNEL_DROP } else { 0 },
        }));
        let made = Made {
            hdr,
            ring,
            capacity,
            stride,
            direct,
            pe: self.pe(),
            sx,
        };
        Ok(if me == publisher {
            Broadcast::Publisher(Publisher::new(self, made, &subs, &leads, policy)?)
        } else if let Some(k) = subs.iter().position(|&s| s == me) {
            Broadcast::Subscriber(Subscriber::new(self, made, publisher, k, relay, policy)?)
        } else {
            Broadcast::Bystander
        })
    }
}

/// Each subscriber's lead (`None` for one on the publisher's node) from the
/// subscribers' paths (`true`: on the publisher's node) and proposed leads
/// (the header words every PE read): the same on every PE. A proposal
/// stands when it names a lower-numbered subscriber on another node than the
/// publisher that proposed itself; otherwise (shared-memory reach that is not
/// the same both ways, say) the subscriber leads itself.
fn leads_of(subs: &[u32], paths: &[bool], proposed: &[u64]) -> Vec<Option<u32>> {
    let leads_itself = |k: usize| !paths[k] && proposed[k] == u64::from(subs[k]);
    (0..subs.len())
        .map(|k| {
            if paths[k] {
                return None;
            }
            let named = subs.iter().position(|&s| u64::from(s) == proposed[k]);
            Some(match named {
                Some(j) if subs[j] < subs[k] && leads_itself(j) => subs[j],
                _ => subs[k],
            })
        })
        .collect()
}

impl<T: Plain> Publisher<T> {
    fn new(
        ctx: &Context,
        m: Made,
        subs: &[u32],
        leads: &[Option<u32>],
        policy: SlowSubscriber,
    ) -> Result<Publisher<T>> {
        let me = ctx.my_pe();
        let local = if leads.iter().any(Option::is_none) {
            Some(slots_in(ctx, me, &m)?)
        } else {
            None
        };
        let cursors = (0..subs.len())
            .map(|k| header_word(ctx, me, &m, cursor_word(k)))
            .collect::<Result<Vec<_>>>()?;
        let remotes = subs
            .iter()
            .zip(leads)
            .filter(|&(&pe, &l)| l == Some(pe))
            .map(|(&pe, _)| pe)
            .collect();
        let remote_subs = leads.iter().filter(|l| l.is_some()).count();
        let words = (m.capacity * m.stride / 8) as usize;
        Ok(Publisher {
            tail: 0,
            limit: m.capacity,
            capacity: m.capacity,
            policy,
            local,
            cursors,
            remotes,
            remote_subs,
            ring: m.ring,
            stride: m.stride,
            seqs: ctx.sym_at(m.ring, words)?,
            watch: subs.to_vec(),
            owner: ctx.owner_id(),
            stats: Counters::new(m.sx),
            _pe: m.pe,
            _t: PhantomData,
        })
    }

    /// The number of slots.
    pub fn capacity(&self) -> usize {
        self.capacity as usize
    }

    /// The stream's slow-subscriber policy.
    pub fn policy(&self) -> SlowSubscriber {
        self.policy
    }

    /// How many subscribers are on other nodes than this one (leads of
    /// their node or not).
    pub fn remote_subscribers(&self) -> usize {
        self.remote_subs
    }

    /// How many leads on other nodes this publisher writes to: one per other
    /// node with subscribers (more only on a node whose shared-memory reach
    /// is not the same both ways). Each costs a put and a signal per message
    /// (into the lead's ring), whatever the node's number of subscribers.
    pub fn remote_nodes(&self) -> usize {
        self.remotes.len()
    }

    /// This end's counters (`sent`, `full`).
    pub fn stats(&self) -> ChannelStats {
        self.stats.now
    }

    /// Sends `v` if every subscriber left room (always, under
    /// [`SlowSubscriber::Drop`]). Subscribers on this node: two stores into
    /// this PE's own ring (four under `Drop`), whatever their number.
    ///
    /// # Errors
    ///
    /// [`TrySendError::Full`] (with `v`, [`SlowSubscriber::Backpressure`]
    /// only) when the slowest subscriber has not freed a slot;
    /// [`TrySendError::Failed`] when a put fails or `ctx` is not of this PE
    /// ([`CtxError::ForeignHandle`]).
    #[inline]
    pub fn try_send(
        &mut self,
        ctx: &mut Context,
        v: T,
    ) -> core::result::Result<(), TrySendError<T>> {
        if ctx.owner_id() != self.owner {
            return Err(TrySendError::Failed(Error::ForeignHandle));
        }
        if self.tail == self.limit && !self.refresh(ctx, true) {
            self.stats.full();
            return Err(TrySendError::Full(v));
        }
        self.push(ctx, &v).map_err(TrySendError::Failed)
    }

    /// Sends `v`, under backpressure waiting for the slowest subscriber
    /// while the subscribers live (no timeout; the context's progress mode).
    ///
    /// # Errors
    ///
    /// [`CtxError::PeerDead`] when a subscriber dies while the publisher
    /// waits for it; the puts' errors; [`CtxError::ForeignHandle`].
    #[inline]
    pub fn send(&mut self, ctx: &mut Context, v: T) -> Result<()> {
        // Every subscriber on this node, and room: the stores into this
        // PE's ring, inlined into the caller's loop.
        if let Some(slots) = &self.local
            && self.remotes.is_empty()
            && self.tail != self.limit
            && ctx.owner_id() == self.owner
        {
            Self::write_local(slots, self.tail, &v, self.policy == SlowSubscriber::Drop);
            self.tail += 1;
            self.stats.sent(1);
            return Ok(());
        }
        self.send_waiting(ctx, v)
    }

    /// [`Publisher::send`] past its fast path: no room (then a wait for
    /// it), remote subscribers, a foreign context.
    #[inline(never)]
    fn send_waiting(&mut self, ctx: &mut Context, v: T) -> Result<()> {
        loop {
            match self.try_send(ctx, v) {
                Ok(()) => return Ok(()),
                Err(TrySendError::Full(_)) => self.wait_room(ctx)?,
                Err(TrySendError::Failed(e)) => return Err(e),
            }
        }
    }

    /// Sends every message of `vs` in order, as [`Publisher::send`] does
    /// (one by one: no batching of the puts to remote subscribers).
    ///
    /// # Errors
    ///
    /// As [`Publisher::send`]; the messages before the failure were sent.
    pub fn send_slice(&mut self, ctx: &mut Context, vs: &[T]) -> Result<()> {
        vs.iter().try_for_each(|&v| self.send(ctx, v))
    }

    /// Waits until the slowest subscriber's cursor moved enough for a slot.
    fn wait_room(&mut self, ctx: &mut Context) -> Result<()> {
        if self.remotes.is_empty() && super::spin(|| self.refresh(ctx, false)) {
            return Ok(());
        }
        // The slowest subscriber is the one to watch; any dying is fatal.
        let slowest = self.slowest();
        let pe = self.watch[slowest];
        ctx.wait_for_peer("a broadcast's send", pe, |c| Ok(self.refresh(c, false)))
    }

    /// The index of the subscriber with the lowest cursor.
    fn slowest(&self) -> usize {
        (0..self.cursors.len())
            // SYNC POINT with the Release store of the cursor in
            // `Subscriber::give_credit` (or the target side of its credit set).
            .min_by_key(|&k| self.cursors[k].get().load(Ordering::Acquire))
            .unwrap_or(0)
    }

    /// Reads the cursors again (after one progress step with `poll` when a
    /// subscriber is remote); whether there is room now. Always room under
    /// [`SlowSubscriber::Drop`].
    fn refresh(&mut self, ctx: &mut Context, poll: bool) -> bool {
        if self.policy == SlowSubscriber::Drop {
            self.limit = u64::MAX;
            return true;
        }
        if poll && !self.remotes.is_empty() {
            ctx.progress();
        }
        let min = self
            .cursors
            .iter()
            // SYNC POINT with the Release store of the cursor in
            // `Subscriber::give_credit` (or the target side of its credit set,
            // `heap_rmw`): the subscriber read the slots below it.
            .map(|c| c.get().load(Ordering::Acquire))
            .min()
            .unwrap_or(self.tail);
        self.limit = min + self.capacity;
        self.tail < self.limit
    }

    /// Writes `v` as message `i` into this PE's ring (`drop`: marking the
    /// slot first, as a seqlock writer).
    #[inline(always)]
    fn write_local(slots: &Slots, i: u64, v: &T, drop: bool) {
        if drop {
            // Seqlock writer: the slot is marked as being rewritten before
            // its bytes change.
            slots.seq(i).store(0, Ordering::Relaxed);
            // SYNC POINT with the Acquire fence in `Subscriber::take`: a
            // reader that saw any new byte sees the 0 (or later).
            fence(Ordering::Release);
        }
        slots.write(i, v);
        // SYNC POINT with the Acquire load of the sequence word in
        // `Subscriber::take`: the message is in the slot.
        slots.seq(i).store(i + 1, Ordering::Release);
    }

    /// Sends `v` (there is room): once into this PE's ring for the
    /// same-node subscribers, once per other node (into its lead's ring).
    #[inline]
    fn push(&mut self, ctx: &mut Context, v: &T) -> Result<()> {
        let i = self.tail;
        let drop = self.policy == SlowSubscriber::Drop;
        if let Some(slots) = &self.local {
            Self::write_local(slots, i, v, drop);
        }
        if !self.remotes.is_empty() {
            let slot = (i & (self.capacity - 1)) * self.stride;
            let msg = Sym::<T>::new(self.ring + slot + SEQ_BYTES as u64, 1, self.owner);
            let at = (slot / 8) as usize;
            for &pe in &self.remotes {
                if drop {
                    ctx.set(&self.seqs, at, 0, pe)?;
                    ctx.fence()?;
                }
                let seq = Signal::set(&self.seqs, at, i + 1);
                ctx.put_signal(&msg, 0, core::slice::from_ref(v), seq, pe)?;
            }
        }
        self.tail += 1;
        self.stats.sent(1);
        Ok(())
    }
}

impl<T: Plain> Subscriber<T> {
    fn new(
        ctx: &Context,
        m: Made,
        publisher: u32,
        k: usize,
        lead: Option<u32>,
        policy: SlowSubscriber,
    ) -> Result<Subscriber<T>> {
        let me = ctx.my_pe();
        let ring_pe = if m.direct {
            publisher
        } else {
            lead.unwrap_or(me)
        };
        let cursor = match (policy, m.direct) {
            (SlowSubscriber::Drop, _) => Cursor::None,
            (SlowSubscriber::Backpressure, true) => {
                Cursor::Direct(header_word(ctx, publisher, &m, cursor_word(k))?)
            }
            (SlowSubscriber::Backpressure, false) => Cursor::Routed(Credit::new(
                ctx,
                m.hdr.offset() + 8 * cursor_word(k) as u64,
                m.capacity,
            )?),
        };
        Ok(Subscriber {
            head: 0,
            capacity: m.capacity,
            slots: slots_in(ctx, ring_pe, &m)?,
            cursor,
            routed: !m.direct,
            lead,
            publisher,
            owner: ctx.owner_id(),
            stats: Counters::new(m.sx),
            _pe: m.pe,
            _t: PhantomData,
        })
    }

    /// The number of slots.
    pub fn capacity(&self) -> usize {
        self.capacity as usize
    }

    /// Whether this subscriber reads a ring through its mapping: the
    /// publisher's (same node), or its node's lead's (another node, not the
    /// lead), rather than its own ring filled by puts.
    pub fn is_direct(&self) -> bool {
        !self.routed || self.lead.is_some()
    }

    /// The node-mate whose ring this subscriber reads (its node's lead),
    /// when it is on another node than the publisher and does not lead.
    pub fn lead(&self) -> Option<u32> {
        self.lead
    }

    /// This end's counters (`received`, `lost`).
    pub fn stats(&self) -> ChannelStats {
        self.stats.now
    }

    /// The next slot's sequence word: `head + 1` when its message is
    /// there, more when this subscriber was lapped.
    #[inline(always)]
    fn seq(&self) -> u64 {
        // SYNC POINT with the Release store of the sequence word in
        // `Publisher::push` (or the target side of its signal, `heap_rmw`).
        self.slots.seq(self.head).load(Ordering::Acquire)
    }

    /// Takes the next message if it has arrived, skipping ahead (and
    /// counting the loss) when the publisher lapped this subscriber.
    #[inline]
    fn take(&mut self) -> Option<T> {
        loop {
            let s = self.seq();
            if s <= self.head {
                return None; // not there yet (or being written: 0)
            }
            if s == self.head + 1 {
                let v = self.slots.read_racy::<T>(self.head);
                // SYNC POINT with the Release fence in `Publisher::push`: if
                // the copy saw a byte of a later lap, the load below sees
                // that lap's 0 or sequence word.
                fence(Ordering::Acquire);
                if self.slots.seq(self.head).load(Ordering::Relaxed) == s {
                    self.head += 1;
                    self.stats.received();
                    return Some(v);
                }
                continue; // overwritten while copying: lapped
            }
            // A later lap's message is in the slot (index `s - 1`): the
            // oldest message that can still be in the ring is the one after
            // it, a lap earlier.
            let next = s - self.capacity;
            self.stats.lost(next - self.head);
            self.head = next;
        }
    }

    /// Frees the slots taken so far (backpressure): on the same node
    /// publishes the cursor (once per `recv`, or per batch of `recv_into`,
    /// so the publisher's reads of it at a full ring do not take the line
    /// back at every message); remote, sends the publisher credit when it is
    /// far enough behind.
    #[inline]
    fn give_credit(&mut self, ctx: &mut Context) -> Result<()> {
        match &mut self.cursor {
            Cursor::Direct(w) => {
                // SYNC POINT with the Acquire loads of the cursors in
                // `Publisher::refresh`: the slots below are read.
                w.get().store(self.head, Ordering::Release);
                Ok(())
            }
            Cursor::Routed(c) => c.give(ctx, self.head, self.publisher),
            Cursor::None => Ok(()),
        }
    }

    /// The next message, if one has arrived (after one progress step when
    /// none had and the ring is filled by puts). Same node: loads of the
    /// publisher's ring, no system call, no allocation.
    ///
    /// # Errors
    ///
    /// The credit put's errors (remote); [`CtxError::ForeignHandle`].
    #[inline]
    pub fn try_recv(&mut self, ctx: &mut Context) -> Result<Option<T>> {
        super::check_owner(ctx, self.owner)?;
        let mut v = self.take();
        if v.is_none() && self.routed {
            ctx.progress();
            v = self.take();
        }
        if v.is_some() {
            self.give_credit(ctx)?;
        }
        Ok(v)
    }

    /// The next message, waiting for it while the publisher lives (no
    /// timeout; the context's progress mode).
    ///
    /// # Errors
    ///
    /// [`CtxError::PeerDead`] once the publisher died and what had arrived
    /// was received; the credit put's errors; [`CtxError::ForeignHandle`].
    pub fn recv(&mut self, ctx: &mut Context) -> Result<T> {
        super::check_owner(ctx, self.owner)?;
        loop {
            if let Some(v) = self.take() {
                self.give_credit(ctx)?;
                return Ok(v);
            }
            if self.is_direct() && super::spin(|| self.seq() > self.head) {
                continue;
            }
            let publisher = self.publisher;
            ctx.wait_for_peer("a broadcast's receive", publisher, |_| {
                Ok(self.seq() > self.head)
            })?;
        }
    }

    /// Waits for at least one message as [`Subscriber::recv`] does, then
    /// receives as many as have arrived, up to `out.len()`; returns how many
    /// (0 only for an empty `out`).
    ///
    /// # Errors
    ///
    /// As [`Subscriber::recv`].
    pub fn recv_into(&mut self, ctx: &mut Context, out: &mut [T]) -> Result<usize> {
        super::recv_batch(self, ctx, out)
    }
}

impl<T: Plain> super::Receiving<T> for Subscriber<T> {
    fn wait_one(&mut self, ctx: &mut Context) -> Result<T> {
        self.recv(ctx)
    }

    fn take_one(&mut self) -> Option<T> {
        self.take()
    }

    fn credit(&mut self, ctx: &mut Context) -> Result<()> {
        self.give_credit(ctx)
    }
}

impl<T: Plain> super::Ready for Subscriber<T> {
    /// Whether a message (or a lap to skip) is waiting: a receive may then
    /// still find nothing, when the skip lands on slots being rewritten.
    fn ready(&self) -> bool {
        self.seq() > self.head
    }
}
