/* shmem_query_thread reports the level shmem_init_thread provided (below
 * SHMEM_THREAD_SERIALIZED that is the level requested), not always
 * SHMEM_THREAD_SERIALIZED. */
#include <shmem.h>
#include <stdio.h>

int main(void) {
    int provided = -1, queried = -1;
    if (shmem_init_thread(SHMEM_THREAD_FUNNELED, &provided) != 0) return 2;
    shmem_query_thread(&queried);
    int me = shmem_my_pe(), bad = 0;
    if (provided != SHMEM_THREAD_FUNNELED) {
        fprintf(stderr, "PE %d: init_thread(FUNNELED) provided %d\n", me, provided);
        bad = 1;
    }
    if (queried != provided) {
        fprintf(stderr, "PE %d: query_thread says %d, init_thread provided %d\n", me, queried, provided);
        bad = 1;
    }
    shmem_finalize();
    return bad;
}
