/* Team reductions (every operator on every type of the specification's
 * table) and the active-set _to_all forms, checked against a sequential
 * reference. Sizes cross the 16 KiB reduction chunk; in-place reductions and
 * back-to-back calls without synchronization in between are included.
 * Floating-point inputs are small integers, so every order is exact. */
#include <shmem.h>
#include <stdio.h>
#include <stdint.h>
#include <stddef.h>
#include <complex.h>

static int me, npes, errors;
static const size_t sizes[] = {1, 7, 1000, 17000};

#define FAIL(...)                                                   \
    do {                                                            \
        if (errors++ < 10) {                                        \
            fprintf(stderr, "PE %d: ", me);                         \
            fprintf(stderr, __VA_ARGS__);                           \
            fputc('\n', stderr);                                    \
        }                                                           \
    } while (0)

/* Inputs per operator: bit patterns, small values, and 1-or-2 for products. */
static long v_bits(int pe, size_t i) { return (long)((pe * 37 + i * 11 + 5) & 0x7f); }
static long v_small(int pe, size_t i) { return (long)((pe * 3 + i) % 13); }
static long v_prod(int pe, size_t i) { return (long)(1 + (pe + i) % 2); }

#define C_AND(a, b) ((a) & (b))
#define C_OR(a, b) ((a) | (b))
#define C_XOR(a, b) ((a) ^ (b))
#define C_MAX(a, b) ((a) > (b) ? (a) : (b))
#define C_MIN(a, b) ((a) < (b) ? (a) : (b))
#define C_SUM(a, b) ((a) + (b))
#define C_PROD(a, b) ((a) * (b))

