//! The driver's peers ([`Peers`]): the state of each peer it has QPs
//! toward, in slots taken in the order the peers were added, and an index
//! from PE number to slot. Its memory is O(peers added), not O(PEs in the
//! job): a driver created lazily ([`VerbsConfig::lazy_peers`]) for a job of
//! 1,000,000 PEs with room for 32 peers holds 32 slots and an index of 64
//! entries (8 bytes each), whatever the job's size.
//!
//! [`VerbsConfig::lazy_peers`]: crate::params::VerbsConfig::lazy_peers

use super::Peer;
use crate::recv::{qpn_insert, qpn_lookup, qpn_table};

/// The peers of one driver (module docs). Capacity fixed at creation:
/// adding a peer never reallocates, and a lookup is one hash probe (the
/// receive side's open-addressing table, keyed by PE + 1), with no
/// allocation.
pub(super) struct Peers {
    /// The peers' state, by slot (capacity fixed at creation).
    slots: Vec<Peer>,
    /// The PE of each slot.
    ids: Vec<u32>,
    /// PE + 1 → slot, open addressing, at most half full.
    index: Box<[(u32, u32)]>,
}

impl Peers {
    /// Room for `cap` peers, none yet.
    pub(super) fn with_capacity(cap: usize) -> Peers {
        Peers {
            slots: Vec::with_capacity(cap),
            ids: Vec::with_capacity(cap),
            index: qpn_table(&[], cap),
        }
    }

    /// Adds `pe` (absent) in the next slot; hands `peer` back when full.
    pub(super) fn push(&mut self, pe: u32, peer: Peer) -> Result<usize, Box<Peer>> {
        let slot = self.slots.len();
        if slot == self.slots.capacity() || self.slot_of(pe).is_some() {
            return Err(Box::new(peer));
        }
        if !qpn_insert(&mut self.index, pe + 1, slot as u32) {
            return Err(Box::new(peer));
        }
        self.slots.push(peer);
        self.ids.push(pe);
        Ok(slot)
    }

    /// The slot of `pe`, if it has one.
    #[inline]
    pub(super) fn slot_of(&self, pe: u32) -> Option<usize> {
        qpn_lookup(&self.index, pe.wrapping_add(1)).map(|s| s as usize)
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
        self.slots.capacity() * core::mem::size_of::<Peer>()
            + self.ids.capacity() * 4
            + self.index.len() * 8
    }
}
