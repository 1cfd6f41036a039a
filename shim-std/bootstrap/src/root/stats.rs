//! [`RootStats`]: what the root refused, by [`Refusal`], readable while it
//! serves and after.

use std::sync::Arc;

use switchyard_core::sync::atomic::{AtomicU64, Ordering};

/// What a root refused, readable while it serves ([`RootServer::stats`](super::RootServer::stats)),
/// by why ([`Refusal`]).
#[derive(Debug, Clone, Default)]
pub struct RootStats {
    counts: Arc<[AtomicU64; Refusal::ALL.len()]>,
    /// Bytes sent, cards served, card requests refused.
    traffic: Arc<[AtomicU64; 3]>,
}

/// Why the root turned a connection away (what [`RootStats`] counts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// A well-formed hello whose MAC does not prove the job's secret.
    BadMac,
    /// A first frame that is not a hello of this protocol.
    Malformed,
    /// Closed, broken off or silent until the deadline before a hello.
    NoHello,
    /// Closed to make room (or not kept) at the cap on connections still
    /// owing their hello.
    OverLimit,
    /// An authentic hello for a rank already claimed.
    DuplicateRank,
}

impl Refusal {
    /// Every reason, in [`Refusal::index`] order.
    pub const ALL: [Refusal; 5] = [
        Refusal::BadMac,
        Refusal::Malformed,
        Refusal::NoHello,
        Refusal::OverLimit,
        Refusal::DuplicateRank,
    ];

    /// Its place in [`Refusal::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }

    /// How a summary names it: `bad MAC`, `malformed`, `no hello`, `over
    /// limit`, `duplicate rank`.
    pub const fn name(self) -> &'static str {
        match self {
            Refusal::BadMac => "bad MAC",
            Refusal::Malformed => "malformed",
            Refusal::NoHello => "no hello",
            Refusal::OverLimit => "over limit",
            Refusal::DuplicateRank => "duplicate rank",
        }
    }
}

impl RootStats {
    /// Connections refused for `why`.
    pub fn count_of(&self, why: Refusal) -> u64 {
        self.counts[why.index()].load(Ordering::Relaxed)
    }

    /// Connections that did not prove the job's secret: a bad MAC, a
    /// malformed first frame, no hello before the deadline, or closed at
    /// the cap on connections.
    pub fn unauthenticated(&self) -> u64 {
        self.total() - self.refused()
    }

    /// Authenticated hellos refused: a rank claimed a second time.
    pub fn refused(&self) -> u64 {
        self.count_of(Refusal::DuplicateRank)
    }

    /// Every connection refused, whatever the reason.
    pub fn total(&self) -> u64 {
        Refusal::ALL.iter().map(|&r| self.count_of(r)).sum()
    }

    /// One line for a person, when anything was refused: `3 connections
    /// refused (2 bad MAC, 1 over limit)`.
    pub fn summary(&self) -> Option<String> {
        let total = self.total();
        if total == 0 {
            return None;
        }
        let parts: Vec<String> = Refusal::ALL
            .iter()
            .map(|&r| (r, self.count_of(r)))
            .filter(|&(_, n)| n > 0)
            .map(|(r, n)| format!("{n} {}", r.name()))
            .collect();
        let s = if total == 1 { "" } else { "s" };
        Some(format!(
            "{total} connection{s} refused ({})",
            parts.join(", ")
        ))
    }

    /// Bytes of frames the root queued to PEs that proved the secret
    /// (welcomes, all cards or localities, card answers and refusals,
    /// releases), and challenges to every connection.
    pub fn bytes_sent(&self) -> u64 {
        self.traffic[0].load(Ordering::Relaxed)
    }

    /// Cards served in answer to card requests (a card asked for twice
    /// counts twice).
    pub fn cards_served(&self) -> u64 {
        self.traffic[1].load(Ordering::Relaxed)
    }

    /// Card requests refused ([`CardRefusal`](crate::CardRefusal)).
    pub fn card_requests_refused(&self) -> u64 {
        self.traffic[2].load(Ordering::Relaxed)
    }

    pub(super) fn add_sent(&self, bytes: usize) {
        self.traffic[0].fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub(super) fn add_served(&self, cards: usize) {
        self.traffic[1].fetch_add(cards as u64, Ordering::Relaxed);
    }

    pub(super) fn add_card_refusal(&self) {
        self.traffic[2].fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn count(&self, why: Refusal) {
        self.counts[why.index()].fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn counts_and_summary() {
        let s = RootStats::default();
        assert_eq!(s.summary(), None);
        s.count(Refusal::OverLimit);
        assert_eq!(
            s.summary().as_deref(),
            Some("1 connection refused (1 over limit)")
        );
        s.count(Refusal::BadMac);
        s.count(Refusal::BadMac);
        s.count(Refusal::DuplicateRank);
        let shared = s.clone();
        assert_eq!(
            shared.summary().as_deref(),
            Some("4 connections refused (2 bad MAC, 1 over limit, 1 duplicate rank)")
        );
        assert_eq!((s.total(), s.unauthenticated(), s.refused()), (4, 3, 1));
        let names: Vec<&str> = Refusal::ALL.iter().map(|r| r.name()).collect();
        assert_eq!(
            names,
            [
                "bad MAC",
                "malformed",
                "no hello",
                "over limit",
                "duplicate rank"
            ]
        );
        assert!(Refusal::ALL.iter().enumerate().all(|(i, r)| r.index() == i));
    }
}
