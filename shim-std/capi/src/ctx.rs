//! Communication contexts: `shmem_ctx_create`, `shmem_team_create_ctx`,
//! `shmem_ctx_destroy`, `shmem_ctx_get_team`, and `shmem_team_ptr`.
//!
//! One [`Context`](switchyard::context::Context) serves the whole PE, so
//! every communication context shares its ordering and completion (stronger
//! than the spec asks: a quiet on one context completes them all). The
//! `shmem_ctx_*` RMA, AMO, signal, fence and quiet forms are inline in
//! `shmem.h`: for a context other than `SHMEM_CTX_DEFAULT` they first call
//! [`switchyard_ctx_check`], then the plain routine.
//!
//! A context is a slot of a fixed table ([`SLOTS`]); its handle is the slot
//! number plus 2 (0 is `SHMEM_CTX_INVALID`, 1 `SHMEM_CTX_DEFAULT`). A slot
//! records the options, the team (its handle and its PEs: a context made on
//! a team numbers PEs in that team) and, for `SHMEM_CTX_PRIVATE`, the
//! creating thread, so that [`switchyard_ctx_check`] can translate the PE
//! and refuse, naming the call: a handle that is no live context, a PE
//! outside the context's team, a private context used from another thread,
//! and a store (put, AMO) on a `SHMEM_CTX_NOSTORE` context. Fence and quiet
//! on `SHMEM_CTX_INVALID` do nothing.
//! `SHMEM_CTX_SERIALIZED` needs nothing more: the library serializes its
//! entries anyway.

use core::ffi::{c_int, c_long, c_void};

use switchyard_core::sync::atomic::{AtomicUsize, Ordering};

use crate::{
    setup, state,
    team::{self, TeamHandle},
};

/// `SHMEM_CTX_INVALID`.
pub const CTX_INVALID: usize = 0;
/// `SHMEM_CTX_DEFAULT`.
pub const CTX_DEFAULT: usize = 1;
/// `SHMEM_CTX_SERIALIZED`.
pub const CTX_SERIALIZED: c_long = 1;
/// `SHMEM_CTX_PRIVATE`.
pub const CTX_PRIVATE: c_long = 2;
/// `SHMEM_CTX_NOSTORE`.
pub const CTX_NOSTORE: c_long = 4;
/// Contexts that may exist at once (besides the default one).
pub const SLOTS: usize = 1024;
/// `SHMEM_TEAM_WORLD`'s handle (see `team`).
const TEAM_WORLD: usize = 0x5E7A_0000;

/// One context. `state` is 0 when the slot is free, otherwise its options
/// plus [`LIVE`].
struct Slot {
    state: AtomicUsize,
    /// The creating thread (`pthread_self`), for `SHMEM_CTX_PRIVATE`.
    owner: AtomicUsize,
    /// The team (`shmem_team_t` as an integer).
    team: AtomicUsize,
    /// The team's job PE of rank 0, rank distance and size ([`team::Team`]).
    start: AtomicUsize,
    stride: AtomicUsize,
    size: AtomicUsize,
}

/// Set in [`Slot::state`] while the context lives.
const LIVE: usize = 1 << 16;

static TABLE: [Slot; SLOTS] = [const {
    Slot {
        state: AtomicUsize::new(0),
        owner: AtomicUsize::new(0),
        team: AtomicUsize::new(0),
        start: AtomicUsize::new(0),
        stride: AtomicUsize::new(0),
        size: AtomicUsize::new(0),
    }
}; SLOTS];

fn me() -> usize {
    // SAFETY: pthread_self has no preconditions and cannot fail.
    unsafe { libc::pthread_self() as usize }
}

/// The slot of a live context handle.
fn live(h: usize) -> Option<(&'static Slot, usize)> {
    let s = TABLE.get(h.checked_sub(CTX_DEFAULT + 1)?)?;
    // SYNC POINT with the Release store of `state` in `create`.
    let st = s.state.load(Ordering::Acquire);
    (st & LIVE != 0).then_some((s, st))
}

