/* A put to a block already freed ends the job naming the call and the
 * argument (its memory may belong to a newer block by then). The block is
 * used before it is freed, so the pointer lookup has it remembered: freeing
 * must forget it. */
// expect-status: 1
// expect-stderr: switchyard: shmem_long_p: dest = 0x
// expect-stderr: no block holds (not from shmem_malloc, or freed)
#include <shmem.h>
#include <stdio.h>

int main(void) {
    shmem_init();
    int next = (shmem_my_pe() + 1) % shmem_n_pes();
    long *x = shmem_malloc(4 * sizeof(long));
    shmem_long_p(x, 1, next);
    shmem_free(x);
    shmem_long_p(x, 1, next);
    fprintf(stderr, "PE %d: the put to a freed block returned\n", shmem_my_pe());
    shmem_finalize();
    return 3;
}
