/* SHMEM_THREAD_MULTIPLE: four threads per PE call in at once (puts, gets,
 * atomics, quiet on the default context); the calls are serialized and
 * every result is right. */
// tcp: yes
#include <pthread.h>
#include <shmem.h>
#include <stdio.h>

#define THREADS 4
#define ROUNDS 500

static long slots[THREADS][ROUNDS];
static long counter;
static int errors[THREADS];

static void *work(void *arg) {
    int id = (int)(long)arg;
    int me = shmem_my_pe(), n = shmem_n_pes(), right = (me + 1) % n;
    for (int i = 0; i < ROUNDS; i++) {
        shmem_long_p(&slots[id][i], me * 100000L + id * 1000 + i, right);
        shmem_long_atomic_inc(&counter, 0);
        if (i % 50 == 0) shmem_quiet();
    }
    shmem_quiet();
    long back = shmem_long_g(&slots[id][ROUNDS - 1], right);
    if (back != me * 100000L + id * 1000 + ROUNDS - 1) errors[id]++;
    return NULL;
}

int main(void) {
    int provided = -1, queried = -1;
    if (shmem_init_thread(SHMEM_THREAD_MULTIPLE, &provided) != 0) return 2;
    shmem_query_thread(&queried);
    int me = shmem_my_pe(), n = shmem_n_pes(), left = (me + n - 1) % n, bad = 0;
    if (provided != SHMEM_THREAD_MULTIPLE || queried != SHMEM_THREAD_MULTIPLE) {
        fprintf(stderr, "PE %d: provided %d, queried %d\n", me, provided, queried);
        bad = 1;
    }
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, work, (void *)i);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    shmem_barrier_all();
    for (int id = 0; id < THREADS; id++) {
        bad |= errors[id];
        for (int i = 0; i < ROUNDS; i++)
            if (slots[id][i] != left * 100000L + id * 1000 + i) {
                fprintf(stderr, "PE %d: slot %d/%d = %ld\n", me, id, i, slots[id][i]);
                bad = 1;
                break;
            }
    }
    if (me == 0 && counter != (long)n * THREADS * ROUNDS) {
        fprintf(stderr, "counter %ld, want %ld\n", counter, (long)n * THREADS * ROUNDS);
        bad = 1;
    }
    shmem_finalize();
    return bad;
}
