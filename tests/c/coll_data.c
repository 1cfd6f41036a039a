/* Team broadcast, collect, fcollect, alltoall and alltoalls on every
 * standard RMA type, the mem forms, the C11 generic names, and the
 * active-set 32/64-bit forms (on every PE and on the odd PEs), each checked
 * element by element. Consecutive collectives on a team run without any
 * synchronization in between (the specification allows that). */
#include <shmem.h>
#include <stdio.h>
#include <stdint.h>
#include <stddef.h>
#include <string.h>

static int me, npes, errors;

#define FAIL(...)                                                   \
    do {                                                            \
        if (errors++ < 10) {                                        \
            fprintf(stderr, "PE %d: ", me);                         \
            fprintf(stderr, __VA_ARGS__);                           \
            fputc('\n', stderr);                                    \
        }                                                           \
    } while (0)

/* A value unique to (pe, index), small enough for every type. */
#define V(T, pe, i) ((T)(((pe) * 31 + (i) * 7 + 1) % 100))

#define TEST_TYPE(T, N)                                                              \
    do {                                                                             \
        size_t n = 700;                                                              \
        T *src = shmem_malloc(n * npes * sizeof(T));                                 \
        T *b1 = shmem_malloc(n * sizeof(T));                                         \
        T *b2 = shmem_malloc(n * sizeof(T));                                         \
        T *fc = shmem_malloc(n * npes * sizeof(T));                                  \
        T *co = shmem_malloc(n * npes * sizeof(T));                                  \
        T *aa = shmem_malloc(n * npes * sizeof(T));                                  \
        T *as = shmem_malloc(2 * n * npes * sizeof(T));                              \
        for (size_t i = 0; i < n * npes; i++) src[i] = V(T, me, i);                  \
        int root = npes - 1;                                                         \
        /* back to back: two broadcasts from different roots, then the rest */     \
        int rc = shmem_##N##_broadcast(SHMEM_TEAM_WORLD, b1, src, n, root);          \
        rc |= shmem_##N##_broadcast(SHMEM_TEAM_WORLD, b2, src, n, 0);                \
        rc |= shmem_##N##_fcollect(SHMEM_TEAM_WORLD, fc, src, n);                    \
        size_t mine = (size_t)me + 1; /* PE p contributes p + 1 elements */          \
        rc |= shmem_##N##_collect(SHMEM_TEAM_WORLD, co, src, mine);                  \
        size_t per = n / (size_t)npes;                                               \
        rc |= shmem_##N##_alltoall(SHMEM_TEAM_WORLD, aa, src, per);                  \
        rc |= shmem_##N##_alltoalls(SHMEM_TEAM_WORLD, as, src, 2, 3, 5);             \
        if (rc) FAIL(#N ": a collective returned non-zero");                         \
        for (size_t i = 0; i < n; i++) {                                             \
            if (b1[i] != V(T, root, i)) { FAIL(#N "_broadcast root %d [%zu]", root, i); break; } \
            if (b2[i] != V(T, 0, i)) { FAIL(#N "_broadcast root 0 [%zu]", i); break; } \
        }                                                                            \
        for (int p = 0; p < npes; p++)                                               \
            for (size_t i = 0; i < n; i++)                                           \
                if (fc[p * n + i] != V(T, p, i)) { FAIL(#N "_fcollect [%d][%zu]", p, i); p = npes; break; } \
        size_t at = 0;                                                               \
        for (int p = 0; p < npes; p++)                                               \
            for (size_t i = 0; i <= (size_t)p; i++, at++)                            \
                if (co[at] != V(T, p, i)) { FAIL(#N "_collect [%zu]", at); p = npes; break; } \
        for (int p = 0; p < npes; p++)                                               \
            for (size_t i = 0; i < per; i++)                                         \
                if (aa[p * per + i] != V(T, p, me * per + i)) { FAIL(#N "_alltoall [%d][%zu]", p, i); p = npes; break; } \
        for (int p = 0; p < npes; p++)                                               \
            for (size_t e = 0; e < 5; e++)                                           \
                if (as[(p * 5 + e) * 2] != V(T, p, (me * 5 + e) * 3)) { FAIL(#N "_alltoalls [%d][%zu]", p, e); p = npes; break; } \
        shmem_barrier_all();                                                         \
        shmem_free(as);                                                              \
        shmem_free(aa);                                                              \
        shmem_free(co);                                                              \
        shmem_free(fc);                                                              \
        shmem_free(b2);                                                              \
        shmem_free(b1);                                                              \
        shmem_free(src);                                                             \
    } while (0)

/* Active-set forms on 32- or 64-bit elements, over PEs start + i * 2^log. */
#define TEST_ACTIVE(BITS, T)                                                         \
    do {                                                                             \
        long *ps = shmem_malloc(5 * SHMEM_COLLECT_SYNC_SIZE * sizeof(long));          \
        for (int i = 0; i < 5 * SHMEM_COLLECT_SYNC_SIZE; i++) ps[i] = SHMEM_SYNC_VALUE; \
        size_t n = 300;                                                              \
        T *src = shmem_malloc(n * npes * sizeof(T));                                 \
        T *b = shmem_malloc(n * sizeof(T));                                          \
        T *fc = shmem_malloc(n * npes * sizeof(T));                                  \
        T *co = shmem_malloc(n * npes * sizeof(T));                                  \
        T *aa = shmem_malloc(n * npes * sizeof(T));                                  \
        T *as = shmem_malloc(2 * n * npes * sizeof(T));                              \
        for (size_t i = 0; i < n * npes; i++) src[i] = V(T, me, i);                  \
        shmem_barrier_all();                                                         \
        for (int odd = 0; odd <= 1; odd++) {                                         \
            int start = odd, log = odd, size = odd ? npes / 2 : npes;                \
            int stride = 1 << log;                                                   \
            memset(b, 0, n * sizeof(T));                                             \
            shmem_barrier_all(); /* dest ready everywhere before the root sends */  \
            if ((me - start) % stride == 0 && me >= start) {                         \
                int rank = (me - start) / stride;                                    \
                shmem_broadcast##BITS(b, src, n, size - 1, start, log, size, ps);    \
                shmem_fcollect##BITS(fc, src, n, start, log, size, ps + SHMEM_BCAST_SYNC_SIZE); \
                shmem_collect##BITS(co, src, (size_t)rank + 1, start, log, size, ps + 2 * SHMEM_BCAST_SYNC_SIZE); \
                size_t per = n / (size_t)size;                                       \
                shmem_alltoall##BITS(aa, src, per, start, log, size, ps + 3 * SHMEM_BCAST_SYNC_SIZE); \
                shmem_alltoalls##BITS(as, src, 2, 3, 5, start, log, size, ps + 4 * SHMEM_BCAST_SYNC_SIZE); \
                int rootpe = start + (size - 1) * stride;                            \
                for (size_t i = 0; i < n; i++) {                                     \
                    T want = me == rootpe ? 0 : V(T, rootpe, i);                     \
                    if (b[i] != want) { FAIL("broadcast" #BITS " odd=%d [%zu]", odd, i); break; } \
                }                                                                    \
                size_t at = 0;                                                       \
                for (int r = 0; r < size; r++) {                                     \
                    int p = start + r * stride;                                      \
                    for (size_t i = 0; i < n; i++)                                   \
                        if (fc[r * n + i] != V(T, p, i)) { FAIL("fcollect" #BITS " odd=%d [%d][%zu]", odd, r, i); break; } \
                    for (size_t i = 0; i <= (size_t)r; i++, at++)                    \
                        if (co[at] != V(T, p, i)) { FAIL("collect" #BITS " odd=%d [%zu]", odd, at); break; } \
                    for (size_t i = 0; i < per; i++)                                 \
                        if (aa[r * per + i] != V(T, p, rank * per + i)) { FAIL("alltoall" #BITS " odd=%d [%d][%zu]", odd, r, i); break; } \
                    for (size_t e = 0; e < 5; e++)                                   \
                        if (as[(r * 5 + e) * 2] != V(T, p, (rank * 5 + e) * 3)) { FAIL("alltoalls" #BITS " odd=%d", odd); break; } \
                }                                                                    \
                for (int i = 0; i < 5 * SHMEM_COLLECT_SYNC_SIZE; i++)                \
                    if (ps[i] != SHMEM_SYNC_VALUE) { FAIL("pSync[%d] = %ld after the active-set collectives", i, ps[i]); break; } \
            }                                                                        \
            shmem_barrier_all(); /* before the pSync is used again */               \
        }                                                                            \
        shmem_free(as);                                                              \
        shmem_free(aa);                                                              \
        shmem_free(co);                                                              \
        shmem_free(fc);                                                              \
        shmem_free(b);                                                               \
        shmem_free(src);                                                             \
        shmem_free(ps);                                                              \
    } while (0)

int main(void) {
    shmem_init();
    me = shmem_my_pe();
    npes = shmem_n_pes();

    TEST_TYPE(float, float);
    TEST_TYPE(double, double);
    TEST_TYPE(long double, longdouble);
    TEST_TYPE(char, char);
    TEST_TYPE(signed char, schar);
    TEST_TYPE(short, short);
    TEST_TYPE(int, int);
    TEST_TYPE(long, long);
    TEST_TYPE(long long, longlong);
    TEST_TYPE(unsigned char, uchar);
    TEST_TYPE(unsigned short, ushort);
    TEST_TYPE(unsigned int, uint);
    TEST_TYPE(unsigned long, ulong);
    TEST_TYPE(unsigned long long, ulonglong);
    TEST_TYPE(int8_t, int8);
    TEST_TYPE(int16_t, int16);
    TEST_TYPE(int32_t, int32);
    TEST_TYPE(int64_t, int64);
    TEST_TYPE(uint8_t, uint8);
    TEST_TYPE(uint16_t, uint16);
    TEST_TYPE(uint32_t, uint32);
    TEST_TYPE(uint64_t, uint64);
    TEST_TYPE(size_t, size);
    TEST_TYPE(ptrdiff_t, ptrdiff);

    /* mem forms and the C11 generic names */
    {
        size_t n = 10000;
        unsigned char *s = shmem_malloc(n * npes);
        unsigned char *d = shmem_malloc(n * npes);
        for (size_t i = 0; i < n * npes; i++) s[i] = (unsigned char)(me * 17 + i);
        shmem_broadcastmem(SHMEM_TEAM_WORLD, d, s, n, npes - 1);
        for (size_t i = 0; i < n; i++)
            if (d[i] != (unsigned char)((npes - 1) * 17 + i)) { FAIL("broadcastmem [%zu]", i); break; }
        shmem_barrier_all();
        shmem_fcollectmem(SHMEM_TEAM_WORLD, d, s, n);
        for (size_t i = 0; i < n * npes; i++)
            if (d[i] != (unsigned char)((i / n) * 17 + i % n)) { FAIL("fcollectmem [%zu]", i); break; }
        shmem_barrier_all();
        shmem_collectmem(SHMEM_TEAM_WORLD, d, s, 3);
        for (size_t i = 0; i < 3 * (size_t)npes; i++)
            if (d[i] != (unsigned char)((i / 3) * 17 + i % 3)) { FAIL("collectmem [%zu]", i); break; }
        shmem_barrier_all();
        shmem_alltoallmem(SHMEM_TEAM_WORLD, d, s, n);
        for (size_t i = 0; i < n * npes; i++)
            if (d[i] != (unsigned char)((i / n) * 17 + me * n + i % n)) { FAIL("alltoallmem [%zu]", i); break; }
        shmem_barrier_all();
        shmem_alltoallsmem(SHMEM_TEAM_WORLD, d, s, 1, 1, n);
        for (size_t i = 0; i < n * npes; i++)
            if (d[i] != (unsigned char)((i / n) * 17 + me * n + i % n)) { FAIL("alltoallsmem [%zu]", i); break; }
        shmem_barrier_all();
        int *gi = shmem_malloc(4 * sizeof(int) * npes);
        int *go = shmem_malloc(4 * sizeof(int) * npes);
        for (int i = 0; i < 4; i++) gi[i] = me * 10 + i;
        shmem_broadcast(SHMEM_TEAM_WORLD, go, gi, 4, 0);
        for (int i = 0; i < 4; i++)
            if (go[i] != i) FAIL("shmem_broadcast (generic) [%d] = %d", i, go[i]);
        shmem_fcollect(SHMEM_TEAM_WORLD, go, gi, 4);
        for (int i = 0; i < 4 * npes; i++)
            if (go[i] != (i / 4) * 10 + i % 4) FAIL("shmem_fcollect (generic) [%d] = %d", i, go[i]);
        shmem_barrier_all();
        shmem_free(go);
        shmem_free(gi);
        shmem_free(d);
        shmem_free(s);
    }

    TEST_ACTIVE(32, uint32_t);
    TEST_ACTIVE(64, uint64_t);

    shmem_barrier_all();
    shmem_finalize();
    if (errors) fprintf(stderr, "PE %d: %d errors\n", me, errors);
    return errors ? 1 : 0;
}
