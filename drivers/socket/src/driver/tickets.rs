//! The tables of outstanding gets and fetching atomics: the slot behind each
//! [`Ticket`](switchyard_core::transport::Ticket) (index and generation), and
//! the arena that holds get replies until `get_poll` copies them out.

use crate::replay::ring_place;

/// Outstanding `get_start`/`get_into_heap` operations, at most.
const GET_SLOTS: usize = 256;
/// Outstanding fetching atomics, at most.
pub(super) const ATOMIC_SLOTS: usize = 256;
/// Ticket slot bits for the index (the generation is above).
pub(super) const SLOT_BITS: u32 = 16;
/// The ticket slot of operations that need no table entry.
pub(super) const NO_SLOT: u32 = u32::MAX;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SlotState {
    Free,
    Pending,
    Done,
    Failed,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct GetSlot {
    gen_: u16,
    pub(super) state: SlotState,
    pub(super) peer: u32,
    pub(super) at: usize,
    pub(super) len: u32,
    pub(super) into_heap: Option<u64>,
    order: u64,
}

/// Outstanding gets and the arena holding their replies.
#[derive(Debug)]
pub(super) struct Gets {
    pub(super) slots: Vec<GetSlot>,
    pub(super) arena: Box<[u8]>,
    head: usize,
    tail: usize,
    live: usize,
    order: u64,
}

impl Gets {
    pub(super) fn new(arena: usize) -> Gets {
        Gets {
            slots: vec![
                GetSlot {
                    gen_: 0,
                    state: SlotState::Free,
                    peer: 0,
                    at: 0,
                    len: 0,
                    into_heap: None,
                    order: 0,
                };
                GET_SLOTS
            ],
            arena: vec![0u8; arena].into_boxed_slice(),
            head: 0,
            tail: 0,
            live: 0,
            order: 0,
        }
    }

    /// Where `n` arena bytes go (same scheme as the replay ring).
    fn place(&self, n: usize) -> Option<usize> {
        ring_place(self.arena.len(), self.head, self.tail, self.live == 0, n)
    }

    /// Takes a slot (and `len` arena bytes unless the reply goes to the heap).
    pub(super) fn take(&mut self, peer: u32, len: u32, into_heap: Option<u64>) -> Option<u32> {
        let idx = self.slots.iter().position(|s| s.state == SlotState::Free)?;
        let mut at = 0;
        if into_heap.is_none() {
            at = self.place(len as usize)?;
            if self.live == 0 {
                self.tail = at;
            }
            self.head = at + len as usize;
            self.live += 1;
        }
        self.order += 1;
        let s = &mut self.slots[idx];
        s.gen_ = s.gen_.wrapping_add(1);
        s.state = SlotState::Pending;
        s.peer = peer;
        s.at = at;
        s.len = len;
        s.into_heap = into_heap;
        s.order = self.order;
        Some(idx as u32 | u32::from(s.gen_) << SLOT_BITS)
    }

    /// Slots free to take.
    pub(super) fn free_slots(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| s.state == SlotState::Free)
            .count()
    }

    pub(super) fn find(&self, slot: u32) -> Option<usize> {
        let idx = (slot & ((1 << SLOT_BITS) - 1)) as usize;
        let s = self.slots.get(idx)?;
        (s.gen_ == (slot >> SLOT_BITS) as u16 && s.state != SlotState::Free).then_some(idx)
    }

    pub(super) fn free(&mut self, idx: usize) {
        let s = &mut self.slots[idx];
        let had_arena = s.into_heap.is_none();
        s.state = SlotState::Free;
        if had_arena {
            self.live -= 1;
            if self.live == 0 {
                self.head = 0;
                self.tail = 0;
            } else {
                // The oldest live arena allocation starts the used region.
                let mut best: Option<(u64, usize)> = None;
                for s in &self.slots {
                    if s.state != SlotState::Free
                        && s.into_heap.is_none()
                        && best.is_none_or(|b| s.order < b.0)
                    {
                        best = Some((s.order, s.at));
                    }
                }
                if let Some((_, at)) = best {
                    self.tail = at;
                }
            }
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub(super) struct AtomicSlot {
    pub(super) gen_: u16,
    pub(super) state: SlotState,
    pub(super) peer: u32,
    pub(super) value: u64,
}
