//! The shm driver within one process: two PEs' segments, one transport.

use std::path::PathBuf;

use switchyard_core::{
    route::ContextId,
    transport::{AtomicOp, AtomicWidth, ErrorKind, LinkState, Transport, TransportError},
    wire::AtomicKind,
};
use switchyard_shm::{Segment, SegmentConfig, ShmError, ShmTransport, object_prefix, remove_stale};

const CTX: ContextId = ContextId { pe: 0, seq: 0 };

fn job() -> u64 {
    // Unique per test process and call.
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    (u64::from(std::process::id()) << 20)
        ^ N.fetch_add(1, Ordering::Relaxed)
        ^ 0xA5A5_0000_0000_0000
}

/// PE 0's transport connected to PE 1, and PE 1's segment (kept alive).
fn pair(heap: u64) -> (ShmTransport, Segment) {
    let j = job();
    let s0 = Segment::create(&SegmentConfig::new(j, 0, 2, heap)).unwrap();
    let s1 = Segment::create(&SegmentConfig::new(j, 1, 2, heap)).unwrap();
    let p1 = s1.path().to_path_buf();
    let mut t = ShmTransport::new(s0, j, 0, 2).unwrap();
    t.set_address(1, &p1).unwrap();
    assert_eq!(t.state(1), LinkState::Down);
    t.connect(1).unwrap();
    assert_eq!(t.state(1), LinkState::Up);
    (t, s1)
}

#[test]
fn put_get_roundtrip_and_bounds() {
    let (mut t, _s1) = pair(8192);
    assert_eq!(t.heap_len(1), Some(8192));
    let data: Vec<u8> = (0..=255u8).cycle().take(3000).collect();
    t.put(1, 100, &data, CTX).unwrap();
    assert!(t.quiet_poll().unwrap());
    let tk = t.get_start(1, 100, 3000, CTX).unwrap();
    let mut back = vec![0u8; 3000];
    assert!(t.get_poll(&tk, &mut back).unwrap());
    assert_eq!(back, data);

    // Out of bounds: error, nothing written.
    let e = t.put(1, 8192 - 10, &[0xFF; 11], CTX).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OutOfBounds);
    assert_eq!(e.peer(), Some(1));
    let e = t.put(1, u64::MAX - 2, &[1; 8], CTX).unwrap_err();
    assert!(matches!(e, ShmError::OutOfBounds { .. }), "{e}");
    let tk = t.get_start(1, 8192 - 16, 16, CTX).unwrap();
    let mut tail = [0u8; 16];
    t.get_poll(&tk, &mut tail).unwrap();
    assert_eq!(tail, [0; 16], "the failed put wrote nothing");
    assert!(t.get_start(1, 8190, 3, CTX).is_err());
    // A buffer of the wrong length is refused.
    assert!(t.get_poll(&tk, &mut [0u8; 3]).is_err());
    // Unknown PE.
    assert_eq!(
        t.put(2, 0, &[1], CTX).unwrap_err().kind(),
        ErrorKind::InvalidPe
    );
}

#[test]
fn every_heap_starts_heap_align_aligned() {
    for heap in [4096, 8192, 3 << 20, 5 << 20] {
        let s = Segment::create(&SegmentConfig::new(job(), 0, 1, heap)).unwrap();
        let at = s.mapped().heap_ptr() as usize;
        assert_eq!(
            at % switchyard_shm::HEAP_ALIGN as usize,
            0,
            "heap of {heap} at {at:#x}"
        );
        // Aligned to the heap size rounded up to a power of two (8 MiB for
        // 5 MiB), so shmem_align serves any alignment up to the heap size.
        let align = switchyard_shm::heap_align(heap) as usize;
        assert!(align >= heap as usize && align.is_power_of_two());
        assert_eq!(at % align, 0, "heap of {heap} at {at:#x}, align {align:#x}");
    }
}

#[test]
fn heap_to_heap_ops() {
    let (mut t, _s1) = pair(4096);
    t.put(0, 0, b"hello, heap", CTX).unwrap();
    t.put_from_heap(1, 512, 0, 11, CTX).unwrap();
    t.get_into_heap(1, 512, 1024, 11, CTX).unwrap();
    assert!(t.quiet_poll().unwrap());
    let tk = t.get_start(0, 1024, 11, CTX).unwrap();
    let mut out = [0u8; 11];
    t.get_poll(&tk, &mut out).unwrap();
    assert_eq!(&out, b"hello, heap");
    assert!(t.put_from_heap(1, 0, 4090, 11, CTX).is_err());
    assert!(t.get_into_heap(1, 4090, 0, 11, CTX).is_err());
}

