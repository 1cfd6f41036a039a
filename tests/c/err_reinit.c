/* shmem_init after shmem_finalize ends the job with a clear message. */
// expect-status: 1
// expect-stderr: switchyard: shmem_init: called after shmem_finalize
#include <shmem.h>

int main(void) {
    shmem_init();
    shmem_pcontrol(1);
    shmem_finalize();
    shmem_init();
    return 0;
}
