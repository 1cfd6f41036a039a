/* shmem_global_exit(0) from PE 0 ends the job with status 0 even though the
 * other PEs never finish. */
// expect-status: 0
// expect-stderr: rank 0 called shmem_global_exit(0)
// expect-no-stderr: bootstrap failed
#include <shmem.h>

int main(void) {
    shmem_init();
    long *never = shmem_calloc(1, sizeof(long));
    if (shmem_my_pe() == 0) shmem_global_exit(0);
    shmem_long_wait_until(never, SHMEM_CMP_EQ, 1);
    return 3;
}
