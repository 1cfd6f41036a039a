/* A get whose range runs past the end of the symmetric heap ends the job
 * before anything is written. */
// expect-status: 1
// expect-stderr: switchyard: shmem_getmem: source = 0x
#include <shmem.h>
#include <stdlib.h>

int main(void) {
    shmem_init();
    char *x = shmem_malloc(64);
    size_t too_much = (size_t)64 << 20; /* the heap is 8M */
    char *dst = malloc(too_much);
    shmem_getmem(dst, x, too_much, 0);
    return 0;
}
