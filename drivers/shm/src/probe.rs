//! What this machine offers for shared memory: `/dev/shm` and huge pages.

use std::{
    io,
    path::{Path, PathBuf},
};

use switchyard_core::transport::{DeviceInfo, ProbeReport};

use crate::{HUGE_DIR, SHM_DIR, sys};

/// What this machine offers for shared memory: `/dev/shm`, which must be a
/// writable tmpfs (checked in `/proc/self/mounts`, then by creating and
/// removing one empty file), with its size and free space; and the huge pages,
/// with the hugetlbfs they are used through.
///
/// The probe file is named `.switchyard-probe-*`: a dot file, which
/// [`remove_stale`](crate::remove_stale) never looks at, and it is removed at once.
pub fn probe() -> ProbeReport {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    probe_in(Path::new(SHM_DIR), mounts.as_deref(), &meminfo)
}

/// [`probe`] with the shared-memory directory at `dir`, the text of
/// `/proc/self/mounts` (`None` when unreadable: the file system is then not
/// checked) and that of `/proc/meminfo`.
fn probe_in(dir: &Path, mounts: Option<&str>, meminfo: &str) -> ProbeReport {
    let mut devices = Vec::new();
    let why_not = match check_shm_dir(dir, mounts) {
        Ok(detail) => {
            devices.push(DeviceInfo {
                name: dir.display().to_string(),
                detail,
            });
            None
        }
        Err((why, detail)) => {
            if let Some(detail) = detail {
                devices.push(DeviceInfo {
                    name: dir.display().to_string(),
                    detail,
                });
            }
            Some(why)
        }
    };
    devices.extend(huge_pages_device(mounts, meminfo));
    ProbeReport {
        name: "shm",
        available: why_not.is_none(),
        why_not,
        devices,
    }
}

/// The detail of a usable shared-memory directory (`tmpfs, writable, 23.5 GiB
/// free of 23.5 GiB`), or why it is not usable with, when it exists, what it is.
fn check_shm_dir(
    dir: &Path,
    mounts: Option<&str>,
) -> std::result::Result<String, (String, Option<String>)> {
    let shown = dir.display();
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err((format!("{shown} is not a directory"), None)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err((
                format!("{shown} does not exist (POSIX shared memory needs a tmpfs there)"),
                None,
            ));
        }
        Err(e) => return Err((format!("{shown} cannot be read: {e}"), None)),
    }
    let mut detail = String::new();
    match mounts {
        Some(mounts) => {
            let Some(m) = mount_of(dir, mounts) else {
                return Err((format!("no mount holds {shown} in /proc/self/mounts"), None));
            };
            if m.fstype != "tmpfs" {
                let why = if m.at == dir {
                    format!("{shown} is a {} file system, not a tmpfs", m.fstype)
                } else {
                    format!(
                        "{shown} is on a {} file system (mounted at {}), not a tmpfs",
                        m.fstype,
                        m.at.display()
                    )
                };
                return Err((why, Some(m.fstype.into())));
            }
            if m.opts.split(',').any(|o| o == "ro") {
                return Err((
                    format!("{shown} is mounted read-only"),
                    Some(format!("tmpfs, read-only ({})", m.opts)),
                ));
            }
            detail.push_str("tmpfs, ");
        }
        None => detail.push_str("file system unknown (/proc/self/mounts unreadable), "),
    }
    if let Err(e) = try_write(dir) {
        return Err((
            format!("{shown} is not writable: {e}"),
            Some(format!("{detail}not writable")),
        ));
    }
    detail.push_str("writable, ");
    match sys::statvfs(dir) {
        Ok((total, free)) => {
            detail.push_str(&format!(
                "{} free of {}",
                human_bytes(free),
                human_bytes(total)
            ));
        }
        Err(e) => detail.push_str(&format!("size unknown (statvfs: {e})")),
    }
    Ok(detail)
}

/// One line of `/proc/self/mounts`.
#[derive(Debug, PartialEq, Eq)]
struct Mount<'a> {
    at: PathBuf,
    fstype: &'a str,
    opts: &'a str,
}

/// The lines of `mounts` (`/proc/self/mounts`), with the mount points'
/// octal escapes (`\040` for a space) undone.
fn parse_mounts(mounts: &str) -> impl Iterator<Item = Mount<'_>> {
    mounts.lines().filter_map(|l| {
        let mut f = l.split_whitespace();
        let (_dev, at, fstype, opts) = (f.next()?, f.next()?, f.next()?, f.next()?);
        Some(Mount {
            at: PathBuf::from(unescape_mount(at)),
            fstype,
            opts,
        })
    })
}

