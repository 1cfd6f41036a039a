//! Unit tests of the launcher library.

use std::{io, path::Path, time::Duration};

use super::*;

#[test]
fn global_exit_marker_round_trip() {
    let job = 0x5ead_0000_0000_0000 | u64::from(std::process::id());
    let path = global_exit_path(job);
    assert!(path.starts_with(SHM_DIR));
    assert!(
        path.file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(&shm_object_prefix(job)),
        "removed with the job's objects"
    );
    assert_eq!(read_global_exit(job), None);
    std::fs::write(&path, "3 7\n").unwrap();
    assert_eq!(read_global_exit(job), Some((3, 7)));
    std::fs::write(&path, "garbage").unwrap();
    assert_eq!(read_global_exit(job), None);
    assert_eq!(remove_shm_objects(Path::new(SHM_DIR), job).unwrap(), 1);
}

#[test]
fn exit_codes_and_messages() {
    assert_eq!(RankExit::Code(3).to_string(), "exited with status 3");
    assert_eq!(
        RankExit::Signal(9).to_string(),
        "was killed by signal 9 (SIGKILL)"
    );
    assert_eq!(RankExit::Code(3).exit_code(), 3);
    assert_eq!(RankExit::Signal(9).exit_code(), 137);
    assert!(RankExit::Code(0).success());
    assert_eq!(JobEnd::Success.exit_code(), 0);
    assert_eq!(JobEnd::TimedOut(Duration::from_secs(1)).exit_code(), 124);
    assert_eq!(JobEnd::Signaled(libc::SIGINT).exit_code(), 130);
    assert_eq!(JobEnd::Signaled(libc::SIGTERM).exit_code(), 143);
    let failed = JobEnd::RankFailed {
        rank: 2,
        exit: RankExit::Code(3),
    };
    assert_eq!(failed.exit_code(), 3);
    assert_eq!(failed.to_string(), "rank 2 exited with status 3");
    let not_found = LaunchError::Spawn {
        program: "x".into(),
        rank: 0,
        source: io::ErrorKind::NotFound.into(),
    };
    assert_eq!(not_found.exit_code(), EXIT_NOT_FOUND);
}

#[test]
fn shm_prefix_and_cleanup() {
    assert_eq!(shm_object_prefix(0xab), "switchyard-00000000000000ab-");
    let dir = std::env::temp_dir().join(format!("switchyard-launch-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let job = 0x1234_5678_9abc_def0;
    for name in [
        format!("{}0", shm_object_prefix(job)),
        format!("{}17", shm_object_prefix(job)),
        format!("{}0", shm_object_prefix(job + 1)),
        "other".into(),
    ] {
        std::fs::write(dir.join(name), b"").unwrap();
    }
    assert_eq!(remove_shm_objects(&dir, job).unwrap(), 2);
    assert_eq!(remove_shm_objects(&dir, job).unwrap(), 0);
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2);
    assert_eq!(remove_shm_objects(&dir.join("missing"), job).unwrap(), 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn launches_through_the_library() {
    let mut opts = LaunchOptions::new(2, "sh");
    opts.args = vec!["-c".into(), "exit $SWITCHYARD_RANK".into()];
    opts.tag_output = false;
    opts.timeout = Some(Duration::from_secs(30));
    opts.job_id = Some(0x5eed);
    let outcome = launch(&opts).unwrap();
    assert_eq!(outcome.job_id, 0x5eed);
    assert_eq!(
        outcome.end,
        JobEnd::RankFailed {
            rank: 1,
            exit: RankExit::Code(1)
        }
    );
    assert_eq!(outcome.ranks.len(), 2);
    assert_eq!(outcome.exit_code(), 1);

    opts.program = "/nonexistent/switchyard-test-program".into();
    let err = launch(&opts).unwrap_err();
    assert_eq!(err.exit_code(), EXIT_NOT_FOUND);
    assert!(err.to_string().contains("rank 0"), "{err}");
}
