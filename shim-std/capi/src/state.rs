//! The process's one [`Context`] and the checks every entry point shares.
//!
//! * [`with`] runs a closure on the context. One thread at a time may be
//!   inside the library; below `SHMEM_THREAD_MULTIPLE` a second one entering
//!   at the same time is reported (it would otherwise race on the context)
//!   and ends the job; under it, the second one waits. The thread
//!   that called `shmem_init` enters without a locked instruction (see
//!   `guard`).
//! * [`sym`] turns a C pointer plus an element count into a checked handle:
//!   O(1) for a range in one of the blocks used last (see `blocks`).
//! * [`fatal`] prints `switchyard: CALL: message`, dumps the route trace
//!   into the job's directory and ends the job with a non-zero status (the
//!   launcher then stops the other PEs).

use core::{
    cell::{Cell, UnsafeCell},
    ffi::c_void,
    fmt,
};
use std::sync::atomic::{AtomicBool, Ordering};

use switchyard::context::{Context, Error, Plain, RESERVED, Sym, TraceDumper};

mod blocks;
mod guard;

use blocks::Blocks;
use guard::{Held, Overlap};

struct Global {
    ctx: UnsafeCell<Option<Context>>,
    /// Where the heap's own part is in this process, while a context is
    /// installed ([`Layout`]).
    layout: Cell<Layout>,
    /// Blocks looked up last.
    blocks: Blocks,
}

/// The heap's own part (where blocks are) in this process: `base + RESERVED
/// ..base + end`. `end` is 0 while no context is installed, so no address
/// is in it.
#[derive(Clone, Copy)]
struct Layout {
    base: usize,
    end: u64,
}

impl Layout {
    const NONE: Layout = Layout { base: 0, end: 0 };

    fn of(ctx: &Context) -> Layout {
        let (base, len) = ctx.local_heap();
        Layout {
            base: base as usize,
            // The heap's own part ends where the aliased variables start.
            end: ctx.symmetric_data().map_or(len, |d| d.offset),
        }
    }
}

// SAFETY: every field is only touched by the thread inside the library
// (`with`, `install`, `take`, and what they call: every `&Context` the C API
// holds comes from `with`), which `guard` serializes; its Acquire/Release
// pairs hand the state from one thread to the next like a mutex.
unsafe impl Sync for Global {}

static GLOBAL: Global = Global {
    ctx: UnsafeCell::new(None),
    layout: Cell::new(Layout::NONE),
    blocks: Blocks::new(),
};

/// Set while a fatal error is being reported, so an `atexit` handler that
/// calls back into the library does not report a second one.
static DYING: AtomicBool = AtomicBool::new(false);

#[inline(always)]
fn hold(call: &'static str) -> Held {
    match guard::enter() {
        Ok(h) => h,
        Err(e) => overlap(call, e),
    }
}

#[cold]
#[inline(never)]
fn overlap(call: &'static str, e: Overlap) -> ! {
    match e {
        Overlap::OtherThread => fatal(
            call,
            format_args!(
                "called while another thread is inside the library (calls from \
                 several threads at once need shmem_init_thread(SHMEM_THREAD_MULTIPLE))"
            ),
        ),
        Overlap::Reentered => fatal(
            call,
            format_args!(
                "called from inside the library on the same thread (from a signal handler?)"
            ),
        ),
    }
}

fn slot() -> &'static mut Option<Context> {
    // SAFETY: only called with the guard held (see `Global`); the reference
    // does not outlive the `Held` guard of the caller.
    unsafe { &mut *GLOBAL.ctx.get() }
}

/// Runs `f` on the context. Ends the job when the library is not initialized.
///
/// Always inlined: each instance serves one closure, so inlining it into its
/// entry point only removes a call, its register saves and the moving of
/// the arguments (about 30 instructions of an 8-byte `shmem_putmem`).
#[inline(always)]
pub fn with<R>(call: &'static str, f: impl FnOnce(&mut Context) -> R) -> R {
    let _held = hold(call);
    match slot() {
        Some(ctx) => f(ctx),
        None => not_initialized(call),
    }
}

/// Inside the library until dropped: [`with`] without a closure, for the
/// entry points where the closure's own stack frame showed in the profile
/// (an 8-byte `shmem_putmem` or `shmem_getmem`). The body runs in the entry
/// point's frame.
pub struct Entered {
    _held: Held,
    call: &'static str,
}

