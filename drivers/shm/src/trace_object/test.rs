use std::path::PathBuf;

use switchyard_core::trace::TraceRecord;

use super::*;

fn meta(capacity: u32) -> TraceMeta {
    TraceMeta {
        pe: 3,
        n_pes: 4,
        job_id: 0x5eed_0000_0000_0000 | u64::from(own_pid()),
        pid: own_pid(),
        capacity,
        flags: 0,
        ticks_per_second: 1_000_000_000,
        anchor_ticks: 1_000,
        anchor_unix_ns: 1_700_000_000_000_000_000,
    }
}

fn rec(i: u64) -> TraceRecord {
    TraceRecord {
        seq: i,
        src: 3,
        dst: 1,
        len: i as u32,
        class: 1,
        transport: 1,
        op: 1,
        flags: if i.is_multiple_of(2) {
            TraceRecord::RETRIED
        } else {
            0
        },
        timestamp: 1_000 + i,
    }
}

/// A temporary directory of this test process, removed on drop.
struct Dir(PathBuf);
impl Drop for Dir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}
fn dir(tag: &str) -> Dir {
    let d = std::env::temp_dir().join(format!("sy-trace-{tag}-{}", own_pid()));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).unwrap();
    Dir(d)
}

/// A reader that opens the object sees what its writers wrote, in both
/// rings, with the header's anchor; the object is 0600.
#[test]
fn a_reader_opens_what_the_writer_writes() {
    let d = dir("rw");
    let path = d.0.join("obj");
    let obj = TraceObject::create_at(&path, &meta(16)).unwrap();
    {
        let mut w = obj.writer(INITIATOR).unwrap();
        assert!(obj.writer(INITIATOR).is_none(), "one writer a ring");
        let mut t = obj.writer(TARGET).unwrap();
        for i in 0..40 {
            w.record(&rec(i));
        }
        t.record(&rec(7));
    }
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(is_trace_file(&path));
    let r = TraceObject::open(&path).unwrap();
    assert_eq!(r.meta(), &meta(16));
    let got = r.snapshot(INITIATOR, usize::MAX);
    assert_eq!(got, (24..40).map(rec).collect::<Vec<_>>());
    assert_eq!(r.snapshot(TARGET, 10), vec![rec(7)]);
    assert_eq!(r.meta().unix_nanos(1_000 + 5), 1_700_000_000_000_000_005);
    obj.remove();
    assert!(!path.exists());
}

/// A dump holds the newest records of each ring and reads back through
/// `open`, flagged as a dump; it refuses to overwrite a file.
#[test]
fn a_dump_reads_back() {
    let d = dir("dump");
    let obj = TraceObject::in_memory(&meta(64)).unwrap();
    {
        let mut w = obj.writer(INITIATOR).unwrap();
        for i in 0..100 {
            w.record(&rec(i));
        }
    }
    let path = d.0.join("dump");
    obj.dump(&path, 10).unwrap();
    let r = TraceObject::open(&path).unwrap();
    assert_eq!(r.meta().flags, TraceMeta::DUMP);
    assert_eq!(r.meta().capacity, 64);
    assert_eq!(
        r.snapshot(INITIATOR, 1000),
        (90..100).map(rec).collect::<Vec<_>>()
    );
    assert!(r.snapshot(TARGET, 1000).is_empty());
    assert!(obj.dump(&path, 10).is_err(), "never overwrites");
    // Written under a temporary name and linked: nothing else is left
    // beside the dump, after a dump or a refused one.
    let names: Vec<_> = std::fs::read_dir(&d.0)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["dump"], "{names:?}");
}

/// Whatever is not a trace object of this layout is refused with a reason.
#[test]
fn open_refuses_what_is_not_a_trace_object() {
    let d = dir("bad");
    let p = d.0.join("x");
    fs::write(&p, b"hello").unwrap();
    assert!(TraceObject::open(&p).is_err());
    fs::write(&p, [0u8; 4096]).unwrap();
    let e = TraceObject::open(&p).unwrap_err().to_string();
    assert!(e.contains("bad magic"), "{e}");
    let obj = TraceObject::in_memory(&meta(8)).unwrap();
    let good = d.0.join("good");
    obj.dump(&good, 8).unwrap();
    let mut bytes = fs::read(&good).unwrap();
    bytes.pop();
    fs::write(&p, &bytes).unwrap();
    let e = TraceObject::open(&p).unwrap_err().to_string();
    assert!(e.contains("its header says"), "{e}");
    assert!(
        TraceObject::in_memory(&meta(48)).is_err(),
        "not a power of two"
    );
    assert!(!is_trace_file(&p.with_extension("none")));
}

/// The object's name carries the job and the PE; `trace_objects` finds it,
/// and stale cleanup removes it once its creator is gone (here: a pid that
/// does not exist).
#[test]
fn objects_are_found_and_cleaned_up_with_the_job() {
    let mut m = meta(8);
    m.job_id ^= 0xabc;
    let obj = TraceObject::create(&m).unwrap();
    let path = trace_object_path(m.job_id, m.pe);
    assert_eq!(obj.path(), Some(path.as_path()));
    assert_eq!(
        trace_objects(Some(m.job_id)),
        vec![(m.job_id, 3, path.clone())]
    );
    assert!(
        crate::remove_stale(Path::new(SHM_DIR), None)
            .iter()
            .all(|p| *p != path),
        "a live creator's object stays"
    );
    obj.remove();
    m.pid = u32::MAX - 1;
    let dead = TraceObject::create(&m).unwrap();
    let removed = crate::remove_stale(Path::new(SHM_DIR), None);
    assert!(removed.contains(&path), "{removed:?}");
    drop(dead);
}
