/* A SHMEM_CTX_PRIVATE context used from a thread other than its creator
 * ends the job. */
// expect-status: 1
// expect-stderr: is SHMEM_CTX_PRIVATE to another thread
#include <pthread.h>
#include <shmem.h>

static long x;
static shmem_ctx_t c;

static void *other(void *arg) {
    (void)arg;
    shmem_ctx_long_p(c, &x, 1, 0);
    return NULL;
}

int main(void) {
    int provided;
    shmem_init_thread(SHMEM_THREAD_MULTIPLE, &provided);
    if (shmem_ctx_create(SHMEM_CTX_PRIVATE, &c) != 0) return 2;
    shmem_ctx_long_p(c, &x, 1, 0);
    pthread_t t;
    pthread_create(&t, NULL, other, NULL);
    pthread_join(t, NULL);
    shmem_finalize();
    return 3;
}
