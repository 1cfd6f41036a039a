//! Teams: `SHMEM_TEAM_WORLD`, `SHMEM_TEAM_SHARED`, split, destroy, sync.
