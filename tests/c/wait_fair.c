/* Waits and tests beyond the op timeout, and fair test_any/wait_until_any.
 * - With SWITCHYARD_OP_TIMEOUT=1s, a flag put 3 s later still wakes
 *   shmem_wait_until with no error, and a barrier whose last PE arrives
 *   3 s late completes: a wait on a live peer never times out, and the
 *   quiet opening it is acked by the sleeping PE's progress thread (also
 *   when it sleeps right after a shmem_test).
 * - Every flag of an array set (and never cleared): test_any and
 *   wait_until_any without a status mask return each index in turn, so a
 *   loop until every index has fired ends (with "always the lowest" it would
 *   return 0 forever; bounded here by a count, then reported). */
// tcp: yes
// env: SWITCHYARD_OP_TIMEOUT=1s
#include <shmem.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#define N 5
#define TRIES 100

static int errors;
#define CHECK(cond, what)                                                              \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "PE %d: %s: %s\n", shmem_my_pe(), what, #cond);            \
            errors++;                                                                  \
        }                                                                              \
    } while (0)

/* Calls `any` until each of the N indices was returned once, at most TRIES
 * times; returns how many distinct indices it saw. */
static int distinct(uint64_t *flags, int wait) {
    int seen[N] = {0}, count = 0;
    for (int t = 0; t < TRIES && count < N; t++) {
        size_t i = wait ? shmem_uint64_wait_until_any(flags, N, NULL, SHMEM_CMP_NE, 0)
                        : shmem_uint64_test_any(flags, N, NULL, SHMEM_CMP_NE, 0);
        if (i < N && !seen[i]) {
            seen[i] = 1;
            count++;
        }
    }
    return count;
}

int main(void) {
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes();
    int right = (me + 1) % n;

    /* A quiet market: the flag comes 3 s after the wait began. */
    uint64_t *late = shmem_calloc(1, sizeof(uint64_t));
    shmem_barrier_all();
    if (me == 0) sleep(3);
    shmem_uint64_atomic_set(late, 7, right);
    shmem_uint64_wait_until(late, SHMEM_CMP_EQ, 7);
    CHECK(*late == 7, "late flag");
    /* A late PE at a barrier: the others' barrier opens with a quiet toward
     * it (the atomic set above), which its progress thread acks while it
     * sleeps. */
    if (me == n - 1) sleep(3);
    shmem_barrier_all();
    /* Asleep right after a shmem_test that saw a flag, its ack still owed:
     * the progress thread acks it (the test gave the driver back), so PE 0's
     * quiet completes within the op timeout. */
    if (me == 0) shmem_uint64_atomic_set(late, 8, n - 1);
    if (me == n - 1) {
        while (!shmem_uint64_test(late, SHMEM_CMP_EQ, 8))
            ;
        sleep(3);
    }
    shmem_quiet();
    shmem_barrier_all();

    /* Fairness. */
    uint64_t *flags = shmem_calloc(N, sizeof(uint64_t));
    shmem_barrier_all();
    for (int i = 0; i < N; i++) shmem_uint64_atomic_set(&flags[i], 1, right);
    shmem_quiet();
    shmem_barrier_all();
    CHECK(distinct(flags, 0) == N, "test_any returned every index");
    CHECK(distinct(flags, 1) == N, "wait_until_any returned every index");
    /* A mask still wins over the cursor. */
    int status[N] = {1, 1, 0, 1, 1};
    for (int t = 0; t < 3; t++)
        CHECK(shmem_uint64_test_any(flags, N, status, SHMEM_CMP_NE, 0) == 2, "masked test_any");

    shmem_barrier_all();
    shmem_free(flags);
    shmem_free(late);
    shmem_finalize();
    return errors ? 1 : 0;
}
