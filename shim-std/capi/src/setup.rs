//! Setup and query: `shmem_init`/`shmem_finalize` (and the thread-level
//! forms), `shmem_my_pe`/`shmem_n_pes`, accessibility queries, `shmem_ptr`,
//! `shmem_global_exit`, library info, and the `SHMEM_*` environment.

use core::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use switchyard::{
    config::{Config, format_size, parse_size},
    context::{Context, InitOptions},
};

use crate::{globals, state};

/// `SHMEM_THREAD_SINGLE`.
pub const SHMEM_THREAD_SINGLE: c_int = 0;
/// `SHMEM_THREAD_FUNNELED`.
pub const SHMEM_THREAD_FUNNELED: c_int = 1;
/// `SHMEM_THREAD_SERIALIZED`.
pub const SHMEM_THREAD_SERIALIZED: c_int = 2;
/// `SHMEM_THREAD_MULTIPLE`: the most this library provides (calls
/// serialized by a lock).
pub const SHMEM_THREAD_MULTIPLE: c_int = 3;

/// The name `shmem_info_get_name` reports (`SHMEM_VENDOR_STRING`).
pub const VENDOR: &str = "switchyard";
/// `SHMEM_MAX_NAME_LEN`.
pub const MAX_NAME_LEN: usize = 256;

static FINALIZED: AtomicBool = AtomicBool::new(false);
/// The thread level provided: `SHMEM_THREAD_SERIALIZED` after `shmem_init`,
/// what `shmem_init_thread` returned in `*provided` after it.
static PROVIDED: AtomicI32 = AtomicI32::new(SHMEM_THREAD_SERIALIZED);
static DEBUG: AtomicBool = AtomicBool::new(false);

/// Whether `shmem_finalize` ran.
pub(crate) fn finalized() -> bool {
    FINALIZED.load(Ordering::Relaxed)
}

/// Whether `SHMEM_DEBUG` asked for debug messages.
pub fn debug() -> bool {
    DEBUG.load(Ordering::Relaxed)
}

/// Whether an environment variable is set to something that means yes
/// (anything but empty, `0`, `no`, `off`, `false`).
fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| {
        !matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "" | "0" | "no" | "off" | "false"
        )
    })
}

/// The configuration: `SWITCHYARD_*` as for any switchyard program, then
/// `SHMEM_SYMMETRIC_SIZE` (bytes, with an optional `K`/`M`/`G`/`T` suffix)
/// for the symmetric heap size when it is set. `op_timeout` keeps the
/// library's default, as in Rust: waits on live PEs (`wait_until`, locks,
/// barriers, collectives) never time out, it bounds only waits for a
/// peer's answer.
fn config(call: &'static str) -> Config {
    let mut cfg = match Config::from_env() {
        Ok(c) => c,
        Err(e) => state::fatal(call, format_args!("{e}")),
    };
    if let Ok(v) = std::env::var("SHMEM_SYMMETRIC_SIZE")
        && !v.trim().is_empty()
    {
        match parse_size(v.trim()) {
            Some(n) if n >= 4096 => cfg.heap_size = n,
            _ => state::fatal(
                call,
                format_args!(
                    "SHMEM_SYMMETRIC_SIZE={v}: expected a size of at least 4K, such as \
                     65536, 512K, 64M or 1G"
                ),
            ),
        }
    }
    cfg
}

