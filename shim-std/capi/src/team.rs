//! Teams: `SHMEM_TEAM_WORLD`, `SHMEM_TEAM_SHARED`, `shmem_team_split_strided`,
//! `shmem_team_destroy`, the queries, and `shmem_team_sync` / `shmem_sync_all`.
//!
//! # Scratch memory
//!
//! Every team needs symmetric scratch for its collectives: [`WORDS`] receive
//! words (see [`crate::coll::link`]) and an outbox of [`CHUNK`] bytes. The
//! symmetric heap's allocator needs every PE of the *job* to make the same
//! sequence of allocations, but a split is collective only over the parent
//! team, so teams cannot allocate as they are made. Instead [`init`] (called
//! by `shmem_init`, on every PE) reserves a pool of [`MAX_TEAMS`] slots
//! (fewer in a heap under 8.25 MiB: at most a sixteenth of it, see
//! [`pool_slots`]), and a
//! team is given a slot every member has free: the split runs a bitwise AND
//! of the members' free-slot masks over the parent team and takes the lowest
//! common slot. Slot 0 is `SHMEM_TEAM_WORLD`, slot 1 `SHMEM_TEAM_SHARED`.
//! A new team's words are zeroed by each member, then the parent syncs, so no
//! member signals into a slot before everyone reset it. `shmem_team_destroy`
//! quiets and syncs the team first, so nothing is still in flight into the
//! slot when it is freed.
//!
//! # Handles
//!
//! `shmem_team_t` is an opaque pointer whose value encodes a tag, the slot
//! and a generation (bumped when a slot is reused), so a stale or made-up
//! handle is recognised and ends the job naming the call; `NULL` is
//! `SHMEM_TEAM_INVALID`.
//!
//! Teams are arithmetic progressions of job PEs (`start + i * stride`), which
//! every split of a progression is. `SHMEM_TEAM_SHARED` holds the PEs whose
//! heaps this PE maps (the ones `shmem_ptr` reaches: this node's, unless
//! `transports` leaves shared memory out) when they form such a progression,
//! and only the calling PE otherwise.

use core::{cell::UnsafeCell, ffi::c_void};

use switchyard::context::Context;

use crate::{
    coll::{
        algo::{self, CHUNK},
        link::{Counts, Group, Mode, WORDS},
    },
    state,
};

/// Team slots in the pool (bits of a `u64` mask).
pub const MAX_TEAMS: usize = 32;
/// Bytes of one slot: the receive words, then the outbox.
pub const SLOT_BYTES: u64 = (WORDS * 8 + CHUNK) as u64;
const WORLD_SLOT: usize = 0;
const SHARED_SLOT: usize = 1;
/// High bits of every handle.
const TAG: usize = 0x5E7A_0000;

/// `shmem_team_t`: an opaque pointer.
pub type TeamHandle = *mut c_void;

/// `shmem_team_config_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct TeamConfig {
    /// Contexts the team is expected to create.
    pub num_contexts: i32,
}

/// `SHMEM_TEAM_NUM_CONTEXTS`.
pub const TEAM_NUM_CONTEXTS: i64 = 1;

/// One team as this PE knows it.
#[derive(Debug)]
pub struct Team {
    /// Job PE of rank 0.
    pub start: i64,
    /// Job-PE distance between ranks.
    pub stride: i64,
    /// Members.
    pub size: u32,
    /// This PE's rank.
    pub me: u32,
    counts: Counts,
    config: TeamConfig,
}

impl Team {
    /// The job PE of rank `r`.
    pub fn pe(&self, r: u32) -> i64 {
        self.start + i64::from(r) * self.stride
    }

    /// The rank of job PE `pe`, if a member.
    pub fn rank_of(&self, pe: i64) -> Option<u32> {
        rank_in(self.start, self.stride, self.size, pe)
    }
}

/// Rank of `pe` in the progression `start + i * stride`, `i < size`.
pub fn rank_in(start: i64, stride: i64, size: u32, pe: i64) -> Option<u32> {
    let d = pe - start;
    if stride == 0 || size == 1 {
        return (d == 0).then_some(0);
    }
    if d % stride != 0 {
        return None;
    }
    let q = d / stride;
    (0..i64::from(size)).contains(&q).then_some(q as u32)
}

/// Why a split's triplet is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitError {
    /// `size < 1`.
    Size,
    /// `stride == 0` with `size > 1`.
    ZeroStride,
    /// A member outside `0..parent size`.
    Range,
}