impl Entered {
    /// The context. Ends the job when the library is not initialized.
    #[inline(always)]
    pub fn ctx(&mut self) -> &mut Context {
        match slot() {
            Some(ctx) => ctx,
            None => not_initialized(self.call),
        }
    }
}

/// Enters the library for `call` (see [`Entered`]).
#[inline(always)]
pub fn enter(call: &'static str) -> Entered {
    Entered {
        _held: hold(call),
        call,
    }
}

#[cold]
#[inline(never)]
fn not_initialized(call: &'static str) -> ! {
    if crate::setup::finalized() {
        fatal(call, format_args!("called after shmem_finalize"))
    }
    fatal(call, format_args!("called before shmem_init"))
}

/// Whether a context is installed (`shmem_init` ran, `shmem_finalize` not yet).
pub fn initialized() -> bool {
    let _held = hold("shmem_query_initialized");
    slot().is_some()
}

/// Installs the context made by `shmem_init`. Returns false (and drops
/// `ctx`) when one is installed already. The calling thread becomes the
/// one that enters without a locked instruction (see `guard`).
pub fn install(ctx: Context) -> bool {
    let _held = hold("shmem_init");
    let s = slot();
    if s.is_some() {
        return false;
    }
    GLOBAL.layout.set(Layout::of(&ctx));
    GLOBAL.blocks.forget();
    let _ = DUMPER.set(ctx.trace_dumper());
    let _ = JOB.set(ctx.job_id());
    if ME.set(ctx.my_pe()).is_ok() && std::env::var_os(switchyard_bootstrap::vars::JOB_ID).is_none()
    {
        // SAFETY: registers a plain `extern "C" fn()` with no captured
        // state; it only unlinks files.
        let _ = unsafe { libc::atexit(remove_own_objects_at_exit) };
    }
    *s = Some(ctx);
    guard::own();
    true
}

/// Waits until `done` gives a value, making progress between polls; ends
/// the job naming `call` as a wait on the context does (a dead PE, the op
/// timeout, an error of `done`).
///
/// Below `SHMEM_THREAD_MULTIPLE` the whole wait is one entry. Under it the
/// wait is a series of short entries with the library left in between, so
/// the other threads of this PE get in meanwhile (one of them may be the
/// one to satisfy the wait); the dead-PE checks run in every entry.
pub fn wait<R>(
    call: &'static str,
    mut done: impl FnMut(&mut Context) -> switchyard::context::Result<Option<R>>,
) -> R {
    /// Polls per entry under `SHMEM_THREAD_MULTIPLE` (the context's wait
    /// checks for dead PEs every 64 pauses).
    const POLLS: u32 = 65;
    let multiple = guard::waiting_allowed();
    loop {
        let got = with(call, |ctx| {
            let (mut got, mut polls) = (None, 0u32);
            ok(
                call,
                ctx.wait_for(call, |c| {
                    got = done(c)?;
                    polls += 1;
                    Ok(got.is_some() || (multiple && polls >= POLLS))
                }),
            );
            got
        });
        if let Some(v) = got {
            return v;
        }
        std::thread::yield_now();
    }
}

/// Grants `SHMEM_THREAD_MULTIPLE`: from now on a thread entering while
/// another is inside waits for it instead of ending the job (see `guard`).
/// Called by `shmem_init_thread` right after [`install`], before the
/// program starts other threads.
pub fn allow_threads() {
    guard::allow_waiting();
}

/// Removes the context (for `shmem_finalize`).
pub fn take() -> Option<Context> {
    let _held = hold("shmem_finalize");
    GLOBAL.layout.set(Layout::NONE);
    GLOBAL.blocks.forget();
    slot().take()
}

/// The size of the symmetric heap's own part (where blocks are), in
/// bytes. Ends the job when the library is not initialized.
pub fn heap_size() -> u64 {
    with("shmem_align", |_| GLOBAL.layout.get().end)
}

/// Forgets the blocks [`sym`] remembers: call before a block is freed
/// (`shmem_free`, `shmem_realloc`).
pub fn blocks_changed() {
    GLOBAL.blocks.forget();
}

/// The route trace's dumper of the PE's context, once installed: a fatal
/// end dumps the trace into the job's directory (it needs no context, so
/// it works from inside a call, or a panic, as well).
static DUMPER: std::sync::OnceLock<TraceDumper> = std::sync::OnceLock::new();

