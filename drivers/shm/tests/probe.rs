//! The shm probe on this machine: `/dev/shm` checked through the mount table,
//! and nothing left behind.

use switchyard_shm::{SHM_DIR, probe};

/// Probe files of this process still in `/dev/shm`.
fn leftovers() -> Vec<String> {
    let mine = format!(".switchyard-probe-{}-", std::process::id());
    std::fs::read_dir(SHM_DIR)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&mine))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn probe_checks_dev_shm_and_leaves_nothing() {
    for _ in 0..3 {
        let r = probe();
        assert_eq!(r.name, "shm");
        assert_eq!(r.available, r.why_not.is_none(), "{r:?}");
        if std::path::Path::new(SHM_DIR).is_dir() {
            let d = r
                .devices
                .iter()
                .find(|d| d.name == SHM_DIR)
                .unwrap_or_else(|| panic!("{r:?}"));
            if r.available {
                assert!(d.detail.contains("writable, "), "{d:?}");
                assert!(d.detail.contains(" free of "), "{d:?}");
            }
        }
    }
    assert_eq!(leftovers(), Vec::<String>::new());
}

#[test]
fn a_tmpfs_dev_shm_is_reported_as_one() {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    // The last mount on /dev/shm is the one in effect.
    let tmpfs = mounts
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .rfind(|f| f.len() > 3 && f[1] == SHM_DIR)
        .is_some_and(|f| f[2] == "tmpfs" && !f[3].split(',').any(|o| o == "ro"));
    if !tmpfs {
        return;
    }
    let r = probe();
    assert!(r.available, "{r:?}");
    let d = r.devices.iter().find(|d| d.name == SHM_DIR).unwrap();
    assert!(d.detail.starts_with("tmpfs, writable, "), "{d:?}");
}
