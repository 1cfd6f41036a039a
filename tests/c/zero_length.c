/* Transfers and collectives of zero elements do nothing and look at no
 * pointer: NULL and private addresses are accepted. A put with signal of
 * no data still updates the signal. */
// tcp: yes
#include <shmem.h>
#include <stdio.h>

static int errors;
#define CHECK(cond, what)                                                              \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "PE %d: %s: %s\n", shmem_my_pe(), what, #cond);            \
            errors++;                                                                  \
        }                                                                              \
    } while (0)

int main(void) {
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes(), right = (me + 1) % n;
    long priv[2] = {0, 0};
    uint64_t *sig = shmem_calloc(1, sizeof(uint64_t));
    shmem_long_put(NULL, NULL, 0, right);
    shmem_long_get(NULL, NULL, 0, right);
    shmem_long_put(priv, priv, 0, right);
    shmem_long_get(priv, priv, 0, right);
    shmem_long_iput(NULL, NULL, 1, 1, 0, right);
    shmem_long_iget(NULL, NULL, 1, 1, 0, right);
    shmem_long_put_nbi(NULL, NULL, 0, right);
    shmem_long_get_nbi(NULL, NULL, 0, right);
    shmem_putmem(NULL, NULL, 0, right);
    shmem_getmem(priv, NULL, 0, right);
    shmem_putmem_nbi(NULL, priv, 0, right);
    shmem_getmem_nbi(NULL, NULL, 0, right);
    shmem_put64(NULL, NULL, 0, right);
    shmem_ctx_long_put(SHMEM_CTX_DEFAULT, NULL, NULL, 0, right);
    shmem_long_put_signal(NULL, NULL, 0, sig, 5, SHMEM_SIGNAL_SET, right);
    shmem_putmem_signal_nbi(NULL, NULL, 0, sig, 2, SHMEM_SIGNAL_ADD, right);
    shmem_quiet();
    shmem_barrier_all();
    CHECK(*sig == 7, "signal updated without data");

    CHECK(shmem_long_broadcast(SHMEM_TEAM_WORLD, NULL, NULL, 0, 0) == 0, "broadcast");
    CHECK(shmem_long_collect(SHMEM_TEAM_WORLD, NULL, NULL, 0) == 0, "collect");
    CHECK(shmem_long_fcollect(SHMEM_TEAM_WORLD, NULL, NULL, 0) == 0, "fcollect");
    CHECK(shmem_long_alltoall(SHMEM_TEAM_WORLD, NULL, NULL, 0) == 0, "alltoall");
    CHECK(shmem_long_alltoalls(SHMEM_TEAM_WORLD, NULL, NULL, 1, 1, 0) == 0, "alltoalls");
    CHECK(shmem_long_sum_reduce(SHMEM_TEAM_WORLD, NULL, NULL, 0) == 0, "sum_reduce");
    CHECK(shmem_int64_and_reduce(SHMEM_TEAM_WORLD, NULL, NULL, 0) == 0, "and_reduce");
    shmem_barrier_all();
    shmem_free(sig);
    shmem_finalize();
    return errors != 0;
}