/// Checks a split triplet against a parent of `n` members: ranks
/// `start + i * stride` for `i < size` must all lie in `0..n` (so there is
/// no wrap-around), `size >= 1`, and `stride == 0` only for one member.
pub fn check_triplet(start: i32, stride: i32, size: i32, n: u32) -> Result<(), SplitError> {
    if size < 1 {
        return Err(SplitError::Size);
    }
    if stride == 0 && size > 1 {
        return Err(SplitError::ZeroStride);
    }
    let last = i64::from(start) + i64::from(stride) * (i64::from(size) - 1);
    let n = i64::from(n);
    if !(0..n).contains(&i64::from(start)) || !(0..n).contains(&last) {
        return Err(SplitError::Range);
    }
    Ok(())
}

/// Every team of this PE, and the pool.
#[derive(Debug)]
pub struct Teams {
    /// Byte offset of the pool, once [`init`] ran (and the heap had room).
    pool: Option<u64>,
    /// Slots in the pool ([`pool_slots`]).
    n_slots: usize,
    slots: [Option<Team>; MAX_TEAMS],
    gens: [u8; MAX_TEAMS],
}

impl Teams {
    const fn new() -> Teams {
        Teams {
            pool: None,
            n_slots: 0,
            slots: [const { None }; MAX_TEAMS],
            gens: [0; MAX_TEAMS],
        }
    }

    /// Slots this PE has no team in, as a mask.
    fn free_mask(&self) -> u64 {
        let mut m = 0u64;
        for (i, s) in self.slots.iter().enumerate().take(self.n_slots) {
            if s.is_none() {
                m |= 1 << i;
            }
        }
        m
    }

    /// The slot of a handle; ends the job naming `call` for anything that
    /// is not a live team (`SHMEM_TEAM_INVALID` included).
    pub fn slot(&self, call: &'static str, h: TeamHandle) -> usize {
        match self.lookup(h) {
            Some(s) => s,
            None if h.is_null() => state::fatal(
                call,
                format_args!("team is SHMEM_TEAM_INVALID (no team to operate on)"),
            ),
            None => state::fatal(
                call,
                format_args!("team = {h:p} is not a team (destroyed, or never created)"),
            ),
        }
    }

    /// The slot of a live team's handle.
    fn lookup(&self, h: TeamHandle) -> Option<usize> {
        let v = h as usize;
        if v & !0xFFFF != TAG {
            return None;
        }
        let (slot, gen_) = (v & 0xFF, ((v >> 8) & 0xFF) as u8);
        (slot < MAX_TEAMS && self.slots[slot].is_some() && self.gens[slot] == gen_).then_some(slot)
    }

    fn handle(&self, slot: usize) -> TeamHandle {
        (TAG | usize::from(self.gens[slot]) << 8 | slot) as TeamHandle
    }

    /// The team in `slot` (from [`Teams::slot`]).
    pub fn team(&self, slot: usize) -> &Team {
        match &self.slots[slot] {
            Some(t) => t,
            None => empty_slot(slot),
        }
    }

    /// The link group of the team in `slot`, for its collectives.
    pub fn group<'a>(&'a mut self, ctx: &Context, call: &'static str, slot: usize) -> Group<'a> {
        let Some(pool) = self.pool else {
            state::fatal(
                call,
                format_args!(
                    "no team scratch: the symmetric heap is too small for it (teams need \
                     {} bytes or more; raise SHMEM_SYMMETRIC_SIZE)",
                    2 * SLOT_BYTES * 16
                ),
            )
        };
        let base = pool + slot as u64 * SLOT_BYTES;
        let words = state::ok(call, ctx.sym_at::<i64>(base, WORDS));
        let Some(t) = self.slots[slot].as_mut() else {
            empty_slot(slot)
        };
        Group::new(
            t.size,
            t.me,
            (t.start, t.stride),
            words,
            (base + (WORDS * 8) as u64, CHUNK),
            Mode::Count(&mut t.counts),
        )
    }
}

/// A slot that [`Teams::slot`] checked is not empty: reaching this is a bug.
fn empty_slot(slot: usize) -> ! {
    state::fatal(
        "teams",
        format_args!("internal error: team slot {slot} is empty"),
    )
}

struct Cell(UnsafeCell<Teams>);

