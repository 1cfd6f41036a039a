/* shmem_align with an alignment that is not a power of two ends the job
 * naming the argument. */
// expect-status: 1
// expect-stderr: switchyard: shmem_align: alignment = 96 is not a power of two
#include <shmem.h>
#include <stdio.h>

int main(void) {
    shmem_init();
    void *p = shmem_align(96, 64);
    fprintf(stderr, "PE %d: shmem_align(96) returned %p\n", shmem_my_pe(), p);
    shmem_finalize();
    return 3;
}
