/* shmem_align serves every power of two up to the heap size (the tests run
 * with an 8 MiB heap): the block's address is aligned on every PE and it
 * is usable remotely. An alignment above the heap gives NULL on every PE. */
#include <shmem.h>
#include <stdint.h>
#include <stdio.h>

static int errors;
#define CHECK(cond, what)                                                              \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "PE %d: %s: %s\n", shmem_my_pe(), what, #cond);            \
            errors++;                                                                  \
        }                                                                              \
    } while (0)

int main(void) {
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes();
    for (int k = 0; k <= 22; k++) {
        size_t align = (size_t)1 << k;
        long *p = shmem_align(align, 2 * sizeof(long));
        CHECK(p != NULL, "aligned block");
        if (p == NULL) continue;
        CHECK((uintptr_t)p % align == 0, "address aligned");
        shmem_long_p(&p[1], me + k, (me + 1) % n);
        shmem_barrier_all();
        CHECK(p[1] == (me + n - 1) % n + k, "remote put into it");
        shmem_free(p);
    }
    CHECK(shmem_align((size_t)1 << 40, 64) == NULL, "alignment above the heap");
    shmem_finalize();
    return errors != 0;
}