/// Makes a context of `team` with `options` in `*ctx`: 0, or non-zero with
/// `*ctx = SHMEM_CTX_INVALID` for unknown options or a full table.
///
/// # Safety
///
/// `ctx` points to a writable `shmem_ctx_t` (NULL ends the job).
unsafe fn create(
    call: &'static str,
    team: TeamHandle,
    options: c_long,
    ctx: *mut *mut c_void,
) -> c_int {
    if ctx.is_null() {
        state::fatal(call, format_args!("ctx is NULL"));
    }
    let known = CTX_SERIALIZED | CTX_PRIVATE | CTX_NOSTORE;
    let h = if options & !known != 0 {
        if setup::debug() {
            eprintln!("switchyard: debug: {call}: unknown options {options:#x}");
        }
        None
    } else {
        // Slots change only inside the library (one thread at a time), so
        // the free slot found stays free.
        team::with_teams(call, |_, teams| {
            // A handle that is no team ends the job, as in every team call.
            let t = teams.team(teams.slot(call, team));
            let i = TABLE
                .iter()
                .position(|s| s.state.load(Ordering::Relaxed) == 0)?;
            let s = &TABLE[i];
            s.owner.store(me(), Ordering::Relaxed);
            s.team.store(team.addr(), Ordering::Relaxed);
            s.start.store(t.start as usize, Ordering::Relaxed);
            s.stride.store(t.stride as usize, Ordering::Relaxed);
            s.size.store(t.size as usize, Ordering::Relaxed);
            // SYNC POINT with the Acquire load in `live`.
            s.state.store(LIVE | options as usize, Ordering::Release);
            Some(i + CTX_DEFAULT + 1)
        })
    };
    // SAFETY: non-null, writable (caller). The handle is an opaque token,
    // never dereferenced.
    unsafe { ctx.write(core::ptr::without_provenance_mut(h.unwrap_or(CTX_INVALID))) };
    if h.is_some() { 0 } else { -1 }
}

/// `shmem_ctx_create`: a new context on `SHMEM_TEAM_WORLD` in `*ctx`;
/// returns 0, or non-zero (`*ctx = SHMEM_CTX_INVALID`) for options other
/// than `SHMEM_CTX_SERIALIZED`, `SHMEM_CTX_PRIVATE` and `SHMEM_CTX_NOSTORE`
/// or when [`SLOTS`] contexts exist already.
///
/// # Safety
///
/// `ctx` points to a writable `shmem_ctx_t` (NULL ends the job).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_ctx_create(options: c_long, ctx: *mut *mut c_void) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        create(
            "shmem_ctx_create",
            core::ptr::without_provenance_mut(TEAM_WORLD),
            options,
            ctx,
        )
    }
}

/// `shmem_team_create_ctx`: as [`shmem_ctx_create`], on `team`; non-zero
/// (`*ctx = SHMEM_CTX_INVALID`) for `SHMEM_TEAM_INVALID` too.
///
/// # Safety
///
/// `ctx` points to a writable `shmem_ctx_t` (NULL ends the job).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_team_create_ctx(
    team: TeamHandle,
    options: c_long,
    ctx: *mut *mut c_void,
) -> c_int {
    const CALL: &str = "shmem_team_create_ctx";
    if team.is_null() {
        if !ctx.is_null() {
            // SAFETY: non-null, writable (caller).
            unsafe { ctx.write(core::ptr::null_mut()) };
        }
        return -1;
    }
    // SAFETY: the caller's contract.
    unsafe { create(CALL, team, options, ctx) }
}

/// `shmem_ctx_destroy`: completes the PE's outstanding operations (a quiet)
/// and frees the context. `SHMEM_CTX_INVALID` does nothing; the default
/// context and handles of no live context end the job.
#[unsafe(no_mangle)]
pub extern "C" fn shmem_ctx_destroy(ctx: *mut c_void) {
    const CALL: &str = "shmem_ctx_destroy";
    let h = ctx as usize;
    if h == CTX_INVALID {
        return;
    }
    state::with(CALL, |c| {
        let Some((s, _)) = live(h).filter(|_| h != CTX_DEFAULT) else {
            state::fatal(
                CALL,
                format_args!("ctx = {ctx:p} is not a context from shmem_ctx_create"),
            )
        };
        state::ok(CALL, c.quiet());
        s.state.store(0, Ordering::Relaxed);
    })
}