fn op(kind: AtomicKind, width: AtomicWidth, operand: u64, compare: u64) -> AtomicOp {
    AtomicOp {
        kind,
        width,
        operand,
        compare,
        fetch: true,
    }
}

fn atomic(t: &mut ShmTransport, off: u64, o: AtomicOp) -> Result<u64, ShmError> {
    let tk = t.atomic_start(1, off, o, CTX)?;
    Ok(t.atomic_poll(&tk)?.unwrap())
}

#[test]
fn atomics_match_the_reference() {
    use AtomicKind::*;
    use AtomicWidth::*;
    let (mut t, _s1) = pair(4096);
    for (w, off) in [(W64, 64u64), (W32, 128u64)] {
        let mut model = 0u64;
        let ops = [
            op(Set, w, 40, 0),
            op(FetchAdd, w, 2, 0),
            op(FetchAdd, w, w.truncate(u64::MAX), 0), // -1
            op(CompareSwap, w, 7, 41),
            op(CompareSwap, w, 9, 41),
            op(Swap, w, 0xF0F0, 0),
            op(FetchAnd, w, 0xFF00, 0),
            op(FetchOr, w, 0x000F, 0),
            op(FetchXor, w, 0x0101, 0),
            op(Fetch, w, 0, 0),
            op(FetchAdd, w, 1, 0),
        ];
        for o in ops {
            let old = atomic(&mut t, off, o).unwrap();
            if o.is_fetching() {
                assert_eq!(old, model, "{o:?}");
            }
            model = o.apply(model);
        }
        assert_eq!(atomic(&mut t, off, op(Fetch, w, 0, 0)).unwrap(), model);
    }
    // Misaligned and out of bounds.
    let e = atomic(&mut t, 3, op(FetchAdd, W32, 1, 0)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Misaligned);
    let e = atomic(&mut t, 4096, op(FetchAdd, W64, 1, 0)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OutOfBounds);
}

#[test]
fn objects_are_private_and_unlinked() {
    use std::os::unix::fs::PermissionsExt;
    let j = job();
    let s = Segment::create(&SegmentConfig::new(j, 0, 1, 4096)).unwrap();
    let path = s.path().to_path_buf();
    assert!(
        path.file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with(&object_prefix(j))
    );
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    // A second creator of the same object fails (O_EXCL).
    let e = Segment::create(&SegmentConfig::new(j, 0, 1, 4096)).unwrap_err();
    assert!(matches!(e, ShmError::Create { .. }), "{e}");
    drop(s);
    assert!(!path.exists());
}

#[test]
fn attach_checks_the_control_block() {
    let j = job();
    let s = Segment::create(&SegmentConfig::new(j, 3, 4, 4096)).unwrap();
    assert!(Segment::attach(s.path(), j, 3).is_ok());
    let e = Segment::attach(s.path(), j ^ 1, 3).unwrap_err();
    assert!(matches!(e, ShmError::BadObject { .. }), "{e}");
    let e = Segment::attach(s.path(), j, 2).unwrap_err();
    assert!(e.to_string().contains("belongs to PE 3"), "{e}");
    // Garbage of the right size is not an object.
    let junk = PathBuf::from(format!("/dev/shm/{}junk", object_prefix(j)));
    std::fs::write(&junk, vec![0xABu8; 16384]).unwrap();
    let e = Segment::attach(&junk, j, 0).unwrap_err();
    assert!(matches!(e, ShmError::BadObject { .. }), "{e}");
    std::fs::write(&junk, b"short").unwrap();
    assert!(Segment::attach(&junk, j, 0).is_err());
    std::fs::remove_file(&junk).unwrap();
    assert!(matches!(
        Segment::attach(&junk, j, 0),
        Err(ShmError::Attach { .. })
    ));
}

