/* A put to a block already freed ends the job naming the call and the
 * argument (its memory may belong to a newer block by then). */
// expect-status: 1
// expect-stderr: switchyard: shmem_long_p: dest = 0x
// expect-stderr: no block holds (not from shmem_malloc, or freed)
#include <shmem.h>
#include <stdio.h>

int main(void) {
    shmem_init();
    long *x = shmem_malloc(4 * sizeof(long));
    shmem_free(x);
    shmem_long_p(x, 1, (shmem_my_pe() + 1) % shmem_n_pes());
    fprintf(stderr, "PE %d: the put to a freed block returned\n", shmem_my_pe());
    shmem_finalize();
    return 3;
}
