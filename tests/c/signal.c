/* Signals: put_signal with SHMEM_SIGNAL_SET and _ADD (typed, sized, putmem,
 * _nbi and the generic name), signal_wait_until, signal_fetch. The data must
 * be there when the signal is seen; to the calling PE with overlapping
 * source and dest it copies like memmove. */
// tcp: yes
#include <shmem.h>
#include <stdio.h>

#define N 4096
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
    long *data = shmem_calloc(N, sizeof(long));
    uint64_t *sig = shmem_calloc(2, sizeof(uint64_t));
    static long src[N];
    for (int round = 1; round <= 20; round++) {
        for (int i = 0; i < N; i++) src[i] = round * 1000000L + me * 10000L + i;
        if (round % 4 == 0)
            shmem_long_put_signal(data, src, N, &sig[0], (uint64_t)round, SHMEM_SIGNAL_SET, right);
        else if (round % 4 == 1)
            shmem_long_put_signal_nbi(data, src, N, &sig[0], (uint64_t)round, SHMEM_SIGNAL_SET, right);
        else if (round % 4 == 2)
            shmem_putmem_signal(data, src, N * sizeof(long), &sig[0], (uint64_t)round, SHMEM_SIGNAL_SET, right);
        else
            shmem_put64_signal_nbi(data, src, N, &sig[0], (uint64_t)round, SHMEM_SIGNAL_SET, right);
        uint64_t v = shmem_signal_wait_until(&sig[0], SHMEM_CMP_GE, (uint64_t)round);
        CHECK(v == (uint64_t)round, "signal value");
        for (int i = 0; i < N; i++)
            if (data[i] != round * 1000000L + left * 10000L + i) { CHECK(0, "data before signal"); break; }
        shmem_barrier_all(); /* nobody overwrites data before its owner checked it */
    }
    /* ADD: every PE adds to PE 0's counter word with a one-element put */
    int one = me;
    int *slot = shmem_calloc((size_t)n, sizeof(int));
    shmem_put_signal(&slot[me], &one, 1, &sig[1], 1, SHMEM_SIGNAL_ADD, 0);
    if (me == 0) {
        shmem_signal_wait_until(&sig[1], SHMEM_CMP_EQ, (uint64_t)n);
        CHECK(shmem_signal_fetch(&sig[1]) == (uint64_t)n, "signal_fetch after adds");
        for (int i = 0; i < n; i++) CHECK(slot[i] == i, "data of each add");
    }
    shmem_barrier_all();
    /* to this PE, source and dest overlapping: copied like memmove */
    for (int i = 0; i < 16; i++) data[i] = i;
    shmem_long_put_signal(data + 1, data, 8, &sig[0], 99, SHMEM_SIGNAL_SET, me);
    CHECK(shmem_signal_wait_until(&sig[0], SHMEM_CMP_EQ, 99) == 99, "signal to self");
    for (int i = 0; i < 8; i++) CHECK(data[i + 1] == i, "overlapping put_signal to self");
    shmem_barrier_all();
    shmem_free(slot);
    shmem_free(sig);
    shmem_free(data);
    shmem_finalize();
    if (errors == 0 && me == 0) printf("signal: ok on %d PEs\n", n);
    return errors != 0;
}