fn init(call: &'static str) {
    if state::initialized() {
        return;
    }
    if FINALIZED.load(Ordering::Relaxed) {
        state::fatal(
            call,
            format_args!("called after shmem_finalize (a PE joins the job once)"),
        );
    }
    // A panic must not unwind into C: report it like any fatal error.
    std::panic::set_hook(Box::new(|info| {
        state::fatal("switchyard", format_args!("internal error: {info}"))
    }));
    DEBUG.store(env_flag("SHMEM_DEBUG"), Ordering::Relaxed);
    // The library's events (fallbacks, lost peers, trace dumps) on stderr,
    // as SWITCHYARD_LOG says (default: warnings, each once).
    switchyard::logging::install();
    let cfg = config(call);
    // The executable's global and static variables become symmetric.
    // SAFETY: `shmem_init` runs before the program starts other threads (its
    // documented precondition, see `globals`).
    let opts = match unsafe { globals::alias() } {
        Some(a) => InitOptions::default().symmetric_data(a),
        None => InitOptions::default(),
    };
    let ctx = state::ok(call, Context::with_options(&cfg, opts));
    let (me, n) = (ctx.my_pe(), ctx.n_pes());
    if me == 0 && env_flag("SHMEM_INFO") {
        print_info(&cfg);
    }
    if debug() {
        let (base, len) = ctx.local_heap();
        eprintln!(
            "switchyard: debug: PE {me} of {n}: symmetric heap at {base:p}, {} ({len} bytes)",
            format_size(len)
        );
        for w in ctx.warnings() {
            eprintln!("switchyard: debug: PE {me}: {w}");
        }
    }
    if !state::install(ctx) {
        state::fatal(call, format_args!("initialized twice at once"));
    }
    // The teams' scratch pool: collective, so every PE allocates it here.
    crate::team::init(call);
}

fn print_info(cfg: &Config) {
    println!(
        "switchyard OpenSHMEM {}.{} ({VENDOR} {})\n\
         environment:\n  \
         SHMEM_SYMMETRIC_SIZE  symmetric heap bytes per PE (K/M/G/T suffixes): {}\n  \
         SHMEM_INFO            print this at init (PE 0): set\n  \
         SHMEM_DEBUG           debug messages on stderr: {}\n  \
         SWITCHYARD_*          the transport configuration (`switchyard info` lists it)\n\
         threading: up to SHMEM_THREAD_MULTIPLE (calls from several threads serialized)\n\
         operation timeout: {:?} (waits for a peer's answer: gets, fetching atomics, quiet; waits on live PEs never time out; SWITCHYARD_OP_TIMEOUT sets it; a dead PE ends a wait at once)",
        1,
        5,
        env!("CARGO_PKG_VERSION"),
        format_size(cfg.heap_size),
        if debug() { "set" } else { "unset" },
        cfg.op_timeout,
    );
}

/// `shmem_init`: joins the job (collective). A second call does nothing.
#[unsafe(no_mangle)]
pub extern "C" fn shmem_init() {
    init("shmem_init");
}

/// `shmem_init_thread`: as [`shmem_init`]; `*provided` is set to
/// `requested` (clamped to `SHMEM_THREAD_SINGLE..=SHMEM_THREAD_MULTIPLE`).
/// Returns 0. Under `SHMEM_THREAD_MULTIPLE` calls from several threads at
/// once are serialized (each waits for the one inside); below it, two
/// threads inside at once end the job.
///
/// # Safety
///
/// `provided` is NULL or points to a writable `int`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_init_thread(requested: c_int, provided: *mut c_int) -> c_int {
    let first = !state::initialized();
    init("shmem_init_thread");
    let level = requested.clamp(SHMEM_THREAD_SINGLE, SHMEM_THREAD_MULTIPLE);
    if first {
        if level == SHMEM_THREAD_MULTIPLE {
            state::allow_threads();
        }
        PROVIDED.store(level, Ordering::Relaxed);
    }
    if !provided.is_null() {
        // SAFETY: non-null, writable (caller).
        unsafe { provided.write(PROVIDED.load(Ordering::Relaxed)) };
    }
    0
}

/// `shmem_query_thread`: the thread level provided (the one
/// `shmem_init_thread` returned, `SHMEM_THREAD_SERIALIZED` after
/// `shmem_init`).
///
/// # Safety
///
/// `provided` is NULL or points to a writable `int`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_query_thread(provided: *mut c_int) {
    if !provided.is_null() {
        // SAFETY: non-null, writable (caller).
        unsafe { provided.write(PROVIDED.load(Ordering::Relaxed)) };
    }
}

/// `shmem_finalize`: leaves the job (collective: a barrier first). Calls
/// after the first do nothing.
#[unsafe(no_mangle)]
pub extern "C" fn shmem_finalize() {
    if let Some(mut ctx) = state::take() {
        FINALIZED.store(true, Ordering::Relaxed);
        if crate::stats::print_at_finalize() {
            crate::stats::print(&mut ctx);
        }
        state::ok("shmem_finalize", ctx.finalize());
    }
}