/// The mount `dir` lives on: the one with the longest mount point holding it,
/// the last listed among equals (it hides those before). `dir` is resolved
/// first, so a symlinked `/dev/shm` finds its real mount.
fn mount_of<'a>(dir: &Path, mounts: &'a str) -> Option<Mount<'a>> {
    let real = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mut best: Option<Mount<'a>> = None;
    for m in parse_mounts(mounts) {
        if real.starts_with(&m.at)
            && best
                .as_ref()
                .is_none_or(|b| m.at.components().count() >= b.at.components().count())
        {
            best = Some(Mount {
                at: if real == m.at {
                    dir.to_path_buf()
                } else {
                    m.at
                },
                ..m
            });
        }
    }
    best
}

/// Undoes the kernel's octal escapes in a mount point (`\040` is a space).
fn unescape_mount(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && let Some(oct) = b.get(i + 1..i + 4)
            && oct.iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push(oct.iter().fold(0u8, |v, c| v.wrapping_mul(8) + (c - b'0')));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The huge pages (from `meminfo`, the text of `/proc/meminfo`) and the
/// hugetlbfs they are used through; `None` when there are neither.
fn huge_pages_device(mounts: Option<&str>, meminfo: &str) -> Option<DeviceInfo> {
    let field = |key: &str| {
        meminfo.lines().find_map(|l| {
            let rest = l.strip_prefix(key)?.strip_prefix(':')?;
            rest.split_whitespace().next()?.parse::<u64>().ok()
        })
    };
    let total = field("HugePages_Total");
    let free = field("HugePages_Free");
    let page = field("Hugepagesize").and_then(|k| k.checked_mul(1024));
    let hugetlbfs = mounts.and_then(|m| {
        let all: Vec<PathBuf> = parse_mounts(m)
            .filter(|m| m.fstype == "hugetlbfs")
            .map(|m| m.at)
            .collect();
        let preferred = all.iter().find(|p| *p == Path::new(HUGE_DIR));
        preferred.or(all.first()).cloned()
    });
    if hugetlbfs.is_none() && total.unwrap_or(0) == 0 {
        return None;
    }
    let pages = match (free, total) {
        (Some(free), Some(total)) => format!(
            "{free} of {total} {} pages free",
            page.map_or_else(|| "huge".to_string(), human_bytes)
        ),
        _ => "no huge page counts in /proc/meminfo".into(),
    };
    Some(match hugetlbfs {
        Some(at) => DeviceInfo {
            name: at.display().to_string(),
            detail: format!("hugetlbfs, {pages}"),
        },
        None => DeviceInfo {
            name: "hugepages".into(),
            detail: format!("{pages}; no hugetlbfs is mounted, so they are not used"),
        },
    })
}

/// Creates and removes one empty dot file in `dir` (never an existing one).
fn try_write(dir: &Path) -> io::Result<()> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mut last = None;
    for i in 0..8 {
        let path = dir.join(format!(".switchyard-probe-{}-{stamp}-{i}", sys::pid()));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(f) => {
                drop(f);
                return std::fs::remove_file(&path);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no free probe file name")))
}

/// A byte count for people: `23.5 GiB`, `2 MiB`, `100 B` (binary units,
/// one decimal where it is not whole). Also used by `switchyard info`.
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if b < 1024 {
        return format!("{b} B");
    }
    let mut v = b as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[unit])
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod probe_test {
    use super::*;

    /// A fresh scratch folder, removed when dropped.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let dir = std::env::temp_dir().join(format!(
                "switchyard-shm-probe-test-{}-{name}",
                std::process::id()
            ));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            // Resolved, as the probe resolves it, for the fake mount tables.
            Scratch(std::fs::canonicalize(&dir).unwrap())
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    const MEMINFO: &str = "MemTotal:       49367312 kB\nHugePages_Total:       4\n\
                           HugePages_Free:        3\nHugepagesize:       2048 kB\n";

    #[test]
    fn shm_dir_checks() {
        let tmp = Scratch::new("checks");
        let dir = tmp.0.join("shm");
        let line = |fs: &str, opts: &str| format!("x {} {fs} {opts} 0 0\n", dir.display());
        let why = |mounts: Option<&str>| probe_in(&dir, mounts, "").why_not.unwrap();

        assert!(why(None).contains("does not exist"), "{}", why(None));
        std::fs::write(&dir, b"").unwrap();
        assert!(why(None).ends_with("is not a directory"));
        std::fs::remove_file(&dir).unwrap();
        std::fs::create_dir_all(&dir).unwrap();

        assert!(why(Some("")).starts_with("no mount holds"));
        let r = probe_in(&dir, Some(&line("ext4", "rw")), "");
        assert!(!r.available);
        assert_eq!(
            r.why_not.unwrap(),
            format!("{} is a ext4 file system, not a tmpfs", dir.display())
        );
        assert_eq!(r.devices[0].detail, "ext4");
        // Not a mount point itself: the mount holding it counts.
        let parent = format!("x {} xfs rw 0 0\n", tmp.0.display());
        assert_eq!(
            why(Some(&format!("none / rootfs rw 0 0\n{parent}"))),
            format!(
                "{} is on a xfs file system (mounted at {}), not a tmpfs",
                dir.display(),
                tmp.0.display()
            )
        );
        let r = probe_in(&dir, Some(&line("tmpfs", "ro,relatime")), "");
        assert_eq!(
            r.why_not.unwrap(),
            format!("{} is mounted read-only", dir.display())
        );
        assert_eq!(r.devices[0].detail, "tmpfs, read-only (ro,relatime)");

        // The last mount on the same point hides the earlier ones.
        let mounts = format!(
            "{}{}{}",
            line("ext4", "rw"),
            parent,
            line("tmpfs", "rw,size=1048576k")
        );
        let r = probe_in(&dir, Some(&mounts), MEMINFO);
        assert!(r.available, "{r:?}");
        assert_eq!(r.why_not, None);
        assert_eq!(r.name, "shm");
        assert_eq!(r.devices.len(), 2, "{r:?}");
        assert_eq!(r.devices[0].name, dir.display().to_string());
        assert!(
            r.devices[0].detail.starts_with("tmpfs, writable, ")
                && r.devices[0].detail.contains(" free of "),
            "{}",
            r.devices[0].detail
        );
        // No mount table: the file system is not checked.
        let r = probe_in(&dir, None, "");
        assert!(r.available);
        assert!(
            r.devices[0]
                .detail
                .starts_with("file system unknown (/proc/self/mounts unreadable), writable, ")
        );
        // The probe file is gone.
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    }

    #[test]
    fn huge_pages() {
        assert_eq!(huge_pages_device(Some(""), ""), None);
        assert_eq!(huge_pages_device(None, "HugePages_Total: 0\n"), None);
        let d = huge_pages_device(Some(""), MEMINFO).unwrap();
        assert_eq!(d.name, "hugepages");
        assert_eq!(
            d.detail,
            "3 of 4 2 MiB pages free; no hugetlbfs is mounted, so they are not used"
        );
        let mounts = "hugetlbfs /mnt/huge hugetlbfs rw 0 0\n\
                      hugetlbfs /dev/hugepages hugetlbfs rw,pagesize=2M 0 0\n";
        let d = huge_pages_device(Some(mounts), MEMINFO).unwrap();
        assert_eq!(d.name, HUGE_DIR);
        assert_eq!(d.detail, "hugetlbfs, 3 of 4 2 MiB pages free");
        let d = huge_pages_device(Some(&mounts[..36]), "").unwrap();
        assert_eq!(d.name, "/mnt/huge");
        assert_eq!(d.detail, "hugetlbfs, no huge page counts in /proc/meminfo");
    }

    #[test]
    fn mount_table() {
        let m: Vec<Mount<'_>> =
            parse_mounts("tmpfs /dev/my\\040shm tmpfs rw 0 0\nshort line\n").collect();
        assert_eq!(
            m,
            [Mount {
                at: PathBuf::from("/dev/my shm"),
                fstype: "tmpfs",
                opts: "rw"
            }]
        );
        assert_eq!(unescape_mount("a\\134b\\011c\\04"), "a\\b\tc\\04");
        let mounts = "/dev/root / ext4 rw 0 0\nproc /proc proc rw 0 0\n";
        let m = mount_of(Path::new("/nonexistent/shm"), mounts).unwrap();
        assert_eq!((m.at.as_path(), m.fstype), (Path::new("/"), "ext4"));
        assert_eq!(mount_of(Path::new("relative"), mounts), None);
    }

    #[test]
    fn sizes() {
        assert_eq!(human_bytes(100), "100 B");
        assert_eq!(human_bytes(2 << 20), "2 MiB");
        assert_eq!(human_bytes(24683656 << 10), "23.5 GiB");
        assert_eq!(human_bytes(u64::MAX), "16384 PiB");
    }
}
