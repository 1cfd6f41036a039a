/* The environment: SHMEM_INFO prints the configuration at init (PE 0, on
 * stdout; with SWITCHYARD_OP_TIMEOUT unset, the library's 10 s bounds
 * waits for a peer's answer; waits on live PEs never time out),
 * SHMEM_DEBUG adds debug lines on stderr. */
// env: SHMEM_INFO=1
// env: SHMEM_DEBUG=1
// env: SHMEM_SYMMETRIC_SIZE=12M
// env: SWITCHYARD_OP_TIMEOUT=
// expect-stdout: SHMEM_SYMMETRIC_SIZE  symmetric heap bytes per PE (K/M/G/T suffixes): 12M
// expect-stdout: operation timeout: 10s (waits for a peer's answer
// expect-stderr: switchyard: debug: PE 0 of
#include <shmem.h>

int main(void) {
    shmem_init();
    shmem_finalize();
    return 0;
}