/// The job's id, set by `shmem_init` (read by `shmem_global_exit` without
/// the context, which another thread may hold).
static JOB: std::sync::OnceLock<u64> = std::sync::OnceLock::new();

/// This PE's number, set by `shmem_init` (for the objects removed at exit).
static ME: std::sync::OnceLock<u32> = std::sync::OnceLock::new();

/// At exit under a resource manager (registered by `install` when no
/// launcher of ours runs the job): a program that returns from `main`
/// without `shmem_finalize` leaves its context in place, whose objects no
/// launcher removes after the job. This removes this PE's own (its heap,
/// stats segment and trace rings; after `shmem_finalize` they are gone
/// already). Peers' mappings of them stay valid while they run.
extern "C" fn remove_own_objects_at_exit() {
    if let (Some(job), Some(&pe)) = (job_id(), ME.get()) {
        let name = switchyard_shm::object_name(job, pe);
        let paths = [
            std::path::Path::new(switchyard_shm::SHM_DIR).join(&name),
            std::path::Path::new(switchyard_shm::HUGE_DIR).join(&name),
            switchyard::statseg::path(job, pe),
            switchyard_shm::trace_object::trace_object_path(job, pe),
        ];
        for p in paths {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// The job's id once `shmem_init` ran.
pub fn job_id() -> Option<u64> {
    JOB.get().copied()
}

/// Under a resource manager (srun, mpirun: no `switchyard run` launcher,
/// which removes a job's objects when it ends), removes this node's
/// shared-memory objects of the job (every local PE's heap, stats and
/// trace rings) before a fatal end or `shmem_global_exit`: the resource
/// manager then kills the other PEs, which cannot, and a node would hold
/// them until a later job's sweep of objects whose creator is dead. The
/// other PEs' mappings stay valid until they end. Does nothing under our
/// launcher or before `shmem_init`.
pub fn remove_node_objects_without_launcher() {
    if std::env::var_os(switchyard_bootstrap::vars::JOB_ID).is_some() {
        return;
    }
    if let Some(job) = job_id() {
        for dir in [switchyard_shm::SHM_DIR, switchyard_shm::HUGE_DIR] {
            let _ = switchyard_shm::remove_job_objects(std::path::Path::new(dir), job);
        }
    }
}

/// Dumps the route trace into the job's directory as
/// `trace-pe<ME>-<why>.sytrace` (once per process; reported by a `tracing`
/// warning), when a context was installed.
pub fn dump_trace(why: &str) {
    static DUMPED: AtomicBool = AtomicBool::new(false);
    if let Some(d) = DUMPER.get()
        && !DUMPED.swap(true, Ordering::AcqRel)
    {
        d.dump(why);
    }
}

/// Prints `switchyard: CALL: message` on stderr, dumps the route trace
/// (`trace-pe<ME>-fatal.sytrace` in the job's directory), under a resource
/// manager removes the node's objects of the job
/// ([`remove_node_objects_without_launcher`]), and ends the process with
/// status 1 without running `atexit` handlers (they may call back in).
pub fn fatal(call: &str, msg: fmt::Arguments<'_>) -> ! {
    if !DYING.swap(true, Ordering::AcqRel) {
        eprintln!("switchyard: {call}: {msg}");
        dump_trace("fatal");
        remove_node_objects_without_launcher();
    }
    // SAFETY: fflush(NULL) flushes every C stdio stream; _exit never returns.
    unsafe {
        libc::fflush(core::ptr::null_mut());
        libc::_exit(1)
    }
}

/// The value of a context call, or the end of the job with its error.
#[inline]
pub fn ok<T>(call: &'static str, r: switchyard::context::Result<T>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => failed(call, e),
    }
}

#[cold]
#[inline(never)]
fn failed(call: &'static str, e: Error) -> ! {
    fatal(call, format_args!("{e}"))
}

/// Checks a C `pe` argument against the job size.
#[inline]
pub fn pe(ctx: &Context, call: &'static str, pe: i32) -> u32 {
    match u32::try_from(pe) {
        Ok(p) if p < ctx.n_pes() => p,
        _ => bad_pe(ctx, call, pe),
    }
}

#[cold]
#[inline(never)]
fn bad_pe(ctx: &Context, call: &'static str, pe: i32) -> ! {
    fatal(
        call,
        format_args!("pe {pe} is not a PE of this job (0..{})", ctx.n_pes()),
    )
}

/// Why a C address is not a usable symmetric range ([`try_sym`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SymError {
    /// The range (this many bytes, `usize::MAX` when the size overflows) is
    /// not inside symmetric memory.
    NotSymmetric {
        /// Bytes of the range.
        bytes: usize,
    },
    /// Not aligned for the element type.
    Misaligned,
    /// In the symmetric heap, but not inside one allocated block: it runs
    /// past the end of the block it starts in (`Some((offset, bytes))` of
    /// that block), or starts in memory no block holds (`None`: never
    /// allocated, or freed).
    OutsideBlock {
        /// The block the range starts in.
        block: Option<(u64, u64)>,
    },
}

/// Checks that the `bytes` at heap offset `off` lie inside one allocated
/// block when they are in the heap's own part (the global variables are
/// one object each, of sizes only the program knows). Without this, a
/// count too large for its object (an undersized `pSync` or `pWrk`, a
/// `dest` too short for `nelems`) silently overwrote the next block.
/// A block found is remembered (`blocks`), so the next check is O(1).
fn in_block(ctx: &Context, off: u64, bytes: usize) -> Result<(), SymError> {
    if bytes == 0 || off >= GLOBAL.layout.get().end {
        return Ok(());
    }
    let end = off.saturating_add(bytes as u64);
    if GLOBAL.blocks.holds(off, end) {
        return Ok(());
    }
    match ctx.block_of(off) {
        Some((start, len)) if end <= start + len => {
            GLOBAL.blocks.remember(start, len);
            Ok(())
        }
        block => Err(SymError::OutsideBlock { block }),
    }
}

/// [`sym`] without ending the job: the checked handle, or why there is none
/// (for queries such as `shmem_addr_accessible`).
pub fn try_sym<T: Plain>(
    ctx: &Context,
    ptr: *const c_void,
    count: usize,
) -> Result<Sym<T>, SymError> {
    if let Some(s) = remembered(ctx, ptr, count) {
        return Ok(s);
    }
    let bytes = count.checked_mul(core::mem::size_of::<T>());
    let off = offset_of(ctx, ptr as usize, bytes).ok_or(SymError::NotSymmetric {
        bytes: bytes.unwrap_or(usize::MAX),
    })?;
    let s = ctx
        .sym_at::<T>(off, count)
        .map_err(|_| SymError::Misaligned)?;
    in_block(ctx, off, bytes.unwrap_or(usize::MAX))?;
    Ok(s)
}

/// The handle for `count` elements of `T` at `ptr` when they lie inside one
/// of the blocks looked up last and are aligned: the common case, a few
/// compares. `None` sends the caller to the full check.
#[inline(always)]
fn remembered<T: Plain>(ctx: &Context, ptr: *const c_void, count: usize) -> Option<Sym<T>> {
    let bytes = count.checked_mul(core::mem::size_of::<T>())? as u64;
    // An address below the heap wraps to an offset no block holds.
    let off = (ptr as usize).wrapping_sub(GLOBAL.layout.get().base) as u64;
    if !GLOBAL.blocks.holds(off, off.checked_add(bytes)?) {
        return None;
    }
    // Blocks lie inside the heap: this checks the alignment.
    ctx.sym_at::<T>(off, count).ok()
}

/// A checked handle for `count` elements of `T` at the C address `ptr`
/// (argument `arg` of `call`): the range must lie inside one allocated block
/// of the symmetric heap or in the executable's global and static variables
/// ([`crate::globals`]), and be aligned for `T`. Anything else ends the job
/// naming the call and the argument.
#[inline]
pub fn sym<T: Plain>(
    ctx: &Context,
    call: &'static str,
    arg: &'static str,
    ptr: *const c_void,
    count: usize,
) -> Sym<T> {
    match remembered(ctx, ptr, count) {
        Some(s) => s,
        None => sym_checked(ctx, call, arg, ptr, count),
    }
}

/// [`sym`] for a range in no remembered block: the full check.
#[inline(never)]
fn sym_checked<T: Plain>(
    ctx: &Context,
    call: &'static str,
    arg: &'static str,
    ptr: *const c_void,
    count: usize,
) -> Sym<T> {
    let addr = ptr as usize;
    let bytes = count.checked_mul(core::mem::size_of::<T>());
    match offset_of(ctx, addr, bytes) {
        Some(off) => match ctx.sym_at::<T>(off, count) {
            Ok(s) => match in_block(ctx, off, bytes.unwrap_or(usize::MAX)) {
                Ok(()) => s,
                Err(e) => outside_block(ctx, call, arg, ptr, bytes, e),
            },
            Err(_) => misaligned::<T>(call, arg, ptr),
        },
        None => not_symmetric(ctx, call, arg, ptr, bytes),
    }
}

#[cold]
#[inline(never)]
fn misaligned<T>(call: &'static str, arg: &'static str, ptr: *const c_void) -> ! {
    fatal(
        call,
        format_args!(
            "{arg} = {ptr:p} is not aligned for a {}-byte element",
            core::mem::align_of::<T>()
        ),
    )
}

#[cold]
#[inline(never)]
fn not_symmetric(
    ctx: &Context,
    call: &'static str,
    arg: &'static str,
    ptr: *const c_void,
    bytes: Option<usize>,
) -> ! {
    let (base, len) = ctx.local_heap();
    let base = base as usize;
    let data = ctx
        .symmetric_data()
        .map(|d| {
            format!(
                " or the global variables {:#x}..{:#x}",
                d.addr,
                d.addr + d.len as usize
            )
        })
        .unwrap_or_default();
    fatal(
        call,
        format_args!(
            "{arg} = {ptr:p} ({} bytes) is not symmetric: not inside the symmetric heap \
             {:#x}..{:#x}{data}",
            bytes.map_or_else(|| "too many".to_string(), |b| b.to_string()),
            base + RESERVED as usize,
            base + len as usize
        ),
    )
}

/// A private buffer the library writes (the destination of a get) that
/// starts in the symmetric heap's own part must lie inside one allocated
/// block there, like a symmetric argument; anything else ends the job naming
/// the call and the argument. Buffers elsewhere are the caller's business
/// (see the `cbuf` module).
#[inline]
pub fn check_private<T>(
    ctx: &Context,
    call: &'static str,
    arg: &'static str,
    p: *const T,
    count: usize,
) {
    let bytes = count.saturating_mul(core::mem::size_of::<T>());
    let layout = GLOBAL.layout.get();
    let off = (p as u64).wrapping_sub(layout.base as u64);
    if bytes == 0 || (p as usize) < layout.base || off >= layout.end {
        return;
    }
    if let Err(e) = in_block(ctx, off, bytes) {
        outside_block(ctx, call, arg, p.cast(), Some(bytes), e);
    }
}

#[cold]
#[inline(never)]
fn outside_block(
    ctx: &Context,
    call: &'static str,
    arg: &'static str,
    ptr: *const c_void,
    bytes: Option<usize>,
    e: SymError,
) -> ! {
    let base = ctx.local_heap().0 as usize;
    let bytes = bytes.unwrap_or(usize::MAX);
    match e {
        SymError::OutsideBlock {
            block: Some((start, len)),
        } => fatal(
            call,
            format_args!(
                "{arg} = {ptr:p} ({bytes} bytes) runs past the end of its symmetric block \
                 {:#x}..{:#x} ({len} bytes from shmem_malloc)",
                base + start as usize,
                base + (start + len) as usize
            ),
        ),
        _ => fatal(
            call,
            format_args!(
                "{arg} = {ptr:p} ({bytes} bytes) is symmetric heap memory that no block holds \
                 (not from shmem_malloc, or freed)"
            ),
        ),
    }
}

/// The symmetric offset of `bytes` bytes at `addr`, when they lie wholly in
/// the heap's usable part or in the symmetric global variables.
pub fn offset_of(ctx: &Context, addr: usize, bytes: Option<usize>) -> Option<u64> {
    let bytes = bytes? as u64;
    let Layout { base, end } = GLOBAL.layout.get();
    let off = (addr as u64).wrapping_sub(base as u64);
    if addr >= base && off >= RESERVED && off.checked_add(bytes)? <= end {
        return Some(off);
    }
    let d = ctx.symmetric_data()?;
    let rel = (addr as u64).checked_sub(d.addr as u64)?;
    (rel.checked_add(bytes)? <= d.len).then(|| d.offset + rel)
}
