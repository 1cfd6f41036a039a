/* Locks: every PE increments a counter on PE 0 with a plain get and put,
 * under shmem_set_lock; the total is exact only if the lock excludes.
 * shmem_test_lock acquires a free lock and reports a held one. */
// tcp: yes
#include <shmem.h>
#include <stdio.h>

#define ROUNDS 200
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
    long *lock = shmem_calloc(2, sizeof(long));
    long *counter = shmem_calloc(1, sizeof(long));
    for (int i = 0; i < ROUNDS; i++) {
        shmem_set_lock(&lock[0]);
        long v = shmem_long_g(counter, 0);
        shmem_long_p(counter, v + 1, 0);
        shmem_clear_lock(&lock[0]);
    }
    shmem_barrier_all();
    if (me == 0) CHECK(*counter == (long)n * ROUNDS, "counter under the lock");
    shmem_barrier_all();

    /* test_lock: PE 0 takes it; the others see it held; then all take it in turn */
    if (me == 0) CHECK(shmem_test_lock(&lock[1]) == 0, "test_lock on a free lock");
    shmem_barrier_all();
    if (me != 0) CHECK(shmem_test_lock(&lock[1]) == 1, "test_lock on a held lock");
    shmem_barrier_all();
    if (me == 0) shmem_clear_lock(&lock[1]);
    shmem_barrier_all();
    int got = 0;
    for (int tries = 0; !got; tries++) {
        got = shmem_test_lock(&lock[1]) == 0;
        if (got) {
            shmem_long_atomic_inc(counter, 0);
            shmem_clear_lock(&lock[1]);
        }
    }
    shmem_barrier_all();
    if (me == 0) CHECK(*counter == (long)n * ROUNDS + n, "test_lock turns");
    shmem_barrier_all();
    shmem_free(counter);
    shmem_free(lock);
    shmem_finalize();
    if (errors == 0 && me == 0) printf("lock: ok on %d PEs\n", n);
    return errors != 0;
}
