/* A context made on a team numbers PEs in that team: a PE number past the
 * team's size ends the job. */
// expect-status: 1
// expect-stderr: is not a PE of the team of ctx
#include <shmem.h>

static long x;

int main(void) {
    shmem_init();
    shmem_team_t t;
    shmem_ctx_t c = SHMEM_CTX_INVALID;
    /* a team of PE 0 alone */
    shmem_team_split_strided(SHMEM_TEAM_WORLD, 0, 1, 1, NULL, 0, &t);
    if (t != SHMEM_TEAM_INVALID) {
        if (shmem_team_create_ctx(t, 0, &c) != 0) return 2;
        shmem_ctx_long_p(c, &x, 1, 0);
        shmem_ctx_long_p(c, &x, 1, 1);
    }
    shmem_finalize();
    return 3;
}