#[test]
fn stale_objects_of_dead_jobs_are_removed() {
    let dir = std::env::temp_dir().join(format!("sy-stale-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let j = job();
    // A live object of another job, created by this (living) process.
    let mut cfg = SegmentConfig::new(j, 0, 1, 4096);
    cfg.dir = dir.clone();
    let live = Segment::create(&cfg).unwrap();
    // A dead job's object: a control block naming a pid that cannot exist.
    let dead = dir.join(format!("{}0", object_prefix(j ^ 0xFF)));
    let mut bytes = std::fs::read(live.path()).unwrap();
    bytes[24..28].copy_from_slice(&(i32::MAX as u32 - 1).to_le_bytes());
    std::fs::write(&dead, &bytes).unwrap();
    // Unrelated files are never touched.
    let other = dir.join("not-ours");
    std::fs::write(&other, b"x").unwrap();
    let removed = remove_stale(&dir, None);
    assert_eq!(removed, vec![dead.clone()]);
    assert!(live.path().exists() && other.exists() && !dead.exists());
    drop(live);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_dead_peer_is_reported_not_waited_on() {
    use switchyard_core::transport::Instant;
    let j = job();
    let s0 = Segment::create(&SegmentConfig::new(j, 0, 2, 4096)).unwrap();
    let s1 = Segment::create(&SegmentConfig::new(j, 1, 2, 4096)).unwrap();
    // Make PE 1's object claim a dead creator.
    let p1 = s1.path().to_path_buf();
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&p1).unwrap();
        f.write_all_at(&(i32::MAX as u32 - 1).to_le_bytes(), 24)
            .unwrap();
    }
    let mut t = ShmTransport::new(s0, j, 0, 2).unwrap();
    t.set_address(1, &p1).unwrap();
    t.connect(1).unwrap();
    for i in 1..10 {
        t.progress(Instant::from_nanos(i * 2_000_000));
    }
    assert_eq!(t.state(1), LinkState::Error);
    // The leg's window went with the mapping: the leg refuses, the driver
    // names the dead peer.
    assert!(!t.put_leg(1, 0, &[1]));
    assert!(!t.get_leg(1, 0, &mut [0u8; 8]));
    let e = t.put(1, 0, &[1], CTX).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::PeerDown);
    assert!(e.to_string().contains("PE 1"), "{e}");
    drop(s1);
}

#[test]
fn the_leg_follows_the_mappings_and_checks_bounds() {
    let j = job();
    let s0 = Segment::create(&SegmentConfig::new(j, 0, 2, 4096)).unwrap();
    let s1 = Segment::create(&SegmentConfig::new(j, 1, 2, 4096)).unwrap();
    let mut t = ShmTransport::new(s0, j, 0, 2).unwrap();
    // Own heap from the start; the peer only once mapped.
    assert!(t.put_leg(0, 8, &7u64.to_ne_bytes()));
    assert!(!t.put_leg(1, 0, &[1]));
    t.set_address(1, s1.path()).unwrap();
    assert!(!t.put_leg(1, 0, &[1]), "named, not mapped");
    t.connect(1).unwrap();
    assert!(t.put_leg(1, 8, &42u64.to_ne_bytes()));
    let mut w = [0u8; 8];
    assert!(t.get_leg(1, 8, &mut w));
    assert_eq!(u64::from_ne_bytes(w), 42);
    let add = op(AtomicKind::FetchAdd, AtomicWidth::W64, 1, 0);
    assert_eq!(t.atomic_leg(1, 8, add), Some(42));
    assert!(t.get_leg(1, 8, &mut w));
    assert_eq!(u64::from_ne_bytes(w), 43);
    // Bounds and alignment: refused, nothing written; out of range PE too.
    assert!(!t.put_leg(1, 4096 - 4, &[0xFF; 8]));
    assert!(!t.put_leg(1, u64::MAX - 2, &[1; 8]));
    assert!(!t.get_leg(1, 4096, &mut [0u8; 1]));
    assert_eq!(t.atomic_leg(1, 4, add), None);
    assert_eq!(t.atomic_leg(1, 4096, add), None);
    assert!(!t.put_leg(2, 0, &[1]));
    let mut tail = [0u8; 8];
    assert!(t.get_leg(1, 4096 - 8, &mut tail));
    assert_eq!(tail, [0; 8], "the refused put wrote nothing");
    // A zero-length access at the end of a heap still goes through the
    // driver's slow range.
    t.put(1, 4096, &[], CTX).unwrap();
    // Closed: the windows are gone with the mappings.
    t.close().unwrap();
    assert!(!t.put_leg(1, 8, &[1]));
    assert!(t.put_leg(0, 8, &[1]), "the own heap stays");
    drop(s1);
}

#[test]
fn probe_reports_dev_shm() {
    let r = switchyard_shm::probe();
    assert_eq!(r.name, "shm");
    assert!(r.available, "{:?}", r.why_not);
    assert!(r.devices.iter().any(|d| d.name == "/dev/shm"));
}

/// One page of this test binary's `.bss`, for the alias test only.
#[repr(C, align(4096))]
struct Page([std::sync::atomic::AtomicU64; 512]);

static ALIASED: Page = Page([const { std::sync::atomic::AtomicU64::new(0) }; 512]);

