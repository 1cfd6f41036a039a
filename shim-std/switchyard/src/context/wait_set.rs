//! Tests and waits on several words at once: [`WaitSet`] (elements of one
//! symmetric array, compared to one value or each to its own, with an
//! optional status mask) and [`Context::test_all`], [`Context::test_any`],
//! [`Context::test_some`], [`Context::wait_until_all`],
//! [`Context::wait_until_any`], [`Context::wait_until_some`], as
//! OpenSHMEM's `shmem_test_*` and `shmem_wait_until_*` (and their `_vector`
//! forms).
//!
//! **Fairness of `_any`.** [`Context::test_any`] and
//! [`Context::wait_until_any`] scan the set starting after the index the
//! same set last returned (wrapping; a new set starts at 0), so a caller
//! that loops until every index has fired sees each one, even when a lower
//! index is satisfied again and again. The cursor is in the set: keep one
//! set per call site to get this rule.

use core::cell::Cell;

use super::{
    AtomicInt, Context, Error, Result, Sym,
    wait::{Cmp, Limit, Watch},
};

/// Elements `at..at + n` of this PE's own copy of a symmetric array, each
/// compared to a value, for the multi-word tests and waits.
///
/// Entries whose status is `true` ([`WaitSet::status`]) are left out, like
/// the non-zero entries of OpenSHMEM's `status` array.
#[derive(Debug, Clone)]
pub struct WaitSet<'a, T> {
    sym: &'a Sym<T>,
    at: usize,
    n: usize,
    cmp: Cmp,
    value: T,
    values: Option<&'a [T]>,
    status: Option<&'a [bool]>,
    /// Where the next `_any` scan starts (the index after the last one
    /// returned).
    cursor: Cell<usize>,
}

impl<'a, T: AtomicInt> WaitSet<'a, T> {
    /// Elements `at..at + n` of `sym`, each compared to `value` as `cmp`
    /// says.
    pub fn new(sym: &'a Sym<T>, at: usize, n: usize, cmp: Cmp, value: T) -> Self {
        WaitSet {
            sym,
            at,
            n,
            cmp,
            value,
            values: None,
            status: None,
            cursor: Cell::new(0),
        }
    }

    /// Elements `at..at + values.len()` of `sym`, element `at + i` compared
    /// to `values[i]` as `cmp` says (the `_vector` forms).
    pub fn each(sym: &'a Sym<T>, at: usize, cmp: Cmp, values: &'a [T]) -> Self {
        WaitSet {
            values: Some(values),
            ..WaitSet::new(sym, at, values.len(), cmp, T::from_bits(0))
        }
    }

    /// Leaves out the elements whose `status` entry is `true`; `status` has
    /// one entry per element (else the tests and waits fail with
    /// [`Error::Length`]).
    #[must_use]
    pub fn status(mut self, status: &'a [bool]) -> Self {
        self.status = Some(status);
        self
    }

    /// How many elements the set has (included or not).
    pub fn len(&self) -> usize {
        self.n
    }

    /// Whether the set has no elements.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    fn included(&self, i: usize) -> bool {
        self.status.is_none_or(|s| !s[i])
    }

    fn any_included(&self) -> bool {
        (0..self.n).any(|i| self.included(i))
    }

    fn value_at(&self, i: usize) -> T {
        self.values.map_or(self.value, |v| v[i])
    }
}

impl Context {
    /// The heap offset of the set's first element, after checking the set.
    fn set_offset<T: AtomicInt>(&self, set: &WaitSet<'_, T>) -> Result<u64> {
        let off = self.check(set.sym, set.at, set.n)?;
        if let Some(s) = set.status
            && s.len() != set.n
        {
            return Err(Error::Length {
                what: "status",
                want: set.n,
                got: s.len(),
            });
        }
        Ok(off)
    }

    /// Whether element `i` of the set (at heap offset `off`) satisfies its
    /// comparison (an Acquire load of the own word).
    #[inline]
    fn set_holds<T: AtomicInt>(&self, set: &WaitSet<'_, T>, off: u64, i: usize) -> Result<bool> {
        let at = off + (i * core::mem::size_of::<T>()) as u64;
        let v = T::from_bits(self.load_local(at, T::WIDTH)?);
        Ok(set.cmp.holds(v, set.value_at(i)))
    }