// SAFETY: the table is only reached through `with_teams`, inside
// `state::with`, which admits one thread at a time into the library (its
// Acquire/Release guard orders the accesses like a mutex).
unsafe impl Sync for Cell {}

static TEAMS: Cell = Cell(UnsafeCell::new(Teams::new()));

/// Runs `f` on the context and the team table (one thread at a time, as
/// [`state::with`]).
pub fn with_teams<R>(call: &'static str, f: impl FnOnce(&mut Context, &mut Teams) -> R) -> R {
    state::with(call, |ctx| {
        // SAFETY: `state::with` holds the library's one-thread guard for the
        // whole closure and rejects re-entry, so this is the only reference.
        let teams = unsafe { &mut *TEAMS.0.get() };
        f(ctx, teams)
    })
}

/// Reserves the team pool and sets up `SHMEM_TEAM_WORLD` and
/// `SHMEM_TEAM_SHARED`. Collective over the job: `shmem_init` calls it on
/// every PE right after the context is installed.
pub fn init(call: &'static str) {
    with_teams(call, |ctx, teams| {
        *teams = Teams::new();
        let (_, heap) = ctx.local_heap();
        let n_slots = pool_slots(heap);
        // Every PE has the same heap size, so every PE allocates (or skips)
        // alike; without a pool the team collectives end the job saying why.
        if n_slots > 0
            && let Ok(pool) = ctx.alloc::<u8>(n_slots * SLOT_BYTES as usize)
        {
            teams.pool = Some(pool.offset());
            teams.n_slots = n_slots;
        }
        let (me, n) = (ctx.my_pe(), ctx.n_pes());
        teams.slots[WORLD_SLOT] = Some(Team {
            start: 0,
            stride: 1,
            size: n,
            me,
            counts: Counts::new(),
            config: TeamConfig::default(),
        });
        // The PEs whose heap this PE maps: exactly those `shmem_ptr` reaches.
        let node: Vec<u32> = (0..n).filter(|&p| ctx.peer_heap(p).is_some()).collect();
        let (start, stride, size) = progression(&node).unwrap_or((i64::from(me), 1, 1));
        teams.slots[SHARED_SLOT] = Some(Team {
            start,
            stride,
            size,
            me: rank_in(start, stride, size, i64::from(me)).unwrap_or(0),
            counts: Counts::new(),
            config: TeamConfig::default(),
        });
    });
}

/// Team slots for a heap of `heap` bytes: [`MAX_TEAMS`], or fewer so the
/// pool takes at most a sixteenth of a small heap; 0 (no team collectives,
/// only the queries) when not even `SHMEM_TEAM_WORLD` and
/// `SHMEM_TEAM_SHARED` fit.
pub fn pool_slots(heap: u64) -> usize {
    let fit = (heap / 16 / SLOT_BYTES) as usize;
    match fit.min(MAX_TEAMS) {
        0 | 1 => 0,
        n => n,
    }
}

/// `(start, stride, size)` of a sorted list that is an arithmetic progression.
pub fn progression(pes: &[u32]) -> Option<(i64, i64, u32)> {
    let first = i64::from(*pes.first()?);
    if pes.len() == 1 {
        return Some((first, 1, 1));
    }
    let stride = i64::from(pes[1]) - first;
    let ok = stride > 0
        && pes
            .windows(2)
            .all(|w| i64::from(w[1]) - i64::from(w[0]) == stride);
    ok.then_some((first, stride, pes.len() as u32))
}

// ---- C API -------------------------------------------------------------

/// `int shmem_team_my_pe(shmem_team_t team)`: -1 for `SHMEM_TEAM_INVALID`.
#[unsafe(no_mangle)]
pub extern "C" fn shmem_team_my_pe(team: TeamHandle) -> i32 {
    if team.is_null() {
        return -1;
    }
    with_teams("shmem_team_my_pe", |_, t| {
        let s = t.slot("shmem_team_my_pe", team);
        t.team(s).me as i32
    })
}

/// `int shmem_team_n_pes(shmem_team_t team)`: -1 for `SHMEM_TEAM_INVALID`.
#[unsafe(no_mangle)]
pub extern "C" fn shmem_team_n_pes(team: TeamHandle) -> i32 {
    if team.is_null() {
        return -1;
    }
    with_teams("shmem_team_n_pes", |_, t| {
        let s = t.slot("shmem_team_n_pes", team);
        t.team(s).size as i32
    })
}

