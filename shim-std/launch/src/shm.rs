//! The job's shared-memory objects: their names, the `shmem_global_exit`
//! marker, and their removal after the job.

use std::{
    io,
    path::{Path, PathBuf},
};

/// `switchyard-<job id, 16 lowercase hex digits>-`: the name prefix of every
/// POSIX shared-memory object of job `job_id` (the shm driver names its objects
/// `<prefix><pe>`; this must stay in step with its `object_prefix`).
pub fn shm_object_prefix(job_id: u64) -> String {
    switchyard_shm::object_prefix(job_id)
}

/// Where `shmem_global_exit` leaves its marker for the launcher: a file of the
/// job in [`SHM_DIR`](crate::SHM_DIR) (removed with the job's objects) holding `RANK STATUS`.
/// The first PE to create it decides the job's exit status.
pub fn global_exit_path(job_id: u64) -> PathBuf {
    switchyard_shm::global_exit_path(job_id)
}

/// The `(rank, status)` a PE left in [`global_exit_path`], if any.
pub fn read_global_exit(job_id: u64) -> Option<(u32, i32)> {
    let text = std::fs::read_to_string(global_exit_path(job_id)).ok()?;
    let mut it = text.split_whitespace();
    let rank = it.next()?.parse().ok()?;
    let status = it.next()?.parse().ok()?;
    Some((rank, status))
}

/// Deletes every object of job `job_id` in `dir` (normally [`SHM_DIR`](crate::SHM_DIR)), that
/// is every entry whose name starts with [`shm_object_prefix`]; returns how many
/// it deleted. A missing `dir` holds nothing.
///
/// # Errors
///
/// Listing `dir` or deleting an entry failed (an entry that vanished meanwhile
/// is not an error).
pub fn remove_shm_objects(dir: &Path, job_id: u64) -> io::Result<usize> {
    switchyard_shm::remove_job_objects(dir, job_id)
}
