/* Teams: the predefined teams, shmem_team_split_strided (even, odd,
 * reversed, single-member, nested, invalid triplets), translate_pe,
 * get_config, collectives and syncs on split teams, many create/destroy
 * cycles (more than the scratch slots, so slots are reused), and the
 * synchronization calls (shmem_sync_all, shmem_sync on a team, the
 * active-set shmem_barrier/shmem_sync with one pSync reused back to back). */
#include <shmem.h>
#include <stdio.h>

static int me, npes, errors;

#define CHECK(cond, ...)                                            \
    do {                                                            \
        if (!(cond) && errors++ < 10) {                             \
            fprintf(stderr, "PE %d: line %d: ", me, __LINE__);      \
            fprintf(stderr, __VA_ARGS__);                           \
            fputc('\n', stderr);                                    \
        }                                                           \
    } while (0)

/* Collectives on a team, checked against the members' world PE numbers. */
static void exercise(shmem_team_t t, const char *what) {
    int n = shmem_team_n_pes(t), r = shmem_team_my_pe(t);
    long *src = shmem_malloc(64 * sizeof(long));
    /* one dest per collective: a member that finished one may already be
     * writing the next one's dest elsewhere */
    long *dst = shmem_malloc(64 * sizeof(long) * 4);
    long *d2 = shmem_malloc(64 * sizeof(long) * 4);
    long *d3 = shmem_malloc(64 * sizeof(long) * 4);
    long *d4 = shmem_malloc(64 * sizeof(long) * 4);
    /* every world PE allocates (malloc is collective over the job) */
    if (t != SHMEM_TEAM_INVALID) {
        for (int i = 0; i < 64; i++) src[i] = me * 1000 + i;
        shmem_long_broadcast(t, dst, src, 64, n - 1);
        int root = shmem_team_translate_pe(t, n - 1, SHMEM_TEAM_WORLD);
        for (int i = 0; i < 64; i++)
            if (dst[i] != root * 1000 + i) { CHECK(0, "%s: broadcast [%d] = %ld", what, i, dst[i]); break; }
        shmem_long_sum_reduce(t, d2, src, 64);
        long base = 0;
        for (int k = 0; k < n; k++) base += shmem_team_translate_pe(t, k, SHMEM_TEAM_WORLD) * 1000;
        for (int i = 0; i < 64; i++)
            if (d2[i] != base + (long)n * i) { CHECK(0, "%s: sum [%d] = %ld", what, i, d2[i]); break; }
        shmem_long_fcollect(t, d3, src, 3);
        for (int k = 0; k < n; k++) {
            int w = shmem_team_translate_pe(t, k, SHMEM_TEAM_WORLD);
            CHECK(d3[3 * k + 2] == w * 1000 + 2, "%s: fcollect block %d", what, k);
        }
        shmem_long_alltoall(t, d4, src, 2);
        for (int k = 0; k < n; k++) {
            int w = shmem_team_translate_pe(t, k, SHMEM_TEAM_WORLD);
            CHECK(d4[2 * k + 1] == w * 1000 + 2 * r + 1, "%s: alltoall block %d", what, k);
        }
        CHECK(shmem_team_sync(t) == 0, "%s: shmem_team_sync", what);
        shmem_sync(t); /* the C11 one-argument form */
    }
    shmem_barrier_all();
    shmem_free(d4);
    shmem_free(d3);
    shmem_free(d2);
    shmem_free(dst);
    shmem_free(src);
}

