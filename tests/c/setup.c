/* Setup, query and memory: init_thread/query_thread, query_initialized and
 * finalized, info_get_version/name, pe_accessible, addr_accessible,
 * shmem_ptr, calloc/align/realloc, and SHMEM_SYMMETRIC_SIZE (the heap is
 * 8M through SWITCHYARD_HEAP_SIZE; 24M comes only from SHMEM_SYMMETRIC_SIZE).
 */
// env: SHMEM_SYMMETRIC_SIZE=32M
#include <shmem.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int errors;
#define CHECK(cond, what)                                                              \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "%s: %s\n", what, #cond);                                  \
            errors++;                                                                  \
        }                                                                              \
    } while (0)

int main(void) {
    int flag = -1, provided = -1;
    shmem_query_initialized(&flag);
    CHECK(flag == 0, "not initialized before init");
    CHECK(shmem_init_thread(SHMEM_THREAD_MULTIPLE, &provided) == 0, "init_thread");
    CHECK(provided == SHMEM_THREAD_MULTIPLE, "MULTIPLE granted");
    shmem_query_thread(&provided);
    CHECK(provided == SHMEM_THREAD_MULTIPLE, "query_thread");
    shmem_query_initialized(&flag);
    CHECK(flag == 1, "initialized");
    shmem_init(); /* a second init does nothing */

    int me = shmem_my_pe(), n = shmem_n_pes();
    int major = 0, minor = 0;
    char name[SHMEM_MAX_NAME_LEN];
    shmem_info_get_version(&major, &minor);
    shmem_info_get_name(name);
    CHECK(major == SHMEM_MAJOR_VERSION && minor == SHMEM_MINOR_VERSION, "version");
    CHECK(strcmp(name, SHMEM_VENDOR_STRING) == 0, "vendor string");

    CHECK(shmem_pe_accessible(0) && shmem_pe_accessible(n - 1), "pe_accessible");
    CHECK(!shmem_pe_accessible(n) && !shmem_pe_accessible(-1), "pe not accessible");

    long *x = shmem_malloc(sizeof(long));
    long local = 0;
    CHECK(shmem_addr_accessible(x, (me + 1) % n) == 1, "heap addr accessible");
    CHECK(shmem_addr_accessible(&local, 0) == 0, "stack addr not accessible");
    CHECK(shmem_addr_accessible(x, n) == 0, "bad pe");

    /* shmem_ptr: one-node jobs map every PE's heap */
    *x = 1000 + me;
    shmem_barrier_all();
    CHECK(shmem_ptr(x, me) == (void *)x, "shmem_ptr to self");
    long *peer = shmem_ptr(x, (me + 1) % n);
    /* NULL only where the peer is not reached through shared memory */
    if (getenv("SWITCHYARD_TRANSPORTS") == NULL) CHECK(peer != NULL, "shmem_ptr to a same-node peer");
    CHECK(peer == NULL || *peer == 1000 + (me + 1) % n, "shmem_ptr value");
    shmem_barrier_all();

    /* memory */
    char *big = shmem_malloc(24u << 20);
    CHECK(big != NULL, "24M from SHMEM_SYMMETRIC_SIZE=32M");
    shmem_free(big);
    CHECK(shmem_malloc((size_t)1 << 40) == NULL, "too large gives NULL");
    long *h = shmem_malloc_with_hints(64, SHMEM_MALLOC_ATOMICS_REMOTE | SHMEM_MALLOC_SIGNAL_REMOTE);
    CHECK(h != NULL && *h == 0, "malloc_with_hints");
    shmem_free(h);
    int *c = shmem_calloc(100, sizeof(int));
    for (int i = 0; i < 100; i++) CHECK(c[i] == 0, "calloc zeroes");
    void *a = shmem_align(4096, 100);
    CHECK(a != NULL && ((uintptr_t)a % 4096) == 0, "align 4096");
    /* beyond a page: the allocator aligns offsets, each heap starts 2 MiB aligned */
    void *a64k = shmem_align((size_t)1 << 16, 100);
    CHECK(a64k != NULL && ((uintptr_t)a64k % ((uintptr_t)1 << 16)) == 0, "align 64K");
    void *a2m = shmem_align((size_t)1 << 21, 100);
    CHECK(a2m != NULL && ((uintptr_t)a2m % ((uintptr_t)1 << 21)) == 0, "align 2M");
    shmem_free(a2m);
    shmem_free(a64k);
    for (int i = 0; i < 100; i++) c[i] = i * me;
    c = shmem_realloc(c, 1000 * sizeof(int));
    CHECK(c != NULL, "realloc");
    for (int i = 0; i < 100; i++) CHECK(c[i] == i * me, "realloc keeps the contents");
    for (int i = 100; i < 1000; i++) CHECK(c[i] == 0, "realloc zeroes the rest");
    c[999] = me;
    shmem_barrier_all();
    CHECK(shmem_int_g(&c[999], (me + 1) % n) == (me + 1) % n, "realloc'd block is symmetric");
    shmem_barrier_all();
    CHECK(shmem_realloc(c, 0) == NULL, "realloc to 0 frees");
    shmem_free(a);
    shmem_free(NULL);
    shmem_free(x);

    shmem_finalize();
    shmem_query_finalized(&flag);
    CHECK(flag == 1, "finalized");
    shmem_finalize(); /* a second finalize does nothing */
    if (errors == 0 && me == 0) printf("setup: ok on %d PEs\n", n);
    return errors != 0;
}
