/* A bad SHMEM_SYMMETRIC_SIZE ends the job at init, naming the variable. */
// env: SHMEM_SYMMETRIC_SIZE=lots
// expect-status: 1
// expect-stderr: switchyard: shmem_init: SHMEM_SYMMETRIC_SIZE=lots: expected a size
#include <shmem.h>

int main(void) {
    shmem_init();
    shmem_finalize();
    return 0;
}