/// `int shmem_team_get_config(shmem_team_t team, long config_mask,
/// shmem_team_config_t *config)`: non-zero for `SHMEM_TEAM_INVALID`.
///
/// # Safety
///
/// `config` points to a `shmem_team_config_t` when `config_mask` asks for a
/// field (NULL then ends the job).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_team_get_config(
    team: TeamHandle,
    config_mask: i64,
    config: *mut TeamConfig,
) -> i32 {
    const CALL: &str = "shmem_team_get_config";
    if team.is_null() {
        return -1;
    }
    with_teams(CALL, |_, t| {
        let s = t.slot(CALL, team);
        if config_mask & TEAM_NUM_CONTEXTS != 0 {
            if config.is_null() {
                state::fatal(CALL, format_args!("config is NULL"));
            }
            // SAFETY: non-null, and the caller passes a shmem_team_config_t.
            unsafe { (*config).num_contexts = t.team(s).config.num_contexts };
        }
        0
    })
}

/// `int shmem_team_translate_pe(shmem_team_t src_team, int src_pe,
/// shmem_team_t dest_team)`: -1 where `src_pe` is not in both teams or a
/// team is `SHMEM_TEAM_INVALID`.
#[unsafe(no_mangle)]
pub extern "C" fn shmem_team_translate_pe(
    src_team: TeamHandle,
    src_pe: i32,
    dest_team: TeamHandle,
) -> i32 {
    const CALL: &str = "shmem_team_translate_pe";
    if src_team.is_null() || dest_team.is_null() {
        return -1;
    }
    with_teams(CALL, |_, t| {
        let (a, b) = (t.slot(CALL, src_team), t.slot(CALL, dest_team));
        let (a, b) = (t.team(a), t.team(b));
        match u32::try_from(src_pe) {
            Ok(r) if r < a.size => b.rank_of(a.pe(r)).map_or(-1, |x| x as i32),
            _ => -1,
        }
    })
}

/// `int shmem_team_split_strided(shmem_team_t parent_team, int start, int
/// stride, int size, const shmem_team_config_t *config, long config_mask,
/// shmem_team_t *new_team)`. Collective over the parent. Returns 0 on every
/// parent member when the team was made (`*new_team` is
/// `SHMEM_TEAM_INVALID` on members left out), non-zero on every one with
/// `*new_team = SHMEM_TEAM_INVALID` for a bad triplet, an invalid parent or
/// no free scratch slot.
///
/// # Safety
///
/// `config` is NULL or points to a `shmem_team_config_t`; `new_team` points
/// to a `shmem_team_t` (NULL ends the job).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_team_split_strided(
    parent_team: TeamHandle,
    start: i32,
    stride: i32,
    size: i32,
    config: *const TeamConfig,
    config_mask: i64,
    new_team: *mut TeamHandle,
) -> i32 {
    const CALL: &str = "shmem_team_split_strided";
    if new_team.is_null() {
        state::fatal(CALL, format_args!("new_team is NULL"));
    }
    // SAFETY: as documented for the caller.
    let cfg = unsafe { config_of(config, config_mask) };
    let (rc, h) = if parent_team.is_null() {
        (-1, core::ptr::null_mut())
    } else {
        with_teams(CALL, |ctx, t| {
            split(ctx, t, parent_team, (start, stride, size), cfg)
        })
    };
    // SAFETY: non-null (checked); the caller passes a shmem_team_t slot.
    unsafe { new_team.write(h) };
    rc
}

/// The body of the split, inside `with_teams`.
fn split(
    ctx: &mut Context,
    t: &mut Teams,
    parent: TeamHandle,
    (start, stride, size): (i32, i32, i32),
    cfg: TeamConfig,
) -> (i32, TeamHandle) {
    const CALL: &str = "shmem_team_split_strided";
    let ps = t.slot(CALL, parent);
    let p = t.team(ps);
    if check_triplet(start, stride, size, p.size).is_err() {
        return (-1, core::ptr::null_mut());
    }
    let triplet = (
        p.pe(start as u32),
        i64::from(stride) * p.stride,
        size as u32,
    );
    split_core(ctx, t, CALL, ps, triplet, cfg)
}

