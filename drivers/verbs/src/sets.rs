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
//!
//! A device has one async event queue, read by the PE's driver. Each open
//! set has a mailbox slot here (its QPs' `qp_context` names it, with the
//! slot's generation, so a late event of a closed set is dropped rather
//! than taken for the slot's next set): the PE's
//! driver leaves in it, as bits, the events of the set's QPs (fatal, last
//! WQE reached) and those of the port and the device, and the set takes
//! them at its async-event checks. A count of the sets collecting their
//! receipts makes the PE's driver read the device's events at every step
//! meanwhile.

use std::sync::Arc;

use switchyard_core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// Mail bits ([`SetBudget::post`]): QP `qi`'s last WQE reached.
pub(crate) const MAIL_LAST_WQE: u64 = 1;
/// Mail bits: QP `qi` fatal (shifted by 16 + `qi`).
pub(crate) const MAIL_QP_FATAL: u64 = 1 << 16;
/// Mail bit: the port went down.
pub(crate) const MAIL_PORT_DOWN: u64 = 1 << 32;
/// Mail bit: the port is active again.
pub(crate) const MAIL_PORT_ACTIVE: u64 = 1 << 33;
/// Mail bit: the device failed.
pub(crate) const MAIL_DEVICE_FATAL: u64 = 1 << 34;
/// The mail word's top byte: the generation of the set the mail is for
/// (0: a free slot).
const GEN_SHIFT: u32 = 56;
/// The most sets a budget holds (a set's key, `generation << 14 | slot`,
/// fits its QPs' `qp_context` below the set bit).
pub const MAX_SETS: u32 = 1 << 14;

/// How many QP sets a PE may still open: a count shared by the PE's driver
/// and every set opened from it (clones share it), and each open set's
/// mailbox, where the PE's driver, which reads the device's async events,
/// leaves a set the events of its QPs and of the port. Lock-free; sized
/// at [`SetBudget::new`]; a set's mailbox is read at its async-event
/// checks, never per operation.
#[derive(Debug, Clone)]
pub struct SetBudget {
    inner: Arc<Budget>,
}

#[derive(Debug)]
struct Budget {
    max: u32,
    used: AtomicU32,
    /// Sets collecting receipts now: the PE's driver reads the device's
    /// events at every progress step meanwhile.
    collecting: AtomicU32,
    slots: Box<[Slot]>,
}

#[derive(Debug)]
struct Slot {
    taken: AtomicBool,
    /// The generation of the set holding the slot (top byte, 1 to 255,
    /// bumped at every take; 0 while free) and its mail bits: a late post
    /// for an earlier set of the slot finds another generation and is
    /// dropped, never taken for the new set's.
    mail: AtomicU64,
    /// The last generation given out.
    generation: AtomicU32,
}

/// A set's key: its slot and generation.
fn split(key: u32) -> (usize, u64) {
    ((key % MAX_SETS) as usize, u64::from(key / MAX_SETS))
}

impl SetBudget {
    /// A budget of `max` sets (0: none; every context uses the shared
    /// set), at most [`MAX_SETS`].
    pub fn new(max: u32) -> SetBudget {
        let max = max.min(MAX_SETS);
        SetBudget {
            inner: Arc::new(Budget {
                max,
                used: AtomicU32::new(0),
                collecting: AtomicU32::new(0),
                slots: (0..max)
                    .map(|_| Slot {
                        taken: AtomicBool::new(false),
                        mail: AtomicU64::new(0),
                        generation: AtomicU32::new(0),
                    })
                    .collect(),
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

    /// Whether `other` is this budget (a clone of it).
    pub(crate) fn same(&self, other: &SetBudget) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Takes one unit and a mailbox slot, and returns the set's key
    /// (`generation << 14 | slot`); `None` when the budget is spent
    /// (nothing taken).
    pub(crate) fn take(&self) -> Option<u32> {
        let max = self.inner.max;
        // Relaxed: the count orders nothing else; the compare-exchange
        // alone keeps it within `max`, so a free slot exists below.
        self.inner
            .used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
                (u < max).then_some(u + 1)
            })
            .ok()?;
        for (i, s) in self.inner.slots.iter().enumerate() {
            // SYNC POINT with the Release store in `give_back`: the slot's
            // mail was cleared before it was freed.
            if s.taken
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                // Only the taker writes `gen` (the slot is its own).
                let g = s.generation.load(Ordering::Relaxed) % 255 + 1;
                s.generation.store(g, Ordering::Relaxed);
                // SYNC POINT with the Acquire loads of `post` and
                // `take_mail`: the mail of this generation starts empty.
                s.mail.store(u64::from(g) << GEN_SHIFT, Ordering::Release);
                return Some(g * MAX_SETS + i as u32);
            }
        }
        // Unreachable while `used` counts the taken slots; undo.
        self.inner.used.fetch_sub(1, Ordering::Relaxed);
        None
    }

    /// Gives the slot of set `key` and one unit back (a set closed).
    pub(crate) fn give_back(&self, key: u32) {
        let (slot, g) = split(key);
        let Some(s) = self.inner.slots.get(slot) else {
            return;
        };
        if s.mail.load(Ordering::Relaxed) >> GEN_SHIFT != g {
            return; // not this set's slot (given back already)
        }
        // Free: no generation, so later posts for this set are dropped.
        s.mail.store(0, Ordering::Relaxed);
        // SYNC POINT with the Acquire compare-exchange in `take`.
        if s.taken.swap(false, Ordering::Release) {
            let _ = self
                .inner
                .used
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| u.checked_sub(1));
        }
    }

