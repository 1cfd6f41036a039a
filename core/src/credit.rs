//! Credit-based flow control: the receiver grants, the sender consumes.
//!
//! Credits count units the receiver has room for (bytes, frames or slots; the
//! caller decides). Grants are *cumulative* totals, not increments, so a grant
//! that is duplicated, reordered or replayed after a reconnect can never inflate
//! the window: the sender keeps the largest total it has seen. Counters are `u64`
//! and compared with wrapping arithmetic.

use core::fmt;

/// Sending without enough credit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumeError {
    /// Fewer credits than asked for are available.
    NoCredit {
        /// Credits asked for.
        want: u64,
        /// Credits available.
        available: u64,
    },
}

impl fmt::Display for ConsumeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoCredit { want, available } => {
                write!(f, "need {want} credits, {available} available")
            }
        }
    }
}

impl core::error::Error for ConsumeError {}

/// The sender's side of a credit window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreditWindow {
    /// Cumulative credits granted by the receiver.
    granted: u64,
    /// Cumulative credits consumed by us.
    consumed: u64,
}

impl CreditWindow {
    /// A window that starts with `initial` credits (agreed at connect time).
    pub const fn new(initial: u64) -> Self {
        CreditWindow {
            granted: initial,
            consumed: 0,
        }
    }

    /// Credits available now.
    #[inline]
    pub const fn available(&self) -> u64 {
        self.granted.wrapping_sub(self.consumed)
    }

    /// Takes `n` credits.
    ///
    /// # Errors
    /// [`ConsumeError::NoCredit`] when fewer than `n` are available; nothing is taken.
    #[inline]
    pub fn try_consume(&mut self, n: u64) -> Result<(), ConsumeError> {
        let available = self.available();
        if n > available {
            return Err(ConsumeError::NoCredit { want: n, available });
        }
        self.consumed = self.consumed.wrapping_add(n);
        Ok(())
    }

    /// Applies a cumulative grant from the receiver. Stale, duplicate and
    /// implausible grants (more than `u64::MAX / 2` ahead, i.e. from a confused
    /// peer) are ignored. Returns whether the window grew.
    #[inline]
    pub fn on_grant(&mut self, total_granted: u64) -> bool {
        let ahead = total_granted.wrapping_sub(self.granted);
        if ahead == 0 || ahead > u64::MAX / 2 {
            return false;
        }
        self.granted = total_granted;
        true
    }

    /// Cumulative credits consumed (sent in frames so the receiver can audit).
    pub const fn consumed(&self) -> u64 {
        self.consumed
    }
}

/// Receiving more than was granted: the peer ignores flow control.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrantError {
    /// The peer sent `received` units with only `granted` granted.
    Overrun {
        /// Cumulative units received.
        received: u64,
        /// Cumulative units granted.
        granted: u64,
    },
}

impl fmt::Display for GrantError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Overrun { received, granted } => {
                write!(
                    f,
                    "peer sent {received} credits' worth with {granted} granted"
                )
            }
        }
    }
}

impl core::error::Error for GrantError {}

/// The receiver's side: tracks what arrived and what was released, and decides
/// when a new grant is worth sending (batched, not one per message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreditGranter {
    window: u64,
    granted: u64,
    received: u64,
    released: u64,
    batch: u64,
}

impl CreditGranter {
    /// A receiver with room for `window` units; it re-grants once at least
    /// `batch` (clamped to 1..=window) units have been released since its last
    /// grant.
    pub const fn new(window: u64, batch: u64) -> Self {
        let batch = if batch == 0 {
            1
        } else if batch > window {
            window
        } else {
            batch
        };
        CreditGranter {
            window,
            granted: window,
            received: 0,
            released: 0,
            batch,
        }
    }

    /// Accounts `n` units that arrived.
    ///
    /// # Errors
    /// [`GrantError::Overrun`] when the peer went past its grant (cut it off).
    #[inline]
    pub fn on_receive(&mut self, n: u64) -> Result<(), GrantError> {
        let received = self.received.wrapping_add(n);
        if received.wrapping_sub(self.released) > self.window
            || received.wrapping_sub(self.granted) as i64 > 0
        {
            return Err(GrantError::Overrun {
                received,
                granted: self.granted,
            });
        }
        self.received = received;
        Ok(())
    }

    /// Accounts `n` units consumed by the application (room freed). Returns the
    /// cumulative total to grant when enough has been freed to be worth a frame.
    ///
    /// Releasing more than was received is clamped to what was received.
    #[inline]
    pub fn on_release(&mut self, n: u64) -> Option<u64> {
        let pending = self.received.wrapping_sub(self.released);
        self.released = self.released.wrapping_add(n.min(pending));
        let target = self.released.wrapping_add(self.window);
        if target.wrapping_sub(self.granted) >= self.batch {
            self.granted = target;
            Some(target)
        } else {
            None
        }
    }

    /// The cumulative total granted so far (to resend after a reconnect).
    pub const fn granted(&self) -> u64 {
        self.granted
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn grant_consume_cycle() {
        let mut tx = CreditWindow::new(8);
        let mut rx = CreditGranter::new(8, 4);
        tx.try_consume(8).unwrap();
        rx.on_receive(8).unwrap();
        assert_eq!(
            tx.try_consume(1),
            Err(ConsumeError::NoCredit {
                want: 1,
                available: 0
            })
        );
        assert_eq!(rx.on_release(3), None, "below batch");
        let g = rx.on_release(1).expect("batch reached");
        assert_eq!(g, 12);
        assert!(tx.on_grant(g));
        assert!(!tx.on_grant(g), "duplicate grant ignored");
        assert!(!tx.on_grant(10), "stale grant ignored");
        assert_eq!(tx.available(), 4);
        tx.try_consume(4).unwrap();
        rx.on_receive(4).unwrap();
        assert_eq!(
            rx.on_receive(1),
            Err(GrantError::Overrun {
                received: 13,
                granted: 12
            })
        );
    }

    #[test]
    fn wrapping_counters() {
        let mut tx = CreditWindow {
            granted: u64::MAX - 1,
            consumed: u64::MAX - 3,
        };
        assert_eq!(tx.available(), 2);
        tx.try_consume(2).unwrap();
        assert!(tx.on_grant(3)); // wrapped past zero
        assert_eq!(tx.available(), 5);
        assert!(!tx.on_grant(u64::MAX / 2 + 10), "implausible jump ignored");
    }
}
