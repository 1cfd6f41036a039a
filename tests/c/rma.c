/* RMA: typed put/get/p/g/iput/iget and their _nbi forms for every standard
 * RMA type, the sized put8..put128 forms, and the C11 generic names. Each PE
 * writes its right neighbour and reads it back. */
// tcp: yes
#include <shmem.h>
#include <stdio.h>
#include <string.h>

#define N 16
static int errors;
#define CHECK(cond, what)                                                              \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "PE %d: %s: %s\n", shmem_my_pe(), what, #cond);            \
            errors++;                                                                  \
        }                                                                              \
    } while (0)

#define TEST_TYPE(T, NAME)                                                             \
    static void test_##NAME(int me, int right, int left) {                             \
        T *a = shmem_malloc(4 * N * sizeof(T));                                        \
        T src[2 * N], got[2 * N];                                                      \
        memset(got, 0, sizeof got);                                                    \
        for (int i = 0; i < 2 * N; i++) src[i] = (T)(me * 3 + i);                      \
        /* contiguous put, get back from the right neighbour */                        \
        shmem_##NAME##_put(a, src, N, right);                                          \
        shmem_##NAME##_put_nbi(a + N, src + N, N, right);                              \
        shmem_quiet();                                                                 \
        shmem_barrier_all();                                                           \
        for (int i = 0; i < 2 * N; i++) CHECK(a[i] == (T)(left * 3 + i), #NAME " put"); \
        shmem_##NAME##_get(got, a, N, right);                                          \
        shmem_##NAME##_get_nbi(got + N, a + N, N, right);                              \
        shmem_quiet();                                                                 \
        for (int i = 0; i < 2 * N; i++) CHECK(got[i] == (T)(me * 3 + i), #NAME " get"); \
        shmem_barrier_all();                                                           \
        /* single elements */                                                          \
        shmem_##NAME##_p(&a[3 * N], (T)(me + 7), right);                               \
        shmem_barrier_all();                                                           \
        CHECK(a[3 * N] == (T)(left + 7), #NAME " p");                                  \
        CHECK(shmem_##NAME##_g(&a[3 * N], right) == (T)(me + 7), #NAME " g");          \
        shmem_barrier_all();                                                           \
        /* strided: every 2nd source element to every 3rd destination element */     \
        memset(a, 0, 4 * N * sizeof(T));                                               \
        shmem_barrier_all();                                                           \
        shmem_##NAME##_iput(a, src, 3, 2, N / 2, right);                               \
        shmem_barrier_all();                                                           \
        for (int i = 0; i < N / 2; i++) {                                              \
            CHECK(a[3 * i] == (T)(left * 3 + 2 * i), #NAME " iput");                   \
            if (3 * i + 1 < 4 * N) CHECK(a[3 * i + 1] == 0, #NAME " iput gap");        \
        }                                                                              \
        memset(got, 0, sizeof got);                                                    \
        shmem_##NAME##_iget(got, a, 2, 3, N / 2, right);                               \
        for (int i = 0; i < N / 2; i++) {                                              \
            CHECK(got[2 * i] == (T)(me * 3 + 2 * i), #NAME " iget");                   \
            CHECK(got[2 * i + 1] == 0, #NAME " iget gap");                             \
        }                                                                              \
        shmem_barrier_all();                                                           \
        shmem_free(a);                                                                 \
    }
SHMEM_RMA_TYPES(TEST_TYPE)

static void sized(int me, int right, int left) {
    uint64_t *a = shmem_calloc(64, sizeof(uint64_t));
    uint64_t src[64], got[64];
    for (int i = 0; i < 64; i++) src[i] = 0x0101010101010101ull * (uint64_t)(me + 1) + (uint64_t)i;
    shmem_put8(a, src, 8, right);
    shmem_put16((char *)a + 8, (char *)src + 8, 4, right);
    shmem_put32((char *)a + 16, (char *)src + 16, 2, right);
    shmem_put64(a + 3, src + 3, 1, right);
    shmem_put128(a + 4, src + 4, 2, right);
    shmem_putmem(a + 8, src + 8, 8 * sizeof(uint64_t), right);
    shmem_put64_nbi(a + 16, src + 16, 16, right);
    shmem_barrier_all();
    for (int i = 0; i < 32; i++)
        CHECK(a[i] == 0x0101010101010101ull * (uint64_t)(left + 1) + (uint64_t)i, "sized put");
    memset(got, 0, sizeof got);
    shmem_get8(got, a, 8, right);
    shmem_get16(got + 1, a + 1, 4, right);
    shmem_get32(got + 2, a + 2, 2, right);
    shmem_get64(got + 3, a + 3, 1, right);
    shmem_get128(got + 4, a + 4, 2, right);
    shmem_getmem(got + 8, a + 8, 8 * sizeof(uint64_t), right);
    shmem_get64_nbi(got + 16, a + 16, 16, right);
    shmem_quiet();
    for (int i = 0; i < 32; i++)
        CHECK(got[i] == 0x0101010101010101ull * (uint64_t)(me + 1) + (uint64_t)i, "sized get");
    shmem_iput64(a + 32, src, 2, 1, 4, right);
    shmem_barrier_all();
    for (int i = 0; i < 4; i++)
        CHECK(a[32 + 2 * i] == 0x0101010101010101ull * (uint64_t)(left + 1) + (uint64_t)i, "iput64");
    shmem_barrier_all();
    shmem_free(a);
}

/* _nbi between symmetric buffers: issued heap to heap, complete at quiet */
static void nbi_symmetric(int me, int right, int left) {
    enum { M = 3000 };
    long *src = shmem_malloc(M * sizeof(long));
    long *dst = shmem_calloc(M, sizeof(long));
    long *back = shmem_calloc(M, sizeof(long));
    for (int i = 0; i < M; i++) src[i] = me * 1000000L + i;
    shmem_barrier_all();
    shmem_long_put_nbi(dst, src, M / 2, right);
    shmem_putmem_nbi(dst + M / 2, src + M / 2, (M - M / 2) * sizeof(long), right);
    shmem_quiet();
    shmem_barrier_all();
    for (int i = 0; i < M; i++)
        if (dst[i] != left * 1000000L + i) { CHECK(0, "put_nbi from symmetric memory"); break; }
    shmem_long_get_nbi(back, dst, M / 3, right);
    shmem_getmem_nbi(back + M / 3, dst + M / 3, (M - M / 3) * sizeof(long), right);
    shmem_get64_nbi(back, dst, 1, right);
    shmem_quiet();
    for (int i = 0; i < M; i++)
        if (back[i] != me * 1000000L + i) { CHECK(0, "get_nbi into symmetric memory"); break; }
    shmem_barrier_all();
    shmem_free(back);
    shmem_free(dst);
    shmem_free(src);
}

/* A PE's transfers to itself whose ranges overlap behave like memmove
 * (strided ones: as if every source element were read first). */
static void overlap_self(int me) {
    long *b = shmem_malloc(16 * sizeof(long));
    for (int i = 0; i < 16; i++) b[i] = i;
    shmem_putmem(b + 1, b, 8 * sizeof(long), me);         /* forward */
    for (int i = 0; i < 8; i++) CHECK(b[i + 1] == i, "overlapping put to self");
    for (int i = 0; i < 16; i++) b[i] = i;
    shmem_long_get(b, b + 2, 8, me);                      /* backward */
    for (int i = 0; i < 8; i++) CHECK(b[i] == i + 2, "overlapping get from self");
    for (int i = 0; i < 16; i++) b[i] = i;
    shmem_long_put_nbi(b + 3, b, 10, me);
    shmem_quiet();
    for (int i = 0; i < 10; i++) CHECK(b[i + 3] == i, "overlapping put_nbi to self");
    /* a source running past its block is read as a local buffer: still
     * like memmove when it overlaps dest */
    for (int i = 0; i < 16; i++) b[i] = i;
    shmem_long_put_nbi(b + 8, b + 9, 8, me);
    shmem_quiet();
    for (int i = 0; i < 7; i++) CHECK(b[i + 8] == i + 9, "overlapping put_nbi from past a block");
    /* strided: every source element is read before any is written */
    for (int i = 0; i < 16; i++) b[i] = i;
    shmem_long_iput(b + 1, b, 2, 1, 6, me);                /* b[1 + 2k] = old b[k] */
    for (int k = 0; k < 6; k++) CHECK(b[1 + 2 * k] == k, "overlapping iput to self");
    for (int i = 0; i < 16; i++) b[i] = i;
    shmem_long_iget(b + 1, b, 2, 1, 6, me);                /* the same, as a get */
    for (int k = 0; k < 6; k++) CHECK(b[1 + 2 * k] == k, "overlapping iget from self");
    shmem_barrier_all();
    shmem_free(b);
}

static void generic(int me, int right, int left) {
    int *a = shmem_malloc(8 * sizeof(int));
    double *d = shmem_malloc(sizeof(double));
    int src[8];
    for (int i = 0; i < 8; i++) src[i] = me * 10 + i;
    shmem_put(a, src, 8, right);
    shmem_p(d, 0.5 + me, right);
    shmem_barrier_all();
    for (int i = 0; i < 8; i++) CHECK(a[i] == left * 10 + i, "generic put");
    CHECK(*d == 0.5 + left, "generic p");
    CHECK(shmem_g(d, right) == 0.5 + me, "generic g");
    int got[8];
    shmem_get(got, a, 8, right);
    for (int i = 0; i < 8; i++) CHECK(got[i] == me * 10 + i, "generic get");
    shmem_barrier_all();
    shmem_free(d);
    shmem_free(a);
}

int main(void) {
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes();
    int right = (me + 1) % n, left = (me + n - 1) % n;
#define RUN(T, NAME) test_##NAME(me, right, left);
    SHMEM_RMA_TYPES(RUN)
    sized(me, right, left);
    nbi_symmetric(me, right, left);
    overlap_self(me);
    generic(me, right, left);
    shmem_finalize();
    if (errors == 0 && me == 0) printf("rma: ok on %d PEs\n", n);
    return errors != 0;
}
