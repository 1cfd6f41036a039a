//! The per-PE budget of QP sets ([`SetBudget`]).
//!
//! A *QP set* ([`VerbsDriver::open_set`](crate::VerbsDriver::open_set)) is
//! a driver of its own toward one peer: its own control and data QPs, its
//! own CQ, shared receive queue and receipts, staging and tickets, sharing
//! with the PE's driver only the device context, the protection domain
//! and the heap's registration (one `rkey` for every set). Its owner (one
//! context) posts, polls and quiets it through `&mut`, without any lock.
//!
//! QPs per PE grow with contexts × peers × (data QPs + 1), which a device's
//! QP cache punishes beyond a few thousand, so sets are opened lazily, per
//! (context, peer), and each counts against a per-PE budget: past it,
//! `open_set` refuses with [`VerbsError::NoSetLeft`](crate::VerbsError::NoSetLeft)
//! and the caller keeps using the PE's driver (the shared set). A set gives
//! its unit back when it is closed or dropped.

use std::sync::Arc;

use switchyard_core::sync::atomic::{AtomicU32, Ordering};

/// How many QP sets a PE may still open: a count shared by the PE's driver
/// and every set opened from it (clones share it). Lock-free; taken and
/// given back only when a set opens or closes, never on the data path.
#[derive(Debug, Clone)]
pub struct SetBudget {
    inner: Arc<Budget>,
}

#[derive(Debug)]
struct Budget {
    max: u32,
    used: AtomicU32,
}

impl SetBudget {
    /// A budget of `max` sets (0: none; every context uses the shared set).
    pub fn new(max: u32) -> SetBudget {
        SetBudget {
            inner: Arc::new(Budget {
                max,
                used: AtomicU32::new(0),
            }),
        }
    }

    /// The most sets open at once.
    pub fn max(&self) -> u32 {
        self.inner.max
    }

    /// Sets open now.
    pub fn in_use(&self) -> u32 {
        self.inner.used.load(Ordering::Relaxed)
    }

    /// Takes one unit; `false` when the budget is spent (nothing taken).
    pub(crate) fn take(&self) -> bool {
        let max = self.inner.max;
        // Relaxed: the count orders nothing else (each set's resources are
        // its own); the compare-exchange alone keeps it within `max`.
        self.inner
            .used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
                (u < max).then_some(u + 1)
            })
            .is_ok()
    }

    /// Gives one unit back (a set closed).
    pub(crate) fn give_back(&self) {
        let _ = self
            .inner
            .used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| u.checked_sub(1));
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn the_budget_is_never_exceeded_and_comes_back() {
        let b = SetBudget::new(2);
        let c = b.clone();
        assert!(b.take());
        assert!(c.take());
        assert!(!b.take(), "a third set is over the budget");
        assert_eq!(b.in_use(), 2);
        c.give_back();
        assert_eq!(b.in_use(), 1);
        assert!(b.take());
        b.give_back();
        b.give_back();
        b.give_back();
        assert_eq!(b.in_use(), 0, "never below zero");
        assert!(!SetBudget::new(0).take());
    }
}
