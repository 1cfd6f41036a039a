//! The driver's peers ([`Peers`]): the state of each peer it has QPs
//! toward, in dense slots, and the way from a PE number to its slot, in
//! one of three layouts fixed at creation, behind one lookup
//! ([`Peers::slot_of`]) for every caller:
//!
//! - **every** (a driver created eagerly, the default): every other PE, in
//!   PE order skipping this one, so a PE's slot is arithmetic
//!   (`pe - (pe > me)`): compares and a subtraction, no index held or
//!   read.
//! - **one** (a QP set's driver): its one peer, in slot 0 (`pe - peer`,
//!   below 1).
//! - **hashed** (a driver created with lazy peers,
//!   [`VerbsConfig::lazy_peers`]): slots taken in the order the peers are
//!   added, and an index PE + 1 → slot (the receive side's open-addressing
//!   table, at most half full: one hash probe). Its memory is O(peers
//!   added), not O(PEs in the job): a lazy driver for a job of 1,000,000
//!   PEs with room for 32 peers holds 32 slots and an index of 64 entries
//!   (8 bytes each), whatever the job's size.
//!
//! [`VerbsConfig::lazy_peers`]: crate::params::VerbsConfig::lazy_peers

use super::Peer;
use crate::recv::{qpn_insert, qpn_lookup, qpn_table};

/// The peers of one driver (module docs). Capacity fixed at creation:
/// adding a peer never reallocates, and a lookup allocates nothing.
pub(super) struct Peers {
    /// The peers' state, by slot (capacity fixed at creation).
    slots: Vec<Peer>,
    /// The PE of each slot.
    ids: Vec<u32>,
    /// Lazy: PE + 1 → slot, open addressing, at most half full. `None`
    /// for the arithmetic layouts, where the slot of `pe` (not `skip`) is
    /// `pe - base - (pe > skip)`: an eager driver's (`base` 0, `skip`
    /// this PE) and a set's (`base` its peer, `skip` `u32::MAX`).
    index: Option<Box<[(u32, u32)]>>,
    /// The first PE of an arithmetic layout.
    base: u32,
    /// The PE an arithmetic layout skips.
    skip: u32,
}

impl Peers {
    /// Room for every PE of a job of `n_pes` but `me`, to be pushed in PE
    /// order (an eager driver).
    pub(super) fn every(me: u32, n_pes: u32) -> Peers {
        let cap = n_pes.saturating_sub(1) as usize;
        Peers {
            slots: Vec::with_capacity(cap),
            ids: Vec::with_capacity(cap),
            index: None,
            base: 0,
            skip: me,
        }
    }

    /// Room for `pe` only (a QP set's driver).
    pub(super) fn one(pe: u32) -> Peers {
        Peers {
            slots: Vec::with_capacity(1),
            ids: Vec::with_capacity(1),
            index: None,
            base: pe,
            skip: u32::MAX,
        }
    }

    /// Room for `cap` peers in any order, none yet (a lazy driver).
    pub(super) fn hashed(cap: usize) -> Peers {
        Peers {
            slots: Vec::with_capacity(cap),
            ids: Vec::with_capacity(cap),
            index: Some(qpn_table(&[], cap)),
            base: 0,
            skip: u32::MAX,
        }
    }

    /// Adds `pe` (absent) in the next slot; hands `peer` back when full,
    /// when `pe` is there already, or when the layout has no place for it
    /// in that slot (an eager table takes the PEs in order, a set's only
    /// its peer).
    pub(super) fn push(&mut self, pe: u32, peer: Peer) -> Result<usize, Box<Peer>> {
        let slot = self.slots.len();
        if slot == self.slots.capacity() || self.slot_of(pe).is_some() {
            return Err(Box::new(peer));
        }
        let fits = match &mut self.index {
            Some(index) => qpn_insert(index, pe.wrapping_add(1), slot as u32),
            None => pe != self.skip && self.arithmetic(pe) == slot,
        };
        if !fits {
            return Err(Box::new(peer));
        }
        self.slots.push(peer);
        self.ids.push(pe);
        Ok(slot)
    }

    /// The slot of `pe`, if it has one: arithmetic for an eager table or
    /// a set's, one hash probe for a lazy one.
    #[inline]
    pub(super) fn slot_of(&self, pe: u32) -> Option<usize> {
        if let Some(index) = &self.index {
            return qpn_lookup(index, pe.wrapping_add(1)).map(|s| s as usize);
        }
        if pe == self.skip {
            return None;
        }
        let slot = self.arithmetic(pe);
        (slot < self.slots.len()).then_some(slot)
    }

    /// The slot `pe` (not `skip`) has in an arithmetic layout, if it is
    /// below the table's length (else no slot).
    #[inline]
    fn arithmetic(&self, pe: u32) -> usize {
        pe.wrapping_sub(self.base)
            .wrapping_sub(u32::from(pe > self.skip)) as usize
    }

    /// `pe`'s state.
    #[inline]
    pub(super) fn get(&self, pe: u32) -> Option<&Peer> {
        self.slot_of(pe).and_then(|s| self.slots.get(s))
    }

    /// `pe`'s state, mutably.
    #[inline]
    pub(super) fn get_mut(&mut self, pe: u32) -> Option<&mut Peer> {
        self.slot_of(pe).and_then(|s| self.slots.get_mut(s))
    }

    /// Peers held.
    pub(super) fn len(&self) -> usize {
        self.slots.len()
    }

    /// Peers it has room for.
    pub(super) fn capacity(&self) -> usize {
        self.slots.capacity()
    }

    /// The PE in `slot` (below [`Peers::len`]).
    #[inline]
    pub(super) fn id(&self, slot: usize) -> u32 {
        debug_assert!(slot < self.ids.len());
        self.ids[slot]
    }

    /// Every peer's state.
    pub(super) fn iter_mut(&mut self) -> core::slice::IterMut<'_, Peer> {
        self.slots.iter_mut()
    }

    /// Every peer's PE and state.
    pub(super) fn iter_ids_mut(&mut self) -> impl Iterator<Item = (u32, &mut Peer)> {
        self.ids.iter().copied().zip(self.slots.iter_mut())
    }

    /// Heap bytes this table holds (its capacity, not its use).
    pub(super) fn heap_bytes(&self) -> usize {
        let index = self.index.as_ref().map_or(0, |i| i.len() * 8);
        self.slots.capacity() * core::mem::size_of::<Peer>() + self.ids.capacity() * 4 + index
    }
}
