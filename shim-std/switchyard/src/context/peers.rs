//! Peer and link state: the progress step of every driver, link events and
//! the link-state records PEs send each other, dead peers, and giving the
//! TCP driver back to the progress thread at the end of a call.

use switchyard_core::{class::PathClass, topology::LinkState, transport::Transport};
use switchyard_socket::Event;

use super::{Context, MAX_TCP_RAILS, N_TRANSPORTS, NOW_EVERY, SHM, progress, tcp_rail, tid, verbs};

impl Context {
    /// One progress step of every driver; link-state changes flip health
    /// bits, and load bits whose backlog drained are cleared.
    pub(super) fn poll_once(&mut self) {
        // The drivers' timers (heartbeats, ack delays, reconnects) are in
        // microseconds and up; reading the clock on every step of a wait cost
        // as much as the rest of the step.
        self.now_age = self.now_age.wrapping_add(1);
        if self.now_age.is_multiple_of(NOW_EVERY) {
            self.now_cache = self.now();
        }
        let now = self.now_cache;
        if self.shm.progress(now) == switchyard_core::transport::PollResult::Busy {
            for pe in 0..self.n_pes {
                let st = self.shm.state(pe);
                if st == LinkState::Error {
                    self.topo.apply_link_state(SHM, pe, st);
                    self.mark_dead(pe);
                }
            }
        }
        if self.tcp.is_some() && self.lock_step_due() {
            if let Some(t) = self.tcp.as_mut().map(progress::Tcp::get) {
                t.progress(now);
                while let Some(ev) = self.tcp.as_mut().and_then(|t| t.get().poll_event()) {
                    self.on_event(ev);
                }
            }
            if self.verbs_in() {
                self.verbs_poll(now);
            }
        }
        // Acks and completions were processed: loaded pairs may have drained.
        self.load_recheck(false);
        self.sx_tick(now);
    }

    /// Applies one TCP driver event: a rail going down or up toward a peer
    /// flips that rail's health bit at once (the next select takes another
    /// rail or transport) and is told to the other PEs; a peer found dead is
    /// made unreachable through a new topology version.
    fn on_event(&mut self, ev: Event) {
        match ev {
            Event::Link { rail, peer, state } => {
                let r = usize::from(rail);
                if r >= MAX_TCP_RAILS {
                    return;
                }
                self.stats.link_transitions += 1;
                if state != LinkState::Up {
                    self.stats.links_lost += 1;
                    tracing::warn!(
                        pe = self.me,
                        peer,
                        transport = "tcp",
                        rail,
                        ?state,
                        "link down"
                    );
                    self.dump_trace_on("link-down", peer);
                }
                self.sx_link(tcp_rail(r), peer, state);
                self.topo.apply_link_state(tcp_rail(r), peer, state);
                self.broadcast_link(peer, rail, state);
                if state == LinkState::Up {
                    self.verbs_tcp_up(peer);
                }
            }
            Event::PeerDead { peer } => self.mark_dead(peer),
            Event::LinkState { from, record } if verbs::Record::is_verbs(&record) => {
                self.verbs_record(from, &record);
            }
            Event::LinkState { from, record } => self.apply_link_record(from, &record),
            // The driver's own counts, exact even when a flood pushed old
            // events out of its queue (the newest one is always kept).
            Event::Refused { .. } => {
                if let Some(t) = self.tcp.as_mut() {
                    self.stats.tcp_refused = t.get().stats().refused_by;
                }
            }
        }
    }

    /// Tells every other TCP-connected PE that `subject`'s `rail` changed
    /// state, as seen from here (a transition, never a periodic report).
    fn broadcast_link(&mut self, subject: u32, rail: u8, state: LinkState) {
        // PE-level: the versions of every context's records in one sequence.
        let version = self
            .pe
            .link_version
            .fetch_add(1, switchyard_core::sync::atomic::Ordering::Relaxed)
            + 1;
        let rec = LinkRecord {
            origin: self.me,
            subject,
            rail,
            state,
            version,
        }
        .encode();
        let Some(t) = self.tcp.as_mut().map(progress::Tcp::get) else {
            return;
        };
        for pe in 0..self.n_pes {
            if pe != self.me
                && pe != subject
                && !self.dead[pe as usize]
                && t.peer_state(pe) == LinkState::Up
                && t.send_link_state(pe, rec).is_ok()
            {
                self.stats.link_records_sent += 1;
            }
        }
    }