/* One reduction of type T (name N), operator OP, inputs VAL, on WORLD. */
#define TEST_REDUCE(T, N, OP, COMB, VAL)                                           \
    do {                                                                           \
        for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {                \
            size_t n = sizes[s];                                                   \
            T *src = shmem_malloc(n * sizeof(T));                                  \
            T *dst = shmem_malloc(n * sizeof(T));                                  \
            T *inpl = shmem_malloc(n * sizeof(T));                                 \
            for (size_t i = 0; i < n; i++) {                                       \
                src[i] = (T)VAL(me, i);                                            \
                inpl[i] = (T)VAL(me, i);                                           \
            }                                                                      \
            int rc = shmem_##N##_##OP##_reduce(SHMEM_TEAM_WORLD, dst, src, n);     \
            int rc2 = shmem_##N##_##OP##_reduce(SHMEM_TEAM_WORLD, inpl, inpl, n);  \
            if (rc != 0 || rc2 != 0) FAIL(#N "_" #OP "_reduce returned %d/%d", rc, rc2); \
            for (size_t i = 0; i < n; i++) {                                       \
                T e = (T)VAL(0, i);                                                \
                for (int p = 1; p < npes; p++) e = (T)COMB(e, (T)VAL(p, i));       \
                if (dst[i] != e || inpl[i] != e || src[i] != (T)VAL(me, i)) {      \
                    FAIL(#N "_" #OP "_reduce n=%zu [%zu]: got %g / in place %g, want %g", \
                         n, i, (double)dst[i], (double)inpl[i], (double)e);        \
                    break;                                                         \
                }                                                                  \
            }                                                                      \
            shmem_free(inpl);                                                      \
            shmem_free(dst);                                                       \
            shmem_free(src);                                                       \
        }                                                                          \
    } while (0)

#define ARITH(T, N)                                  \
    TEST_REDUCE(T, N, max, C_MAX, v_small);          \
    TEST_REDUCE(T, N, min, C_MIN, v_small);          \
    TEST_REDUCE(T, N, sum, C_SUM, v_small);          \
    TEST_REDUCE(T, N, prod, C_PROD, v_prod)
#define BITWISE(T, N)                                \
    TEST_REDUCE(T, N, and, C_AND, v_bits);           \
    TEST_REDUCE(T, N, or, C_OR, v_bits);             \
    TEST_REDUCE(T, N, xor, C_XOR, v_bits);           \
    ARITH(T, N)

/* Complex: sums and products of small Gaussian integers (exact). */
#define TEST_COMPLEX(T, N)                                                          \
    do {                                                                            \
        size_t n = 5;                                                               \
        T *src = shmem_malloc(n * sizeof(T));                                       \
        T *sum = shmem_malloc(n * sizeof(T));                                       \
        T *prod = shmem_malloc(n * sizeof(T));                                      \
        for (size_t i = 0; i < n; i++) src[i] = (T)(me % 3 + 1) + (T)(i % 2) * (T)I; \
        shmem_##N##_sum_reduce(SHMEM_TEAM_WORLD, sum, src, n);                      \
        shmem_##N##_prod_reduce(SHMEM_TEAM_WORLD, prod, src, n);                    \
        for (size_t i = 0; i < n; i++) {                                            \
            T es = 0, ep = 1;                                                       \
            for (int p = 0; p < npes; p++) {                                        \
                T x = (T)(p % 3 + 1) + (T)(i % 2) * (T)I;                        \
                es += x;                                                            \
                ep *= x;                                                            \
            }                                                                       \
            if (sum[i] != es || prod[i] != ep) FAIL(#N " sum/prod [%zu] wrong", i);  \
        }                                                                           \
        shmem_free(prod);                                                           \
        shmem_free(sum);                                                            \
        shmem_free(src);                                                            \
    } while (0)

/* Active-set _to_all over every PE and, with logPE_stride 1, the even PEs. */
#define TEST_TO_ALL(T, N, OP, COMB, VAL)                                            \
    do {                                                                            \
        size_t n = 1500;                                                            \
        T *src = shmem_malloc(n * sizeof(T));                                       \
        T *dst = shmem_malloc(n * sizeof(T));                                       \
        T *wrk = shmem_malloc((n / 2 + 1 + SHMEM_REDUCE_MIN_WRKDATA_SIZE) * sizeof(T)); \
        long *ps = shmem_malloc(SHMEM_REDUCE_SYNC_SIZE * sizeof(long));             \
        for (int i = 0; i < SHMEM_REDUCE_SYNC_SIZE; i++) ps[i] = SHMEM_SYNC_VALUE;  \
        for (size_t i = 0; i < n; i++) src[i] = (T)VAL(me, i);                      \
        shmem_barrier_all();                                                        \
        for (int log = 0; log <= 1; log++) {                                        \
            int size = log == 0 ? npes : (npes + 1) / 2;                            \
            if (me % (1 << log) == 0) {                                             \
            shmem_##N##_##OP##_to_all(dst, src, (int)n, 0, log, size, wrk, ps);     \
            for (size_t i = 0; i < n; i++) {                                        \
                T e = (T)VAL(0, i);                                                 \
                for (int p = 1 << log; p < npes; p += 1 << log) e = (T)COMB(e, (T)VAL(p, i)); \
                if (dst[i] != e) {                                                  \
                    FAIL(#N "_" #OP "_to_all log=%d [%zu]: got %g want %g", log, i,  \
                         (double)dst[i], (double)e);                                \
                    break;                                                          \
                }                                                                   \
            }                                                                       \
            for (int i = 0; i < SHMEM_REDUCE_SYNC_SIZE; i++)                        \
                if (ps[i] != SHMEM_SYNC_VALUE) {                                    \
                    FAIL(#N "_" #OP "_to_all: pSync[%d] = %ld not restored", i, ps[i]); \
                    break;                                                          \
                }                                                                   \
            }                                                                       \
            /* the pSync is reused: every member must be done with it first */     \
            shmem_barrier_all();                                                    \
        }                                                                           \
        shmem_barrier_all();                                                        \
        shmem_free(ps);                                                             \
        shmem_free(wrk);                                                            \
        shmem_free(dst);                                                            \
        shmem_free(src);                                                            \
    } while (0)

/* The documented reduction order (shim-std/capi/src/coll/algo.rs,
 * tree_fold): ranks [a, b) combine as v[a] + f(a+1, a+2) + f(a+2, a+4) + ...
 * left to right, each term a subtree. */
static double tree_sum(const double *v, int a, int b) {
    double acc = v[a];
    for (int step = 1; a + step < b; step *= 2) {
        int e = a + 2 * step < b ? a + 2 * step : b;
        acc += tree_sum(v, a + step, e);
    }
    return acc;
}

int main(void) {
    shmem_init();
    me = shmem_my_pe();
    npes = shmem_n_pes();

    ARITH(char, char);
    ARITH(signed char, schar);
    ARITH(short, short);
    ARITH(int, int);
    ARITH(long, long);
    ARITH(long long, longlong);
    ARITH(ptrdiff_t, ptrdiff);
    BITWISE(unsigned char, uchar);
    BITWISE(unsigned short, ushort);
    BITWISE(unsigned int, uint);
    BITWISE(unsigned long, ulong);
    BITWISE(unsigned long long, ulonglong);
    BITWISE(int8_t, int8);
    BITWISE(int16_t, int16);
    BITWISE(int32_t, int32);
    BITWISE(int64_t, int64);
    BITWISE(uint8_t, uint8);
    BITWISE(uint16_t, uint16);
    BITWISE(uint32_t, uint32);
    BITWISE(uint64_t, uint64);
    BITWISE(size_t, size);
    ARITH(float, float);
    ARITH(double, double);
#if defined(__x86_64__)
    ARITH(long double, longdouble);
    { /* values a double cannot hold: the sum keeps the 64-bit mantissa */
        long double *s = shmem_malloc(sizeof(long double)), *d = shmem_malloc(sizeof(long double));
        *s = 1.0L + 0x1p-58L * (me + 1);
        shmem_longdouble_sum_reduce(SHMEM_TEAM_WORLD, d, s, 1);
        long double want = 0;
        for (int p = 0; p < npes; p++) want += 1.0L + 0x1p-58L * (p + 1);
        if (*d != want || (double)(*d - npes) == 0.0) FAIL("longdouble_sum_reduce lost precision");
        shmem_free(d);
        shmem_free(s);
    }
#endif
    TEST_COMPLEX(double _Complex, complexd);
    TEST_COMPLEX(float _Complex, complexf);

    /* Non-integer doubles: bit for bit the documented order, on every PE. */
    {
        size_t n = 600;
        double *src = shmem_malloc(n * sizeof(double));
        double *dst = shmem_malloc(n * sizeof(double));
        double v[64];
        for (size_t i = 0; i < n; i++) src[i] = 1.0 / (me + 3) + (double)i * 1e-3;
        shmem_double_sum_reduce(SHMEM_TEAM_WORLD, dst, src, n);
        for (size_t i = 0; i < n && npes <= 64; i++) {
            for (int p = 0; p < npes; p++) v[p] = 1.0 / (p + 3) + (double)i * 1e-3;
            if (dst[i] != tree_sum(v, 0, npes)) { FAIL("double_sum_reduce [%zu] not in the documented order", i); break; }
        }
        shmem_free(dst);
        shmem_free(src);
    }

    /* C11 generic names */
    {
        int *a = shmem_malloc(4 * sizeof(int));
        int *b = shmem_malloc(4 * sizeof(int));
        for (int i = 0; i < 4; i++) a[i] = me + i;
        shmem_sum_reduce(SHMEM_TEAM_WORLD, b, a, 4);
        for (int i = 0; i < 4; i++)
            if (b[i] != npes * (npes - 1) / 2 + npes * i) FAIL("shmem_sum_reduce (generic) [%d] = %d", i, b[i]);
        shmem_free(b);
        shmem_free(a);
    }
#if defined(__x86_64__)
    {
        long double *a = shmem_malloc(2 * sizeof(long double));
        long double *b = shmem_malloc(2 * sizeof(long double));
        a[0] = me + 0.5L;
        a[1] = -me;
        shmem_max_reduce(SHMEM_TEAM_WORLD, b, a, 2);
        if (b[0] != npes - 0.5L || b[1] != 0) FAIL("shmem_max_reduce (generic, long double)");
        shmem_free(b);
        shmem_free(a);
    }
#endif

    TEST_TO_ALL(short, short, and, C_AND, v_bits);
    TEST_TO_ALL(int, int, or, C_OR, v_bits);
    TEST_TO_ALL(long, long, xor, C_XOR, v_bits);
    TEST_TO_ALL(long long, longlong, max, C_MAX, v_small);
    TEST_TO_ALL(int, int, min, C_MIN, v_small);
    TEST_TO_ALL(long, long, sum, C_SUM, v_small);
    TEST_TO_ALL(short, short, prod, C_PROD, v_prod);
    TEST_TO_ALL(float, float, sum, C_SUM, v_small);
    TEST_TO_ALL(double, double, max, C_MAX, v_small);
    TEST_TO_ALL(double, double, prod, C_PROD, v_prod);
#if defined(__x86_64__)
    TEST_TO_ALL(long double, longdouble, sum, C_SUM, v_small);
    TEST_TO_ALL(long double, longdouble, min, C_MIN, v_small);
#endif

    shmem_barrier_all();
    shmem_finalize();
    if (errors) fprintf(stderr, "PE %d: %d errors\n", me, errors);
    return errors ? 1 : 0;
}
