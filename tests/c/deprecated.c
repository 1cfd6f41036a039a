/* Deprecated names older programs use: start_pes, _my_pe, _num_pes,
 * shmalloc/shfree/shrealloc/shmemalign, shmem_*_cswap/fadd/finc/swap/add/inc/
 * fetch/set, shmem_*_wait, shmem_wait, shmem_swap, _SHMEM_CMP_*. */
// tcp: yes
#include <shmem.h>
#include <stdio.h>

static int errors;
#define CHECK(cond, what)                                                              \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "PE %d: %s: %s\n", _my_pe(), what, #cond);                 \
            errors++;                                                                  \
        }                                                                              \
    } while (0)

int main(void) {
    start_pes(0);
    int me = _my_pe(), n = _num_pes();
    int right = (me + 1) % n;
    long *l = shmalloc(4 * sizeof(long));
    int *i = shmalloc(4 * sizeof(int));
    long long *ll = shmemalign(128, 2 * sizeof(long long));
    double *d = shmalloc(sizeof(double));
    l[0] = l[1] = l[2] = l[3] = 0;
    i[0] = i[1] = i[2] = i[3] = 0;
    ll[0] = ll[1] = 0;
    *d = 0;
    shmem_barrier_all();

    shmem_long_add(&l[0], 2, 0);
    shmem_long_inc(&l[0], 0);
    (void)shmem_int_fadd(&i[0], 1, 0);
    (void)shmem_int_finc(&i[0], 0);
    (void)shmem_longlong_fadd(&ll[0], 5, 0);
    shmem_barrier_all();
    if (me == 0) {
        CHECK(l[0] == 3L * n, "add+inc");
        CHECK(i[0] == 2 * n, "fadd+finc");
        CHECK(ll[0] == 5LL * n, "longlong fadd");
    }
    shmem_barrier_all();
    CHECK(shmem_int_cswap(&i[1], 0, me + 1, right) == 0, "cswap");
    shmem_barrier_all();
    CHECK(shmem_int_fetch(&i[1], right) == me + 1, "fetch");
    CHECK(shmem_long_swap(&l[1], 7, right) == 0, "long swap");
    CHECK(shmem_swap(&l[1], 8, right) == 7, "shmem_swap");
    shmem_double_set(d, 1.25, right);
    shmem_barrier_all();
    CHECK(*d == 1.25 && shmem_double_swap(d, 2.5, me) == 1.25, "double set/swap");
    shmem_barrier_all();

    /* shmem_*_wait: wait until the value differs */
    shmem_long_p(&l[2], 42, right);
    shmem_long_wait(&l[2], 0);
    CHECK(l[2] == 42, "long_wait");
    shmem_int_p(&i[2], 1, right);
    shmem_int_wait_until(&i[2], _SHMEM_CMP_EQ, 1);
    shmem_barrier_all();
    shmem_long_p(&l[3], 9, right);
    shmem_wait(&l[3], 0);
    CHECK(l[3] == 9, "shmem_wait");
    shmem_barrier_all();

    l = shrealloc(l, 8 * sizeof(long));
    CHECK(l[2] == 42 && l[3] == 9, "shrealloc keeps the contents");
    shfree(d);
    shfree(ll);
    shfree(i);
    shfree(l);
    shmem_finalize();
    if (errors == 0 && me == 0) printf("deprecated: ok on %d PEs\n", n);
    return errors != 0;
}