/// `shmem_ctx_get_team`: the team `ctx` was made on (`SHMEM_TEAM_WORLD`
/// for the default context) in `*team`, and 0; non-zero with `*team =
/// SHMEM_TEAM_INVALID` for `SHMEM_CTX_INVALID` or a handle of no live
/// context.
///
/// # Safety
///
/// `team` points to a writable `shmem_team_t` (NULL ends the job).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_ctx_get_team(ctx: *mut c_void, team: *mut TeamHandle) -> c_int {
    const CALL: &str = "shmem_ctx_get_team";
    if team.is_null() {
        state::fatal(CALL, format_args!("team is NULL"));
    }
    let h = ctx as usize;
    let t = if h == CTX_DEFAULT {
        Some(TEAM_WORLD)
    } else {
        live(h).map(|(s, _)| s.team.load(Ordering::Relaxed))
    };
    // SAFETY: non-null, writable (caller).
    unsafe { team.write(core::ptr::without_provenance_mut(t.unwrap_or(0))) };
    if t.is_some() { 0 } else { -1 }
}

/// Checks a context handle before a `shmem_ctx_*` routine uses it and
/// returns the job PE of `pe`, a PE of the context's team (the header calls
/// it for every context but `SHMEM_CTX_DEFAULT`; `store` is non-zero for
/// puts and AMOs). Ends the job for a handle of no live context, a `pe`
/// outside the team, a `SHMEM_CTX_PRIVATE` context used from a thread other
/// than the one that made it, and a store on a `SHMEM_CTX_NOSTORE` context.
#[unsafe(no_mangle)]
pub extern "C" fn switchyard_ctx_check(ctx: *mut c_void, store: c_int, pe: c_int) -> c_int {
    const CALL: &str = "shmem_ctx_*";
    let h = ctx as usize;
    if h == CTX_DEFAULT {
        return pe;
    }
    let Some((s, st)) = live(h) else {
        state::fatal(
            CALL,
            format_args!("ctx = {ctx:p} is not a live context (SHMEM_CTX_INVALID, or destroyed)"),
        )
    };
    if st & CTX_PRIVATE as usize != 0 && s.owner.load(Ordering::Relaxed) != me() {
        state::fatal(
            CALL,
            format_args!(
                "ctx = {ctx:p} is SHMEM_CTX_PRIVATE to another thread (the one that created it)"
            ),
        );
    }
    if store != 0 && st & CTX_NOSTORE as usize != 0 {
        state::fatal(
            CALL,
            format_args!("ctx = {ctx:p} is SHMEM_CTX_NOSTORE: no puts or AMOs on it"),
        );
    }
    let size = s.size.load(Ordering::Relaxed);
    match usize::try_from(pe) {
        Ok(r) if r < size => {
            let start = s.start.load(Ordering::Relaxed) as i64;
            let stride = s.stride.load(Ordering::Relaxed) as i64;
            // Inside the job: the team's ranks are job PEs.
            (start + r as i64 * stride) as c_int
        }
        _ => state::fatal(
            CALL,
            format_args!("pe {pe} is not a PE of the team of ctx = {ctx:p} (0..{size})"),
        ),
    }
}

/// `shmem_team_ptr`: `shmem_ptr(dest, pe)` for `pe` numbered in `team`:
/// a local address of `dest` on that PE, or NULL when it has none here (or
/// `pe` is not in the team, or `team` is `SHMEM_TEAM_INVALID`).
#[unsafe(no_mangle)]
pub extern "C" fn shmem_team_ptr(team: TeamHandle, dest: *const c_void, pe: c_int) -> *mut c_void {
    let world =
        team::shmem_team_translate_pe(team, pe, core::ptr::without_provenance_mut(TEAM_WORLD));
    if world < 0 {
        return core::ptr::null_mut();
    }
    setup::shmem_ptr(dest, world)
}
