//! The SPSC ring between two real processes: a `MAP_SHARED` mapping, `fork`, the
//! child attaches as producer through the checked header and streams a sequence,
//! the parent consumes and checks every value in order. Bounded in time.
#![cfg(target_os = "linux")]

use std::time::{Duration, Instant};

use switchyard_core::shared_ring::{AttachError, SharedRing};

type Ring = SharedRing<u64, 1024>;
const COUNT: u64 = 200_000;
const TAG: u32 = 0x5EED;
const DEADLINE: Duration = Duration::from_secs(30);

/// An anonymous shared mapping, unmapped on drop.
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

impl Mapping {
    fn new(len: usize) -> Mapping {
        // SAFETY: a fresh anonymous mapping; no pointer is passed in.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(
            ptr,
            libc::MAP_FAILED,
            "mmap: {}",
            std::io::Error::last_os_error()
        );
        Mapping {
            ptr: ptr.cast(),
            len,
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: mapped in `new` with this length.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// The child's whole life: attach, produce, exit. No allocation, no panic,
/// nothing that is not async-signal-safe after `fork`.
fn child(m: &Mapping) -> ! {
    // SAFETY: the mapping is inherited and stays mapped until we exit.
    let code = match unsafe { Ring::attach(m.ptr, m.len, TAG) } {
        Ok(shared) => {
            // SAFETY: the only producer, in any process.
            let mut p = unsafe { shared.ring().producer() };
            let start = Instant::now();
            let mut next = 0;
            let mut code = 0;
            while next < COUNT {
                match p.push(next) {
                    Ok(()) => next += 1,
                    Err(_) if start.elapsed() > DEADLINE => {
                        code = 3;
                        break;
                    }
                    Err(_) => std::hint::spin_loop(),
                }
            }
            code
        }
        Err(_) => 2,
    };
    // SAFETY: leaves the child at once, without running the parent's atexit
    // handlers or the test harness.
    unsafe { libc::_exit(code) }
}

#[test]
fn a_child_process_streams_through_the_shared_ring() {
    let m = Mapping::new(Ring::SIZE.next_multiple_of(4096));
    // SAFETY: a fresh mapping, ours alone until we fork.
    let shared = unsafe { Ring::create(m.ptr, m.len, TAG) }.expect("create");
    // SAFETY: the child only runs `child`, which allocates nothing and exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        child(&m);
    }
    // SAFETY: the only consumer, in any process.
    let mut c = unsafe { shared.ring().consumer() };
    let start = Instant::now();
    let mut expect = 0;
    let mut buf = [0u64; 64];
    while expect < COUNT && start.elapsed() < DEADLINE {
        let n = c.pop_slice(&mut buf);
        for &v in &buf[..n] {
            assert_eq!(v, expect, "out of order or corrupted across processes");
            expect += 1;
        }
        if n == 0 {
            std::thread::yield_now();
        }
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(waited, pid);
    assert!(
        libc::WIFEXITED(status),
        "child did not exit normally: {status:#x}"
    );
    assert_eq!(
        libc::WEXITSTATUS(status),
        0,
        "child failed (2: attach, 3: deadline)"
    );
    assert_eq!(
        expect, COUNT,
        "consumer stopped at {expect} within {DEADLINE:?}"
    );
}

#[test]
fn a_mapping_of_another_ring_is_refused() {
    let m = Mapping::new(Ring::SIZE.next_multiple_of(4096));
    // SAFETY: a fresh mapping, ours alone.
    unsafe { Ring::create(m.ptr, m.len, TAG) }.expect("create");
    // SAFETY: mapped for the test's life.
    let other = unsafe { SharedRing::<u64, 512>::attach(m.ptr, m.len, TAG) };
    assert_eq!(
        other.unwrap_err(),
        AttachError::WrongCapacity {
            expected: 512,
            found: 1024
        }
    );
    // SAFETY: as above.
    let foreign = unsafe { Ring::attach(m.ptr, m.len, TAG + 1) };
    assert!(matches!(foreign, Err(AttachError::WrongTag { .. })));
}