/// `shmem_query_initialized`: 1 between `shmem_init` and `shmem_finalize`.
///
/// # Safety
///
/// `initialized` points to a writable `int`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_query_initialized(initialized: *mut c_int) {
    let v = c_int::from(state::initialized());
    if !initialized.is_null() {
        // SAFETY: non-null, writable (caller).
        unsafe { initialized.write(v) };
    }
}

/// `shmem_query_finalized`: 1 once `shmem_finalize` ran.
///
/// # Safety
///
/// `finalized` points to a writable `int`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_query_finalized(finalized: *mut c_int) {
    let v = c_int::from(FINALIZED.load(Ordering::Relaxed));
    if !finalized.is_null() {
        // SAFETY: non-null, writable (caller).
        unsafe { finalized.write(v) };
    }
}

/// `shmem_my_pe`: this PE's number.
#[unsafe(no_mangle)]
pub extern "C" fn shmem_my_pe() -> c_int {
    state::with("shmem_my_pe", |ctx| ctx.my_pe() as c_int)
}

/// `shmem_n_pes`: the number of PEs.
#[unsafe(no_mangle)]
pub extern "C" fn shmem_n_pes() -> c_int {
    state::with("shmem_n_pes", |ctx| ctx.n_pes() as c_int)
}

/// `shmem_pe_accessible`: 1 when `pe` is a PE of the job (every PE is
/// reachable through some transport), else 0.
#[unsafe(no_mangle)]
pub extern "C" fn shmem_pe_accessible(pe: c_int) -> c_int {
    state::with("shmem_pe_accessible", |ctx| {
        c_int::from(u32::try_from(pe).is_ok_and(|p| p < ctx.n_pes()))
    })
}

/// `shmem_addr_accessible`: 1 when `addr` is symmetric and `pe` a PE of the
/// job, else 0.
#[unsafe(no_mangle)]
pub extern "C" fn shmem_addr_accessible(addr: *const c_void, pe: c_int) -> c_int {
    state::with("shmem_addr_accessible", |ctx| {
        let pe_ok = u32::try_from(pe).is_ok_and(|p| p < ctx.n_pes());
        c_int::from(pe_ok && state::try_sym::<u8>(ctx, addr, 1).is_ok())
    })
}

/// `shmem_ptr`: a local address of the symmetric `dest` on `pe` when that
/// PE's memory is mapped here (this PE, or a same-node PE over shared
/// memory), else NULL.
#[unsafe(no_mangle)]
pub extern "C" fn shmem_ptr(dest: *const c_void, pe: c_int) -> *mut c_void {
    const CALL: &str = "shmem_ptr";
    state::with(CALL, |ctx| {
        let pe = state::pe(ctx, CALL, pe);
        let s = state::sym::<u8>(ctx, CALL, "dest", dest, 1);
        match ctx.peer_heap(pe) {
            Some((base, len)) if s.offset() < len => {
                // SAFETY: the offset is inside that PE's mapped heap (checked).
                unsafe { base.add(s.offset() as usize).cast() }
            }
            _ => core::ptr::null_mut(),
        }
    })
}

