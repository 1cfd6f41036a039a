//! The two ends of an SPSC channel: [`Producer`] and [`Consumer`] (the
//! protocol is in the [module docs](super)).

use core::marker::PhantomData;

use switchyard_core::sync::atomic::Ordering;

use super::{
    ChannelStats, Counters, Credit, HDR_CREDIT, HDR_HEAD, Made,
    slots::{SEQ_BYTES, Slots, Word, header_word, slots_in},
};
use crate::context::{Context, Error, Pe, Plain, Result, Signal, Sym};

/// A [`Producer::try_send`] that did not send.
#[derive(Debug)]
pub enum TrySendError<T> {
    /// The ring is full: the message comes back.
    Full(T),
    /// The put toward the consumer failed (a routed channel's transport
    /// error, [`Error::PeerDead`]) or the context is not the channel's PE's.
    Failed(Error),
}

/// How the producer reaches the consumer's ring.
#[derive(Debug)]
enum Path {
    /// Through its mapping of the consumer's heap (same node).
    Direct {
        /// The consumer's slots.
        slots: Slots,
        /// The consumer's published head.
        head: Word,
    },
    /// Puts and signals through the route (another node).
    Routed {
        /// This PE's credit word, set by the consumer.
        credit: Word,
        /// The ring block's heap offset.
        ring: u64,
        /// The slot stride.
        stride: u64,
        /// The ring block as 64-bit words (the sequence words' handle).
        seqs: Sym<u64>,
    },
}

/// The sending end of an [`Spsc`](super::Spsc) channel (`Send`, not
/// `Sync`): one per channel, on the producer PE. Every call takes a context
/// of that PE.
#[derive(Debug)]
pub struct Producer<T> {
    /// Index of the next message.
    tail: u64,
    /// Messages may be sent while `tail < limit` (the consumer's head as
    /// last read, plus the capacity).
    limit: u64,
    capacity: u64,
    path: Path,
    consumer: u32,
    owner: u64,
    stats: Counters,
    /// Keeps the PE, and the mappings the path points into, alive.
    _pe: Pe,
    _t: PhantomData<fn(T) -> T>,
}

/// The receiving end of an [`Spsc`](super::Spsc) channel (`Send`, not
/// `Sync`): one per channel, on the consumer PE. Every call takes a context
/// of that PE.
#[derive(Debug)]
pub struct Consumer<T> {
    /// Index of the next message.
    head: u64,
    capacity: u64,
    slots: Slots,
    /// The published head (this PE's header).
    head_word: Word,
    /// With a producer on another node.
    credit: Option<Credit>,
    producer: u32,
    owner: u64,
    stats: Counters,
    /// Keeps the PE, and the heap mapping, alive.
    _pe: Pe,
    _t: PhantomData<fn(T) -> T>,
}

