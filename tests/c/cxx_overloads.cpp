// shmem.h from C++: the typed and context routines, and the generic names as
// overloads (with and without a context first), compiled by the C++ compiler
// (`SWITCHYARD_CC=c++ switchyard cc`).
#include <shmem.h>

#include <cstdio>

static int errors;
#define CHECK(cond, what)                                                              \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            std::fprintf(stderr, "PE %d: %s: %s\n", shmem_my_pe(), what, #cond);       \
            errors++;                                                                  \
        }                                                                              \
    } while (0)

static long x[4];
static double d;
static unsigned int bits;
static int32_t b32;

int main() {
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes();
    int right = (me + 1) % n, left = (me + n - 1) % n;
    shmem_ctx_t c = SHMEM_CTX_INVALID;
    CHECK(shmem_ctx_create(0, &c) == 0, "ctx_create");
    long src[2] = {me, me + 1};
    shmem_put(x, src, 2, right);
    shmem_p(c, &x[2], static_cast<long>(me * 10), right);
    shmem_p(&d, me + 0.5, right);
    shmem_ctx_quiet(c);
    shmem_barrier_all();
    CHECK(x[0] == left && x[1] == left + 1 && x[2] == left * 10, "put, p");
    CHECK(d == left + 0.5, "double p");
    CHECK(shmem_g(c, &x[2], right) == me * 10 && shmem_g(&d, right) == me + 0.5, "g");
    long got[2] = {0, 0};
    shmem_get(c, got, x, 2, right);
    CHECK(got[1] == me + 1, "get(ctx)");
    shmem_barrier_all();
    (void)shmem_atomic_fetch_add(c, &x[3], 1L, 0);
    shmem_atomic_or(&bits, 1u << me, 0);
    shmem_atomic_xor(c, &b32, static_cast<int32_t>(1) << me, 0);
    shmem_ctx_quiet(c);
    shmem_barrier_all();
    if (me == 0) {
        CHECK(x[3] == n, "fetch_add(ctx)");
        CHECK(bits == (1u << n) - 1 && b32 == (1 << n) - 1, "or, xor");
    }
    CHECK(shmem_atomic_fetch(c, &x[3], 0) == n, "atomic_fetch(ctx)");
    shmem_ctx_destroy(c);
    shmem_barrier_all();
    shmem_finalize();
    return errors != 0;
}
