/* A call after shmem_finalize ends the job saying so (it used to say
 * "called before shmem_init"). */
// expect-status: 1
// expect-stderr: switchyard: shmem_my_pe: called after shmem_finalize
#include <shmem.h>
#include <stdio.h>

int main(void) {
    shmem_init();
    shmem_finalize();
    int me = shmem_my_pe();
    fprintf(stderr, "shmem_my_pe after finalize returned %d\n", me);
    return 3;
}
