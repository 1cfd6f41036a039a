/* AMO: every standard, extended and bitwise AMO type, fetching and
 * non-fetching forms, the _nbi forms and the C11 generic names. Every PE
 * hits PE 0's copy (contention), then checks what it can. */
// tcp: yes
#include <shmem.h>
#include <stdio.h>

static int errors;
#define CHECK(cond, what)                                                              \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "PE %d: %s: %s\n", shmem_my_pe(), what, #cond);            \
            errors++;                                                                  \
        }                                                                              \
    } while (0)

#define TEST_STD(T, NAME)                                                              \
    static void std_##NAME(int me, int n) {                                            \
        T *x = shmem_calloc(4, sizeof(T));                                             \
        T f;                                                                           \
        shmem_##NAME##_atomic_add(&x[0], (T)2, 0);                                     \
        shmem_##NAME##_atomic_inc(&x[0], 0);                                           \
        f = shmem_##NAME##_atomic_fetch_add(&x[1], (T)1, 0);                           \
        CHECK(f < (T)(2 * n), #NAME " fetch_add old value");                                 \
        f = shmem_##NAME##_atomic_fetch_inc(&x[1], 0);                                 \
        CHECK(f < (T)(2 * n), #NAME " fetch_inc old value");                           \
        shmem_##NAME##_atomic_fetch_add_nbi(&f, &x[2], (T)5, 0);                       \
        shmem_##NAME##_atomic_fetch_inc_nbi(&f, &x[2], 0);                             \
        shmem_quiet();                                                                 \
        shmem_barrier_all();                                                           \
        if (me == 0) {                                                                 \
            CHECK(x[0] == (T)(3 * n), #NAME " add+inc total");                         \
            CHECK(x[1] == (T)(2 * n), #NAME " fetch_add+fetch_inc total");             \
            CHECK(x[2] == (T)(6 * n), #NAME " _nbi total");                            \
        }                                                                              \
        shmem_barrier_all();                                                           \
        /* compare-swap: exactly one PE wins each round */                             \
        T old = shmem_##NAME##_atomic_compare_swap(&x[3], (T)0, (T)(me + 1), 0);       \
        shmem_barrier_all();                                                           \
        T winner = shmem_##NAME##_atomic_fetch(&x[3], 0);                              \
        CHECK(winner >= (T)1 && winner <= (T)n, #NAME " compare_swap winner");         \
        CHECK((old == 0) == (winner == (T)(me + 1)), #NAME " compare_swap result");    \
        shmem_barrier_all();                                                           \
        if (me == 0) {                                                                 \
            shmem_##NAME##_atomic_compare_swap_nbi(&f, &x[3], winner, (T)99, 0);       \
            shmem_quiet();                                                             \
            CHECK(f == winner && x[3] == (T)99, #NAME " compare_swap_nbi");            \
        }                                                                              \
        shmem_barrier_all();                                                           \
        shmem_free(x);                                                                 \
    }
SHMEM_AMO_STD_TYPES(TEST_STD)

#define TEST_EXT(T, NAME)                                                              \
    static void ext_##NAME(int me, int n) {                                            \
        T *x = shmem_calloc(2, sizeof(T));                                             \
        int right = (me + 1) % n, left = (me + n - 1) % n;                             \
        shmem_##NAME##_atomic_set(&x[0], (T)(me + 0.5f), right);                       \
        shmem_barrier_all();                                                           \
        CHECK(x[0] == (T)(left + 0.5f), #NAME " set");                                 \
        CHECK(shmem_##NAME##_atomic_fetch(&x[0], right) == (T)(me + 0.5f), #NAME " fetch"); \
        shmem_barrier_all();                                                           \
        T old = shmem_##NAME##_atomic_swap(&x[0], (T)(me + 2), right);                 \
        CHECK(old == (T)(me + 0.5f), #NAME " swap");                                   \
        shmem_barrier_all();                                                           \
        T f = 0;                                                                       \
        shmem_##NAME##_atomic_fetch_nbi(&f, &x[0], right);                             \
        shmem_quiet();                                                                 \
        CHECK(f == (T)(me + 2), #NAME " fetch_nbi");                                   \
        shmem_barrier_all();                                                           \
        shmem_##NAME##_atomic_swap_nbi(&f, &x[0], (T)1, right);                        \
        shmem_quiet();                                                                 \
        CHECK(f == (T)(me + 2), #NAME " swap_nbi");                                    \
        shmem_barrier_all();                                                           \
        shmem_free(x);                                                                 \
    }
SHMEM_AMO_EXT_TYPES(TEST_EXT)

#define TEST_BIT(T, NAME)                                                              \
    static void bit_##NAME(int me, int n) {                                            \
        T *x = shmem_calloc(3, sizeof(T));                                             \
        T bit = (T)((T)1 << me), f;                                                    \
        if (me == 0) { x[1] = (T)~(T)0; }                                              \
        shmem_barrier_all();                                                           \
        shmem_##NAME##_atomic_or(&x[0], bit, 0);                                       \
        f = shmem_##NAME##_atomic_fetch_and(&x[1], (T)~bit, 0);                        \
        shmem_##NAME##_atomic_fetch_xor_nbi(&f, &x[2], bit, 0);                        \
        shmem_##NAME##_atomic_xor(&x[2], (T)((T)1 << (me + 8)), 0);                    \
        shmem_quiet();                                                                 \
        shmem_barrier_all();                                                           \
        T all = (T)(((T)1 << n) - 1);                                                  \
        if (me == 0) {                                                                 \
            CHECK(x[0] == all, #NAME " or");                                           \
            CHECK(x[1] == (T)~all, #NAME " fetch_and");                                \
            CHECK(x[2] == (T)(all | (T)(all << 8)), #NAME " xor");                     \
        }                                                                              \
        shmem_barrier_all();                                                           \
        shmem_##NAME##_atomic_and(&x[0], (T)~bit, 0);                                  \
        shmem_##NAME##_atomic_fetch_or_nbi(&f, &x[1], bit, 0);                         \
        f = shmem_##NAME##_atomic_fetch_xor(&x[2], bit, 0);                            \
        shmem_##NAME##_atomic_fetch_and_nbi(&f, &x[2], (T)~(T)0, 0);                   \
        (void)shmem_##NAME##_atomic_fetch_or(&x[1], (T)0, 0);                          \
        shmem_quiet();                                                                 \
        shmem_barrier_all();                                                           \
        if (me == 0) {                                                                 \
            CHECK(x[0] == 0, #NAME " and");                                            \
            CHECK(x[1] == (T)~(T)0, #NAME " fetch_or_nbi");                            \
            CHECK(x[2] == (T)(all << 8), #NAME " fetch_xor");                          \
        }                                                                              \
        shmem_barrier_all();                                                           \
        shmem_free(x);                                                                 \
    }
SHMEM_AMO_BIT_TYPES(TEST_BIT)

static void generic(int me, int n) {
    long *x = shmem_calloc(1, sizeof(long));
    unsigned *u = shmem_calloc(1, sizeof(unsigned));
    double *d = shmem_calloc(1, sizeof(double));
    shmem_atomic_add(x, 10L, 0);
    (void)shmem_atomic_fetch_inc(x, 0);
    shmem_atomic_or(u, 1u << me, 0);
    if (me == n - 1) shmem_atomic_set(d, 2.5, 0);
    shmem_barrier_all();
    if (me == 0) {
        CHECK(*x == 11L * n, "generic add");
        CHECK(*u == (1u << n) - 1, "generic or");
        CHECK(shmem_atomic_fetch(d, 0) == 2.5, "generic set/fetch");
    }
    shmem_barrier_all();
    shmem_free(d);
    shmem_free(u);
    shmem_free(x);
}

/* Many non-fetching AMOs between quiets (they wait for no reply, complete
 * at quiet): each PE adds, increments and XORs its own bit (an odd number of
 * times) into PE 0's words; after its quiet a fetch sees at least its own
 * increments, and after the barrier PE 0 sees exact totals: none lost, none
 * applied twice (a doubled XOR would clear a bit). */
static void many_non_fetching(int me, int n) {
    enum { OPS = 1001 };
    long *c = shmem_calloc(2, sizeof(long));
    unsigned long *b = shmem_calloc(1, sizeof(unsigned long));
    long sum = 0;
    for (int i = 0; i < OPS; i++) {
        shmem_long_atomic_add(&c[0], (long)(i % 3 + 1), 0);
        shmem_long_atomic_inc(&c[1], 0);
        shmem_ulong_atomic_xor(&b[0], 1UL << (me % 64), 0);
        sum += i % 3 + 1;
    }
    shmem_quiet();
    CHECK(shmem_long_atomic_fetch(&c[1], 0) >= OPS, "many inc: own after quiet");
    shmem_barrier_all();
    if (me == 0) {
        CHECK(c[0] == sum * n, "many add total");
        CHECK(c[1] == (long)OPS * n, "many inc total");
        if (n < 64) CHECK(b[0] == (1UL << n) - 1, "many xor bits");
    }
    shmem_barrier_all();
    shmem_free(b);
    shmem_free(c);
}

int main(void) {
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes();
#define RUN_STD(T, NAME) std_##NAME(me, n);
#define RUN_EXT(T, NAME) ext_##NAME(me, n);
#define RUN_BIT(T, NAME) bit_##NAME(me, n);
    SHMEM_AMO_STD_TYPES(RUN_STD)
    SHMEM_AMO_EXT_TYPES(RUN_EXT)
    SHMEM_AMO_BIT_TYPES(RUN_BIT)
    generic(me, n);
    many_non_fetching(me, n);
    shmem_finalize();
    if (errors == 0 && me == 0) printf("amo: ok on %d PEs\n", n);
    return errors != 0;
}