    /// Leaves `bits` in the mailbox of set `key` (the PE's driver); dropped
    /// when that set is gone (its slot free or another set's).
    pub(crate) fn post(&self, key: u32, bits: u64) {
        let (slot, g) = split(key);
        if let Some(s) = self.inner.slots.get(slot) {
            // SYNC POINT with the Acquire update in `take_mail`, and the
            // Release store of a new generation in `take`.
            let _ = s
                .mail
                .fetch_update(Ordering::Release, Ordering::Acquire, |m| {
                    (m >> GEN_SHIFT == g).then_some(m | bits)
                });
        }
    }

    /// Leaves `bits` in every open set's mailbox (port and device events).
    pub(crate) fn post_all(&self, bits: u64) {
        for s in self.inner.slots.iter() {
            // SYNC POINT as in `post`.
            let _ = s
                .mail
                .fetch_update(Ordering::Release, Ordering::Acquire, |m| {
                    (m >> GEN_SHIFT != 0).then_some(m | bits)
                });
        }
    }

    /// Takes what the mailbox of set `key` holds (the set), 0 if nothing.
    pub(crate) fn take_mail(&self, key: u32) -> u64 {
        let (slot, g) = split(key);
        let Some(s) = self.inner.slots.get(slot) else {
            return 0;
        };
        let only_gen = g << GEN_SHIFT;
        // A load first: an empty mailbox costs no exclusive line.
        if s.mail.load(Ordering::Relaxed) == only_gen {
            return 0;
        }
        // SYNC POINT with the Release updates in `post` and `post_all`.
        match s
            .mail
            .fetch_update(Ordering::Acquire, Ordering::Relaxed, |m| {
                (m >> GEN_SHIFT == g).then_some(only_gen)
            }) {
            Ok(m) => m & !(0xFF << GEN_SHIFT),
            Err(_) => 0,
        }
    }

    /// A set started (`true`) or ended collecting its receipts.
    pub(crate) fn collecting(&self, started: bool) {
        if started {
            self.inner.collecting.fetch_add(1, Ordering::Relaxed);
        } else {
            let _ = self
                .inner
                .collecting
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| u.checked_sub(1));
        }
    }

    /// Whether any set is collecting its receipts now.
    pub(crate) fn any_collecting(&self) -> bool {
        self.inner.collecting.load(Ordering::Relaxed) > 0
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn the_budget_is_never_exceeded_and_comes_back() {
        let b = SetBudget::new(2);
        let c = b.clone();
        assert!(b.same(&c) && !b.same(&SetBudget::new(2)));
        let (x, y) = (b.take().unwrap(), c.take().unwrap());
        assert_ne!(split(x).0, split(y).0, "each set its own mailbox");
        assert_eq!(b.take(), None, "a third set is over the budget");
        assert_eq!(b.in_use(), 2);
        b.post(x, MAIL_LAST_WQE << 2);
        b.post_all(MAIL_PORT_DOWN);
        assert_eq!(b.take_mail(x), MAIL_LAST_WQE << 2 | MAIL_PORT_DOWN);
        assert_eq!(b.take_mail(x), 0, "taken once");
        assert_eq!(b.take_mail(y), MAIL_PORT_DOWN);
        c.give_back(y);
        assert_eq!(b.in_use(), 1);
        b.post_all(MAIL_DEVICE_FATAL);
        let z = b.take().unwrap();
        assert_eq!(split(z).0, split(y).0, "the freed slot");
        assert_ne!(z, y, "a new generation");
        b.post(y, MAIL_LAST_WQE);
        assert_eq!(b.take_mail(z), 0, "nothing of the closed set's");
        assert_eq!(b.take_mail(y), 0, "a closed set gets nothing");
        b.post(z, MAIL_LAST_WQE);
        assert_eq!(b.take_mail(z), MAIL_LAST_WQE);
        b.give_back(x);
        b.give_back(z);
        b.give_back(z);
        b.give_back(y);
        assert_eq!(b.in_use(), 0, "never below zero");
        assert_eq!(SetBudget::new(u32::MAX).max(), MAX_SETS);
        assert_eq!(SetBudget::new(0).take(), None);
        b.collecting(true);
        assert!(b.any_collecting());
        b.collecting(false);
        b.collecting(false);
        assert!(!b.any_collecting());
    }

    /// Two threads opening and closing sets against a budget of one: never
    /// two open at once, each time its own slot, the count back at zero.
    #[test]
    fn racing_takes_never_exceed_the_budget() {
        const ROUNDS: u32 = if cfg!(miri) { 50 } else { 20_000 };
        let b = SetBudget::new(1);
        let open = Arc::new(AtomicU32::new(0));
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let (b, open) = (b.clone(), open.clone());
                std::thread::spawn(move || {
                    let mut got = 0u32;
                    for _ in 0..ROUNDS {
                        if let Some(slot) = b.take() {
                            assert_eq!(split(slot).0, 0);
                            assert_eq!(open.fetch_add(1, Ordering::Relaxed), 0, "two sets open");
                            b.post(slot, MAIL_LAST_WQE);
                            open.fetch_sub(1, Ordering::Relaxed);
                            b.give_back(slot);
                            got += 1;
                        }
                    }
                    got
                })
            })
            .collect();
        let got: u32 = hs.into_iter().map(|h| h.join().unwrap()).sum();
        assert!(got > 0, "takes succeeded");
        assert_eq!(b.in_use(), 0);
        let k = b.take().unwrap();
        assert_eq!(b.take_mail(k), 0, "mail cleared with each close");
    }
}
