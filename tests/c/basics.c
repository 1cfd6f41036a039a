/* Setup, memory, putmem/getmem, barrier, quiet: each PE writes its right
 * neighbour's buffer and reads its left neighbour's. */
// tcp: yes
#include <shmem.h>
#include <stdio.h>
#include <string.h>

#define N 1000

static int fail(const char *what, long got, long want) {
    fprintf(stderr, "PE %d: %s: got %ld, want %ld\n", shmem_my_pe(), what, got, want);
    return 1;
}

int main(void) {
    int errors = 0;
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes();
    int right = (me + 1) % n, left = (me + n - 1) % n;

    long *buf = shmem_malloc(N * sizeof(long));
    if (buf == NULL) return fail("shmem_malloc", 0, 1);
    for (int i = 0; i < N; i++)
        if (buf[i] != 0) return fail("shmem_malloc zeroes", buf[i], 0);
    shmem_barrier_all(); /* everyone checked before anyone writes */
    long src[N];
    for (int i = 0; i < N; i++) src[i] = me * 100000L + i;
    shmem_putmem(buf, src, sizeof src, right);
    shmem_quiet();
    shmem_barrier_all();
    for (int i = 0; i < N; i++)
        if (buf[i] != left * 100000L + i) { errors += fail("putmem from the left", buf[i], left * 100000L + i); break; }

    long got[N];
    memset(got, 0, sizeof got);
    shmem_getmem(got, buf, sizeof got, right);
    for (int i = 0; i < N; i++)
        if (got[i] != me * 100000L + i) { errors += fail("getmem from the right", got[i], me * 100000L + i); break; }

    /* zero-length transfers are no-ops, even with NULL local buffers */
    shmem_putmem(buf, NULL, 0, right);
    shmem_getmem(NULL, buf, 0, right);

    if (shmem_malloc(0) != NULL) errors += fail("shmem_malloc(0)", 1, 0);
    char *c = shmem_malloc(3);
    char *d = shmem_malloc(5);
    if (((size_t)c % 8) || ((size_t)d % 8) || d - c < 8) errors += fail("8-byte granularity", d - c, 8);
    shmem_free(d);
    shmem_free(c);
    shmem_free(buf);
    shmem_barrier_all();
    shmem_finalize();
    if (me == 0 && errors == 0) printf("basics: ok on %d PEs\n", n);
    return errors != 0;
}