/// Makes the team `(start, stride, size)` (job PEs) out of the parent in
/// slot `ps`; collective over the parent. Members may pass different
/// (disjoint) teams, as `shmem_team_split_2d` does: the slot is the lowest
/// one free on every parent member, so it suits every new team at once.
fn split_core(
    ctx: &mut Context,
    t: &mut Teams,
    call: &'static str,
    ps: usize,
    (nstart, nstride, nsize): (i64, i64, u32),
    cfg: TeamConfig,
) -> (i32, TeamHandle) {
    let my_rank = rank_in(nstart, nstride, nsize, i64::from(ctx.my_pe()));
    let offer = if my_rank.is_some() { t.free_mask() } else { !0 };
    let common = {
        let mut g = t.group(ctx, call, ps);
        state::ok(call, algo::allreduce_and(ctx, &mut g, offer))
    } & ((1u64 << MAX_TEAMS) - 1);
    if common == 0 {
        return (-1, core::ptr::null_mut());
    }
    let slot = common.trailing_zeros() as usize;
    if let Some(r) = my_rank {
        let Some(pool) = t.pool else { empty_slot(slot) };
        let words = state::ok(
            call,
            ctx.sym_at::<i64>(pool + slot as u64 * SLOT_BYTES, WORDS),
        );
        state::ok(call, ctx.write_local(&words, 0, &[0i64; WORDS]));
        t.gens[slot] = t.gens[slot].wrapping_add(1).max(1);
        t.slots[slot] = Some(Team {
            start: nstart,
            stride: nstride,
            size: nsize,
            me: r,
            counts: Counts::new(),
            config: cfg,
        });
    }
    // Nobody signals into the new slot before every member zeroed it.
    let mut g = t.group(ctx, call, ps);
    state::ok(call, algo::sync(ctx, &mut g));
    match my_rank {
        Some(_) => (0, t.handle(slot)),
        None => (0, core::ptr::null_mut()),
    }
}

/// The config a split uses: `config` where the mask asks for a field.
///
/// # Safety
///
/// `config` is NULL or points to a `shmem_team_config_t`.
unsafe fn config_of(config: *const TeamConfig, mask: i64) -> TeamConfig {
    if mask & TEAM_NUM_CONTEXTS != 0 && !config.is_null() {
        // SAFETY: non-null; the caller passes a shmem_team_config_t.
        unsafe { *config }
    } else {
        TeamConfig::default()
    }
}

/// `int shmem_team_split_2d(shmem_team_t parent_team, int xrange, const
/// shmem_team_config_t *xaxis_config, long xaxis_mask, shmem_team_t
/// *xaxis_team, const shmem_team_config_t *yaxis_config, long yaxis_mask,
/// shmem_team_t *yaxis_team)`. Parent rank `p` is at `(p mod xrange, p div
/// xrange)`; the x-axis team is its row, the y-axis team its column (an
/// `xrange` above the parent's size is the parent's size). Returns 0 when
/// both teams were made; non-zero, with the teams not made set to
/// `SHMEM_TEAM_INVALID`, for an invalid parent, `xrange < 1` or no free slot.
///
/// # Safety
///
/// The configs are NULL or point to `shmem_team_config_t`s; the team
/// pointers point to `shmem_team_t`s (NULL ends the job).
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)] // the C signature
pub unsafe extern "C" fn shmem_team_split_2d(
    parent_team: TeamHandle,
    xrange: i32,
    xaxis_config: *const TeamConfig,
    xaxis_mask: i64,
    xaxis_team: *mut TeamHandle,
    yaxis_config: *const TeamConfig,
    yaxis_mask: i64,
    yaxis_team: *mut TeamHandle,
) -> i32 {
    const CALL: &str = "shmem_team_split_2d";
    if xaxis_team.is_null() || yaxis_team.is_null() {
        state::fatal(CALL, format_args!("xaxis_team or yaxis_team is NULL"));
    }
    // SAFETY: as documented for the caller.
    let (xc, yc) = unsafe {
        (
            config_of(xaxis_config, xaxis_mask),
            config_of(yaxis_config, yaxis_mask),
        )
    };
    let (rc, x, y) = if parent_team.is_null() || xrange < 1 {
        (-1, core::ptr::null_mut(), core::ptr::null_mut())
    } else {
        with_teams(CALL, |ctx, t| {
            let ps = t.slot(CALL, parent_team);
            let p = t.team(ps);
            let (n, me) = (p.size, p.me);
            let xr = (xrange as u32).min(n);
            let (col, row) = (me % xr, me / xr);
            let row_len = xr.min(n - row * xr);
            let col_len = (n - col).div_ceil(xr);
            let xt = (p.pe(row * xr), p.stride, row_len);
            let yt = (p.pe(col), i64::from(xr) * p.stride, col_len);
            let (rx, x) = split_core(ctx, t, CALL, ps, xt, xc);
            let (ry, y) = split_core(ctx, t, CALL, ps, yt, yc);
            (if rx == 0 && ry == 0 { 0 } else { -1 }, x, y)
        })
    };
    // SAFETY: non-null (checked); the caller passes shmem_team_t slots.
    unsafe {
        xaxis_team.write(x);
        yaxis_team.write(y);
    }
    rc
}

