/* Every function shmem.h declares (outside teams and collectives) is
 * exported by the library: this program takes the address of each one, so
 * a missing export fails the link. It then checks nothing more. */
#include <shmem.h>
#include <stdio.h>

typedef void (*fn)(void);
#define F(f) (fn) f,

#define RMA_(T, N) F(shmem_##N##_put) F(shmem_##N##_get) F(shmem_##N##_iput) F(shmem_##N##_iget) \
    F(shmem_##N##_put_nbi) F(shmem_##N##_get_nbi) F(shmem_##N##_put_signal) F(shmem_##N##_put_signal_nbi)
#define PG_(T, N) F(shmem_##N##_p) F(shmem_##N##_g)
#define SIZED_(S) F(shmem_put##S) F(shmem_get##S) F(shmem_iput##S) F(shmem_iget##S) F(shmem_put##S##_nbi) \
    F(shmem_get##S##_nbi) F(shmem_put##S##_signal) F(shmem_put##S##_signal_nbi)
#define EXT_(T, N) F(shmem_##N##_atomic_fetch) F(shmem_##N##_atomic_set) F(shmem_##N##_atomic_swap) \
    F(shmem_##N##_atomic_fetch_nbi) F(shmem_##N##_atomic_swap_nbi)
#define STD_(T, N) F(shmem_##N##_atomic_compare_swap) F(shmem_##N##_atomic_fetch_inc) F(shmem_##N##_atomic_inc) \
    F(shmem_##N##_atomic_fetch_add) F(shmem_##N##_atomic_add) F(shmem_##N##_atomic_compare_swap_nbi) \
    F(shmem_##N##_atomic_fetch_inc_nbi) F(shmem_##N##_atomic_fetch_add_nbi)
#define BIT_(T, N) F(shmem_##N##_atomic_fetch_and) F(shmem_##N##_atomic_and) F(shmem_##N##_atomic_fetch_and_nbi) \
    F(shmem_##N##_atomic_fetch_or) F(shmem_##N##_atomic_or) F(shmem_##N##_atomic_fetch_or_nbi) \
    F(shmem_##N##_atomic_fetch_xor) F(shmem_##N##_atomic_xor) F(shmem_##N##_atomic_fetch_xor_nbi)
#define P2P_(T, N) F(shmem_##N##_wait_until) F(shmem_##N##_wait_until_all) F(shmem_##N##_wait_until_any) \
    F(shmem_##N##_wait_until_some) F(shmem_##N##_wait_until_all_vector) F(shmem_##N##_wait_until_any_vector) \
    F(shmem_##N##_wait_until_some_vector) F(shmem_##N##_test) F(shmem_##N##_test_all) F(shmem_##N##_test_any) \
    F(shmem_##N##_test_some) F(shmem_##N##_test_all_vector) F(shmem_##N##_test_any_vector) \
    F(shmem_##N##_test_some_vector)
#define OLD_AMO_(N) F(shmem_##N##_cswap) F(shmem_##N##_fadd) F(shmem_##N##_finc) F(shmem_##N##_add) F(shmem_##N##_inc)
#define OLD_EXT_(N) F(shmem_##N##_swap) F(shmem_##N##_fetch) F(shmem_##N##_set)

static fn const all[] = {
    F(shmem_init) F(shmem_init_thread) F(shmem_query_thread) F(shmem_finalize) F(shmem_query_initialized)
    F(shmem_query_finalized) F(shmem_my_pe) F(shmem_n_pes) F(shmem_pe_accessible) F(shmem_addr_accessible)
    F(shmem_ptr) F(shmem_global_exit) F(shmem_info_get_version) F(shmem_info_get_name) F(shmem_pcontrol)
    F(shmem_malloc) F(shmem_malloc_with_hints) F(shmem_calloc) F(shmem_align) F(shmem_realloc) F(shmem_free)
    F(shmem_fence) F(shmem_quiet) F(shmem_barrier_all)
    F(shmem_putmem) F(shmem_getmem) F(shmem_putmem_nbi) F(shmem_getmem_nbi)
    F(shmem_putmem_signal) F(shmem_putmem_signal_nbi) F(shmem_signal_fetch) F(shmem_signal_wait_until)
    F(shmem_set_lock) F(shmem_clear_lock) F(shmem_test_lock) F(shmem_ctx_create) F(shmem_ctx_destroy)
    F(shmem_team_create_ctx) F(shmem_ctx_get_team) F(shmem_team_ptr) F(switchyard_ctx_check)
    F(start_pes) F(_my_pe) F(_num_pes) F(shmalloc) F(shfree) F(shrealloc) F(shmemalign)
    F(shmem_swap) F(shmem_wait) F(shmem_short_wait) F(shmem_int_wait) F(shmem_long_wait) F(shmem_longlong_wait)
    OLD_AMO_(int) OLD_AMO_(long) OLD_AMO_(longlong)
    OLD_EXT_(int) OLD_EXT_(long) OLD_EXT_(longlong) OLD_EXT_(float) OLD_EXT_(double)
    SHMEM_RMA_TYPES(RMA_) SHMEM_RMA_PG_TYPES(PG_)
    SIZED_(8) SIZED_(16) SIZED_(32) SIZED_(64) SIZED_(128)
    SHMEM_AMO_EXT_TYPES(EXT_) SHMEM_AMO_STD_TYPES(STD_) SHMEM_AMO_BIT_TYPES(BIT_)
    SHMEM_P2P_TYPES(P2P_)
};

int main(void) {
    shmem_init();
    size_t missing = 0;
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) missing += all[i] == NULL;
    if (shmem_my_pe() == 0) printf("api_link: %zu entry points linked\n", sizeof all / sizeof all[0]);
    shmem_finalize();
    return missing != 0;
}
