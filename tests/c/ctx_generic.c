/* The C11 generic names with and without a context first argument, the
 * signed bitwise AMO and reduction generics, the context options, contexts
 * on teams (shmem_team_create_ctx, shmem_ctx_get_team) and shmem_team_ptr. */
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

static long x[8], y[8];
static int32_t b32;
static int64_t b64;
static uint64_t sig;
static int8_t r8[2], s8[2];
static int16_t r16, s16;
static int32_t r32, s32;
static int64_t r64, s64;

int main(void) {
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes();
    int right = (me + 1) % n, left = (me + n - 1) % n;
    shmem_ctx_t c = SHMEM_CTX_INVALID, ns = SHMEM_CTX_INVALID, bad = SHMEM_CTX_DEFAULT;
    CHECK(shmem_ctx_create(SHMEM_CTX_SERIALIZED | SHMEM_CTX_PRIVATE, &c) == 0, "create");
    CHECK(shmem_ctx_create(SHMEM_CTX_NOSTORE, &ns) == 0, "create NOSTORE");
    CHECK(shmem_ctx_create(1L << 8, &bad) != 0 && bad == SHMEM_CTX_INVALID, "unknown option");

    long src[4] = {me, me + 1, me + 2, me + 3};
    shmem_put(c, x, src, 4, right);
    shmem_put(&x[4], src, 1, right);
    shmem_p(c, &x[5], (long)me * 10, right);
    shmem_iput(c, &x[6], &src[1], 1, 2, 2, right);
    shmem_put_nbi(c, y, src, 2, right);
    shmem_ctx_quiet(c);
    shmem_barrier_all();
    for (int i = 0; i < 4; i++) CHECK(x[i] == left + i, "put(ctx)");
    CHECK(x[4] == left && x[5] == left * 10, "put, p(ctx)");
    CHECK(x[6] == left + 1 && x[7] == left + 3, "iput(ctx)");
    CHECK(y[0] == left && y[1] == left + 1, "put_nbi(ctx)");
    CHECK(shmem_g(c, &x[5], right) == me * 10 && shmem_g(&x[4], right) == me, "g");
    long got[4] = {0};
    shmem_get(c, got, x, 4, right);
    CHECK(got[3] == me + 3, "get(ctx)");
    shmem_iget(c, got, x, 2, 2, 2, right);
    CHECK(got[0] == me && got[2] == me + 2, "iget(ctx)");
    /* a NOSTORE context reads */
    shmem_get_nbi(ns, got, &x[5], 1, right);
    shmem_ctx_quiet(ns);
    CHECK(got[0] == me * 10, "get_nbi(NOSTORE ctx)");
    CHECK(shmem_atomic_fetch(ns, &x[4], right) == me, "atomic_fetch(NOSTORE ctx)");
    shmem_barrier_all();

    (void)shmem_atomic_fetch_add(c, &y[2], 2L, 0);
    shmem_atomic_add(&y[2], 1L, 0);
    shmem_atomic_inc(c, &y[3], 0);
    long old = -1;
    shmem_atomic_fetch_inc_nbi(c, &old, &y[4], 0);
    shmem_atomic_or(c, &b32, (int32_t)1 << me, 0);
    shmem_atomic_xor(&b64, (int64_t)1 << me, 0);
    (void)shmem_atomic_fetch_and(c, &b64, (int64_t)-1, 0);
    shmem_ctx_quiet(c);
    CHECK(old >= 0 && old < n, "fetch_inc_nbi(ctx)");
    shmem_put_signal(c, &y[5], &src[0], 1, &sig, 1, SHMEM_SIGNAL_ADD, 0);
    shmem_barrier_all();
    if (me == 0) {
        CHECK(y[2] == 3L * n && y[3] == n && y[4] == n, "add, inc");
        CHECK(b32 == (1 << n) - 1 && b64 == ((int64_t)1 << n) - 1, "signed bitwise");
        CHECK(sig == (uint64_t)n, "put_signal(ctx)");
    }
    CHECK(shmem_atomic_compare_swap(c, &x[0], (long)me, (long)-1, right) == me, "cswap(ctx)");
    CHECK(shmem_atomic_swap(c, &x[1], 7L, right) == me + 1, "swap(ctx)");
    shmem_atomic_set(c, &x[2], 9L, right);
    shmem_barrier_all();
    CHECK(x[0] == -1 && x[1] == 7 && x[2] == 9, "cswap, swap, set");

    /* bitwise reductions on the signed fixed-width types */
    s8[0] = (int8_t)(1 << me);
    s8[1] = -1;
    s16 = (int16_t)(1 << me);
    s32 = (int32_t)(3 << me);
    s64 = (int64_t)1 << (40 + me);
    shmem_barrier_all();
    CHECK(shmem_or_reduce(SHMEM_TEAM_WORLD, r8, s8, 2) == 0, "or_reduce int8");
    CHECK(r8[0] == (int8_t)((1 << n) - 1) && r8[1] == -1, "int8 or");
    CHECK(shmem_xor_reduce(SHMEM_TEAM_WORLD, &r16, &s16, 1) == 0, "xor_reduce int16");
    CHECK(r16 == (1 << n) - 1, "int16 xor");
    CHECK(shmem_and_reduce(SHMEM_TEAM_WORLD, &r32, &s32, 1) == 0, "and_reduce int32");
    CHECK(r32 == (n == 2 ? 2 : 0), "int32 and");
    CHECK(shmem_or_reduce(SHMEM_TEAM_WORLD, &r64, &s64, 1) == 0, "or_reduce int64");
    CHECK(r64 == (((int64_t)1 << n) - 1) << 40, "int64 or");

    /* contexts on teams (shmem_team_ptr may give another mapping of the same
     * memory, a global variable's alias in the heap) */
    shmem_team_t t = SHMEM_TEAM_INVALID, got_team = SHMEM_TEAM_INVALID;
    CHECK(shmem_ctx_get_team(SHMEM_CTX_DEFAULT, &got_team) == 0 && got_team == SHMEM_TEAM_WORLD,
          "default ctx team");
    CHECK(shmem_ctx_get_team(c, &got_team) == 0 && got_team == SHMEM_TEAM_WORLD, "ctx team");
    CHECK(shmem_ctx_get_team(SHMEM_CTX_INVALID, &got_team) != 0 && got_team == SHMEM_TEAM_INVALID,
          "invalid ctx team");
    shmem_ctx_t tc = SHMEM_CTX_DEFAULT;
    CHECK(shmem_team_create_ctx(SHMEM_TEAM_INVALID, 0, &tc) != 0 && tc == SHMEM_CTX_INVALID,
          "ctx on no team");
    shmem_ctx_quiet(SHMEM_CTX_INVALID); /* does nothing */
    shmem_ctx_fence(SHMEM_CTX_INVALID);
    /* the odd PEs (and PE 0 when alone) */
    shmem_team_split_strided(SHMEM_TEAM_WORLD, 1, 2, n / 2, NULL, 0, &t);
    if (t != SHMEM_TEAM_INVALID) {
        CHECK(shmem_team_create_ctx(t, 0, &tc) == 0, "team ctx");
        CHECK(shmem_ctx_get_team(tc, &got_team) == 0 && got_team == t, "team ctx's team");
        int tme = shmem_team_my_pe(t), tn = shmem_team_n_pes(t);
        /* a context on a team numbers PEs in the team */
        shmem_p(tc, &y[6], (long)me, (tme + 1) % tn);
        shmem_ctx_quiet(tc);
        shmem_ctx_destroy(tc);
        long *p = shmem_team_ptr(t, &y[6], tme);
        CHECK(p != NULL && *p == y[6], "team_ptr to myself");
        CHECK(shmem_team_ptr(t, &y[6], tn) == NULL, "team_ptr past the team");
    }
    shmem_barrier_all();
    if (t != SHMEM_TEAM_INVALID) {
        int tme = shmem_team_my_pe(t), tn = shmem_team_n_pes(t);
        CHECK(y[6] == shmem_team_translate_pe(t, (tme + tn - 1) % tn, SHMEM_TEAM_WORLD),
              "put on the team ctx");
        shmem_team_destroy(t);
    }
    CHECK(shmem_team_ptr(SHMEM_TEAM_INVALID, &y[6], 0) == NULL, "team_ptr on no team");
    long *w = shmem_team_ptr(SHMEM_TEAM_WORLD, &y[6], me);
    CHECK(w != NULL && *w == y[6], "team_ptr world");

    shmem_ctx_destroy(ns);
    shmem_ctx_destroy(c);
    shmem_finalize();
    return errors != 0;
}
