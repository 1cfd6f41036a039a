/* SHMEM_THREAD_MULTIPLE: a thread blocked in shmem_wait_until or
 * shmem_set_lock leaves the library between polls, so another thread of
 * the same PE gets in, here to satisfy the wait (a put to itself) and to
 * release the lock. */
#include <pthread.h>
#include <shmem.h>
#include <stdatomic.h>
#include <stdio.h>

static long flag, lock, inside;
static atomic_int started;

static void *waiter(void *arg) {
    (void)arg;
    atomic_store(&started, 1);
    shmem_long_wait_until(&flag, SHMEM_CMP_EQ, 1);
    return NULL;
}

static void *locker(void *arg) {
    (void)arg;
    atomic_store(&started, 2);
    shmem_set_lock(&lock); /* waits for the main thread's clear_lock */
    inside++;
    shmem_clear_lock(&lock);
    return NULL;
}

int main(void) {
    int provided;
    if (shmem_init_thread(SHMEM_THREAD_MULTIPLE, &provided) != 0) return 2;
    int me = shmem_my_pe();
    pthread_t t;
    pthread_create(&t, NULL, waiter, NULL);
    while (atomic_load(&started) != 1) {
    }
    shmem_long_p(&flag, 1, me);
    shmem_quiet();
    pthread_join(t, NULL);

    shmem_barrier_all();
    if (me == 0) {
        shmem_set_lock(&lock);
        pthread_create(&t, NULL, locker, NULL);
        while (atomic_load(&started) != 2) {
        }
        inside++;
        shmem_clear_lock(&lock);
        pthread_join(t, NULL);
    }
    shmem_barrier_all();
    int bad = flag != 1 || (me == 0 && inside != 2);
    if (bad) fprintf(stderr, "PE %d: flag %ld, inside %ld\n", me, flag, inside);
    shmem_finalize();
    return bad;
}