/// `void shmem_team_destroy(shmem_team_t team)`: collective over the team
/// (a quiet and a sync, then the slot is free). `SHMEM_TEAM_INVALID` is
/// ignored; the predefined teams cannot be destroyed.
#[unsafe(no_mangle)]
pub extern "C" fn shmem_team_destroy(team: TeamHandle) {
    const CALL: &str = "shmem_team_destroy";
    if team.is_null() {
        return;
    }
    with_teams(CALL, |ctx, t| {
        let s = t.slot(CALL, team);
        if s == WORLD_SLOT || s == SHARED_SLOT {
            state::fatal(
                CALL,
                format_args!("team is a predefined team (SHMEM_TEAM_WORLD or SHMEM_TEAM_SHARED)"),
            );
        }
        state::ok(CALL, ctx.quiet());
        let mut g = t.group(ctx, CALL, s);
        state::ok(CALL, algo::sync(ctx, &mut g));
        t.slots[s] = None;
    });
}

/// `int shmem_team_sync(shmem_team_t team)`: every member has called it
/// (stores before it are visible; remote updates are not completed: that
/// is `shmem_quiet`'s job).
#[unsafe(no_mangle)]
pub extern "C" fn shmem_team_sync(team: TeamHandle) -> i32 {
    const CALL: &str = "shmem_team_sync";
    with_teams(CALL, |ctx, t| {
        let s = t.slot(CALL, team);
        let mut g = t.group(ctx, CALL, s);
        state::ok(CALL, algo::sync(ctx, &mut g));
        0
    })
}

/// `void shmem_sync_all(void)`: `shmem_team_sync(SHMEM_TEAM_WORLD)`.
#[unsafe(no_mangle)]
pub extern "C" fn shmem_sync_all() {
    const CALL: &str = "shmem_sync_all";
    with_teams(CALL, |ctx, t| {
        let mut g = t.group(ctx, CALL, WORLD_SLOT);
        state::ok(CALL, algo::sync(ctx, &mut g));
    });
}