/// `shmem_global_exit`: ends the whole job with `status`. The launcher
/// (`switchyard run`) is told through a marker file of the job (see
/// [`switchyard_shm::global_exit_path`]) and stops the other PEs; under a
/// PMIx server (srun, mpirun), `PMIx_Abort` asks it to, after this PE
/// removed the job's shared-memory objects on its node (no launcher of
/// ours is there to; other nodes' stay until a later job's sweep of
/// objects whose creator is dead). Then it exits with
/// `status`. A non-zero status is a fatal end: the route trace is dumped
/// first (`trace-pe<ME>-global-exit.sytrace` in the job's directory).
#[unsafe(no_mangle)]
pub extern "C" fn shmem_global_exit(status: c_int) -> ! {
    if status != 0 {
        state::dump_trace("global-exit");
    }
    let rank = std::env::var(switchyard_bootstrap::vars::RANK).unwrap_or_default();
    if let Some(job) = std::env::var(switchyard_bootstrap::vars::JOB_ID)
        .ok()
        .and_then(|j| u64::from_str_radix(&j, 16).ok())
    {
        let path = switchyard_shm::global_exit_path(job);
        // The first PE to call it decides the status.
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            use std::io::Write;
            let _ = writeln!(f, "{} {status}", rank.trim());
        }
    } else {
        // Under srun or mpirun (PMIx, in a build with the `pmix` feature):
        // the resource manager ends the job, and no launcher of ours
        // removes its shared-memory objects after it. The PEs it kills
        // cannot: this one removes this node's objects of the job (the
        // heaps, stats and trace rings; the other PEs' mappings stay
        // valid until they end), so a node is not left holding them until
        // a later job's stale sweep. Output first, since the abort may
        // kill this process before it returns.
        state::remove_node_objects_without_launcher();
        // SAFETY: flushes every C stdio stream.
        unsafe { libc::fflush(core::ptr::null_mut()) };
        let _ = switchyard_bootstrap::pmix_abort(status, &format!("shmem_global_exit({status})"));
    }
    // SAFETY: flushes every C stdio stream; `_exit` does not return.
    unsafe {
        libc::fflush(core::ptr::null_mut());
        libc::_exit(status)
    }
}

/// `shmem_info_get_version`: 1.5.
///
/// # Safety
///
/// `major` and `minor` are NULL or point to writable `int`s.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_info_get_version(major: *mut c_int, minor: *mut c_int) {
    if !major.is_null() {
        // SAFETY: non-null, writable (caller).
        unsafe { major.write(1) };
    }
    if !minor.is_null() {
        // SAFETY: non-null, writable (caller).
        unsafe { minor.write(5) };
    }
}

/// `shmem_info_get_name`: copies `SHMEM_VENDOR_STRING` with its NUL into
/// `name` (at most `SHMEM_MAX_NAME_LEN` bytes).
///
/// # Safety
///
/// `name` is NULL or points to `SHMEM_MAX_NAME_LEN` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_info_get_name(name: *mut c_char) {
    if name.is_null() {
        return;
    }
    let v = VENDOR.as_bytes();
    let n = v.len().min(MAX_NAME_LEN - 1);
    // SAFETY: `name` has room for MAX_NAME_LEN bytes (caller); `n + 1` fit.
    unsafe {
        core::ptr::copy_nonoverlapping(v.as_ptr(), name.cast::<u8>(), n);
        name.add(n).write(0);
    }
}

/// `start_pes` (deprecated): [`shmem_init`]; the argument is ignored.
#[unsafe(no_mangle)]
pub extern "C" fn start_pes(_npes: c_int) {
    init("start_pes");
}

/// `_my_pe` (deprecated): [`shmem_my_pe`].
#[unsafe(no_mangle)]
pub extern "C" fn _my_pe() -> c_int {
    state::with("_my_pe", |ctx| ctx.my_pe() as c_int)
}

/// `_num_pes` (deprecated): [`shmem_n_pes`].
#[unsafe(no_mangle)]
pub extern "C" fn _num_pes() -> c_int {
    state::with("_num_pes", |ctx| ctx.n_pes() as c_int)
}

/// `shmemx_trace_dump`: writes this PE's route trace (the newest records of
/// its initiator and target rings) to a new file at `path` (0600; it must not
/// exist), for `switchyard trace FILE`. Returns 0, or -1 when `path` is NULL
/// or not UTF-8, or the file cannot be written (the reason is a warning on
/// the `SWITCHYARD_LOG` subscriber).
///
/// # Safety
///
/// `path` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmemx_trace_dump(path: *const std::ffi::c_char) -> c_int {
    if path.is_null() {
        return -1;
    }
    // SAFETY: non-null and NUL-terminated (caller).
    let Ok(p) = unsafe { std::ffi::CStr::from_ptr(path) }.to_str() else {
        return -1;
    };
    let r = state::with("shmemx_trace_dump", |ctx| {
        ctx.dump_trace(std::path::Path::new(p))
    });
    match r {
        Ok(()) => 0,
        Err(e) => {
            tracing::warn!("shmemx_trace_dump({p}): {e}");
            -1
        }
    }
}
