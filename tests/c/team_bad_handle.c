/* A destroyed team handle used again ends the job with a message naming
 * the call and the argument. */
// expect-status: 1
// expect-stderr: shmem_int_sum_reduce: team = 0x5e7a0
// expect-stderr: is not a team (destroyed, or never created)
#include <shmem.h>
#include <stdio.h>

int main(void) {
    shmem_init();
    shmem_team_t t;
    if (shmem_team_split_strided(SHMEM_TEAM_WORLD, 0, 1, shmem_n_pes(), NULL, 0, &t) != 0) return 2;
    int *s = shmem_malloc(sizeof(int)), *d = shmem_malloc(sizeof(int));
    shmem_team_destroy(t);
    shmem_int_sum_reduce(t, d, s, 1);
    fprintf(stderr, "PE %d: the reduction on a destroyed team returned\n", shmem_my_pe());
    shmem_finalize();
    return 3;
}
