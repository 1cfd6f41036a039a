/* shmem_align with an alignment above the one every PE's heap starts at
 * (2 MiB) ends the job naming the argument, rather than returning a block
 * whose offset is aligned but whose address is not. */
// expect-status: 1
// expect-stderr: switchyard: shmem_align: alignment = 4194304 is above 2097152
#include <shmem.h>
#include <stdint.h>
#include <stdio.h>

int main(void) {
    shmem_init();
    void *p = shmem_align((size_t)1 << 22, 64);
    fprintf(stderr, "PE %d: shmem_align(4 MiB) returned %p%s\n", shmem_my_pe(), p,
            ((uintptr_t)p % ((uintptr_t)1 << 22)) ? " (misaligned)" : "");
    shmem_finalize();
    return 3;
}
