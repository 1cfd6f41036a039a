/* Symmetric global and static variables (.data and .bss): put, get, p/g,
 * atomics, signals and waits on them, like on heap memory. Fails at once
 * when shmem_addr_accessible says they are not symmetric. */
// tcp: yes
#include <shmem.h>
#include <stdio.h>
#include <stdlib.h>

long g_data[8] = {1, 2, 3, 4, 5, 6, 7, 8}; /* .data */
long g_bss[8];                             /* .bss */
static int s_counter;                      /* static, .bss */
static double s_value = 1.5;               /* static, .data */
uint64_t g_sig;

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
    int right = (me + 1) % n, left = (me + n - 1) % n;
    if (!shmem_addr_accessible(g_bss, right) || !shmem_addr_accessible(&s_counter, right)) {
        fprintf(stderr, "PE %d: global and static variables are not symmetric\n", me);
        shmem_finalize();
        return 1;
    }
    long src[8];
    for (int i = 0; i < 8; i++) src[i] = me * 100 + i;
    shmem_long_put(g_bss, src, 8, right);
    shmem_double_p(&s_value, 2.5 + me, right);
    shmem_barrier_all();
    for (int i = 0; i < 8; i++) CHECK(g_bss[i] == left * 100 + i, "put to a .bss global");
    long *direct = shmem_ptr(g_bss, right); /* NULL where the peer is not mapped here */
    CHECK(direct == NULL || direct[7] == me * 100 + 7, "shmem_ptr to a peer's global");
    if (getenv("SWITCHYARD_TRANSPORTS") == NULL) CHECK(direct != NULL, "shmem_ptr to a same-node global");
    CHECK(s_value == 2.5 + left, "p to a static double");
    long got[8];
    shmem_long_get(got, g_data, 8, right);
    for (int i = 0; i < 8; i++) CHECK(got[i] == i + 1, "get from a .data global");
    CHECK(shmem_double_g(&s_value, right) == 2.5 + me, "g of a static");
    shmem_int_atomic_add(&s_counter, 1, 0);
    shmem_barrier_all();
    if (me == 0) CHECK(s_counter == n, "atomic add on a static");
    CHECK(shmem_int_atomic_fetch(&s_counter, 0) == n, "atomic fetch of a static");
    shmem_barrier_all();
    shmem_long_put_signal(g_data, src, 8, &g_sig, 1, SHMEM_SIGNAL_SET, right);
    shmem_signal_wait_until(&g_sig, SHMEM_CMP_EQ, 1);
    for (int i = 0; i < 8; i++) CHECK(g_data[i] == left * 100 + i, "put_signal to a global");
    shmem_barrier_all();
    shmem_finalize();
    if (errors == 0 && me == 0) printf("globals: ok on %d PEs\n", n);
    return errors != 0;
}
