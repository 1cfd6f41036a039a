/* A comparison that is not a SHMEM_CMP_* value ends the job naming it. */
// expect-status: 1
// expect-stderr: switchyard: shmem_int_wait_until: cmp = 42
// expect-no-stderr: bootstrap failed
#include <shmem.h>

int main(void) {
    shmem_init();
    int *x = shmem_calloc(1, sizeof(int));
    shmem_int_wait_until(x, 42, 0);
    return 0;
}
