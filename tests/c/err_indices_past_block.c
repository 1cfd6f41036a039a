/* shmem_*_test_some writes up to nelems indices: a symmetric indices array
 * shorter than that ends the job naming the call and the argument instead
 * of the indices running into the next symmetric object. */
// expect-status: 1
// expect-stderr: switchyard: shmem_long_test_some: indices = 0x
// expect-stderr: runs past the end of its symmetric block
#include <shmem.h>
#include <stdio.h>

int main(void) {
    shmem_init();
    long *ivars = shmem_calloc(32, sizeof(long));
    size_t *idx = shmem_malloc(4 * sizeof(size_t)); /* 32 indices would be needed */
    size_t n = shmem_long_test_some(ivars, 32, idx, NULL, SHMEM_CMP_EQ, 0);
    fprintf(stderr, "PE %d: test_some returned %zu\n", shmem_my_pe(), n);
    shmem_finalize();
    return 3;
}
