/* Non-fetching against fetching atomics (and an 8-byte put) through the
 * C API: PE 0 issues N ops of each kind to PE 1, then shmem_quiet, in
 * interleaved rounds; PE 1 waits in the barrier (its progress serves them)
 * and checks the total at the end (every add and fetch_add applied once).
 * Prints the median ns per op of each and the median of the rounds'
 * fetch_add/add ratios.
 *
 *   target/release/switchyard cc -O2 benches/c/add_rate.c -o /tmp/add_rate
 *   SWITCHYARD_TRANSPORTS=tcp target/release/switchyard run -n 2 -- /tmp/add_rate [N] [ROUNDS]
 */
#define _POSIX_C_SOURCE 199309L
#include <shmem.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}
static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 20000, rounds = argc > 2 ? atoi(argv[2]) : 9;
    shmem_init();
    long *w = shmem_calloc(1, sizeof(long));
    long *p = shmem_calloc(1, sizeof(long));
    double add[64], fadd[64], put[64];
    long expect = 0;
    for (int r = 0; r < rounds; r++) {
        if (shmem_my_pe() == 0) {
            double t0 = now();
            for (int i = 0; i < n; i++) shmem_long_atomic_add(w, 1, 1);
            shmem_quiet();
            double t1 = now();
            for (int i = 0; i < n; i++) (void)shmem_long_atomic_fetch_add(w, 1, 1);
            shmem_quiet();
            double t2 = now();
            for (int i = 0; i < n; i++) shmem_long_p(p, i, 1);
            shmem_quiet();
            double t3 = now();
            add[r] = (t1 - t0) / n; fadd[r] = (t2 - t1) / n; put[r] = (t3 - t2) / n;
        }
        expect += 2L * n;
        shmem_barrier_all();
    }
    if (shmem_my_pe() == 1 && *w != expect) {
        printf("PE 1: total %ld, expected %ld\n", *w, expect);
        return 1;
    }
    if (shmem_my_pe() == 0) {
        double ratio[64];
        for (int r = 0; r < rounds; r++) ratio[r] = fadd[r] / add[r];
        qsort(add, rounds, sizeof(double), cmp);
        qsort(fadd, rounds, sizeof(double), cmp);
        qsort(put, rounds, sizeof(double), cmp);
        qsort(ratio, rounds, sizeof(double), cmp);
        printf("median ns/op over %d rounds of %d: add %.0f  fetch_add %.0f  put8 %.0f  "
               "fetch_add/add (median of rounds) %.1fx\n",
               rounds, n, add[rounds / 2], fadd[rounds / 2], put[rounds / 2], ratio[rounds / 2]);
    }
    shmem_finalize();
    return 0;
}
