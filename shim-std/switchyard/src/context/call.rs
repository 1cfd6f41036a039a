//! A call into the library: [`Call`], the context for the length of one
//! public entry point, which gives the TCP driver back (and posts the verbs
//! work requests batched in the call) when it drops: at the call's end, on
//! every way out of it, an early `?` return included.
//!
//! The TCP driver is taken lazily, at a call's first use of it
//! ([`progress::Tcp::get`](super::progress::Tcp::get)), and must be given
//! back before the application leaves the library, or the progress thread
//! stays locked out while the application computes (and a peer's quiet
//! waits for this PE's next call for its ack). An entry point that may use
//! the driver runs its body on `self.call()`, so giving it back cannot be
//! forgotten on some path.

use core::ops::{Deref, DerefMut};

use super::Context;

/// The context for one call; gives the TCP driver back when dropped
/// ([`Context::leave`]).
pub(super) struct Call<'a>(&'a mut Context);

impl Context {
    /// This context for one call into the library: see [`Call`].
    #[inline]
    pub(super) fn call(&mut self) -> Call<'_> {
        Call(self)
    }
}

impl Deref for Call<'_> {
    type Target = Context;

    #[inline]
    fn deref(&self) -> &Context {
        self.0
    }
}

impl DerefMut for Call<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut Context {
        self.0
    }
}

impl Drop for Call<'_> {
    #[inline]
    fn drop(&mut self) {
        self.0.leave();
    }
}
