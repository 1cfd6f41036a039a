/* SHMEM_THREAD_SERIALIZED: threads take turns in the library. The thread
 * that called shmem_init_thread, then a second thread (while the first
 * waits in pthread_join), then the first again: each puts to its right
 * neighbour and checks what its left neighbour put. The second thread's
 * first call ends the first thread's lock-free entry; every call after it
 * goes through the lock, and none of them is taken for an overlap. */
#include <pthread.h>
#include <shmem.h>
#include <stdio.h>

static long *box;
static int errors;

static void round_trip(long tag) {
    int me = shmem_my_pe(), n = shmem_n_pes();
    int right = (me + 1) % n, left = (me + n - 1) % n;
    shmem_long_p(box, tag * 1000 + me, right);
    shmem_barrier_all();
    long want = tag * 1000 + left;
    if (*box != want) {
        fprintf(stderr, "PE %d round %ld: got %ld, want %ld\n", me, tag, *box, want);
        errors++;
    }
    shmem_barrier_all();
}

static void *second(void *arg) {
    (void)arg;
    round_trip(2);
    return NULL;
}

int main(void) {
    int provided = -1;
    if (shmem_init_thread(SHMEM_THREAD_SERIALIZED, &provided) != 0) return 2;
    if (provided != SHMEM_THREAD_SERIALIZED) {
        fprintf(stderr, "provided %d, not SHMEM_THREAD_SERIALIZED\n", provided);
        return 1;
    }
    box = shmem_malloc(sizeof *box);
    round_trip(1);
    pthread_t t;
    if (pthread_create(&t, NULL, second, NULL) != 0 || pthread_join(t, NULL) != 0) return 3;
    round_trip(3);
    shmem_free(box);
    shmem_finalize();
    return errors;
}
