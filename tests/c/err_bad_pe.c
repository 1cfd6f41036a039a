/* A put to a PE that does not exist ends the job naming the call and the PE. */
// expect-status: 1
// expect-stderr: switchyard: shmem_putmem: pe
// expect-no-stderr: bootstrap failed
#include <shmem.h>

int main(void) {
    shmem_init();
    long *x = shmem_malloc(sizeof(long));
    long v = 1;
    shmem_putmem(x, &v, sizeof v, shmem_n_pes());
    return 0;
}