    /// Applies another PE's link-state record: newer versions only; a rail
    /// reported down clears that rail's health bit toward the subject here
    /// too, one reported up sets it again only where this PE's own connection
    /// on that rail is up.
    fn apply_link_record(&mut self, from: u32, record: &[u8; 32]) {
        let Some(rec) = LinkRecord::decode(record) else {
            return;
        };
        let (o, r) = (rec.origin as usize, usize::from(rec.rail));
        if rec.origin != from
            || rec.subject >= self.n_pes
            || rec.subject == self.me
            || r >= MAX_TCP_RAILS
        {
            return;
        }
        // Per PE: whichever context pulled the newer record, an older one
        // is dropped here. Raised atomically, so of two contexts with
        // records of one origin only the newer version passes.
        let Some(seen) = self.pe.link_seen.get(o) else {
            return;
        };
        if seen.fetch_max(
            rec.version,
            switchyard_core::sync::atomic::Ordering::Relaxed,
        ) >= rec.version
        {
            return;
        }
        let (own_up, known) =
            self.tcp
                .as_mut()
                .map(progress::Tcp::get)
                .map_or((false, false), |t| {
                    let up = r < t.rails() && t.rail(r).state(rec.subject) == LinkState::Up;
                    (up, t.knows_peer(rec.subject))
                });
        match rec.state {
            LinkState::Up if own_up => {
                self.topo.set_health(tcp_rail(r), rec.subject, true);
            }
            LinkState::Up => {}
            // A peer this PE has no connection to yet (`cards = lazy`):
            // its link will be this PE's own, made at its first use.
            _ if !known => {}
            s => {
                self.topo.apply_link_state(tcp_rail(r), rec.subject, s);
            }
        }
        self.stats.link_records_applied += 1;
    }

    /// Marks `pe` dead: every transport's health bit toward it is cleared and
    /// a new topology version makes it unreachable, so every later operation
    /// to it fails at once naming it.
    fn mark_dead(&mut self, pe: u32) {
        let Some(d) = self.dead.get_mut(pe as usize) else {
            return;
        };
        if *d || pe == self.me {
            return;
        }
        *d = true;
        self.stats.dead_peers += 1;
        tracing::warn!(pe = self.me, peer = pe, "peer dead");
        self.dump_trace_on("peer-dead", pe);
        for t in 0..N_TRANSPORTS {
            self.topo.apply_link_state(tid(t), pe, LinkState::Error);
        }
        // The versioned update: this thread is the only writer; leave the
        // held version first so the writer may reuse its slot.
        self.sel.unpin();
        if let Some(mut w) = self.topo.writer()
            && let Ok(mut u) = w.try_update()
        {
            u.set_class(pe, PathClass::Unreachable);
            u.publish();
        }
        // The verbs QP sets toward it close.
        self.verbs_sets_peer_dead(pe);
    }

    /// Whether a wait step may take the entry lock now: always when this
    /// context is the PE's only one, or holds the lock already; otherwise
    /// once [`LOCK_SPACING`](super::pe::LOCK_SPACING) passed since its last
    /// such step (the steps between only check shared memory and the
    /// wait's condition), so that contexts waiting at once do not pass the
    /// lock back and forth on every step. Bounded: the step after the
    /// spacing takes it.
    #[inline]
    fn lock_step_due(&mut self) -> bool {
        if !self.others() || self.tcp.as_ref().is_some_and(progress::Tcp::held) {
            return true;
        }
        let now = self.now().nanos;
        if self.last_locked != 0
            && now.saturating_sub(self.last_locked) < super::pe::LOCK_SPACING.as_nanos() as u64
        {
            return false;
        }
        self.last_locked = now.max(1);
        true
    }

    /// Gives the TCP driver back (the end of a call into the library), so the
    /// progress thread may run while the application is outside; the verbs
    /// state goes back to the PE's cell first (the lock order).
    #[inline]
    pub(super) fn leave(&mut self) {
        // Work requests batched during the call go out now: nothing waits
        // on the application's next call.
        if let Some(v) = self.verbs.as_mut() {
            v.drv.post_batches();
        }
        // And those on this context's own QP sets.
        self.verbs_sets_post();
        self.verbs_back();
        if self.tcp.as_ref().is_some_and(progress::Tcp::held) {
            // A call that used the TCP driver runs its timers when they are
            // overdue (a stream of sends keeps both the progress thread and
            // the waits' progress steps out): one clock read per such call.
            let now = self.now();
            if let Some(t) = self.tcp.as_mut() {
                let d = t.get();
                if d.timers_due(now) {
                    d.run_timers(now);
                }
                t.leave();
            }
        }
    }

    /// Whether `pe` is known dead by any driver.
    pub(super) fn is_dead(&mut self, pe: u32) -> bool {
        self.dead.get(pe as usize).copied().unwrap_or(false)
            || self.shm.state(pe) == LinkState::Error
            || self
                .tcp
                .as_mut()
                .is_some_and(|t| t.get().peer_state(pe) == LinkState::Error)
    }
}

/// A link-state transition as broadcast between PEs (32 bytes, little-endian):
/// magic `"SYLS"`, origin PE `u32`, subject PE `u32`, rail `u8`, state `u8`
/// (0 up, 1 down, 2 error), 2 reserved bytes, version `u64` (per origin,
/// increasing), 8 reserved bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LinkRecord {
    origin: u32,
    subject: u32,
    rail: u8,
    state: LinkState,
    version: u64,
}

