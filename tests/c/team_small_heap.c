/* A heap too small for the team scratch: the job still starts, the team
 * queries and the active-set collectives work, and a team collective ends
 * the job saying what to raise. */
// env: SHMEM_SYMMETRIC_SIZE=64K
// expect-status: 1
// expect-stderr: shmem_team_sync: no team scratch: the symmetric heap is too small
#include <shmem.h>
#include <stdio.h>

int main(void) {
    shmem_init();
    int me = shmem_my_pe(), npes = shmem_n_pes();
    if (shmem_team_my_pe(SHMEM_TEAM_WORLD) != me || shmem_team_n_pes(SHMEM_TEAM_WORLD) != npes) return 2;
    long *ps = shmem_malloc(SHMEM_BARRIER_SYNC_SIZE * sizeof(long));
    int *x = shmem_malloc(sizeof(int)), *y = shmem_malloc(sizeof(int) * npes);
    int *wrk = shmem_malloc(SHMEM_REDUCE_MIN_WRKDATA_SIZE * sizeof(int));
    int *sum = shmem_malloc(sizeof(int));
    *x = me;
    shmem_barrier(0, 0, npes, ps);
    shmem_fcollect32(y, x, 1, 0, 0, npes, ps);
    for (int p = 0; p < npes; p++)
        if (y[p] != p) return 3;
    shmem_barrier_all(); /* the pSync is free again */
    shmem_int_sum_to_all(sum, x, 1, 0, 0, npes, wrk, ps);
    if (*sum != npes * (npes - 1) / 2) return 5;
    shmem_barrier_all();
    shmem_team_sync(SHMEM_TEAM_WORLD);
    fprintf(stderr, "PE %d: shmem_team_sync returned\n", me);
    shmem_finalize();
    return 4;
}
