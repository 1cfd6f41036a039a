//! [`Select`]: which of several channels has a message, waiting for one if
//! none has.

use crate::context::{Context, Result};

/// A receiving end a [`Select`] can watch ([`Consumer`](super::Consumer)).
pub trait Ready {
    /// Whether a message is waiting (a load of the end's own memory; it
    /// makes no progress).
    fn ready(&self) -> bool;
}

/// Polls several receiving ends, fairly: each call starts looking at the
/// end after the one it last returned, so a busy channel does not starve
/// the others (keep one `Select` per call site and pass the ends in the
/// same order each time). Nothing allocates.
///
/// ```no_run
/// # use switchyard::{channel::{Consumer, Select}, context::Context};
/// # fn f(ctx: &mut Context, a: &mut Consumer<u64>, b: &mut Consumer<u64>) -> switchyard::context::Result<()> {
/// let mut sel = Select::new();
/// loop {
///     match sel.wait(ctx, &[&*a, &*b])? {
///         0 => { let _quote = a.try_recv(ctx)?; }
///         _ => { let _order = b.try_recv(ctx)?; }
///     }
/// #   break;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Default, Clone)]
pub struct Select {
    /// Where the next scan starts.
    next: usize,
}

impl Select {
    /// A select whose first scan starts at the first end.
    pub fn new() -> Select {
        Select::default()
    }

    /// The index of an end in `ends` with a message waiting, scanning from
    /// the one after the last returned.
    fn scan(&mut self, ends: &[&dyn Ready]) -> Option<usize> {
        let n = ends.len();
        let found = (0..n)
            .map(|k| (self.next + k) % n)
            .find(|&i| ends[i].ready())?;
        self.next = (found + 1) % n;
        Some(found)
    }

    /// The index of an end with a message waiting, if any, after one
    /// progress step when none had (so messages arriving over TCP count).
    /// Never waits.
    pub fn poll(&mut self, ctx: &mut Context, ends: &[&dyn Ready]) -> Option<usize> {
        if ends.is_empty() {
            return None;
        }
        self.scan(ends).or_else(|| {
            ctx.progress();
            self.scan(ends)
        })
    }

    /// Waits until one of `ends` has a message and returns its index. The
    /// wait is the library's (the context's progress mode, busy or
    /// adaptive; no timeout while the PEs live).
    ///
    /// # Errors
    ///
    /// [`Error::PeerDead`](crate::context::Error::PeerDead) when a PE dies
    /// meanwhile and no end has a message;
    /// [`Error::Length`](crate::context::Error::Length) for no ends at all
    /// (nothing could end the wait).
    pub fn wait(&mut self, ctx: &mut Context, ends: &[&dyn Ready]) -> Result<usize> {
        if ends.is_empty() {
            return Err(crate::context::Error::Length {
                what: "Select::wait's ends",
                want: 1,
                got: 0,
            });
        }
        if let Some(i) = self.scan(ends) {
            return Ok(i);
        }
        let mut found = None;
        if super::spin(|| {
            found = self.scan(ends);
            found.is_some()
        }) {
            return Ok(found.unwrap_or(self.next));
        }
        ctx.wait_for("a channel select", |_| {
            found = self.scan(ends);
            Ok(found.is_some())
        })?;
        // `wait_for` returns Ok only once `ready` said so.
        Ok(found.unwrap_or(self.next))
    }
}
