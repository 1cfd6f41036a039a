/* An active set that does not fit the job ends it with a message naming
 * the call and the argument. */
// expect-status: 1
// expect-stderr: shmem_barrier: PE_size = 
// expect-stderr: does not fit
#include <shmem.h>
#include <stdio.h>

int main(void) {
    shmem_init();
    long *ps = shmem_malloc(SHMEM_BARRIER_SYNC_SIZE * sizeof(long));
    shmem_barrier(0, 1, shmem_n_pes(), ps); /* stride 2: the last PE is past the end */
    fprintf(stderr, "PE %d: the barrier returned\n", shmem_my_pe());
    shmem_finalize();
    return 3;
}
