/* Communication contexts: shmem_ctx_create/destroy, and the shmem_ctx_*
 * RMA, AMO, signal, fence and quiet forms on the default and created ones. */
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
    int me = shmem_my_pe(), n = shmem_n_pes();
    int right = (me + 1) % n, left = (me + n - 1) % n;
    shmem_ctx_t a = SHMEM_CTX_INVALID, b = SHMEM_CTX_INVALID;
    CHECK(shmem_ctx_create(SHMEM_CTX_PRIVATE | SHMEM_CTX_SERIALIZED, &a) == 0, "create");
    CHECK(shmem_ctx_create(0, &b) == 0, "create");
    CHECK(a != SHMEM_CTX_INVALID && a != SHMEM_CTX_DEFAULT && a != b, "distinct handles");

    long *x = shmem_calloc(8, sizeof(long));
    uint64_t *sig = shmem_calloc(1, sizeof(uint64_t));
    long src[4] = {me, me + 1, me + 2, me + 3};
    shmem_ctx_long_put(a, x, src, 4, right);
    shmem_ctx_long_p(SHMEM_CTX_DEFAULT, &x[4], me * 10, right);
    shmem_ctx_putmem_nbi(b, &x[5], &src[1], sizeof(long), right);
    shmem_ctx_quiet(a);
    shmem_ctx_quiet(b);
    shmem_barrier_all();
    for (int i = 0; i < 4; i++) CHECK(x[i] == left + i, "ctx put");
    CHECK(x[4] == left * 10 && x[5] == left + 1, "ctx p, putmem_nbi");
    CHECK(shmem_ctx_long_g(b, &x[4], right) == me * 10, "ctx g");
    long got[4];
    shmem_ctx_long_get(a, got, x, 4, right);
    CHECK(got[3] == me + 3, "ctx get");
    shmem_barrier_all();

    shmem_ctx_long_atomic_add(a, &x[6], 2, 0);
    (void)shmem_ctx_long_atomic_fetch_inc(SHMEM_CTX_DEFAULT, &x[6], 0);
    shmem_ctx_ulong_atomic_or(b, (unsigned long *)&x[7], 1ul << me, 0);
    shmem_ctx_fence(a);
    shmem_ctx_quiet(a);
    shmem_barrier_all();
    if (me == 0) {
        CHECK(x[6] == 3L * n, "ctx add + fetch_inc");
        CHECK((unsigned long)x[7] == (1ul << n) - 1, "ctx or");
    }
    shmem_barrier_all();

    shmem_ctx_long_put_signal(b, x, src, 4, sig, 1, SHMEM_SIGNAL_ADD, right);
    shmem_signal_wait_until(sig, SHMEM_CMP_EQ, 1);
    CHECK(x[0] == left, "ctx put_signal");
    shmem_barrier_all();

    shmem_ctx_destroy(a);
    shmem_ctx_destroy(b);
    shmem_ctx_destroy(SHMEM_CTX_INVALID);
    shmem_free(sig);
    shmem_free(x);
    shmem_finalize();
    if (errors == 0 && me == 0) printf("ctx: ok on %d PEs\n", n);
    return errors != 0;
}
