/* SHMEM_THREAD_MULTIPLE: a thread blocked in a set wait (wait_until_all,
 * _any, _some and their _vector forms) leaves the library between polls,
 * as shmem_wait_until does, so another thread of the same PE gets in: here
 * the main thread, whose puts (to its own PE) satisfy the wait. Many
 * rounds, each with the next form: a wait that held the library while
 * blocking would hang the job on the first round where the waiter got in
 * first. */
#include <pthread.h>
#include <sched.h>
#include <shmem.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#define N 3
#define ROUNDS 60

static int ivars[N];
static atomic_int ready, failed;

static void *waiter(void *arg) {
    (void)arg;
    int cmp_values[N];
    size_t idx[N];
    for (int r = 1; r <= ROUNDS; r++) {
        for (int i = 0; i < N; i++) cmp_values[i] = r;
        atomic_store(&ready, r);
        size_t got = 0, k = 0;
        switch (r % 6) {
        case 0: shmem_int_wait_until_all(ivars, N, NULL, SHMEM_CMP_GE, r); break;
        case 1: got = shmem_int_wait_until_any(ivars, N, NULL, SHMEM_CMP_GE, r); break;
        case 2: k = shmem_int_wait_until_some(ivars, N, idx, NULL, SHMEM_CMP_GE, r); break;
        case 3: shmem_int_wait_until_all_vector(ivars, N, NULL, SHMEM_CMP_GE, cmp_values); break;
        case 4: got = shmem_int_wait_until_any_vector(ivars, N, NULL, SHMEM_CMP_GE, cmp_values); break;
        default: k = shmem_int_wait_until_some_vector(ivars, N, idx, NULL, SHMEM_CMP_GE, cmp_values); break;
        }
        int ok = 1;
        if (r % 3 == 1) ok = got < N && __atomic_load_n(&ivars[got], __ATOMIC_ACQUIRE) >= r;
        if (r % 3 == 2) ok = k >= 1 && k <= N && idx[0] < N;
        if (!ok) {
            fprintf(stderr, "round %d: any %zu, some %zu\n", r, got, k);
            atomic_store(&failed, 1);
        }
        /* Every round's puts are done before the next round's wait. */
        while (shmem_int_test_all(ivars, N, NULL, SHMEM_CMP_GE, r) == 0) {
        }
    }
    return NULL;
}

int main(void) {
    int provided;
    if (shmem_init_thread(SHMEM_THREAD_MULTIPLE, &provided) != 0) return 2;
    int me = shmem_my_pe();
    pthread_t t;
    pthread_create(&t, NULL, waiter, NULL);
    for (int r = 1; r <= ROUNDS; r++) {
        while (atomic_load(&ready) != r) {
        }
        /* Give the waiter time to be inside its wait (pacing only: the
         * result is the same either way). */
        for (int y = 0; y < 100; y++) sched_yield();
        for (int i = 0; i < N; i++) shmem_int_p(&ivars[i], r, me);
        shmem_quiet();
    }
    pthread_join(t, NULL);
    shmem_barrier_all();
    int bad = atomic_load(&failed) || ivars[0] != ROUNDS;
    if (bad) fprintf(stderr, "PE %d: failed %d, ivars[0] %d\n", me, atomic_load(&failed), ivars[0]);
    shmem_finalize();
    return bad;
}
