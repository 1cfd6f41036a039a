/* Many different collectives back to back on WORLD and on a split team,
 * with rotating roots and sizes and no synchronization in between (dest
 * buffers rotate over three sets: a member can only be a full iteration
 * ahead, since every iteration has a reduction). */
#include <shmem.h>
#include <stdio.h>

#define ITERS 200
#define MAXN 600

static int me, npes, errors;

#define CHECK(cond, ...)                                            \
    do {                                                            \
        if (!(cond) && errors++ < 10) {                             \
            fprintf(stderr, "PE %d: ", me);                         \
            fprintf(stderr, __VA_ARGS__);                           \
            fputc('\n', stderr);                                    \
        }                                                           \
    } while (0)

int main(void) {
    shmem_init();
    me = shmem_my_pe();
    npes = shmem_n_pes();
    shmem_team_t half;
    shmem_team_split_strided(SHMEM_TEAM_WORLD, 0, 1, (npes + 1) / 2, NULL, 0, &half);
    long *src = shmem_malloc(MAXN * sizeof(long));
    long *bc[3], *rd[3], *fc[3], *co[3];
    for (int s = 0; s < 3; s++) {
        bc[s] = shmem_malloc(MAXN * sizeof(long));
        rd[s] = shmem_malloc(MAXN * sizeof(long));
        fc[s] = shmem_malloc(MAXN * npes * sizeof(long));
        co[s] = shmem_malloc(MAXN * npes * sizeof(long));
    }
    for (int i = 0; i < MAXN; i++) src[i] = me * 100000L + i;
    shmem_barrier_all();
    for (int it = 0; it < ITERS; it++) {
        int s = it % 3;
        shmem_team_t t = (it % 2 && half != SHMEM_TEAM_INVALID) ? half : SHMEM_TEAM_WORLD;
        if (it % 2 && half == SHMEM_TEAM_INVALID) continue; /* not in the half team */
        int n = shmem_team_n_pes(t), r = shmem_team_my_pe(t);
        size_t len = (size_t)(1 + (it * 37) % MAXN);
        int root = it % n;
        shmem_long_broadcast(t, bc[s], src, len, root);
        shmem_long_sum_reduce(t, rd[s], src, len);
        shmem_long_fcollect(t, fc[s], src, len);
        shmem_long_collect(t, co[s], src, (size_t)(r + it) % 5);
        /* world PE of team rank k: k (both teams start at 0 with stride 1) */
        for (size_t i = 0; i < len; i++) {
            if (bc[s][i] != root * 100000L + (long)i) { CHECK(0, "it %d bcast [%zu]", it, i); break; }
            long want = 0;
            for (int k = 0; k < n; k++) want += k * 100000L + (long)i;
            if (rd[s][i] != want) { CHECK(0, "it %d sum [%zu]", it, i); break; }
        }
        for (int k = 0; k < n; k++)
            if (fc[s][k * len + len - 1] != k * 100000L + (long)len - 1) { CHECK(0, "it %d fcollect %d", it, k); break; }
        size_t at = 0;
        for (int k = 0; k < n; k++)
            for (size_t i = 0; i < (size_t)(k + it) % 5; i++, at++)
                if (co[s][at] != k * 100000L + (long)i) { CHECK(0, "it %d collect %zu", it, at); k = n; break; }
    }
    shmem_barrier_all();
    shmem_team_destroy(half);
    shmem_finalize();
    if (errors) fprintf(stderr, "PE %d: %d errors\n", me, errors);
    return errors ? 1 : 0;
}