int main(void) {
    shmem_init();
    me = shmem_my_pe();
    npes = shmem_n_pes();

    CHECK(shmem_team_my_pe(SHMEM_TEAM_WORLD) == me, "world my_pe");
    CHECK(shmem_team_n_pes(SHMEM_TEAM_WORLD) == npes, "world n_pes");
    CHECK(shmem_team_my_pe(SHMEM_TEAM_INVALID) == -1, "invalid my_pe");
    CHECK(shmem_team_n_pes(SHMEM_TEAM_INVALID) == -1, "invalid n_pes");
    /* the shared team: exactly the PEs shmem_ptr reaches (all of them on one
     * node with shared memory, only this one over TCP alone) */
    {
        int *probe = shmem_malloc(sizeof(int)), reach = 0;
        for (int p = 0; p < npes; p++) reach += shmem_ptr(probe, p) != NULL;
        int sn = shmem_team_n_pes(SHMEM_TEAM_SHARED);
        CHECK(sn == reach, "shared n_pes = %d, shmem_ptr reaches %d", sn, reach);
        for (int r = 0; r < sn; r++)
            CHECK(shmem_ptr(probe, shmem_team_translate_pe(SHMEM_TEAM_SHARED, r, SHMEM_TEAM_WORLD)) != NULL,
                  "shared rank %d", r);
        CHECK(shmem_team_translate_pe(SHMEM_TEAM_WORLD, me, SHMEM_TEAM_SHARED) == shmem_team_my_pe(SHMEM_TEAM_SHARED),
              "world→shared");
        shmem_free(probe);
    }
    shmem_team_config_t cfg = {.num_contexts = 99};
    CHECK(shmem_team_get_config(SHMEM_TEAM_WORLD, SHMEM_TEAM_NUM_CONTEXTS, &cfg) == 0 && cfg.num_contexts == 0,
          "world config");
    CHECK(shmem_team_get_config(SHMEM_TEAM_INVALID, 0, &cfg) != 0, "invalid config");
    exercise(SHMEM_TEAM_WORLD, "world");
    exercise(SHMEM_TEAM_SHARED, "shared");

    /* even and odd PEs */
    shmem_team_t even, odd, rev, single, sub;
    cfg.num_contexts = 3;
    CHECK(shmem_team_split_strided(SHMEM_TEAM_WORLD, 0, 2, (npes + 1) / 2, &cfg, SHMEM_TEAM_NUM_CONTEXTS, &even) == 0,
          "split even");
    if (npes > 1)
        CHECK(shmem_team_split_strided(SHMEM_TEAM_WORLD, 1, 2, npes / 2, NULL, 0, &odd) == 0, "split odd");
    else
        CHECK(shmem_team_split_strided(SHMEM_TEAM_WORLD, 1, 2, npes / 2, NULL, 0, &odd) != 0, "split odd of 1 PE");
    CHECK((even != SHMEM_TEAM_INVALID) == (me % 2 == 0), "even membership");
    CHECK((odd != SHMEM_TEAM_INVALID) == (me % 2 == 1), "odd membership");
    if (me % 2 == 0) {
        CHECK(shmem_team_my_pe(even) == me / 2, "even my_pe");
        CHECK(shmem_team_n_pes(even) == (npes + 1) / 2, "even n_pes");
        cfg.num_contexts = 0;
        CHECK(shmem_team_get_config(even, SHMEM_TEAM_NUM_CONTEXTS, &cfg) == 0 && cfg.num_contexts == 3, "even config");
        CHECK(shmem_team_translate_pe(even, 1, SHMEM_TEAM_WORLD) == (npes > 2 ? 2 : -1), "even rank 1 → world");
        CHECK(shmem_team_translate_pe(SHMEM_TEAM_WORLD, 1, even) == -1, "world 1 is not even");
    }
    exercise(even, "even");
    exercise(odd, "odd");

    /* reversed order (negative stride) */
    CHECK(shmem_team_split_strided(SHMEM_TEAM_WORLD, npes - 1, -1, npes, NULL, 0, &rev) == 0, "split reversed");
    CHECK(shmem_team_my_pe(rev) == npes - 1 - me, "reversed my_pe");
    exercise(rev, "reversed");

    /* a team of one (stride 0) */
    CHECK(shmem_team_split_strided(SHMEM_TEAM_WORLD, npes - 1, 0, 1, NULL, 0, &single) == 0, "split single");
    CHECK((single != SHMEM_TEAM_INVALID) == (me == npes - 1), "single membership");
    exercise(single, "single");

    /* nested: the even team's upper half */
    if (me % 2 == 0) {
        int en = shmem_team_n_pes(even);
        CHECK(shmem_team_split_strided(even, en / 2, 1, en - en / 2, NULL, 0, &sub) == 0, "split nested");
        int r = shmem_team_my_pe(even);
        CHECK((sub != SHMEM_TEAM_INVALID) == (r >= en / 2), "nested membership");
        if (sub != SHMEM_TEAM_INVALID) {
            CHECK(shmem_team_translate_pe(sub, 0, SHMEM_TEAM_WORLD) == 2 * (en / 2), "nested rank 0 → world");
            CHECK(shmem_team_translate_pe(sub, shmem_team_my_pe(sub), even) == r, "nested → even");
        }
    } else {
        sub = SHMEM_TEAM_INVALID;
    }
    exercise(sub, "nested");

    /* invalid triplets: non-zero on every PE, SHMEM_TEAM_INVALID */
    shmem_team_t bad = SHMEM_TEAM_WORLD;
    CHECK(shmem_team_split_strided(SHMEM_TEAM_WORLD, 0, 1, npes + 1, NULL, 0, &bad) != 0 && bad == SHMEM_TEAM_INVALID,
          "too large");
    bad = SHMEM_TEAM_WORLD;
    CHECK(shmem_team_split_strided(SHMEM_TEAM_WORLD, 0, 1, 0, NULL, 0, &bad) != 0 && bad == SHMEM_TEAM_INVALID, "size 0");
    bad = SHMEM_TEAM_WORLD;
    CHECK(shmem_team_split_strided(SHMEM_TEAM_WORLD, -1, 1, 1, NULL, 0, &bad) != 0 && bad == SHMEM_TEAM_INVALID, "start -1");
    bad = SHMEM_TEAM_WORLD;
    CHECK(shmem_team_split_strided(SHMEM_TEAM_INVALID, 0, 1, 1, NULL, 0, &bad) != 0 && bad == SHMEM_TEAM_INVALID,
          "invalid parent");
    if (npes > 1) {
        bad = SHMEM_TEAM_WORLD;
        CHECK(shmem_team_split_strided(SHMEM_TEAM_WORLD, 1, 1, npes, NULL, 0, &bad) != 0 && bad == SHMEM_TEAM_INVALID,
              "wrap-around");
    }

    shmem_team_destroy(sub == SHMEM_TEAM_INVALID ? SHMEM_TEAM_INVALID : sub);
    shmem_team_destroy(single);
    shmem_team_destroy(rev);
    shmem_team_destroy(odd);
    shmem_team_destroy(even);

    /* 2D split: rows of 3 (x-axis teams) and columns (y-axis teams) */
    {
        shmem_team_t xt, yt;
        CHECK(shmem_team_split_2d(SHMEM_TEAM_WORLD, 3, NULL, 0, &xt, NULL, 0, &yt) == 0, "split_2d");
        CHECK(shmem_team_my_pe(xt) == me % 3 && shmem_team_my_pe(yt) == me / 3, "2d coordinates (%d, %d)",
              shmem_team_my_pe(xt), shmem_team_my_pe(yt));
        int row = me / 3, rows = (npes + 2) / 3;
        int xn = npes - row * 3 < 3 ? npes - row * 3 : 3;
        int yn = rows - ((npes % 3) != 0 && me % 3 >= npes % 3 ? 1 : 0);
        CHECK(shmem_team_n_pes(xt) == xn, "x team size %d, want %d", shmem_team_n_pes(xt), xn);
        CHECK(shmem_team_n_pes(yt) == yn, "y team size %d, want %d", shmem_team_n_pes(yt), yn);
        CHECK(shmem_team_translate_pe(yt, 0, SHMEM_TEAM_WORLD) == me % 3, "y team rank 0");
        exercise(xt, "x axis");
        exercise(yt, "y axis");
        shmem_team_destroy(yt);
        shmem_team_destroy(xt);
        shmem_team_t a = SHMEM_TEAM_WORLD, b = SHMEM_TEAM_WORLD;
        CHECK(shmem_team_split_2d(SHMEM_TEAM_WORLD, 0, NULL, 0, &a, NULL, 0, &b) != 0 && a == SHMEM_TEAM_INVALID &&
                  b == SHMEM_TEAM_INVALID,
              "split_2d xrange 0");
    }

    /* more teams over time than there are scratch slots */
    for (int i = 0; i < 100; i++) {
        shmem_team_t a, b;
        CHECK(shmem_team_split_strided(SHMEM_TEAM_WORLD, 0, 1, npes, NULL, 0, &a) == 0, "cycle %d split a", i);
        CHECK(shmem_team_split_strided(a, i % npes, 0, 1, NULL, 0, &b) == 0, "cycle %d split b", i);
        int v = i, w = -1;
        int *s = shmem_malloc(sizeof(int)), *d = shmem_malloc(sizeof(int));
        *s = v + me;
        shmem_int_max_reduce(a, d, s, 1);
        w = *d;
        CHECK(w == i + npes - 1, "cycle %d max = %d", i, w);
        shmem_free(d);
        shmem_free(s);
        shmem_team_destroy(b);
        shmem_team_destroy(a);
    }

    /* synchronization: sync_all, and one pSync reused by consecutive
     * active-set barriers and syncs over every PE and over the even PEs */
    long *ps = shmem_malloc(SHMEM_BARRIER_SYNC_SIZE * sizeof(long));
    int *counter = shmem_malloc(sizeof(int));
    for (int i = 0; i < 50; i++) shmem_sync_all();
    for (int i = 0; i < 50; i++) {
        shmem_int_atomic_add(counter, 1, (me + 1) % npes);
        shmem_barrier(0, 0, npes, ps);
        CHECK(*counter == i + 1, "barrier round %d: counter %d", i, *counter);
        shmem_barrier(0, 0, npes, ps); /* nobody adds before everyone checked */
    }
    for (int i = 0; i < 50; i++) shmem_sync(0, 0, npes, ps);
    shmem_barrier_all();
    if (me % 2 == 0)
        for (int i = 0; i < 50; i++) shmem_barrier(0, 1, (npes + 1) / 2, ps);
    shmem_barrier_all();
    for (int i = 0; i < SHMEM_BARRIER_SYNC_SIZE; i++) CHECK(ps[i] == SHMEM_SYNC_VALUE, "pSync[%d] = %ld", i, ps[i]);
    shmem_free(counter);
    shmem_free(ps);

    shmem_finalize();
    if (errors) fprintf(stderr, "PE %d: %d errors\n", me, errors);
    return errors ? 1 : 0;
}
