/* A put on a SHMEM_CTX_NOSTORE context ends the job naming the context. */
// expect-status: 1
// expect-stderr: is SHMEM_CTX_NOSTORE: no puts or AMOs on it
#include <shmem.h>

static long x;

int main(void) {
    shmem_init();
    shmem_ctx_t c;
    if (shmem_ctx_create(SHMEM_CTX_NOSTORE, &c) != 0) return 2;
    shmem_long_p(&x, 1, 0);
    shmem_ctx_long_p(c, &x, 1, 0);
    shmem_finalize();
    return 3;
}