impl<T: Plain> Producer<T> {
    pub(super) fn new(ctx: &Context, m: Made, consumer: u32) -> Result<Producer<T>> {
        let path = if m.direct {
            Path::Direct {
                slots: slots_in(ctx, consumer, &m)?,
                head: header_word(ctx, consumer, &m, HDR_HEAD)?,
            }
        } else {
            let words = (m.capacity * m.stride / 8) as usize;
            Path::Routed {
                credit: header_word(ctx, ctx.my_pe(), &m, HDR_CREDIT)?,
                ring: m.ring,
                stride: m.stride,
                seqs: ctx.sym_at(m.ring, words)?,
            }
        };
        Ok(Producer {
            tail: 0,
            limit: m.capacity,
            capacity: m.capacity,
            path,
            consumer,
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

    /// Whether the producer writes the consumer's memory directly (same
    /// node), rather than through puts.
    pub fn is_direct(&self) -> bool {
        matches!(self.path, Path::Direct { .. })
    }

    /// This end's counters (`sent`, `full`).
    pub fn stats(&self) -> ChannelStats {
        self.stats.now
    }

    /// Sends `v` if the ring has room. Same node: two stores into the
    /// consumer's slot, no system call, no allocation.
    ///
    /// # Errors
    ///
    /// [`TrySendError::Full`] (with `v`) when the consumer has not freed a
    /// slot; [`TrySendError::Failed`] when the put fails or `ctx` is not of
    /// this PE ([`Error::ForeignHandle`]).
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
        self.push(ctx, core::slice::from_ref(&v))
            .map_err(TrySendError::Failed)
    }

    /// Sends `v`, waiting for room while the consumer lives (no timeout;
    /// the context's progress mode).
    ///
    /// # Errors
    ///
    /// [`Error::PeerDead`] when the consumer dies meanwhile; the put's errors
    /// on a routed channel; [`Error::ForeignHandle`].
    #[inline]
    pub fn send(&mut self, ctx: &mut Context, v: T) -> Result<()> {
        // Same node with room: the two stores, inlined into the caller's
        // loop (the message is not copied through a call's frame).
        if let Path::Direct { slots, .. } = &self.path
            && self.tail != self.limit
            && ctx.owner_id() == self.owner
        {
            Self::write_direct(slots, self.tail, core::slice::from_ref(&v));
            self.tail += 1;
            self.stats.sent(1);
            return Ok(());
        }
        self.send_waiting(ctx, v)
    }

    /// [`Producer::send`] past its fast path: a full ring (then a wait for
    /// room), a routed channel, a foreign context.
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

    /// Sends every message of `vs` in order, as many at once as the ring
    /// has room for (on a routed channel: their puts, one fence, their
    /// signals), waiting for room as [`Producer::send`] does.
    ///
    /// # Errors
    ///
    /// As [`Producer::send`]; the messages before the failure were sent.
    pub fn send_slice(&mut self, ctx: &mut Context, vs: &[T]) -> Result<()> {
        if ctx.owner_id() != self.owner {
            return Err(Error::ForeignHandle);
        }
        let mut rest = vs;
        while !rest.is_empty() {
            if self.tail == self.limit && !self.refresh(ctx, true) {
                self.stats.full();
                self.wait_room(ctx)?;
            }
            let n = (self.limit - self.tail).min(rest.len() as u64) as usize;
            let (now, later) = rest.split_at(n);
            self.push(ctx, now)?;
            rest = later;
        }
        Ok(())
    }

    /// Waits until the ring has room (the consumer's head moved): on the
    /// same node a spin on the consumer's head first (no system call), then
    /// the library's wait.
    fn wait_room(&mut self, ctx: &mut Context) -> Result<()> {
        if self.is_direct() && super::spin(|| self.refresh(ctx, false)) {
            return Ok(());
        }
        let consumer = self.consumer;
        ctx.wait_for_peer("a channel's send", consumer, |c| Ok(self.refresh(c, false)))
    }

    /// Reads the consumer's head again (one progress step first on a routed
    /// channel, with `poll`); whether there is room now.
    fn refresh(&mut self, ctx: &mut Context, poll: bool) -> bool {
        let head = match &self.path {
            // SYNC POINT with the Release store of the head in
            // `Consumer::give_credit`: the consumer read the slots below it.
            Path::Direct { head, .. } => head.get().load(Ordering::Acquire),
            Path::Routed { credit, .. } => {
                if poll {
                    ctx.progress();
                }
                // SYNC POINT with the Release store the target side of the
                // consumer's atomic set makes (`heap_rmw`), after the
                // consumer's reads of the slots below it.
                credit.get().load(Ordering::Acquire)
            }
        };
        self.limit = head + self.capacity;
        self.tail < self.limit
    }

    /// Writes `vs` into the consumer's slots from index `tail` on (same
    /// node; the ring has room for them all).
    #[inline(always)]
    fn write_direct(slots: &Slots, tail: u64, vs: &[T]) {
        for (i, v) in (tail..).zip(vs) {
            slots.write(i, v);
            // SYNC POINT with the Acquire load of the sequence word in
            // `Consumer::take`: the message is in the slot.
            slots.seq(i).store(i + 1, Ordering::Release);
        }
    }

    /// Sends `vs` (the ring has room for them all).
    #[inline]
    fn push(&mut self, ctx: &mut Context, vs: &[T]) -> Result<()> {
        match &self.path {
            Path::Direct { slots, .. } => Self::write_direct(slots, self.tail, vs),
            Path::Routed {
                ring, stride, seqs, ..
            } => {
                let consumer = self.consumer;
                let slot = |i: u64| (i & (self.capacity - 1)) * stride;
                if let [v] = vs {
                    let i = self.tail;
                    let msg = Sym::<T>::new(ring + slot(i) + SEQ_BYTES as u64, 1, self.owner);
                    let seq = Signal::set(seqs, (slot(i) / 8) as usize, i + 1);
                    ctx.put_signal(&msg, 0, core::slice::from_ref(v), seq, consumer)?;
                } else {
                    for (i, v) in (self.tail..).zip(vs) {
                        let msg = Sym::<T>::new(ring + slot(i) + SEQ_BYTES as u64, 1, self.owner);
                        ctx.put(&msg, 0, core::slice::from_ref(v), consumer)?;
                    }
                    ctx.fence()?;
                    for i in self.tail..self.tail + vs.len() as u64 {
                        ctx.set(seqs, (slot(i) / 8) as usize, i + 1, consumer)?;
                    }
                }
            }
        }
        self.tail += vs.len() as u64;
        self.stats.sent(vs.len() as u64);
        Ok(())
    }
}

impl<T: Plain> Consumer<T> {
    pub(super) fn new(ctx: &Context, m: Made, producer: u32) -> Result<Consumer<T>> {
        let me = ctx.my_pe();
        let credit = if m.direct {
            None
        } else {
            Some(Credit::new(
                ctx,
                m.hdr.offset() + 8 * HDR_CREDIT as u64,
                m.capacity,
            )?)
        };
        Ok(Consumer {
            head: 0,
            capacity: m.capacity,
            slots: slots_in(ctx, me, &m)?,
            head_word: header_word(ctx, me, &m, HDR_HEAD)?,
            credit,
            producer,
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

    /// This end's counters (`received`).
    pub fn stats(&self) -> ChannelStats {
        self.stats.now
    }

    /// Messages that have arrived and are not received yet (it looks at
    /// their slots: O(messages)).
    pub fn len(&self) -> usize {
        (self.head..self.head + self.capacity)
            .take_while(|&i| self.ready_at(i))
            .count()
    }

    /// Whether no message is waiting ([`Consumer::len`] is 0).
    pub fn is_empty(&self) -> bool {
        !self.ready_at(self.head)
    }

    /// Whether the message of index `i` is in its slot.
    #[inline(always)]
    fn ready_at(&self, i: u64) -> bool {
        // SYNC POINT with the Release store of the sequence word in
        // `Producer::push` (or the target side of its signal, `heap_rmw`).
        self.slots.seq(i).load(Ordering::Acquire) == i + 1
    }

    /// Takes the next message if it has arrived.
    #[inline(always)]
    fn take(&mut self) -> Option<T> {
        if !self.ready_at(self.head) {
            return None;
        }
        let v = self.slots.read::<T>(self.head);
        self.head += 1;
        self.stats.received();
        Some(v)
    }

    /// Frees the slots taken so far: publishes the head (same node: once per
    /// `recv`, or per batch of `recv_into`, so the producer's reads of it at
    /// a full ring do not take the line back at every message), and sends
    /// the producer credit when it is far enough behind (routed).
    #[inline]
    fn give_credit(&mut self, ctx: &mut Context) -> Result<()> {
        // SYNC POINT with the Acquire load of the head in
        // `Producer::refresh`: the slots below it are read, the producer may
        // reuse them.
        self.head_word.get().store(self.head, Ordering::Release);
        match self.credit.as_mut() {
            Some(c) => c.give(ctx, self.head, self.producer),
            None => Ok(()),
        }
    }

    /// The next message, if one has arrived (on a routed channel after one
    /// progress step when none had). Same node: loads of this PE's own
    /// memory, no system call, no allocation.
    ///
    /// # Errors
    ///
    /// The credit put's errors (routed); [`Error::ForeignHandle`].
    #[inline]
    pub fn try_recv(&mut self, ctx: &mut Context) -> Result<Option<T>> {
        super::check_owner(ctx, self.owner)?;
        let mut v = self.take();
        if v.is_none() && self.credit.is_some() {
            ctx.progress();
            v = self.take();
        }
        if v.is_some() {
            self.give_credit(ctx)?;
        }
        Ok(v)
    }

    /// The next message, waiting for it while the producer lives (no
    /// timeout; the context's progress mode).
    ///
    /// # Errors
    ///
    /// [`Error::PeerDead`] once the producer died and every message it sent
    /// before was received; the credit put's errors (routed);
    /// [`Error::ForeignHandle`].
    pub fn recv(&mut self, ctx: &mut Context) -> Result<T> {
        super::check_owner(ctx, self.owner)?;
        loop {
            if let Some(v) = self.take() {
                self.give_credit(ctx)?;
                return Ok(v);
            }
            // Same node: a spin on this PE's own memory first (the
            // library's wait polls the sockets at every step when the job
            // also has TCP peers).
            if self.credit.is_none() && super::spin(|| self.ready_at(self.head)) {
                continue;
            }
            let producer = self.producer;
            ctx.wait_for_peer("a channel's receive", producer, |_| {
                Ok(self.ready_at(self.head))
            })?;
        }
    }

    /// Waits for at least one message as [`Consumer::recv`] does, then
    /// receives as many as have arrived, up to `out.len()`; returns how many
    /// (0 only for an empty `out`).
    ///
    /// # Errors
    ///
    /// As [`Consumer::recv`].
    pub fn recv_into(&mut self, ctx: &mut Context, out: &mut [T]) -> Result<usize> {
        super::recv_batch(self, ctx, out)
    }
}

impl<T: Plain> super::Receiving<T> for Consumer<T> {
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

impl<T: Plain> super::Ready for Consumer<T> {
    fn ready(&self) -> bool {
        self.ready_at(self.head)
    }
}
