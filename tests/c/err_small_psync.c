/* A pSync allocated in bytes instead of longs (a common slip) ends the job
 * naming the call and the argument, instead of the collective writing past
 * the block into the next symmetric object. */
// expect-status: 1
// expect-stderr: switchyard: shmem_collect64: pSync = 0x
// expect-stderr: runs past the end of its symmetric block
#include <shmem.h>
#include <stdio.h>

int main(void) {
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes();
    long *ps = shmem_malloc(SHMEM_COLLECT_SYNC_SIZE); /* should be * sizeof(long) */
    long *next = shmem_malloc(64 * sizeof(long));
    long *src = shmem_malloc(sizeof(long)), *dst = shmem_malloc((size_t)n * sizeof(long));
    for (int i = 0; i < 64; i++) next[i] = 7;
    *src = me;
    shmem_barrier_all();
    shmem_collect64(dst, src, 1, 0, 0, n, ps);
    for (int i = 0; i < 64; i++)
        if (next[i] != 7) fprintf(stderr, "PE %d: the next block changed: [%d] = %ld\n", me, i, next[i]);
    fprintf(stderr, "PE %d: the collect returned\n", me);
    shmem_finalize();
    return 3;
}
