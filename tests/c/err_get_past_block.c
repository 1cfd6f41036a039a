/* A get into symmetric memory too short for nelems ends the job naming the
 * call and the argument instead of writing past the block into the next
 * symmetric object (a get's dest is checked like a local buffer otherwise). */
// expect-status: 1
// expect-stderr: switchyard: shmem_long_get: dest = 0x
// expect-stderr: runs past the end of its symmetric block
#include <shmem.h>
#include <stdio.h>

int main(void) {
    shmem_init();
    int me = shmem_my_pe();
    long *small = shmem_malloc(8 * sizeof(long));
    long *next = shmem_malloc(64 * sizeof(long));
    long *big = shmem_calloc(64, sizeof(long));
    for (int i = 0; i < 64; i++) next[i] = 7;
    shmem_barrier_all();
    shmem_long_get(small, big, 64, (me + 1) % shmem_n_pes());
    for (int i = 0; i < 64; i++)
        if (next[i] != 7) fprintf(stderr, "PE %d: the next block changed: [%d] = %ld\n", me, i, next[i]);
    fprintf(stderr, "PE %d: the get returned\n", me);
    shmem_finalize();
    return 3;
}
