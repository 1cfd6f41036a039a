/* shmem_align with an alignment above what every PE's heap mapping allows
 * (a page) ends the job naming the argument: the offset-aligned block it
 * used to return was not aligned at its address. */
// expect-status: 1
// expect-stderr: switchyard: shmem_align: alignment = 65536 is above 4096
#include <shmem.h>
#include <stdint.h>
#include <stdio.h>

int main(void) {
    shmem_init();
    void *p = shmem_align((size_t)1 << 16, 64);
    fprintf(stderr, "PE %d: shmem_align(65536) returned %p%s\n", shmem_my_pe(), p,
            ((uintptr_t)p % ((uintptr_t)1 << 16)) ? " (misaligned)" : "");
    shmem_finalize();
    return 3;
}