#[test]
fn an_aliased_static_is_reached_through_the_object() {
    use std::sync::atomic::Ordering::SeqCst;

    use switchyard_shm::Alias;
    ALIASED.0[3].store(7, SeqCst);
    let j = job();
    let mut cfg = SegmentConfig::new(j, 1, 2, 8192);
    // SAFETY: `ALIASED` is one page-aligned page of our own .bss, used by this
    // test only.
    cfg.alias = Some(unsafe { Alias::new(core::ptr::addr_of!(ALIASED) as usize, 4096) }.unwrap());
    let s1 = Segment::create(&cfg).unwrap();
    let at = s1.alias_offset().expect("an alias offset");
    assert_eq!(at, 8192, "the alias follows the heap");
    assert_eq!(s1.mapped().heap_len(), 8192 + 4096);
    assert_eq!(ALIASED.0[3].load(SeqCst), 7, "the contents moved with it");

    // PE 0 reaches it through PE 1's object, like any heap range.
    let s0 = Segment::create(&SegmentConfig::new(j, 0, 2, 8192)).unwrap();
    let mut t = ShmTransport::new(s0, j, 0, 2).unwrap();
    t.set_address(1, s1.path()).unwrap();
    t.connect(1).unwrap();
    t.put(1, at + 5 * 8, &42u64.to_ne_bytes(), CTX).unwrap();
    assert!(t.quiet_poll().unwrap());
    assert_eq!(ALIASED.0[5].load(SeqCst), 42, "a put lands in the static");
    ALIASED.0[6].store(100, SeqCst);
    let old = atomic(
        &mut t,
        at + 6 * 8,
        op(AtomicKind::FetchAdd, AtomicWidth::W64, 5, 0),
    )
    .unwrap();
    assert_eq!(old, 100, "an atomic reads the static");
    ALIASED.0[6].fetch_add(1, SeqCst);
    assert_eq!(ALIASED.0[6].load(SeqCst), 106, "both atomics applied");
    drop(t);
    drop(s1);
    ALIASED.0[7].store(9, SeqCst);
    assert_eq!(
        ALIASED.0[7].load(SeqCst),
        9,
        "the static outlives the segment"
    );

    // Unaligned or empty ranges are refused before anything is touched.
    // SAFETY: refused before use.
    let unaligned = unsafe { Alias::new(4097, 4096) };
    assert!(matches!(unaligned, Err(ShmError::BadAlias { .. })));
    // SAFETY: refused before use.
    assert!(unsafe { Alias::new(4096, 0) }.is_err());
}

/// A skip is a failure as root or with `CI`/`SWITCHYARD_NO_SKIP` set (the
/// rule of `switchyard_tests::skip`, which a driver cannot depend on).
fn skip_or_fail(why: &str) {
    // SAFETY: geteuid has no preconditions, touches no memory and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let strict = root
        || ["CI", "SWITCHYARD_NO_SKIP"]
            .iter()
            .any(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty()));
    assert!(!strict, "{why}; a skip is a failure here");
    eprintln!("skipped: {why}");
}

/// A small tmpfs mounted for one test, unmounted when dropped.
struct SmallTmpfs(PathBuf);

impl SmallTmpfs {
    fn mount(size: &str) -> Option<SmallTmpfs> {
        let dir = std::env::temp_dir().join(format!("sy-shm-nospace-{}", job()));
        std::fs::create_dir_all(&dir).ok()?;
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = std::fs::remove_dir(&dir);
            return None;
        }
        Some(SmallTmpfs(dir))
    }
}

impl Drop for SmallTmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// A heap larger than the free space of its filesystem is refused before it
/// is mapped, naming the sizes and the setting, instead of a SIGBUS while its
/// pages are faulted in; nothing is left behind. A heap that fits still works.
#[test]
fn a_heap_larger_than_its_tmpfs_is_refused_without_sigbus() {
    let Some(fs) = SmallTmpfs::mount("1m") else {
        skip_or_fail("cannot mount a small tmpfs (needs root)");
        return;
    };
    let mut cfg = SegmentConfig::new(job(), 0, 1, 8 << 20);
    cfg.dir = fs.0.clone();
    let err = Segment::create(&cfg).expect_err("an 8 MiB heap in a 1 MiB tmpfs");
    match &err {
        ShmError::NoSpace { dir, need, free } => {
            assert_eq!(dir, &fs.0);
            assert!(*need > 8 << 20, "need {need}");
            assert!(*free <= 1 << 20, "free {free}");
        }
        other => panic!("expected NoSpace, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains("SWITCHYARD_HEAP_SIZE"), "{msg}");
    assert!(
        msg.contains(&(8u64 << 20).to_string()) || msg.contains("needs"),
        "{msg}"
    );
    assert_eq!(err.kind(), ErrorKind::Fatal, "{err}");
    assert_eq!(
        std::fs::read_dir(&fs.0).unwrap().count(),
        0,
        "object left behind"
    );

    cfg.heap_size = 256 << 10;
    let seg = Segment::create(&cfg).expect("a 256 KiB heap fits");
    drop(seg);
}