    fn set_all<T: AtomicInt>(&self, set: &WaitSet<'_, T>, off: u64) -> Result<bool> {
        for i in 0..set.n {
            if set.included(i) && !self.set_holds(set, off, i)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The first included, satisfied element from the set's cursor on
    /// (wrapping); moves the cursor past it.
    fn set_any<T: AtomicInt>(&self, set: &WaitSet<'_, T>, off: u64) -> Result<Option<usize>> {
        let start = set.cursor.get();
        for k in 0..set.n {
            let i = (start + k) % set.n;
            if set.included(i) && self.set_holds(set, off, i)? {
                set.cursor.set((i + 1) % set.n);
                return Ok(Some(i));
            }
        }
        Ok(None)
    }

    fn set_some<T: AtomicInt>(
        &self,
        set: &WaitSet<'_, T>,
        off: u64,
        out: &mut [usize],
    ) -> Result<usize> {
        let mut k = 0;
        for i in 0..set.n {
            if set.included(i) && self.set_holds(set, off, i)? {
                out[k] = i;
                k += 1;
            }
        }
        Ok(k)
    }

    /// Checks `out` has room for every index of the set.
    fn out_room<T>(set: &WaitSet<'_, T>, out: &[usize]) -> Result<()> {
        if out.len() < set.n {
            return Err(Error::Length {
                what: "out",
                want: set.n,
                got: out.len(),
            });
        }
        Ok(())
    }

    /// One progress step, then the set checked: the offset of its first
    /// element.
    fn test_prep<T: AtomicInt>(&mut self, set: &WaitSet<'_, T>) -> Result<u64> {
        let off = self.set_offset(set)?;
        self.call().poll_once();
        Ok(off)
    }

    /// Whether every included element of `set` satisfies its comparison,
    /// after one progress step. Never waits; true when none is included.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfBounds`], [`Error::ForeignHandle`], [`Error::Length`].
    pub fn test_all<T: AtomicInt>(&mut self, set: &WaitSet<'_, T>) -> Result<bool> {
        let off = self.test_prep(set)?;
        self.set_all(set, off)
    }

    /// An included element of `set` that satisfies its comparison, after
    /// one progress step, or `None`. Never waits. Fair: the scan starts
    /// after the index this set last returned (see the module docs).
    ///
    /// # Errors
    ///
    /// [`Error::OutOfBounds`], [`Error::ForeignHandle`], [`Error::Length`].
    pub fn test_any<T: AtomicInt>(&mut self, set: &WaitSet<'_, T>) -> Result<Option<usize>> {
        let off = self.test_prep(set)?;
        self.set_any(set, off)
    }

    /// Writes the indices of the included elements of `set` that satisfy
    /// their comparison to `out` (ascending), after one progress step, and
    /// returns how many. Never waits.
    ///
    /// # Errors
    ///
    /// [`Error::Length`] when `out` is shorter than the set,
    /// [`Error::OutOfBounds`], [`Error::ForeignHandle`].
    pub fn test_some<T: AtomicInt>(
        &mut self,
        set: &WaitSet<'_, T>,
        out: &mut [usize],
    ) -> Result<usize> {
        Self::out_room(set, out)?;
        let off = self.test_prep(set)?;
        self.set_some(set, off, out)
    }

    /// Waits until every included element of `set` satisfies its
    /// comparison. Like [`Context::wait_until`]: no op timeout, ends with
    /// [`Error::PeerDead`] when a PE dies.
    ///
    /// # Errors
    ///
    /// [`Error::PeerDead`], [`Error::OutOfBounds`],
    /// [`Error::ForeignHandle`], [`Error::Length`].
    pub fn wait_until_all<T: AtomicInt>(&mut self, set: &WaitSet<'_, T>) -> Result<()> {
        let mut call = self.call();
        let off = call.set_offset(set)?;
        call.wait_on("wait_until_all", Watch::Any, Limit::Peers, |c| {
            c.set_all(set, off)
        })
    }

    /// Waits until an included element of `set` satisfies its comparison
    /// and returns its index; `None` at once when no element is included.
    /// Fair as [`Context::test_any`]. Like [`Context::wait_until`]: no op
    /// timeout, ends with [`Error::PeerDead`] when a PE dies.
    ///
    /// # Errors
    ///
    /// [`Error::PeerDead`], [`Error::OutOfBounds`],
    /// [`Error::ForeignHandle`], [`Error::Length`].
    pub fn wait_until_any<T: AtomicInt>(&mut self, set: &WaitSet<'_, T>) -> Result<Option<usize>> {
        let mut call = self.call();
        let off = call.set_offset(set)?;
        let mut found = None;
        if set.any_included() {
            call.wait_on("wait_until_any", Watch::Any, Limit::Peers, |c| {
                found = c.set_any(set, off)?;
                Ok(found.is_some())
            })?;
        }
        Ok(found)
    }

    /// Waits until at least one included element of `set` satisfies its
    /// comparison, writes the indices of all that do to `out` (ascending)
    /// and returns how many; 0 at once when no element is included. Like
    /// [`Context::wait_until`]: no op timeout, ends with
    /// [`Error::PeerDead`] when a PE dies.
    ///
    /// # Errors
    ///
    /// [`Error::Length`] when `out` is shorter than the set,
    /// [`Error::PeerDead`], [`Error::OutOfBounds`], [`Error::ForeignHandle`].
    pub fn wait_until_some<T: AtomicInt>(
        &mut self,
        set: &WaitSet<'_, T>,
        out: &mut [usize],
    ) -> Result<usize> {
        Self::out_room(set, out)?;
        let mut call = self.call();
        let off = call.set_offset(set)?;
        let mut k = 0;
        if set.any_included() {
            call.wait_on("wait_until_some", Watch::Any, Limit::Peers, |c| {
                k = c.set_some(set, off, out)?;
                Ok(k > 0)
            })?;
        }
        Ok(k)
    }
}
