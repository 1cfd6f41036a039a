/* shmem_global_exit: the last PE ends the whole job with status 7 while the
 * others wait for a flag that never comes; `switchyard run` must exit with 7. */
// expect-status: 7
// expect-stderr: global-exit.sytrace
// expect-no-stderr: bootstrap failed
#include <shmem.h>
#include <stdio.h>

int main(void) {
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes();
    long *never = shmem_calloc(1, sizeof(long));
    if (me == n - 1) {
        printf("PE %d: calling shmem_global_exit(7)\n", me);
        shmem_global_exit(7);
    }
    shmem_long_wait_until(never, SHMEM_CMP_EQ, 1);
    fprintf(stderr, "PE %d: the wait ended: shmem_global_exit did not stop the job\n", me);
    return 3;
}
