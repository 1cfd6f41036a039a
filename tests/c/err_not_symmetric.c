/* A put to a stack address ends the job naming the call and the argument. */
// expect-status: 1
// expect-stderr: switchyard: shmem_long_put: dest = 0x
// expect-stderr: is not symmetric
#include <shmem.h>

int main(void) {
    shmem_init();
    long local[4] = {0};
    long v[4] = {1, 2, 3, 4};
    shmem_long_put(local, v, 4, 0);
    return 0;
}