impl LinkRecord {
    const MAGIC: [u8; 4] = *b"SYLS";

    fn encode(&self) -> [u8; 32] {
        let mut b = [0u8; 32];
        b[..4].copy_from_slice(&Self::MAGIC);
        b[4..8].copy_from_slice(&self.origin.to_le_bytes());
        b[8..12].copy_from_slice(&self.subject.to_le_bytes());
        b[12] = self.rail;
        b[13] = match self.state {
            LinkState::Up => 0,
            LinkState::Down => 1,
            LinkState::Error => 2,
        };
        b[16..24].copy_from_slice(&self.version.to_le_bytes());
        b
    }

    fn decode(b: &[u8; 32]) -> Option<LinkRecord> {
        if b[..4] != Self::MAGIC {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut v = [0u8; 8];
        v.copy_from_slice(&b[16..24]);
        Some(LinkRecord {
            origin: u32_at(4),
            subject: u32_at(8),
            rail: b[12],
            state: match b[13] {
                0 => LinkState::Up,
                1 => LinkState::Down,
                2 => LinkState::Error,
                _ => return None,
            },
            version: u64::from_le_bytes(v),
        })
    }
}

#[cfg(test)]
mod link_record_test {
    use super::*;

    #[test]
    fn round_trip_and_rejects() {
        let r = LinkRecord {
            origin: 3,
            subject: 9,
            rail: 1,
            state: LinkState::Down,
            version: 42,
        };
        assert_eq!(LinkRecord::decode(&r.encode()), Some(r));
        let mut b = r.encode();
        b[13] = 7;
        assert_eq!(LinkRecord::decode(&b), None);
        let mut b = r.encode();
        b[0] = b'X';
        assert_eq!(LinkRecord::decode(&b), None);
    }

    /// The versions of link records applied are the PE's: an older record
    /// that a second context pulls after the first context applied a newer
    /// one is dropped, and so is the same version again.
    #[test]
    fn link_records_are_applied_in_version_order_per_pe() {
        use switchyard_core::route::PolicyConfig;
        use switchyard_socket::TcpConfig;

        use crate::context::{TCP, tcp_pair_test};

        let pair = tcp_pair_test::Pair {
            job: tcp_pair_test::job(0x15EE),
            routed: false,
            policy: PolicyConfig::default(),
            tcp: TcpConfig {
                listen: vec!["127.0.0.1".parse().unwrap()],
                // No progress thread: heartbeats go out only while a PE is
                // in the library, and a loaded machine may not run PE 0's
                // checks for 200 ms. This test is about records, not
                // detection (PE 1 once gave PE 0 up mid-test under load).
                detection_window: std::time::Duration::from_secs(10),
                give_up: std::time::Duration::from_secs(20),
                ..TcpConfig::default()
            },
        };
        // Both PEs quiet, then wait (progressing) for each other before
        // leaving: a PE that left at once could owe its peer's quiet the
        // acks it would never send (no progress thread here).
        let left = std::sync::Arc::new(switchyard_core::sync::atomic::AtomicU32::new(0));
        pair.run(move |mut ctx| {
            if ctx.my_pe() == 0 {
                // From PE 1, about its own rail 0 (the checks only need a
                // subject that is not this PE).
                let rec = |version| {
                    LinkRecord {
                        origin: 1,
                        subject: 1,
                        rail: 0,
                        state: LinkState::Down,
                        version,
                    }
                    .encode()
                };
                let mut other = ctx.pe().context().expect("a second context");
                // As at the end of a call: each gives the TCP driver back
                // (a record is applied holding it).
                ctx.apply_link_record(1, &rec(5));
                ctx.leave();
                assert_eq!(ctx.stats().link_records_applied, 1);
                assert!(!ctx.topo.is_healthy(TCP, 1));
                // Up again, so that a stale record's effect would show.
                ctx.topo.set_health(TCP, 1, true);
                other.apply_link_record(1, &rec(4));
                other.apply_link_record(1, &rec(5));
                other.leave();
                assert_eq!(
                    other.stats().link_records_applied,
                    0,
                    "older, then the same"
                );
                assert!(other.topo.is_healthy(TCP, 1));
                other.apply_link_record(1, &rec(6));
                other.leave();
                assert_eq!(other.stats().link_records_applied, 1, "newer");
                assert!(!other.topo.is_healthy(TCP, 1));
                // Not from its origin: dropped.
                other.apply_link_record(0, &rec(7));
                other.leave();
                assert_eq!(other.stats().link_records_applied, 1);
                ctx.topo.set_health(TCP, 1, true);
            }
            ctx.barrier_all().unwrap();
            ctx.quiet().unwrap();
            left.fetch_add(1, switchyard_core::sync::atomic::Ordering::SeqCst);
            tcp_pair_test::wait_for(&mut ctx, &left, 2, true);
        });
    }
}