/// A team's slot and its link group, for the collectives.
pub fn team_group<'a>(
    ctx: &Context,
    t: &'a mut Teams,
    call: &'static str,
    team: TeamHandle,
) -> Group<'a> {
    let s = t.slot(call, team);
    t.group(ctx, call, s)
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn triplets() {
        assert_eq!(check_triplet(0, 1, 4, 4), Ok(()));
        assert_eq!(check_triplet(0, 2, 2, 4), Ok(()));
        assert_eq!(check_triplet(1, 2, 2, 4), Ok(()));
        assert_eq!(
            check_triplet(1, 2, 3, 4),
            Err(SplitError::Range),
            "would wrap"
        );
        assert_eq!(check_triplet(3, -1, 4, 4), Ok(()), "reversed");
        assert_eq!(check_triplet(2, -1, 4, 4), Err(SplitError::Range));
        assert_eq!(check_triplet(2, 0, 1, 4), Ok(()));
        assert_eq!(check_triplet(2, 0, 2, 4), Err(SplitError::ZeroStride));
        assert_eq!(check_triplet(0, 1, 0, 4), Err(SplitError::Size));
        assert_eq!(check_triplet(-1, 1, 1, 4), Err(SplitError::Range));
        assert_eq!(check_triplet(4, 1, 1, 4), Err(SplitError::Range));
        assert_eq!(
            check_triplet(0, i32::MAX, 2, 4),
            Err(SplitError::Range),
            "no overflow"
        );
    }

    #[test]
    fn ranks_and_translation() {
        // World 0..8, parent = odd PEs (1,3,5,7), child = parent ranks 1,3 → PEs 3,7.
        let parent = (1i64, 2i64, 4u32);
        let (cs, cst) = (parent.0 + parent.1, 2 * parent.1);
        assert_eq!((cs, cst), (3, 4));
        assert_eq!(rank_in(cs, cst, 2, 3), Some(0));
        assert_eq!(rank_in(cs, cst, 2, 7), Some(1));
        assert_eq!(rank_in(cs, cst, 2, 5), None);
        assert_eq!(rank_in(cs, cst, 2, 11), None, "past the end");
        assert_eq!(rank_in(7, -2, 4, 1), Some(3), "negative stride");
        assert_eq!(rank_in(5, 0, 1, 5), Some(0));
        assert_eq!(rank_in(5, 0, 1, 6), None);
    }

    #[test]
    fn handles_round_trip_and_reject_strangers() {
        let mut t = Teams::new();
        t.n_slots = MAX_TEAMS;
        t.slots[3] = Some(Team {
            start: 0,
            stride: 1,
            size: 1,
            me: 0,
            counts: Counts::new(),
            config: TeamConfig::default(),
        });
        t.gens[3] = 7;
        let h = t.handle(3);
        assert_eq!(t.lookup(h), Some(3));
        t.gens[3] = 8;
        assert_eq!(t.lookup(h), None, "stale generation");
        assert_eq!(t.lookup(core::ptr::null_mut()), None);
        assert_eq!(t.lookup(0x1234 as TeamHandle), None);
        assert_eq!(t.free_mask() & (1 << 3), 0);
        assert_eq!(t.free_mask().count_ones() as usize, MAX_TEAMS - 1);
    }

    /// `shmem.h` spells the handles and sizes the code uses.
    #[test]
    fn header_matches_the_code() {
        let h = include_str!("../include/shmem.h");
        let t = Teams::new();
        let world = format!(
            "#define SHMEM_TEAM_WORLD ((shmem_team_t){:#X})",
            t.handle(WORLD_SLOT) as usize
        );
        let shared = format!(
            "#define SHMEM_TEAM_SHARED ((shmem_team_t){:#X})",
            t.handle(SHARED_SLOT) as usize
        );
        assert!(h.contains(&world.replace("0X", "0x")), "{world}");
        assert!(h.contains(&shared.replace("0X", "0x")), "{shared}");
        use crate::coll::api::{REDUCE_MIN_WRKDATA_SIZE, SYNC_SIZE, SYNC_VALUE};
        for name in [
            "SYNC",
            "BARRIER_SYNC",
            "BCAST_SYNC",
            "REDUCE_SYNC",
            "COLLECT_SYNC",
            "ALLTOALL_SYNC",
            "ALLTOALLS_SYNC",
        ] {
            let line = format!("#define SHMEM_{name}_SIZE {SYNC_SIZE}\n");
            assert!(h.contains(&line), "{line}");
        }
        assert!(h.contains(&format!(
            "#define SHMEM_REDUCE_MIN_WRKDATA_SIZE {REDUCE_MIN_WRKDATA_SIZE}\n"
        )));
        assert!(h.contains(&format!("#define SHMEM_SYNC_VALUE {SYNC_VALUE}L\n")));
        assert!(
            h.contains("#define SHMEM_TEAM_NUM_CONTEXTS (1L << 0)\n") && TEAM_NUM_CONTEXTS == 1
        );
    }

    #[test]
    fn pool_fits_the_heap() {
        assert_eq!(pool_slots(64 << 20), MAX_TEAMS);
        assert_eq!(pool_slots(1 << 20), (1 << 20) / 16 / SLOT_BYTES as usize);
        assert_eq!(pool_slots(8 << 20), 31, "the C tests' 8 MiB heap");
        assert_eq!(pool_slots(2 * 16 * SLOT_BYTES), 2);
        assert_eq!(pool_slots(2 * 16 * SLOT_BYTES - 1), 0);
        assert_eq!(pool_slots(4096), 0);
    }

    #[test]
    fn node_progressions() {
        assert_eq!(progression(&[2]), Some((2, 1, 1)));
        assert_eq!(progression(&[0, 1, 2, 3]), Some((0, 1, 4)));
        assert_eq!(progression(&[1, 3, 5]), Some((1, 2, 3)));
        assert_eq!(progression(&[0, 1, 3]), None);
        assert_eq!(progression(&[]), None);
    }
}
