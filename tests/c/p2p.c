/* Point-to-point synchronization: wait_until (typed, generic, 16-bit),
 * wait_until_all/any/some and their _vector forms with a status mask, test,
 * test_all/any/some (+ _vector), SHMEM_CMP_* and _SHMEM_CMP_*. */
// tcp: yes
#include <shmem.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

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
    int right = (me + 1) % n;

    /* A token passed around the ring. */
    long *token = shmem_calloc(1, sizeof(long));
    for (long lap = 1; lap <= 3; lap++) {
        if (me == 0) {
            shmem_long_p(token, lap, right);
            shmem_long_wait_until(token, SHMEM_CMP_EQ, lap);
        } else {
            shmem_wait_until(token, SHMEM_CMP_GE, lap);
            CHECK(*token == lap, "token value");
            shmem_long_p(token, lap, right);
        }
    }
    shmem_barrier_all();

    /* 16-bit */
    short *flag = shmem_calloc(1, sizeof(short));
    CHECK(shmem_short_test(flag, SHMEM_CMP_EQ, (short)0) == 1, "16-bit test before");
    shmem_barrier_all();
    shmem_short_p(flag, (short)-3, right);
    shmem_short_wait_until(flag, _SHMEM_CMP_LT, (short)0);
    CHECK(*flag == -3, "16-bit wait");
    CHECK(shmem_test(flag, SHMEM_CMP_EQ, (short)-3) == 1, "16-bit test after");
    shmem_barrier_all();

    /* Every PE sets its slot on every PE; slot `me` is masked out locally. */
    uint64_t *slots = shmem_calloc((size_t)n, sizeof(uint64_t));
    int *status = calloc((size_t)n, sizeof(int));
    size_t *idx = calloc((size_t)n, sizeof(size_t));
    uint64_t *want = calloc((size_t)n, sizeof(uint64_t));
    status[me] = 1;
    CHECK(shmem_uint64_test_any(slots, (size_t)n, status, SHMEM_CMP_NE, 0) == SIZE_MAX, "test_any before");
    CHECK(shmem_uint64_test_some(slots, (size_t)n, idx, status, SHMEM_CMP_NE, 0) == 0, "test_some before");
    CHECK(shmem_uint64_test_all(slots, (size_t)n, status, SHMEM_CMP_EQ, 0) == 1, "test_all before");
    shmem_barrier_all();
    for (int pe = 0; pe < n; pe++)
        if (pe != me) shmem_uint64_atomic_set(&slots[me], (uint64_t)(me + 1), pe);
    size_t first = shmem_uint64_wait_until_any(slots, (size_t)n, status, SHMEM_CMP_NE, 0);
    CHECK(first < (size_t)n && first != (size_t)me && slots[first] == first + 1, "wait_until_any");
    size_t k = shmem_uint64_wait_until_some(slots, (size_t)n, idx, status, SHMEM_CMP_GT, 0);
    CHECK(k >= 1 && k <= (size_t)n - 1, "wait_until_some count");
    for (size_t i = 0; i < k; i++) CHECK(idx[i] != (size_t)me && slots[idx[i]] == idx[i] + 1, "wait_until_some index");
    shmem_uint64_wait_until_all(slots, (size_t)n, status, SHMEM_CMP_NE, 0);
    for (int i = 0; i < n; i++) {
        CHECK(slots[i] == (i == me ? 0u : (uint64_t)(i + 1)), "wait_until_all values");
        want[i] = (uint64_t)(i + 1);
    }
    shmem_uint64_wait_until_all_vector(slots, (size_t)n, status, SHMEM_CMP_EQ, want);
    CHECK(shmem_uint64_wait_until_any_vector(slots, (size_t)n, status, SHMEM_CMP_EQ, want) != SIZE_MAX, "any_vector");
    CHECK(shmem_uint64_wait_until_some_vector(slots, (size_t)n, idx, status, SHMEM_CMP_LE, want) == (size_t)n - 1, "some_vector");
    CHECK(shmem_uint64_test_all_vector(slots, (size_t)n, status, SHMEM_CMP_GE, want) == 1, "test_all_vector");
    CHECK(shmem_uint64_test_any_vector(slots, (size_t)n, status, SHMEM_CMP_GT, want) == SIZE_MAX, "test_any_vector");
    CHECK(shmem_uint64_test_some_vector(slots, (size_t)n, idx, NULL, SHMEM_CMP_EQ, want) == (size_t)n - 1, "test_some_vector (no mask)");
    CHECK(shmem_uint64_test_all(slots, (size_t)n, NULL, SHMEM_CMP_NE, 0) == 0, "test_all sees the local zero");
    /* all masked out / no elements */
    for (int i = 0; i < n; i++) status[i] = 1;
    CHECK(shmem_uint64_wait_until_any(slots, (size_t)n, status, SHMEM_CMP_EQ, 12345) == SIZE_MAX, "any, all masked");
    CHECK(shmem_uint64_wait_until_some(slots, 0, idx, NULL, SHMEM_CMP_EQ, 12345) == 0, "some, none");
    shmem_uint64_wait_until_all(slots, (size_t)n, status, SHMEM_CMP_EQ, 12345);
    shmem_barrier_all();

    /* other types through the generic names */
    int *iv = shmem_calloc(1, sizeof(int));
    unsigned long long *uv = shmem_calloc(1, sizeof(unsigned long long));
    shmem_int_p(iv, 5, right);
    shmem_ulonglong_p(uv, 1ull << 40, right);
    shmem_wait_until(iv, SHMEM_CMP_GE, 5);
    shmem_wait_until(uv, SHMEM_CMP_EQ, 1ull << 40);
    shmem_size_wait_until((size_t *)uv, SHMEM_CMP_NE, 0);
    CHECK(shmem_int_test(iv, SHMEM_CMP_LE, 5) == 1, "int test");
    CHECK(shmem_ptrdiff_test((ptrdiff_t *)uv, SHMEM_CMP_LT, 0) == 0, "ptrdiff test");
    shmem_barrier_all();

    free(want);
    free(idx);
    free(status);
    shmem_finalize();
    if (errors == 0 && me == 0) printf("p2p: ok on %d PEs\n", n);
    return errors != 0;
}
